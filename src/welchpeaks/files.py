"""Files, safely: every file welchpeaks writes (results, reports, weights, the cost-model cache,
plots) goes through :func:`write_atomic`, the command line checks an output path with
:func:`check_writable` (and every name with :func:`name_problem`) before it starts the work
that fills it, and every small file it reads
back and cannot trust (manifests, saved units, weights, caches) goes through
:func:`read_regular` or :func:`load_json`: a regular file only (never a pipe, a device or a
folder), at most a stated number of bytes, JSON of bounded nesting, or a
:class:`FileContentError` naming the path."""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

#: the deepest JSON nesting :func:`load_json` accepts (welchpeaks' own files nest at most 5 deep)
MAX_JSON_DEPTH = 64


class FileContentError(ValueError):
    """A file welchpeaks reads back (a manifest, a saved unit, weights, a cache) that is not what
    it should be: not a regular file, too large, or malformed. The message names the path."""


class OutputPathError(ValueError):
    """An output path that cannot be written; the message says why and what to do."""


#: what :func:`write_atomic` adds to a name for its temporary file: ``.NAME.`` + 8 random
#: characters (``tempfile``'s) + ``.tmp``
TEMPORARY_EXTRA = 14


def _limit(path: str, name: str, default: int) -> int:
    """``os.pathconf(path, name)``, or ``default`` where the system does not say."""
    try:
        value = os.pathconf(path, name)
    except (OSError, ValueError, AttributeError):
        return default
    return value if value and value > 0 else default


def name_problem(path: str | os.PathLike, name_extra: int = 0, path_extra: int = 0) -> str | None:
    """Why the filesystem cannot take ``path`` as a name, or None: a name that cannot be encoded
    for it, a component longer than its ``NAME_MAX`` (``os.pathconf``, usually 255 bytes; the
    last less ``name_extra``, what a writer adds to it for the files it makes beside it), or
    the whole longer than its ``PATH_MAX`` less ``path_extra``. The limits are those of the
    nearest folder above ``path`` that exists."""
    text = os.fspath(path)
    try:
        raw = os.fsencode(text)
    except UnicodeError:
        return "the name cannot be encoded for the filesystem; give a name of plain characters"
    if b"\0" in raw:
        return "the name holds a NUL character"
    where = os.path.dirname(os.path.abspath(text))
    while not os.path.isdir(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    name_max, path_max = _limit(where, "PC_NAME_MAX", 255), _limit(where, "PC_PATH_MAX", 4096)
    parts = [part for part in raw.split(b"/") if part]
    for i, part in enumerate(parts):
        extra = name_extra if i == len(parts) - 1 else 0
        if len(part) + extra > name_max:
            shown = os.fsdecode(part)
            shown = shown if len(shown) <= 40 else f"{shown[:24]}...{shown[-12:]}"
            more = (f", and welchpeaks adds up to {extra} to it for the files it makes beside it: give a name of "
                    f"at most {name_max - extra} bytes") if extra else "; give a shorter name"
            return f"the name {shown!r} is {len(part)} bytes; this filesystem takes names of at most {name_max}{more}"
    whole = len(os.fsencode(os.path.abspath(text)))
    if whole + path_extra >= path_max:
        return (f"the path is {whole} bytes in full; this filesystem takes paths under {path_max}"
                + (f", and welchpeaks needs {path_extra} more for the files it makes there" if path_extra else "")
                + "; give a shorter path")
    return None


def check_writable(path: str | os.PathLike, what: str = "output") -> Path:
    """``path`` if a file can be created or replaced there, else an :class:`OutputPathError`
    naming ``what`` (an option such as ``--json``) and the reason (a name the filesystem cannot
    take, for the file or its temporary file, included)."""
    problem = name_problem(path, TEMPORARY_EXTRA, TEMPORARY_EXTRA)
    if problem is not None:
        raise OutputPathError(f"{what} {quoted(path)}: {problem}")
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


def quoted(path: str | os.PathLike) -> str:
    """``path`` quoted for a message, its middle left out when it is long."""
    text = os.fspath(path)
    return repr(text if len(text) <= 80 else f"{text[:48]}...{text[-24:]}")


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


def read_regular(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of ``path``, a regular file (links followed) of at most ``limit`` bytes, else a
    :class:`FileContentError` naming ``what`` and the path. The file is opened without waiting
    (a pipe would block a plain ``open`` until a writer comes) and checked on the opened
    descriptor, so a file swapped after the check is not read either; a file that grows past
    ``limit`` while it is read (``/dev/zero`` behind a link reports size 0) is refused."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise FileContentError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise FileContentError(f"{what} {path}: a directory, not a file") from None
    except OSError as exc:
        raise FileContentError(f"{what} {path}: cannot be opened ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileContentError(f"{what} {path}: not a regular file (a pipe, a device or a directory)")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > limit:
            raise FileContentError(f"{what} {path}: {st.st_size} bytes, more than such a file ever holds ({limit})")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileContentError(f"{what} {path}: more than {limit} bytes, more than such a file ever holds")
    return data


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``data`` (strings skipped)."""
    codes = np.frombuffer(_JSON_STRING.sub(b"", data), np.uint8)
    step = (np.isin(codes, (ord("["), ord("{"))).astype(np.int64)
            - np.isin(codes, (ord("]"), ord("}"))).astype(np.int64))
    return int(np.cumsum(step).max(initial=0))


def load_json(path: str | os.PathLike, limit: int, what: str = "file", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON document in ``path`` (read with :func:`read_regular`), nested at most
    ``max_depth`` deep, else a :class:`FileContentError` naming ``what`` and the path. Parsed
    first (a hostile nesting stops the parser at Python's recursion limit), then measured:
    :func:`json_depth` is linear on valid JSON only."""
    data = read_regular(path, limit, what)
    try:
        doc = json.loads(data)
    except RecursionError:
        doc = None
    except ValueError as exc:
        raise FileContentError(f"{what} {path}: not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    if doc is None and data.strip() != b"null" or json_depth(data) > max_depth:
        raise FileContentError(f"{what} {path}: JSON nested deeper than {max_depth} levels; not a welchpeaks file")
    return doc
