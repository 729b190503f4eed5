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


def test_a_compile_is_said_per_signature_neither_compiled_here_nor_cached_on_disk(tmp_path):
    """announce_compile with the call's arguments: a kernel with nothing on disk is said; once
    a signature is cached (another process compiled it), that signature is not said again,
    but another signature of the same kernel, which still compiles (float64 rows beside
    float32 ones: 40 s for the fused pass), is; each once per process."""
    import os
    import subprocess
    import sys

    (tmp_path / "toy.py").write_text("from numba import njit\n\n@njit(cache=True)\ndef total(x):\n    return x.sum()\n")
    script = """
import sys, numpy as np
import toy
from welchpeaks.numba_base import announce_compile
for dtype in sys.argv[1:]:
    x = np.zeros(3, dtype)
    announce_compile(toy.total, "the toy kernel", "a second", (x,))
    announce_compile(toy.total, "the toy kernel", "a second", (x,))  # (said once a process)
    print("called", dtype, file=sys.stderr, flush=True)
    toy.total(x)
"""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=str(tmp_path))

    def said(*dtypes):
        proc = subprocess.run([sys.executable, "-c", script, *dtypes], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        return [line for line in proc.stderr.splitlines() if line.startswith(("welchpeaks:", "called"))]

    notice = "welchpeaks: compiling the toy kernel with numba (a second); once per machine, the result is cached on disk"
    assert said("float32") == [notice, "called float32"]  # nothing on disk
    assert said("float32", "float64") == ["called float32", notice, "called float64"]  # a new signature only
    assert said("float64", "float32") == ["called float64", "called float32"]  # both cached now
