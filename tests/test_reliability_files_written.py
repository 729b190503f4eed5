"""Regression tests for the defects found by fuzzing (issue 13 and after): files written. Each names the
case it keeps from coming back."""

import os

import pytest

from welchpeaks.files import OutputPathError, check_writable, write_atomic


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_files_written_have_the_mode_the_umask_gives(tmp_path, mask):
    """Results are written through a temporary file (0600) renamed into place: they must end
    with the mode a plain open gives (0644 under umask 0022), so that others can read them."""
    import stat

    old = os.umask(mask)
    try:
        write_atomic(tmp_path / "a.csv", "x")
        write_atomic(tmp_path / "b.png", lambda p: p.write_bytes(b"y"))  # a writer that opens the path itself
        (tmp_path / "c.json").write_text("old")
        write_atomic(tmp_path / "c.json", "new")  # replacing a file
    finally:
        os.umask(old)
    for name in ("a.csv", "b.png", "c.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~mask, name


def test_write_atomic_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")

    def half_then_fail(tmp):
        tmp.write_text("partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_atomic(target, half_then_fail)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    write_atomic(target, "new")
    assert target.read_text() == "new"


def test_output_paths_are_checked(tmp_path):
    with pytest.raises(OutputPathError, match="does not exist"):
        check_writable(tmp_path / "missing" / "x.json", "--json")
    with pytest.raises(OutputPathError, match="is a directory"):
        check_writable(tmp_path, "--json")
    if os.path.exists("/dev/full"):
        with pytest.raises(OutputPathError, match="not a regular file"):
            check_writable("/dev/full", "--json")
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputPathError, match="not a directory"):
        check_writable(tmp_path / "f" / "x.json", "--json")
