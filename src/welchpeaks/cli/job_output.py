"""The output of an out-of-core job (:mod:`welchpeaks.cli.job`): its saved units' columns
written as one CSV, JSON Lines or Parquet file (into a temporary file renamed over the output)
or one Zarr folder (a temporary folder swapped in), so an output is whole or absent, never
half-written. ``JobError`` is the jobs' error.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from welchpeaks.files import as_umask_allows, write_atomic

#: each saved unit's columns, in order (``Job.columns``)
Columns = Callable[[], Iterator[dict[str, np.ndarray]]]


class JobError(ValueError):
    """A job that cannot start or go on; the message says why and what to do."""


#: what a killed assembly of ``NAME`` leaves beside it, which the next one removes (a pattern,
#: and whether it is a folder): a temporary file (``write_atomic``), a temporary Zarr folder,
#: an old Zarr folder renamed aside, a staging folder renamed aside (``Job.assemble``)
_LEFT_BEHIND = ((r"\.{name}\.[a-z0-9_]{{8}}\.tmp", False), (r"\.{name}\.[a-z0-9_]{{8}}", True),
                (r"\.{name}\.old\.[a-z0-9_]{{8}}", True), (r"\.{name}\.partial\.done\.\d+", True))
#: the files a Zarr store (v2 or v3) has at its top
_ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")


def is_zarr_store(path: Path) -> bool:
    """Whether the folder ``path`` is a Zarr store (an output this may replace whole)."""
    return path.is_dir() and not path.is_symlink() and any((path / m).is_file() for m in _ZARR_MARKERS)


def check_output(out: Path) -> None:
    """Refuse, before any work, an output the job could not write or must not replace: the
    extra its format needs missing, a ``.zarr`` name held by a file, a link or a folder that is
    not a Zarr store, a parent folder that is missing or not writable (a file output's own
    checks are ``files.check_writable``'s)."""
    suffix = out.suffix.lower()
    need = {".parquet": ("pyarrow", "--out .parquet needs pyarrow"), ".zarr": ("zarr", "--out .zarr needs zarr")}
    if suffix in need:
        module, what = need[suffix]
        try:
            __import__(module)
        except ImportError:
            raise JobError(f"{what}: pip install 'welchpeaks[io]'") from None
    if suffix != ".zarr":
        return
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise JobError(f"--out {str(out)!r} exists and is not a Zarr folder (a file or a link; the output folder is "
                       "replaced whole); give another name or the real path")
    if out.exists() and not is_zarr_store(out):
        raise JobError(f"--out {str(out)!r} is a folder but not a Zarr store, and the output replaces it whole; give "
                       "another name, or remove the folder first")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise JobError(f"--out {str(out)!r}: the directory {str(parent)!r} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise JobError(f"--out {str(out)!r}: the directory {str(parent)!r} is not writable")


def removed_beside(out: Path, name: str) -> bool:
    """Whether an entry called ``name`` in the folder of ``out`` has a name an assembly of
    ``out`` removes as left behind by a killed one (:data:`_LEFT_BEHIND`, a folder or not)."""
    return any(re.fullmatch(p.format(name=re.escape(out.name)), name) for p, _ in _LEFT_BEHIND)


def _remove_left_behind(out: Path) -> None:
    """Remove what killed assemblies of ``out`` left beside it (:data:`_LEFT_BEHIND`): the
    job's lock is held, so no other run is writing them."""
    parent = out.parent if str(out.parent) else Path(".")
    patterns = [(re.compile(p.format(name=re.escape(out.name))), folder) for p, folder in _LEFT_BEHIND]
    for entry in parent.iterdir():
        for pattern, folder in patterns:
            if not pattern.fullmatch(entry.name) or entry.is_symlink() or entry.is_dir() != folder:
                continue
            if folder:
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            break


def write_output(out: Path, kind: str, names: list[str], column_names: list[str], columns: Columns) -> None:
    """Write the job's output ``out`` (its suffix names the format) from ``columns()``: the
    columns ``column_names``, the ``file`` column (an index into ``names``) as the file's
    name; a Zarr group also records ``names`` and the job's ``kind``. What an earlier,
    killed assembly left beside ``out`` is removed first."""
    check_output(out)  # (again: the folder may have changed while the job ran)
    _remove_left_behind(out)
    suffix = out.suffix.lower()
    if suffix == ".zarr":
        _write_zarr(out, kind, names, column_names, columns)
        return
    write = {".csv": _write_csv, ".jsonl": _write_jsonl, ".parquet": _write_parquet}[suffix]
    write_atomic(out, lambda tmp: write(tmp, names, column_names, columns))


def _rows(cols: dict[str, np.ndarray], names: list[str], column_names: list[str]) -> Iterator[list[Any]]:
    """A unit's columns as table rows, the file's index replaced by its name."""
    lists = [cols[c].tolist() for c in column_names]
    for row in zip(*lists):
        yield [names[row[0]], *row[1:]]


def _write_csv(tmp: Path, names: list[str], column_names: list[str], columns: Columns) -> None:
    with open(tmp, "w", newline="") as fh:
        fh.write(",".join(column_names) + "\n")
        for cols in columns():
            fh.writelines(",".join(_csv_cell(v) for v in row) + "\n" for row in _rows(cols, names, column_names))


def _write_jsonl(tmp: Path, names: list[str], column_names: list[str], columns: Columns) -> None:
    finite = lambda v: None if isinstance(v, float) and not math.isfinite(v) else v  # noqa: E731 (JSON has no NaN)
    with open(tmp, "w") as fh:
        for cols in columns():
            fh.writelines(json.dumps(dict(zip(column_names, map(finite, row)))) + "\n"
                          for row in _rows(cols, names, column_names))


def _write_parquet(tmp: Path, names: list[str], column_names: list[str], columns: Columns) -> None:
    import pyarrow as pa  # (check_output has said how to install it when missing)
    import pyarrow.parquet as pq

    writer = None
    try:
        for cols in columns():
            arrays = {c: cols[c] for c in column_names}
            arrays["file"] = pa.DictionaryArray.from_arrays(cols["file"], pa.array(names))
            table = pa.table(arrays)
            if writer is None:
                writer = pq.ParquetWriter(str(tmp), table.schema)
            writer.write_table(table)
        if writer is None:  # no peak at all: an empty table with the columns
            writer = pq.ParquetWriter(str(tmp), pa.schema([(c, pa.float64()) for c in column_names]))
    finally:
        if writer is not None:
            writer.close()


def _write_zarr(out: Path, kind: str, names: list[str], column_names: list[str], columns: Columns) -> None:
    import zarr  # (check_output has said how to install it when missing)

    tmp = Path(tempfile.mkdtemp(dir=out.parent if str(out.parent) else ".", prefix=f".{out.name}."))
    try:
        as_umask_allows(tmp, directory=True)
        group = zarr.open_group(str(tmp), mode="w")
        group.attrs.update(files=names, kind=kind)
        arrays = {}
        for cols in columns():  # (once: each unit is read, checked and linked once)
            for c in column_names:
                if c not in arrays:
                    arrays[c] = group.create_array(c, shape=(0,), dtype=cols[c].dtype, chunks=(1 << 20,))
                if len(cols[c]):
                    arrays[c].append(cols[c])
        _swap_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_folder(new: Path, out: Path) -> None:
    """Put the folder ``new`` at ``out``: an old ``out`` is renamed aside first and removed only
    once ``new`` is in place, so a kill at any point leaves the old output or the new one (under
    its own name or, between the two renames, beside it as ``.NAME.old.*``, which the next run
    removes). ``out`` must not be a link (the command line refuses one before the job runs)."""
    aside = None
    if out.exists() or out.is_symlink():
        if not is_zarr_store(out):
            raise JobError(f"--out {str(out)!r} exists and is not a Zarr store; give another name")
        aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old."))
        os.replace(out, aside)  # onto the empty temporary folder: atomic
    os.replace(new, out)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _csv_cell(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    text = str(v)
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text
