"""Out-of-core jobs of the command line (``peaks --out`` and ``track``): a source cut into
units of work, each computed in bounded memory (here, or on a dask cluster), each result saved
as soon as it is done, the output assembled at the end.

* **Bounded memory**: a unit reads at most a quarter of ``--memory`` of samples.
* **Never half-written**: each finished unit is saved atomically in ``OUT.partial/`` (beside
  the output), with a manifest of the job's arguments; the output is assembled from them into
  a temporary file and renamed over ``OUT`` at the end, then the staging folder is removed.
* **Resume**: the same command run again after an interruption (Ctrl-C, a kill, a crash) finds
  the manifest, keeps the units already saved and computes the rest; the output is identical
  to an uninterrupted run's (units are deterministic and assembled in order). Different
  arguments find a different manifest and are refused, naming the folder to remove.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from welchpeaks.files import as_umask_allows, write_atomic

FORMATS = (".parquet", ".zarr", ".csv", ".jsonl")
#: the columns of every job of a kind; the measures asked for (``measures=``) follow them
COLUMNS = {"peaks": ("file", "signal", "rank", "bin", "freq", "power"),
           "track": ("file", "signal", "time", "rank", "bin", "freq", "power")}
MANIFEST_VERSION = 1


class JobError(ValueError):
    """A job that cannot start or go on; the message says why and what to do."""


@dataclass(frozen=True)
class Unit:
    """One unit of work: rows ``r0:r1`` of part ``part`` of source ``source`` (and frames
    ``t0:t1`` for track)."""

    source: int
    part: int
    r0: int
    r1: int
    t0: int = 0
    t1: int = 0


def _open(path: str) -> Any:
    from welchpeaks.sources import open_signals

    return open_signals(path)


_CACHE: dict[str, Any] = {}


def _cached(key: str, make: Callable[[], Any]) -> Any:
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _executor(spec: dict[str, Any], unit: Unit) -> tuple[Any, Any]:
    """The unit's source and executor (WelchPeaks or Tracker), built once per process."""
    from welchpeaks.api import Tracker, WelchPeaks

    path, kind, kw = spec["sources"][unit.source], spec["kind"], spec["kw"][unit.source]
    src = _cached("src:" + path, lambda: _open(path))
    return src, _cached(json.dumps([kind, kw], sort_keys=True), lambda: (WelchPeaks if kind == "peaks" else Tracker)(**kw))


def unit_read(spec: dict[str, Any], unit: Unit) -> tuple[int, int, int, int, int] | None:
    """The one read ``(part, r0, r1, s0, s1)`` a unit makes, or None when it reads in pieces."""
    src, ex = _executor(spec, unit)
    if spec["kind"] == "peaks":
        if ex._in_pieces(src, unit.part, spec["budget"]):
            return None
        return unit.part, unit.r0, unit.r1, 0, ex.params.frame_for(src.parts[unit.part].samples)
    s0 = unit.t0 * ex.step
    return unit.part, unit.r0, unit.r1, s0, s0 + (unit.t1 - unit.t0 - 1) * ex.step + ex.frame


def read_unit(spec: dict[str, Any], unit: Unit) -> np.ndarray | None:
    """The samples of a unit (None when it reads in pieces itself)."""
    where = unit_read(spec, unit)
    return None if where is None else _executor(spec, unit)[0].read(*where)


def compute_unit(spec: dict[str, Any], unit: Unit, data: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The long-form columns of one unit (runs here or on a dask worker, which opens the source
    and builds the executor itself, once per process); ``data``: its samples, already read."""
    from welchpeaks.api.lazy import fit_numba_threads

    fit_numba_threads()
    src, ex = _executor(spec, unit)
    if data is None:
        data = read_unit(spec, unit)
    times = None
    if spec["kind"] == "peaks":
        res = ex.source_block(src, unit.part, unit.r0, unit.r1, spec["budget"], data)
    else:
        res = ex.run(data, unit_read(spec, unit)[3])
        times = res.times
    bins, power, freqs = res.bins, res.power, res.freqs
    sig, *rest = np.nonzero(bins >= 0)
    cols = {"file": np.full(sig.shape, spec["file_index"][unit.source][unit.part], np.int32),
            "signal": (sig + unit.r0).astype(np.int64)}
    if times is not None:
        cols["time"] = times[rest[0]]
    cols.update(rank=rest[-1].astype(np.int32), bin=bins[bins >= 0].astype(np.int32),
                freq=freqs[bins >= 0].astype(np.float64), power=power[bins >= 0].astype(np.float64))
    for name in spec["measures"]:
        cols[name] = np.asarray(res.measures.get(name, np.full(bins.shape, np.nan)), np.float64)[bins >= 0]
    return cols


def measure_columns(kind: str, kw: dict[str, Any]) -> list[str]:
    """The measures' columns of a job (after :data:`COLUMNS`): those ``measures=`` asks for,
    then ``width_hz`` when the width is asked (NaN for a source without a sample rate)."""
    from welchpeaks.api import Tracker, WelchPeaks

    names = (WelchPeaks if kind == "peaks" else Tracker)(**kw).params.measure_names()
    return [n for n in names if n != "width_hz"] + (["width_hz"] if "width" in names else [])


def plan_units(kind: str, sources: list[Any], kw: list[dict[str, Any]], budget: int) -> list[Unit]:
    """The job's units: blocks of rows (and of frames, for track) reading at most ``budget``
    bytes of samples each."""
    from welchpeaks.api import Tracker, WelchPeaks

    units = []
    for s, src in enumerate(sources):
        item = src.dtype.itemsize
        for i, part in enumerate(src.parts):
            if kind == "peaks":
                try:
                    blocks = WelchPeaks(**kw[s]).source_blocks(src, i, budget)
                except ValueError as exc:
                    raise JobError(str(exc)) from None
                units += [Unit(s, i, r0, r1) for r0, r1, _ in blocks]
                continue
            tr = Tracker(**kw[s])
            n_frames = tr.n_frames(part.samples)
            if n_frames == 0:
                raise JobError(f"{part.name}: {part.samples} samples, but a frame needs {tr.frame}; pass a smaller "
                               "--n-fft or fewer --frame-segments")
            for r0, r1 in src.row_blocks(i, 4 * tr.frame * item, budget):
                per = max(1, (budget // ((r1 - r0) * item) - tr.frame) // tr.step + 1)
                units += [Unit(s, i, r0, r1, t0, min(n_frames, t0 + per)) for t0 in range(0, n_frames, per)]
    return units


def _fingerprint(kind: str, paths: list[str], sources: list[Any], kw: list[dict[str, Any]], budget: int,
                 out: Path) -> str:
    """What makes two runs the same job: arguments, the sources' files (names, sizes, times of
    change, shapes) and the unit layout."""
    files = []
    for src in sources:
        for part in src.parts:
            base = part.name.split(":")[0]
            st = os.stat(base) if os.path.exists(base) else None
            files.append([part.name, part.rows, part.samples, st.st_size if st else 0,
                          st.st_mtime_ns if st else 0])
    doc = json.dumps([MANIFEST_VERSION, kind, paths, files, kw, budget, out.suffix.lower()], sort_keys=True,
                     default=str)
    return hashlib.sha256(doc.encode()).hexdigest()


def staging_dir(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


class Job:
    """One out-of-core job; :meth:`run` computes what is missing and writes the output."""

    def __init__(self, kind: str, paths: list[str], sources: list[Any], kw: list[dict[str, Any]], out: Path,
                 memory: int):
        if out.suffix.lower() not in FORMATS:
            raise JobError(f"--out {str(out)!r}: unknown format {out.suffix!r}; use one of {', '.join(FORMATS)}")
        self.kind, self.paths, self.sources, self.kw, self.out = kind, paths, sources, kw, out
        self.budget = max(1 << 20, memory // 4)
        self.units = plan_units(kind, sources, kw, self.budget)
        names = [part.name for src in sources for part in src.parts]
        index, n = [], 0
        for src in sources:
            index.append(list(range(n, n + len(src.parts))))
            n += len(src.parts)
        measures = measure_columns(kind, kw[0]) if kw else []
        self.column_names = COLUMNS[kind] + tuple(measures)
        self.spec = {"kind": kind, "sources": paths, "kw": kw, "file_index": index, "budget": self.budget,
                     "measures": measures}
        self.names = names
        self.stage = staging_dir(out)
        self.key = _fingerprint(kind, paths, sources, kw, self.budget, out)

    # ------------------------------------------------------------------ staging
    def _unit_path(self, i: int) -> Path:
        return self.stage / f"unit-{i:07d}.npz"

    def prepare(self) -> list[int]:
        """Open (or create) the staging folder; the indices of the units still to compute."""
        manifest = self.stage / "manifest.json"
        if self.stage.exists():
            try:
                doc = json.loads(manifest.read_text())
            except (OSError, ValueError):
                doc = None
            if not isinstance(doc, dict) or doc.get("key") != self.key:
                raise JobError(f"{self.stage} holds an unfinished run with other arguments or inputs; rerun that "
                               "command to finish it, or delete the folder to start this one")
        else:
            self.stage.mkdir()
            write_atomic(manifest, json.dumps({"key": self.key, "units": len(self.units), "kind": self.kind,
                                               "sources": self.paths}))
        return [i for i in range(len(self.units)) if not self._load(i, check_only=True)]

    def _save(self, i: int, cols: dict[str, np.ndarray]) -> None:
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, **{"c_" + c: v for c, v in cols.items()})  # 'file' is savez's own argument

        write_atomic(self._unit_path(i), write)

    def _load(self, i: int, check_only: bool = False) -> dict[str, np.ndarray] | None:
        """A saved unit's columns (None when absent or unreadable: it is computed again)."""
        path = self._unit_path(i)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                cols = {c: z["c_" + c] for c in self.column_names}
            if len({len(v) for v in cols.values()}) != 1:
                raise ValueError("columns of different lengths")
        except Exception:
            path.unlink(missing_ok=True)
            return None
        return {} if check_only else cols

    # ------------------------------------------------------------------ running
    def run(self, progress: Callable[[Unit, int], None] | None = None, client: Any = None,
            todo: list[int] | None = None) -> None:
        """Compute the missing units (``todo``, else what :meth:`prepare` finds; on ``client``'s
        cluster when given), then assemble."""
        todo = self.prepare() if todo is None else todo
        if client is None:
            # the next unit's samples are read while this one computes (reading and the kernels
            # release the GIL): two units' samples in flight, each within the budget
            with ThreadPoolExecutor(1, thread_name_prefix="welchpeaks-read") as reader:
                ahead = reader.submit(read_unit, self.spec, self.units[todo[0]]) if todo else None
                for j, i in enumerate(todo):
                    data = ahead.result()
                    if j + 1 < len(todo):
                        ahead = reader.submit(read_unit, self.spec, self.units[todo[j + 1]])
                    self._save(i, compute_unit(self.spec, self.units[i], data))
                    del data
                    if progress:
                        progress(self.units[i], i)
        else:
            from distributed import as_completed

            futures = {client.submit(compute_unit, self.spec, self.units[i], pure=False): i for i in todo}
            for fut in as_completed(futures):
                i = futures[fut]
                self._save(i, fut.result())
                if progress:
                    progress(self.units[i], i)
        self.assemble()

    def columns(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(len(self.units)):
            cols = self._load(i)
            if cols is None:
                raise JobError(f"{self._unit_path(i)} went missing while the output was written; rerun the command")
            yield cols

    def assemble(self) -> None:
        """Write the output from the saved units (atomically), then remove the staging folder."""
        suffix = self.out.suffix.lower()
        if suffix == ".zarr":
            self._write_zarr()
        else:
            write_atomic(self.out, {".csv": self._write_csv, ".jsonl": self._write_jsonl,
                                    ".parquet": self._write_parquet}[suffix])
        shutil.rmtree(self.stage, ignore_errors=True)

    def _rows(self, cols: dict[str, np.ndarray]) -> Iterator[list[Any]]:
        names = self.names
        lists = [cols[c].tolist() for c in self.column_names]
        for row in zip(*lists):
            yield [names[row[0]], *row[1:]]

    def _write_csv(self, tmp: Path) -> None:
        with open(tmp, "w", newline="") as fh:
            fh.write(",".join(self.column_names) + "\n")
            for cols in self.columns():
                fh.writelines(",".join(_csv_cell(v) for v in row) + "\n" for row in self._rows(cols))

    def _write_jsonl(self, tmp: Path) -> None:
        keys = self.column_names
        finite = lambda v: None if isinstance(v, float) and not math.isfinite(v) else v  # noqa: E731 (JSON has no NaN)
        with open(tmp, "w") as fh:
            for cols in self.columns():
                fh.writelines(json.dumps(dict(zip(keys, map(finite, row)))) + "\n" for row in self._rows(cols))

    def _write_parquet(self, tmp: Path) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise JobError("--out .parquet needs pyarrow: pip install 'welchpeaks[io]'") from None
        writer = None
        try:
            for cols in self.columns():
                arrays = {c: cols[c] for c in self.column_names}
                arrays["file"] = pa.DictionaryArray.from_arrays(cols["file"], pa.array(self.names))
                table = pa.table(arrays)
                if writer is None:
                    writer = pq.ParquetWriter(str(tmp), table.schema)
                writer.write_table(table)
            if writer is None:  # no peak at all: an empty table with the columns
                writer = pq.ParquetWriter(str(tmp), pa.schema([(c, pa.float64()) for c in self.column_names]))
        finally:
            if writer is not None:
                writer.close()

    def _write_zarr(self) -> None:
        try:
            import zarr
        except ImportError:
            raise JobError("--out .zarr needs zarr: pip install 'welchpeaks[io]'") from None
        total = sum(len(c["signal"]) for c in self.columns())
        tmp = Path(tempfile.mkdtemp(dir=self.out.parent if str(self.out.parent) else ".", prefix=f".{self.out.name}."))
        try:
            as_umask_allows(tmp, directory=True)
            group = zarr.open_group(str(tmp), mode="w")
            group.attrs.update(files=self.names, kind=self.kind)
            arrays = {}
            at = 0
            for cols in self.columns():
                for c in self.column_names:
                    if c not in arrays:
                        arrays[c] = group.create_array(c, shape=(total,), dtype=cols[c].dtype,
                                                       chunks=(max(1, min(total, 1 << 20)),))
                    arrays[c][at:at + len(cols[c])] = cols[c]
                at += len(cols["signal"])
            if self.out.exists():
                shutil.rmtree(self.out) if self.out.is_dir() else self.out.unlink()
            os.replace(tmp, self.out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _csv_cell(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    text = str(v)
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text


def bytes_of(unit: Unit, job: Job) -> int:
    """Bytes of samples a unit reads (for the progress rate)."""
    where = unit_read(job.spec, unit)
    src = job.sources[unit.source]
    if where is None:  # whole long rows, in pieces
        return (unit.r1 - unit.r0) * src.parts[unit.part].samples * src.dtype.itemsize
    return (unit.r1 - unit.r0) * (where[4] - where[3]) * src.dtype.itemsize
