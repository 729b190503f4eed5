"""The tests' own guard against numba's stale caches (numba keys a cached kernel on its own
file only): any edit of a module using numba, or of one it imports from, clears the cached
kernels of the package; no edit, nothing cleared."""

from welchpeaks.numba_base import clear_stale_caches


def _package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "kernel.py").write_text("from numba import njit\nfrom pkg.consts import GATE\n")
    (pkg / "consts.py").write_text("GATE = 10.0\n")
    (pkg / "other.py").write_text("X = 1  # mentions numba, imports none\n")
    return pkg


def _caches(pkg):
    files = [pkg / "__pycache__" / "kernel.f-1.py311.nbi", pkg / "__pycache__" / "kernel.f-1.py311.1.nbc"]
    for f in files:
        f.write_bytes(b"cached")
    return files


def test_an_edit_clears_the_cached_kernels_and_no_edit_keeps_them(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    pkg = _package(tmp_path)
    files = _caches(pkg)
    assert clear_stale_caches(str(pkg)) and not any(f.exists() for f in files)  # first sight: cleared
    files = _caches(pkg)
    assert not clear_stale_caches(str(pkg)) and all(f.exists() for f in files)
    (pkg / "other.py").write_text("X = 2\n")  # not numba's, nor a kernel's import
    assert not clear_stale_caches(str(pkg)) and all(f.exists() for f in files)
    for edited, text in (("consts.py", "GATE = 12.0\n"), ("kernel.py", "from numba import njit\n")):
        files = _caches(pkg)
        (pkg / edited).write_text(text)
        assert clear_stale_caches(str(pkg)) and not any(f.exists() for f in files), edited


def test_kernels_in_family_folders_and_what_they_import_from_a_face(tmp_path, monkeypatch):
    """Kernels in sub-packages (backends/numba/fused/...) are found, and so are the files they
    import from a package: its face (``__init__``, whose constants are compiled in) and a module
    imported by name (``from pkg.family import module``)."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    pkg = _package(tmp_path)
    family = pkg / "family"
    (family / "__pycache__").mkdir(parents=True)
    (family / "__init__.py").write_text("EDGE = 1.0\n")
    (family / "shared.py").write_text("WIDTH = 16\n")
    (family / "kern.py").write_text("import numba\nfrom pkg.family import EDGE, shared\n")
    cached = family / "__pycache__" / "kern.f-1.py311.nbi"
    cached.write_bytes(b"cached")
    assert clear_stale_caches(str(pkg)) and not cached.exists()
    for edited, text in (("kern.py", "import numba\nfrom pkg.family import EDGE, shared  # edited\n"),
                         ("__init__.py", "EDGE = 2.0\n"), ("shared.py", "WIDTH = 8\n")):
        cached.write_bytes(b"cached")
        assert not clear_stale_caches(str(pkg)) and cached.exists()
        (family / edited).write_text(text)
        assert clear_stale_caches(str(pkg)) and not cached.exists(), edited


def test_caches_under_numba_cache_dir_are_cleared_too(tmp_path, monkeypatch):
    pkg = _package(tmp_path)
    elsewhere = tmp_path / "numba-cache"
    mine, theirs = elsewhere / "x" / "pkg" / "kernel.f-1.py311.nbi", elsewhere / "x" / "other" / "k.f-1.nbi"
    for f in (mine, theirs):
        f.parent.mkdir(parents=True)
        f.write_bytes(b"cached")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(elsewhere))
    assert clear_stale_caches(str(pkg))
    assert not mine.exists() and theirs.exists()


def test_a_read_only_package_is_left_as_it_is(tmp_path, monkeypatch):
    """An installed package the tests cannot write to (its files can be neither removed nor
    stamped): no error, and False (nothing cleared)."""
    from pathlib import Path

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    pkg = _package(tmp_path)
    files = _caches(pkg)

    def refused(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refused)
    monkeypatch.setattr(Path, "write_text", refused)
    assert not clear_stale_caches(str(pkg)) and all(f.exists() for f in files)
