"""Out-of-core jobs of the command line (``peaks --out`` and ``track``): a source cut into
units of work, each computed in bounded memory (here, or on a dask cluster), each result saved
as soon as it is done, the output assembled at the end.

* **Bounded memory, fixed units**: every unit reads at most :data:`welchpeaks.memory.UNIT_BYTES` of samples (a
  quarter of the least ``--memory``), whatever ``--memory`` is, so that the units and the
  output's row order are the same at any ``--memory``; ``--memory`` bounds the executions'
  working memory (``max_memory``), which cuts their work into blocks of rows (and, under
  ``numpy``, a row too long for it into pieces of segments, which changes the last bits).
* **One execution per job**: under ``--strategy auto`` the execution and its precision are
  chosen once, for the whole job, with this machine's measured cost model (measured first if
  there is none), and pinned in the manifest with the working-memory bound: a resume gives the
  bytes of an uninterrupted run whatever ``--memory`` it passes and whatever model was
  measured meanwhile.
* **Never half-written**: the staging folder ``OUT.partial/`` (beside the output) appears with
  its manifest at once (made under a temporary name, then renamed); each finished unit is
  saved atomically in it and its SHA-256 appended to the manifest's unit list
  (``done.jsonl``); the output is assembled into a temporary file (a temporary folder for
  Zarr) and renamed over ``OUT`` at the end (an old Zarr folder is renamed aside first, then
  removed), then the staging folder is removed.
* **Resume**: the same command run again after an interruption (Ctrl-C, a kill, a crash) finds
  the manifest, reuses every saved unit whose bytes match its listed digest (a unit that is
  missing, damaged, replaced or a link is computed again) and computes the rest; the output
  is byte-identical to an uninterrupted run's. Different arguments find a different manifest
  and are refused, naming the folder to remove.
* **One run at a time**: a run holds a lock on ``OUT.partial/lock``; a second run on the same
  output is refused with a message (the lock goes with the process, a kill included).
* Everything read back from the staging folder is untrusted: regular files only, bounded
  sizes and JSON nesting (:func:`welchpeaks.files.load_json`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from welchpeaks.cli.job_output import JobError, write_output
from welchpeaks.files import FileContentError, as_umask_allows, load_json, quoted, read_regular, write_atomic
from welchpeaks.memory import UNIT_BYTES
from welchpeaks.result import time_column

try:
    import fcntl
except ImportError:  # not on Windows: there a second run on one output is not refused
    fcntl = None  # type: ignore[assignment]

FORMATS = (".parquet", ".zarr", ".csv", ".jsonl")
#: the columns of every job of a kind; the measures asked for (``measures=``) follow them;
#: ``time`` is ``time_samples`` (in samples) unless every source has a sample rate
COLUMNS = {"peaks": ("file", "signal", "rank", "bin", "freq", "power"),
           "track": ("file", "signal", "time", "rank", "bin", "freq", "power")}
MANIFEST_VERSION = 2
#: the most bytes a manifest holds (arguments, sources, pins), and a line of the unit list
MANIFEST_BYTES = 1 << 20
DONE_LINE_BYTES = 128


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
        if ex.reads_in_pieces(src, unit.part, spec["budget"]):
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
        cols["frame"] = (rest[0] + unit.t0).astype(np.int64)  # not written: what linking orders by
        fs = ex.params.fs
        cols[spec["time"]] = times[rest[0]] * (fs if fs and spec["time"] == "time_samples" else 1.0)
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


def _file_state(base: str) -> list[Any]:
    """What changes when a source's bytes change: size, times of change (``ctime`` too: ``touch
    -r`` or ``rsync -t`` keep ``mtime``) and inode (a file renamed over it); for a folder (a Zarr
    store, whose chunks are rewritten in place without touching the folder), the same over
    every file in it (count, total size, latest times, a digest of the names and states)."""
    if not os.path.exists(base):
        return [0, 0, 0, 0]
    st = os.stat(base)
    if not os.path.isdir(base):
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    h, count = hashlib.sha256(), 0
    for root, dirs, files in os.walk(base):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            try:
                f = os.stat(full)
            except OSError:
                continue
            count += 1
            h.update(f"{os.path.relpath(full, base)}|{f.st_size}|{f.st_mtime_ns}|{f.st_ctime_ns}|{f.st_ino}\n".encode())
    return [count, h.hexdigest()]


def _fingerprint(kind: str, paths: list[str], sources: list[Any], kw: list[dict[str, Any]], budget: int,
                 out: Path) -> str:
    """What makes two runs the same job: arguments (but the working-memory bound: a rerun with
    another --memory resumes, with the first run's bound, which the manifest keeps), the
    sources' files (names, shapes, and their bytes' state: :func:`_file_state`) and the unit
    layout."""
    files = []
    for src in sources:
        for part in src.parts:
            files.append([part.name, part.rows, part.samples, _file_state(part.name.split(":")[0])])
    kw = [{k: v for k, v in one.items() if k != "max_memory"} for one in kw]
    doc = json.dumps([MANIFEST_VERSION, kind, paths, files, kw, budget, out.suffix.lower()], sort_keys=True,
                     default=str)
    return hashlib.sha256(doc.encode()).hexdigest()


def staging_dir(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def check_format(out: Path) -> None:
    """A ``JobError`` unless ``out``'s suffix names an output format."""
    if out.suffix.lower() not in FORMATS:
        raise JobError(f"--out {quoted(out)}: unknown format {out.suffix!r}; use one of {', '.join(FORMATS)}")


def made_beside(out: Path) -> list[Path]:
    """What a job writing ``out`` makes beside it, each with the longest name it takes (random
    parts as 8 characters, a process id as 7 digits): the staging folder (first), its temporary
    and set-aside names, the output's temporary file or folder, an old Zarr output set aside."""
    stage = staging_dir(out)
    return [stage, stage.with_name(f".{stage.name}.xxxxxxxx"), stage.with_name(f".{stage.name}.done.9999999"),
            out.with_name(f".{out.name}.xxxxxxxx.tmp"), out.with_name(f".{out.name}.old.xxxxxxxx")]


def pin_execution(kind: str, kw: dict[str, Any], rows: int, length: int, dtype: np.dtype) -> dict[str, Any]:
    """The execution and precision a job runs for its every unit (``{'strategy', 'dtype'}``):
    under 'auto' the planner's choice for the whole source in memory, with the machine's
    measured cost model (waited for while it is measured) and without the job's memory bound
    (which only cuts the work into blocks); else what was asked."""
    from welchpeaks.api import Tracker, WelchPeaks
    from welchpeaks.plan import cost_model_for

    if kw.get("strategy", "auto") != "auto":
        return {"strategy": kw.get("strategy", "auto"), "dtype": kw.get("dtype")}
    cost_model_for("cpu", wait=True)
    free = dict(kw, max_memory=None)
    ex = Tracker(**free).executor(dtype) if kind == "track" else WelchPeaks(**free).for_batch(rows, length, dtype)
    return {"strategy": ex.requested, "dtype": ex._init.get("dtype")}


def model_identity() -> str | None:
    """Which CPU cost model chose the pinned executions (its status and a digest of it); None
    when there is none (the executions were named): it never starts a measurement."""
    from welchpeaks.plan import cost_model_for

    model = cost_model_for("cpu", calibrate=False, wait=False)
    if model is None:
        return None
    doc = json.dumps(model.to_dict(), sort_keys=True, default=str).encode()
    return f"{model.status}:{hashlib.sha256(doc).hexdigest()[:16]}"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _BlockLinker:
    """The ``track`` column of a track job's units, given in the units' order: the frames of each
    block of rows are linked in time order (a block's time units come one after another), by
    one :class:`welchpeaks.tracks.MultiLinker` per block; tracks are numbered across the job."""

    def __init__(self, link: dict[str, Any], k: list[int]):
        self.link, self.k = link, k
        self.block: tuple | None = None
        self.multi: Any = None
        self.base = 0  # tracks of the blocks before this one

    def __call__(self, unit: Unit, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from welchpeaks.tracks import MultiLinker

        if (unit.source, unit.part, unit.r0, unit.r1) != self.block:
            self.base += 0 if self.multi is None else self.multi.count
            self.block, self.multi = (unit.source, unit.part, unit.r0, unit.r1), MultiLinker(**self.link)
        s, f, r = cols["signal"] - unit.r0, cols["frame"] - unit.t0, cols["rank"]
        dense = np.full((unit.r1 - unit.r0, unit.t1 - unit.t0, self.k[unit.source]), np.nan)
        dense[s, f, r] = cols["freq"]
        ids = self.multi.feed_frames(dense)[s, f, r]
        return dict(cols, track=np.where(ids >= 0, ids + self.base, -1))


class Job:
    """One out-of-core job: :meth:`prepare` opens (or creates) its staging folder, takes its
    lock and says what is left to compute; :meth:`run` computes it and writes the output;
    :meth:`close` lets the lock go (the process's end does too)."""

    def __init__(self, kind: str, paths: list[str], sources: list[Any], kw: list[dict[str, Any]], out: Path,
                 memory: int, link: dict[str, Any] | None = None):
        check_format(out)
        self.kind, self.paths, self.sources, self.kw, self.out = kind, paths, sources, kw, out
        self.budget = UNIT_BYTES
        names = [part.name for src in sources for part in src.parts]
        index, n = [], 0
        for src in sources:
            index.append(list(range(n, n + len(src.parts))))
            n += len(src.parts)
        measures = measure_columns(kind, kw[0]) if kw else []
        # seconds where every source has a sample rate, else every time in samples
        time = time_column(all(k.get("fs") for k in kw) if kw else None)
        # with link (track): the peaks linked into tracks as the output is written (a "track" column)
        self.link = link
        base = tuple(time if c == "time" else c for c in COLUMNS[kind])
        self.column_names = base + (("track",) if link else ()) + tuple(measures)  # written
        self.saved_names = base + (("frame",) if kind == "track" else ()) + tuple(measures)  # in a unit's file
        self.spec = {"kind": kind, "sources": paths, "kw": kw, "file_index": index, "budget": self.budget,
                     "measures": measures, "time": time}
        self.names = names
        self.stage = staging_dir(out)
        self.key = _fingerprint(kind, paths, sources, kw, self.budget, out)
        self.units: list[Unit] = []
        self.pins: list[dict[str, Any]] = []
        self._done: dict[int, str] = {}
        self._lock: int | None = None
        #: called with each unit's columns as the output is written (``track --plot``)
        self.watch: Callable[[dict[str, np.ndarray]], None] | None = None

    # ------------------------------------------------------------------ staging
    def _unit_path(self, i: int) -> Path:
        return self.stage / f"unit-{i:07d}.npz"

    def _pins(self) -> list[dict[str, Any]]:
        return [dict(pin_execution(self.kind, kw, src.rows, src.parts[0].samples, src.dtype),
                     max_memory=kw.get("max_memory")) for src, kw in zip(self.sources, self.kw)]

    def _use(self, pins: list[dict[str, Any]]) -> None:
        """Run every unit with ``pins`` (the manifest's: execution, precision and working-memory
        bound, which decides whether ``numpy`` sums a long row in pieces) and plan the units."""
        self.pins = pins
        self.kw = [dict(kw, **pin) for kw, pin in zip(self.kw, pins)]
        self.spec["kw"] = self.kw
        self.units = plan_units(self.kind, self.sources, self.kw, self.budget)

    def _create_stage(self) -> None:
        """Make the staging folder with its manifest at once: built under a temporary name
        beside it, then renamed (a kill leaves either no folder or a whole one). Another run
        that made it first wins; this one then opens theirs."""
        self._use(self._pins())
        parent = self.stage.parent if str(self.stage.parent) else Path(".")
        tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{self.stage.name}."))
        try:
            as_umask_allows(tmp, directory=True)
            write_atomic(tmp / "manifest.json", json.dumps({
                "format": MANIFEST_VERSION, "key": self.key, "kind": self.kind, "sources": self.paths,
                "units": len(self.units), "pins": self.pins, "cost_model": model_identity()}))
            os.rename(tmp, self.stage)
        except OSError:
            if not self.stage.exists():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _refuse(self, why: str) -> JobError:
        return JobError(f"{self.stage}: {why}; delete that folder to start this job afresh")

    def _take_lock(self) -> None:
        fd = os.open(self.stage / "lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise JobError(f"another welchpeaks run is writing {self.out} (it holds {self.stage / 'lock'}); "
                               "wait for it to finish, or stop it and run this command again") from None
        self._lock = fd

    def close(self) -> None:
        """Let the staging folder's lock go."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _read_manifest(self) -> dict[str, Any]:
        try:
            doc = load_json(self.stage / "manifest.json", MANIFEST_BYTES, "manifest")
        except FileContentError as exc:
            raise self._refuse(f"its manifest is unusable ({exc})") from None
        if not isinstance(doc, dict) or doc.get("key") != self.key:
            raise JobError(f"{self.stage} holds an unfinished run with other arguments or inputs; rerun that "
                           "command to finish it, or delete the folder to start this one")
        pins = doc.get("pins")
        if (doc.get("format") != MANIFEST_VERSION or not isinstance(pins, list) or len(pins) != len(self.sources)
                or not all(isinstance(q, dict) and set(q) == {"strategy", "dtype", "max_memory"}
                           and isinstance(q["strategy"], str) and q["dtype"] in (None, "float32", "float64")
                           and (q["max_memory"] is None or type(q["max_memory"]) is int and q["max_memory"] >= 1 << 20)
                           for q in pins)):
            raise self._refuse("its manifest was not written by this version of welchpeaks, or was altered")
        return doc

    def prepare(self) -> list[int]:
        """Open (or create) the staging folder and take its lock; the indices of the units
        still to compute (a saved unit whose bytes match its listed digest is reused)."""
        for attempt in range(3):
            if self.stage.is_symlink() or (self.stage.exists() and not self.stage.is_dir()):
                raise self._refuse("it is not a folder welchpeaks made (a link or a file)")
            if not self.stage.exists():
                self._create_stage()
            try:
                self._take_lock()
                if not self.stage.exists():  # the run that held it finished and removed it
                    self.close()
                    continue
                doc = self._read_manifest()
                if doc["pins"] != self.pins:  # made by another run, or resumed: its pins rule
                    self._use(doc["pins"])
                if doc.get("units") != len(self.units):
                    raise self._refuse(f"its manifest lists {doc.get('units')} units where this job has "
                                       f"{len(self.units)}")
                self._done = self._read_done()
                return [i for i in range(len(self.units)) if self._load(i) is None]
            except BaseException:
                self.close()
                raise
        raise JobError(f"{self.stage} kept appearing and vanishing (other runs on the same --out); run one at a time")

    def _read_done(self) -> dict[int, str]:
        """The unit list: index -> SHA-256 of each unit saved (a torn last line is ignored)."""
        path = self.stage / "done.jsonl"
        if not path.exists() and not path.is_symlink():
            return {}
        try:
            text = read_regular(path, DONE_LINE_BYTES * (len(self.units) + 1), "unit list").decode("ascii", "replace")
        except FileContentError as exc:
            raise self._refuse(f"its unit list is unusable ({exc})") from None
        done = {}
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                i, digest = entry["unit"], entry["sha256"]
            except (ValueError, TypeError, KeyError):
                continue
            if isinstance(i, int) and 0 <= i < len(self.units) and isinstance(digest, str) and len(digest) == 64:
                done[i] = digest
        return done

    def _save(self, i: int, cols: dict[str, np.ndarray]) -> None:
        """Save unit ``i`` atomically, then list its digest (a kill between the two leaves an
        unlisted unit, computed again)."""
        buf = io.BytesIO()
        np.savez(buf, **{"c_" + c: v for c, v in cols.items()})  # 'file' is savez's own argument
        data = buf.getvalue()
        write_atomic(self._unit_path(i), data)
        digest = _digest(data)
        line = json.dumps({"unit": i, "sha256": digest}) + "\n"
        fd = os.open(self.stage / "done.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                     0o666)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a line torn by a kill: end it first
                line = "\n" + line
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        self._done[i] = digest

    def _load(self, i: int) -> dict[str, np.ndarray] | None:
        """Unit ``i``'s columns if it was saved, is a regular file (not a link) and its bytes
        match its listed digest; else None, and whatever is in its place is removed (it is
        computed again). A folder in its place is refused."""
        path = self._unit_path(i)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            raise self._refuse(f"{path.name} is a folder, not a unit welchpeaks saved")
        try:
            if not stat.S_ISREG(st.st_mode) or i not in self._done:
                raise ValueError("not a listed unit")
            data = read_regular(path, max(64 << 20, 64 * self.budget), "saved unit")
            if _digest(data) != self._done[i]:
                raise ValueError("its bytes do not match its digest")
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                cols = {c: z["c_" + c] for c in self.saved_names}
            if len({len(v) for v in cols.values()}) != 1:
                raise ValueError("columns of different lengths")
        except Exception:
            path.unlink(missing_ok=True)
            self._done.pop(i, None)
            return None
        return cols

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
        """Each unit's saved columns, in order (with ``link``: and each peak's ``track``)."""
        linker = _BlockLinker(self.link, [k["k"] for k in self.kw]) if self.link else None
        for i in range(len(self.units)):
            cols = self._load(i)
            if cols is None:
                raise JobError(f"{self._unit_path(i)} went missing or changed while the output was written; rerun "
                               "the command")
            cols = cols if linker is None else linker(self.units[i], cols)
            if self.watch is not None:
                self.watch(cols)
            yield cols

    def assemble(self) -> None:
        """Write the output from the saved units (atomically), then remove the staging folder."""
        write_output(self.out, self.kind, self.names, self.column_names, self.columns)
        # renamed aside first: a run that opens the folder meanwhile finds it whole or not at all
        gone = self.stage.with_name(f".{self.stage.name}.done.{os.getpid()}")
        os.replace(self.stage, gone)
        self.close()
        shutil.rmtree(gone, ignore_errors=True)

def bytes_of(unit: Unit, job: Job) -> int:
    """Bytes of samples a unit reads (for the progress rate)."""
    where = unit_read(job.spec, unit)
    src = job.sources[unit.source]
    if where is None:  # whole long rows, in pieces
        return (unit.r1 - unit.r0) * src.parts[unit.part].samples * src.dtype.itemsize
    return (unit.r1 - unit.r0) * (where[4] - where[3]) * src.dtype.itemsize
