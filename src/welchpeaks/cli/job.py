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
  sizes and JSON nesting (:func:`welchpeaks.files.load_json`); the manifest's pins must match
  its digest, which every unit's listed digest is keyed with, and a unit's members and columns
  are checked against the job (:func:`read_columns`, :meth:`Job._unit_columns`) before it is
  used; a unit that fails is removed and computed again.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from welchpeaks.cli.job_output import JobError, write_output
from welchpeaks.files import FileContentError, as_umask_allows, load_json, quoted, read_regular, write_atomic
from welchpeaks.loaders import SignalFileError, read_npy_header
from welchpeaks.memory import MIN_BUDGET_BYTES, UNIT_BYTES
from welchpeaks.result import freq_column, time_column
from welchpeaks.tracks import DEFAULT_MIN_LENGTH

try:
    import fcntl
except ImportError:  # not on Windows: there a second run on one output is not refused
    fcntl = None  # type: ignore[assignment]

FORMATS = (".parquet", ".zarr", ".csv", ".jsonl")
#: the columns of every job of a kind; the measures asked for (``measures=``) follow them;
#: ``time`` is ``time_samples`` (in samples) unless every source has a sample rate
COLUMNS = {"peaks": ("file", "signal", "rank", "bin", "freq", "power"),
           "track": ("file", "signal", "time", "rank", "bin", "freq", "power")}
MANIFEST_VERSION = 3
#: the most bytes a manifest holds (arguments, sources, pins), and a line of the unit list
MANIFEST_BYTES = 1 << 20
DONE_LINE_BYTES = 128
#: the dtype of each column a unit saves (:func:`compute_unit`; a measure's is float64)
SAVED_DTYPES = {"file": np.int32, "signal": np.int64, "frame": np.int64, "time": np.float64,
                "time_samples": np.float64, "rank": np.int32, "bin": np.int32, "freq": np.float64, "power": np.float64}
#: bytes a saved unit may hold beyond its columns' values: per member (its zip entries and
#: .npy header), and for the archive
MEMBER_BYTES, ARCHIVE_BYTES = 512, 1024


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


_CACHE: dict[Any, Any] = {}


def _cached(key: Any, make: Callable[[], Any]) -> Any:
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _executor(spec: dict[str, Any], unit: Unit) -> tuple[Any, Any]:
    """The unit's source and executor (WelchPeaks or Tracker), built once per process (the
    executor once per plan state: its planner keeps the state it was made in)."""
    from welchpeaks.api import Tracker, WelchPeaks
    from welchpeaks.plan import current_state

    path, kind, kw = spec["sources"][unit.source], spec["kind"], spec["kw"][unit.source]
    key = "src:" + os.path.abspath(path)  # (a process may run jobs from other folders)
    src = _CACHE.get(key)
    if src is None or not src.is_current():  # opened again where a file was replaced since
        src = _CACHE[key] = _open(path)
    if [list(p.stamp) if p.stamp else None for p in src.parts] != spec["stamps"][unit.source]:
        from welchpeaks.loaders import SignalFileError

        raise SignalFileError(f"{path}: changed since this job started (its size, time or inode differ); run the "
                              "command again")
    return src, _cached((current_state(), json.dumps([kind, kw], sort_keys=True)),
                        lambda: (WelchPeaks if kind == "peaks" else Tracker)(**kw))


def unit_read(spec: dict[str, Any], unit: Unit) -> tuple[int, int, int, int, int] | None:
    """The one read ``(part, r0, r1, s0, s1)`` a unit makes, or None when it reads in pieces."""
    src, ex = _executor(spec, unit)
    if spec["kind"] == "peaks":
        return ex.source_plan(src, unit.part, spec["budget"]).read(unit.part, unit.r0, unit.r1)
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
    if spec["kind"] == "peaks":
        res = ex.source_block(src, unit.part, unit.r0, unit.r1, spec["budget"], data)
    else:
        res = ex.source_frames(src, unit.part, unit.r0, unit_read(spec, unit)[3], data)
    bins, power, freqs = res.bins, res.power, res.freqs
    sig, *rest = np.nonzero(bins >= 0)
    cols = {"file": np.full(sig.shape, spec["file_index"][unit.source][unit.part], np.int32),
            "signal": (sig + unit.r0).astype(np.int64)}
    if spec["kind"] == "track":
        cols["frame"] = (rest[0] + unit.t0).astype(np.int64)  # not written: what linking orders by
        cols[spec["time"]] = frame_times(spec, unit)[rest[0]]
    cols.update(rank=rest[-1].astype(np.int32), bin=bins[bins >= 0].astype(np.int32),
                freq=freqs[bins >= 0].astype(np.float64), power=power[bins >= 0].astype(np.float64))
    for name in spec["measures"]:
        cols[name] = np.asarray(res.measures.get(name, np.full(bins.shape, np.nan)), np.float64)[bins >= 0]
    return cols


def frame_times(spec: dict[str, Any], unit: Unit) -> np.ndarray:
    """The time column's value for each frame of a track unit (seconds, or samples in a job
    whose time is ``time_samples``): the frames' centres, as ``Tracker.run`` gives them."""
    ex = _executor(spec, unit)[1]
    times = ex.times(unit.t1 - unit.t0, unit.t0 * ex.step)
    fs = ex.params.fs
    return times * (fs if fs and spec["time"] == "time_samples" else 1.0)


def read_columns(data: bytes, dtypes: dict[str, Any], most: int) -> dict[str, np.ndarray]:
    """The columns in a saved unit's bytes (an .npz as ``np.savez`` writes it: one member
    ``c_NAME.npy`` per column), read as untrusted data: exactly the members of ``dtypes``, none
    compressed (nothing is inflated), each a 1-D array of its dtype of at most ``most`` values
    whose declared size is the member's, checked before its values are read; else a
    ``ValueError`` saying what is wrong."""
    want = {f"c_{name}.npy": name for name in dtypes}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        if len(members) != len(want) or {m.filename for m in members} != set(want):
            raise ValueError("its members are not the job's columns")
        cols = {}
        for m in members:
            if m.compress_type != zipfile.ZIP_STORED or m.compress_size != m.file_size or m.flag_bits & 1:
                raise ValueError(f"its member {m.filename} is compressed or encrypted (units are saved as they are)")
            expected = np.dtype(dtypes[want[m.filename]])
            with archive.open(m) as fh:
                try:
                    shape, _, dtype = read_npy_header(fh, Path(m.filename))
                except SignalFileError:
                    raise ValueError(f"its member {m.filename} is not a NumPy array") from None
                if dtype != expected or len(shape) != 1 or not 0 <= shape[0] <= most:
                    raise ValueError(f"its member {m.filename} does not declare a column of at most {most} "
                                     f"{expected.str} values")
                size = shape[0] * dtype.itemsize
                if fh.tell() + size != m.file_size:
                    raise ValueError(f"its member {m.filename} holds other than the bytes its header declares")
                cols[want[m.filename]] = np.frombuffer(fh.read(size), dtype)
                fh.read()  # to its end, where zipfile checks the member's CRC
    if len({len(v) for v in cols.values()}) > 1:
        raise ValueError("its columns are of different lengths")
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


def job_digest(key: str, pins: Any, units: Any) -> str:
    """The digest a manifest carries over its job's key, pins and unit count: an edited pin is
    an altered manifest, and every unit's listed digest is keyed with it (:func:`_digest`)."""
    return hashlib.sha256(json.dumps([key, pins, units], sort_keys=True).encode()).hexdigest()


def pin_execution(kind: str, kw: dict[str, Any], rows: int, length: int, dtype: np.dtype) -> dict[str, Any]:
    """The execution and precision a job runs for its every unit (``{'strategy', 'dtype'}``):
    under 'auto' the planner's choice for the whole source in memory, with the machine's
    measured cost model (waited for while it is measured) and without the job's memory bound
    (which only cuts the work into blocks); else what was asked."""
    from welchpeaks.api import Tracker, WelchPeaks
    from welchpeaks.plan import cost_model_for
    from welchpeaks.plan.modes import execution_name

    if kw.get("strategy", "auto") != "auto":
        return {"strategy": kw.get("strategy", "auto"), "dtype": kw.get("dtype")}
    cost_model_for("cpu", wait=True)
    free = dict(kw, max_memory=None)
    pinned = (Tracker(**free).frames_plan(dtype).planner if kind == "track"
              else WelchPeaks(**free).planner.pin(rows, length, dtype))
    return {"strategy": execution_name(pinned), "dtype": pinned.params.dtype}


def model_identity() -> str | None:
    """Which CPU cost model chose the pinned executions (its status and a digest of it); None
    when there is none (the executions were named): it never starts a measurement."""
    from welchpeaks.plan import cost_model_for

    model = cost_model_for("cpu", calibrate=False, wait=False)
    if model is None:
        return None
    doc = json.dumps(model.to_dict(), sort_keys=True, default=str).encode()
    return f"{model.status}:{hashlib.sha256(doc).hexdigest()[:16]}"


def _digest(job: str, data: bytes) -> str:
    """A saved unit's listed digest: SHA-256 over its job's digest and its bytes."""
    return hashlib.sha256(job.encode() + data).hexdigest()


def _reason(exc: BaseException, known: str = "") -> str:
    """The first line of an error's message, ``known`` (what the report says already) left
    out, at most 160 characters, for a one-line report."""
    text = (str(exc).splitlines()[0] if str(exc) else type(exc).__name__).replace(known, "")
    return text if len(text) <= 160 else text[:157] + "..."


class _BlockLinker:
    """The ``track`` column of a track job's units, given in the units' order: the frames of each
    block of rows are linked in time order (a block's time units come one after another), by
    one :class:`welchpeaks.tracks.MultiLinker` per block (with each peak's power and, where the
    job measured it, SNR), as :meth:`welchpeaks.TrackResult.link` links them; tracks are
    numbered across the job. ``keep`` (a pass before): which of the job's tracks have
    ``min_length`` peaks; the others get -1 and the kept are numbered again."""

    def __init__(self, link: dict[str, Any], kw: list[dict[str, Any]], keep: np.ndarray | None = None):
        from welchpeaks.api import Tracker
        from welchpeaks.tracks import check_link

        self.k = [k["k"] for k in kw]
        params = [Tracker(**dict(k, max_memory=None)).params for k in kw]
        self.params = [check_link(**dict(link, min_length=1), resolution=(1.0 if p.fs is None else p.fs) / p.n_fft)
                       for p in params]
        self.block: tuple | None = None
        self.multi: Any = None
        self.base = 0  # tracks of the blocks before this one
        self.sizes = np.zeros(0, np.int64)  # each of the job's tracks' peaks so far
        self.renumber = None if keep is None else np.concatenate([np.cumsum(keep) - 1, [-1]])
        if keep is not None:
            self.renumber[:-1][~keep] = -1

    @property
    def count(self) -> int:
        """The job's tracks so far."""
        return self.base + (0 if self.multi is None else self.multi.count)

    def __call__(self, unit: Unit, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from welchpeaks.tracks import MultiLinker

        if (unit.source, unit.part, unit.r0, unit.r1) != self.block:
            self.base = self.count
            self.block = (unit.source, unit.part, unit.r0, unit.r1)
            self.multi = MultiLinker(self.params[unit.source])
        s, f, r = cols["signal"] - unit.r0, cols["frame"] - unit.t0, cols["rank"]
        shape = (unit.r1 - unit.r0, unit.t1 - unit.t0, self.k[unit.source])
        dense = {}
        for name in ("freq", "power", "snr_db"):
            if name in cols:
                dense[name] = np.full(shape, np.nan)
                dense[name][s, f, r] = cols[name]
        ids = self.multi.feed_frames(dense["freq"], dense["power"], dense.get("snr_db"))[s, f, r]
        ids = np.where(ids >= 0, ids + self.base, -1)
        if self.sizes.size < self.count:
            self.sizes = np.concatenate([self.sizes, np.zeros(max(self.count, 2 * self.sizes.size) - self.sizes.size,
                                                              np.int64)])
        np.add.at(self.sizes, ids[ids >= 0], 1)
        if self.renumber is not None:
            ids = self.renumber[ids]  # (-1 maps to the last entry, -1)
        return dict(cols, track=ids)


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
        every_fs = all(k.get("fs") for k in kw) if kw else None
        time = time_column(every_fs)
        #: the frequency column written: ``freq`` (Hz) where every source has a sample rate, else
        #: ``freq_cycles`` (cycles per sample) for all, as the time column
        self.freq = freq_column(every_fs)
        # with link (track): the peaks linked into tracks as the output is written (a "track" column)
        self.link = link
        base = tuple(time if c == "time" else c for c in COLUMNS[kind])
        written = tuple(self.freq if c == "freq" else c for c in base)
        self.column_names = written + (("track",) if link else ()) + tuple(measures)  # written
        self.saved_names = base + (("frame",) if kind == "track" else ()) + tuple(measures)  # in a unit's file
        self.spec = {"kind": kind, "sources": paths, "kw": kw, "file_index": index, "budget": self.budget,
                     "measures": measures, "time": time,
                     # the files as this job opened them: a unit refuses one changed since
                     "stamps": [[list(p.stamp) if p.stamp else None for p in src.parts] for src in sources]}
        self.names = names
        self.stage = staging_dir(out)
        self.key = _fingerprint(kind, paths, sources, kw, self.budget, out)
        self.units: list[Unit] = []
        self.pins: list[dict[str, Any]] = []
        self.job = ""  # the manifest's digest (job_digest)
        #: the saved units found untrustworthy, removed and computed again: (file name, why)
        self.discarded: list[tuple[str, str]] = []
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
        self.job = job_digest(self.key, pins, len(self.units))

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
                "units": len(self.units), "pins": self.pins, "job": self.job, "cost_model": model_identity()}))
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
        if not isinstance(doc, dict) or doc.get("format") != MANIFEST_VERSION:
            raise self._refuse("its manifest was not written by this version of welchpeaks")
        if doc.get("key") != self.key:
            raise JobError(f"{self.stage} holds an unfinished run with other arguments or inputs; rerun that "
                           "command to finish it, or delete the folder to start this one")
        from welchpeaks.backends import names

        pins = doc.get("pins")
        if (not isinstance(pins, list) or len(pins) != len(self.sources)
                or not all(isinstance(q, dict) and set(q) == {"strategy", "dtype", "max_memory"}
                           and q["strategy"] in names() and q["dtype"] in (None, "float32", "float64")
                           and (q["max_memory"] is None or type(q["max_memory"]) is int and q["max_memory"] >= MIN_BUDGET_BYTES)
                           for q in pins)
                or doc.get("job") != job_digest(self.key, pins, doc.get("units"))):
            raise self._refuse("its manifest was altered (its pinned executions are not what this version of "
                               "welchpeaks wrote, or do not match its digest)")
        return doc

    def prepare(self) -> list[int]:
        """Open (or create) the staging folder and take its lock; the indices of the units
        still to compute (a saved unit that :meth:`_load` trusts is reused; those it does not
        are listed in :attr:`discarded`)."""
        for attempt in range(3):
            self.discarded = []
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
        digest = _digest(self.job, data)
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
        """Unit ``i``'s columns if it was saved, is a regular file (not a link), its bytes match
        its listed digest and its columns pass :meth:`_unit_columns`; else None, and whatever
        is in its place is removed (it is computed again) and listed in :attr:`discarded`. A
        folder in its place is refused."""
        path = self._unit_path(i)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            raise self._refuse(f"{path.name} is a folder, not a unit welchpeaks saved")
        try:
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file (a link, a pipe or a device)")
            if i not in self._done:
                raise ValueError("not listed in done.jsonl")
            data = read_regular(path, self._unit_bytes(i), "saved unit")
            if _digest(self.job, data) != self._done[i]:
                raise ValueError("its bytes do not match its listed digest")
            cols = self._unit_columns(i, data)
        except Exception as exc:  # whatever a forged file makes zipfile or NumPy raise
            path.unlink(missing_ok=True)
            self._done.pop(i, None)
            self.discarded.append((path.name, _reason(exc, f"saved unit {path}: ")))
            return None
        return cols

    def _unit_bytes(self, i: int) -> int:
        """The most bytes unit ``i``'s file may hold: every slot of its rows (and frames) a peak."""
        unit = self.units[i]
        slots = (unit.r1 - unit.r0) * max(1, unit.t1 - unit.t0) * self.kw[unit.source]["k"]
        per_row = sum(np.dtype(SAVED_DTYPES.get(c, np.float64)).itemsize for c in self.saved_names)
        return slots * per_row + MEMBER_BYTES * len(self.saved_names) + ARCHIVE_BYTES

    def _unit_columns(self, i: int, data: bytes) -> dict[str, np.ndarray]:
        """Unit ``i``'s columns from its saved bytes (:func:`read_columns`), checked against the
        job: its file's index, signals, frames and ranks within the unit's, bins within the
        spectrum, rows in the order they are computed in (no repeat), frequencies and powers
        finite, powers not negative, each time its frame's; else a ``ValueError`` saying why."""
        unit = self.units[i]
        ex = _executor(self.spec, unit)[1]
        k = self.kw[unit.source]["k"]
        frames = unit.t1 - unit.t0 if self.kind == "track" else 1
        dtypes = {c: SAVED_DTYPES.get(c, np.float64) for c in self.saved_names}
        cols = read_columns(data, dtypes, (unit.r1 - unit.r0) * frames * k)
        file = self.spec["file_index"][unit.source][unit.part]
        ranges = {"file": (file, file + 1), "signal": (unit.r0, unit.r1), "rank": (0, k), "bin": (0, ex.params.n_bins)}
        if self.kind == "track":
            ranges["frame"] = (unit.t0, unit.t1)
        for name, (lo, hi) in ranges.items():
            values = cols[name]
            if values.size and (values.min() < lo or values.max() >= hi):
                raise ValueError(f"its {name} column holds values outside {lo}..{hi - 1}, the unit's")
        order = cols["signal"] - unit.r0
        if self.kind == "track":
            order = order * frames + (cols["frame"] - unit.t0)
            if not np.array_equal(cols[self.spec["time"]], frame_times(self.spec, unit)[cols["frame"] - unit.t0]):
                raise ValueError("its times are not its frames' times")
        order = order * k + cols["rank"]
        if np.any(np.diff(order) <= 0):
            raise ValueError("its rows are out of order or repeat")
        if not (np.isfinite(cols["freq"]).all() and np.isfinite(cols["power"]).all() and (cols["power"] >= 0).all()):
            raise ValueError("its frequencies or powers are not finite, or a power is negative")
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
        """Each unit's saved columns, in order (with ``link``: and each peak's ``track``; with its
        ``min_length`` over 1, after a first pass over the units that counts each track's
        peaks)."""
        keep = None
        if self.link and (self.link.get("min_length") or DEFAULT_MIN_LENGTH) > 1:
            counting = _BlockLinker(self.link, self.kw)
            for i in range(len(self.units)):
                counting(self.units[i], self._loaded(i))
            keep = counting.sizes[:counting.count] >= (self.link.get("min_length") or DEFAULT_MIN_LENGTH)
        linker = _BlockLinker(self.link, self.kw, keep) if self.link else None
        for i in range(len(self.units)):
            cols = self._loaded(i)
            cols = cols if linker is None else linker(self.units[i], cols)
            if self.watch is not None:
                self.watch(cols)
            if self.freq != "freq":  # in cycles per sample: a source's Hz divided by its rate
                fs = self.kw[self.units[i].source].get("fs")
                cols = dict(cols)
                cols[self.freq] = cols.pop("freq") / fs if fs else cols.pop("freq")
            yield cols

    def _loaded(self, i: int) -> dict[str, np.ndarray]:
        cols = self._load(i)
        if cols is None:
            raise JobError(f"{self._unit_path(i)} went missing or changed while the output was written; rerun "
                           "the command")
        return cols

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
