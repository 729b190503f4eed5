"""The one check of the paths a command writes, made before any work: every command that writes
(peaks, track, demo, bench, learn, gpu-check, calibrate) calls :func:`check_paths` with what it
writes and what it reads. Each written path must be a name the filesystem takes (with the names
welchpeaks derives from it), writable, and apart from every input and every other written path;
a job's ``--out`` brings its staging folder and the temporary names it removes beside it. One
line (exit 2) says which path and why.

"Apart" is judged on disk: paths are compared with their folders' links resolved and each
existing path by its device and inode (a link to an input, or the input through another mount,
is the input). An input is what :func:`welchpeaks.sources.footprint` says its argument reads:
files (an HDF5 file for ``file.h5:/dataset``), folders read whole (a Zarr store, a folder of
sound files: a path inside one is inside the input) and, for a glob, any sound file it would
match on a rerun.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Iterable, Optional, Union

from welchpeaks.cli.common import fail
from welchpeaks.cli.job import check_format, made_beside, staging_dir
from welchpeaks.cli.job_output import JobError, check_output as check_job_output, removed_beside
from welchpeaks.files import TEMPORARY_EXTRA, OutputPathError, check_writable, name_problem, quoted
from welchpeaks.loaders import SignalFileError
from welchpeaks.sources import AUDIO_SUFFIXES, footprint

#: the room a job's path keeps for what it makes inside its folders (units and their
#: temporary files in the staging folder, a Zarr output's arrays)
INSIDE_BYTES = 64

PathLike = Union[str, os.PathLike]


def check_paths(outputs: dict[str, Optional[Path]], sources: Iterable[PathLike] = (),
                reads: Iterable[Optional[PathLike]] = (), job: Optional[str] = None) -> None:
    """Refuse, in one line, a command's written paths that could not be written or would harm
    what it reads: ``outputs`` maps each option (``--out``) to its path (None: not given);
    ``sources`` are the inputs whose names the outputs hold (a job's ``file`` column, the
    ``peaks`` CSV and JSON, plot titles), which must then be UTF-8, found as ``open_signals``
    finds them; ``reads`` are other files or folders read as named (weights; None: not given);
    ``job`` names the option that is a job's output."""
    given = {option: path for option, path in outputs.items() if path is not None}
    reads = [r for r in reads if r is not None]
    for option, path in given.items():  # 1. names the filesystem takes (with those derived from them)
        extra = max(len(p.name) for p in made_beside(path)) - len(path.name) if option == job else TEMPORARY_EXTRA
        problem = name_problem(path, extra, INSIDE_BYTES if option == job else TEMPORARY_EXTRA)
        if problem is not None:
            fail(f"{option} {quoted(path)}: {problem}")
    for text in [*sources, *reads]:
        problem = name_problem(text)
        if problem is not None:
            fail(f"the input {quoted(text)}: {problem}")
    written: list[tuple[str, Path, bool]] = []  # 2. apart from the inputs and each other (message, path, folder?)
    for option, path in given.items():
        written.append((f"{option} {quoted(path)}", path, option == job and path.suffix.lower() == ".zarr"))
        if option == job:
            written.append((f"the staging folder {quoted(staging_dir(path))} of {option}", staging_dir(path), True))
    regions = [(f"the input {quoted(r)}", Path(r)) for r in reads]  # (what a message calls it, path)
    patterns: list[str] = []
    names: list[str] = []
    for text in sources:
        try:
            fp = footprint(text)
        except SignalFileError as exc:
            fail(str(exc))
        regions += [(f"the input {quoted(f)}", f) for f in fp.files]
        regions += [(f"the input folder {quoted(d)} (read whole)", d) for d in fp.folders]
        patterns += [fp.pattern] if fp.pattern is not None else []
        names += fp.names
    for what, path, folder in written:
        for other, region in regions:
            relation = _relation(path, region, folder)
            if relation is not None:
                fail(f"{what} {relation} {other}, which writing it would {_HARM[relation]}; name a path apart from "
                     "every input")
        for pattern in patterns:
            if _glob_reads(pattern, path):
                fail(f"{what} matches the input pattern {pattern!r}, so a rerun would read it as a recording; name a "
                     "path the pattern does not match")
    for i, (what, path, folder) in enumerate(written):
        for other, second, second_folder in written[i + 1:]:
            relation = _relation(path, second, folder, second_folder)
            if relation is not None:
                fail(f"{what} {relation} {other}; give each output a path of its own, outside the others")
    if job in given:
        own = (given[job], staging_dir(given[job]))
        _check_removed_beside(given[job], job, regions + [w[:2] for w in written if w[1] not in own])
    if given:  # 3. names the outputs can hold
        _check_names(names, written[0][0])
    for option, path in given.items():  # 4. a place it can be written, in a format it can be written in
        try:
            if option == job:
                check_format(path)
                if path.suffix.lower() != ".zarr":  # (a .zarr output is a folder: check_job_output checks it)
                    check_writable(path, option)
                check_job_output(path)
            else:
                check_writable(path, option)
        except (OutputPathError, JobError) as exc:
            fail(str(exc))


def _check_removed_beside(out: Path, option: str, others: list[tuple[str, Path]]) -> None:
    """Refuse an input or another output with a name the job's assembly removes beside ``out``
    (what a killed assembly left: ``job_output.removed_beside``), or inside one."""
    folder = _identity(_landing(out).parent)
    for what, path in others:
        place = _landing(path)
        for entry in (place, *place.parents):
            if entry.name and _identity(entry.parent) == folder and removed_beside(out, entry.name):
                fail(f"{what} has a name {option} {quoted(out)} gives its temporary files, which a job removes beside "
                     "it; rename it or name another output")


def _check_names(names: list[str], output: str) -> None:
    """Refuse an input whose name is not UTF-8 (bytes the file system took as they are) where an
    output holds input names: CSV and Parquet cannot hold it, and JSON would hold a lone
    surrogate escape that pandas and pyarrow cannot read."""
    for name in names:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            fail(f"the input {quoted(name)}: its name is not valid UTF-8, and {output} holds the inputs' names as "
                 "UTF-8 text; rename the file (or link it under a UTF-8 name) and run again")


def _landing(path: PathLike) -> Path:
    """Where ``path`` lands on disk: its folder with every link resolved, then its own name."""
    path = Path(path)
    if path.name in ("", ".", ".."):
        return Path(os.path.realpath(path))
    return Path(os.path.realpath(path.parent)) / path.name


def _identity(path: Path) -> object:
    """What ``path`` is: an existing path's device and inode (links followed), else its real path."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return os.path.realpath(path)
    return st.st_dev, st.st_ino


#: what writing a path does to an input it is, lies inside, or holds
_HARM = {"is": "replace", "lies inside": "change", "holds": "remove"}


def _relation(a: PathLike, b: PathLike, a_folder: bool, b_folder: bool = True) -> Optional[str]:
    """How the path ``a`` stands to ``b`` on disk: ``is``, ``lies inside`` (when ``b`` may be
    a folder: an input, or a folder written), ``holds`` (when ``a`` is a folder written), or
    None (apart; a file written over an existing folder is refused as such, later)."""
    pa, pb = _landing(a), _landing(b)
    ida, idb = _identity(pa), _identity(pb)
    if ida == idb:
        return "is"
    if b_folder and idb in [_identity(p) for p in pa.parents]:
        return "lies inside"
    if a_folder and ida in [_identity(p) for p in pb.parents]:
        return "holds"
    return None


def _glob_reads(pattern: str, path: Path) -> bool:
    """Whether ``open_signals(pattern)`` would read ``path`` on a rerun: a sound file's suffix,
    every name matching its part of the pattern (as ``glob`` matches: a leading dot only by a
    leading dot), the pattern and the path taken as written and with their links resolved."""
    if path.suffix.lower() not in AUDIO_SUFFIXES:
        return False
    parts = Path(os.path.abspath(pattern)).parts
    magic = next((i for i, p in enumerate(parts) if any(c in p for c in "*?[")), len(parts))
    resolved = Path(os.path.realpath(Path(*parts[:magic]))).parts + parts[magic:]
    for want, got in ((parts, Path(os.path.abspath(path)).parts), (resolved, _landing(path).parts)):
        if len(want) == len(got) and all(fnmatch.fnmatchcase(g, w) and (w.startswith(".") or not g.startswith("."))
                                         for w, g in zip(want, got)):
            return True
    return False
