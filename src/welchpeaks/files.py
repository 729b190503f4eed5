"""Writing files safely: every file welchpeaks writes (results, reports, weights, the cost-model
cache, plots) goes through :func:`write_atomic`, and the command line checks an output path
with :func:`check_writable` before it starts the work that fills it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


class OutputPathError(ValueError):
    """An output path that cannot be written; the message says why and what to do."""


def check_writable(path: str | os.PathLike, what: str = "output") -> Path:
    """``path`` if a file can be created or replaced there, else an :class:`OutputPathError`
    naming ``what`` (an option such as ``--json``) and the reason."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OutputPathError(f"{what} {str(path)!r} is a directory; give a file name")
    if path.exists() and not path.is_file():
        raise OutputPathError(f"{what} {str(path)!r} exists and is not a regular file (a device or a pipe); give a "
                              "file name")
    if not parent.exists():
        raise OutputPathError(f"{what} {str(path)!r}: the directory {str(parent)!r} does not exist; create it first")
    if not parent.is_dir():
        raise OutputPathError(f"{what} {str(path)!r}: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {str(path)!r}: the directory {str(parent)!r} is not writable")
    return path


def umask() -> int:
    """The process's file-mode creation mask, read without changing it where Linux says it
    (``/proc/self/status``), else by setting it and putting it back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def as_umask_allows(path: str | os.PathLike, directory: bool = False) -> None:
    """Give ``path`` (made by ``tempfile``, which creates 0600 files and 0700 folders) the mode
    a plain ``open`` or ``mkdir`` would: 0666 or 0777 less the umask (0644 / 0755 under 0022)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~umask())


def write_atomic(path: str | os.PathLike, data: bytes | str | Callable[[Path], None]) -> Path:
    """Write ``data`` (bytes, text, or a function that writes a given path) to a new, exclusively
    created temporary file beside ``path`` (never through a link planted there), flush it to
    disk, then rename it over ``path``: readers see the old file or the whole new one, and a
    full disk or an interruption leaves the old file as it was. The file gets the mode the
    umask gives new files (0644 under 0022), not the temporary file's 0600."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.",
                               suffix=".tmp")
    try:
        if callable(data):
            os.close(fd)
            data(Path(tmp))
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode() if isinstance(data, str) else data)
                fh.flush()
                os.fsync(fh.fileno())
        as_umask_allows(tmp)  # after the writer, which may have made the file anew
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
