"""Signals that stay on disk: :func:`open_signals` returns a lazy, chunked view over a
memory-mapped .npy, a Zarr array, an HDF5 dataset, or sound files (one or a directory or glob
of them). Nothing is read until a block is asked for, so ``welch_peaks`` and ``track`` work
through files larger than memory one bounded block at a time.

A source is a list of *parts* (one per file; one for an array store), each ``[rows, samples]``
(a 1-D array is one row; sound files have a row per channel). Every value read from a file is
untrusted: shapes and dtypes are checked before anything is allocated, and a file that cannot
be read gives a :class:`welchpeaks.loaders.SignalFileError` naming it and the reason.
"""

from __future__ import annotations

import glob as _glob
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from welchpeaks.loaders import SignalFileError, read_npy_header
from welchpeaks.numeric import real_dtype, size_text

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")
ARRAY_SUFFIXES = (".npy", ".zarr", ".h5", ".hdf5")
#: A Zarr array may leave out chunks (zarr skips those holding only the fill value), but not
#: most of them when they would stand for more than this many bytes of samples
MAX_UNSTORED_BYTES = 64 << 20
#: the largest chunk a Zarr source may have, decoded (a block read decodes whole chunks)
MAX_CHUNK_BYTES = 256 << 20
#: The most frames a compressed sound file (FLAC, Ogg) may declare per byte it holds: FLAC's
#: smallest frame (a constant block of 65,535 samples) takes 10 bytes, Vorbis and Opus more
MAX_FRAMES_PER_BYTE = 8192
#: Bytes per sample of the uncompressed sound encodings (their data is exactly frames x channels x this)
_PCM_BYTES = {"PCM_S8": 1, "PCM_U8": 1, "ULAW": 1, "ALAW": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4,
              "DOUBLE": 8}
_COMPRESSED_AUDIO = ("FLAC", "OGG", "MPEG")


@dataclass(frozen=True)
class Part:
    """One file (or array) of a source: ``rows`` signals of ``samples`` samples; ``stamp``: the
    file's identity when it was opened (:func:`file_stamp`), checked before every read."""

    name: str
    rows: int
    samples: int
    read: Callable[[int, int, int, int], np.ndarray]  # (r0, r1, s0, s1) -> [r1-r0, s1-s0]
    stamp: tuple | None = None


def file_stamp(path: str | os.PathLike) -> tuple:
    """``(path, size, modification time in ns, inode)``: a file replaced or rewritten (even with
    the same size) has another."""
    st = os.stat(path)
    return str(path), st.st_size, st.st_mtime_ns, st.st_ino


class SignalSource:
    """A lazy view of signals on disk. Use :func:`open_signals` to make one.

    Attributes: ``parts`` (one per file), ``fs`` (the files' sample rate, or None), ``dtype``
    (float32 or float64: what blocks come back as), ``description``.
    """

    def __init__(self, parts: list[Part], fs: float | None, dtype: np.dtype, description: str):
        self.parts = parts
        self.fs = fs
        self.dtype = np.dtype(dtype)
        self.description = description

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.rows * p.samples for p in self.parts) * self.dtype.itemsize

    def __repr__(self) -> str:
        return (f"SignalSource({self.description}: {len(self.parts)} part(s), {self.rows} signal(s), "
                f"{self.nbytes / 2**20:.1f} MiB, fs={self.fs})")

    def is_current(self) -> bool:
        """Whether every file of the source is as it was when opened (its stamp), so reads
        succeed rather than being refused as changed."""
        try:
            return all(p.stamp is None or file_stamp(p.stamp[0]) == p.stamp for p in self.parts)
        except OSError:
            return False

    def read(self, part: int, r0: int, r1: int, s0: int, s1: int) -> np.ndarray:
        """Samples ``s0:s1`` of rows ``r0:r1`` of part ``part``, as a C-contiguous float array
        (a read error names the file)."""
        p = self.parts[part]
        if p.stamp is not None:
            try:
                now = file_stamp(p.stamp[0])
            except OSError as exc:
                raise SignalFileError(f"{p.stamp[0]}: can no longer be read ({exc.strerror or exc}); it was moved or "
                                      "removed after open_signals") from None
            if now != p.stamp:
                raise SignalFileError(f"{p.stamp[0]}: changed since open_signals opened it (its size, time or inode "
                                      "differ); open it again")
        try:
            out = p.read(r0, r1, s0, s1)
        except SignalFileError:
            raise
        except Exception as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SignalFileError(f"{p.name}: reading rows {r0}..{r1 - 1}, samples {s0}..{s1 - 1} failed ({reason})") from None
        out = np.ascontiguousarray(out, dtype=self.dtype)
        if out.shape != (r1 - r0, s1 - s0):
            raise SignalFileError(f"{p.name}: asked for {(r1 - r0, s1 - s0)} samples, the file gave {out.shape}; it is "
                                  "damaged or changed while being read")
        return out

    def row_blocks(self, part: int, row_bytes: int, budget: int) -> Iterator[tuple[int, int]]:
        """``(r0, r1)`` blocks of part ``part`` whose rows of ``row_bytes`` fit ``budget`` (at least one row)."""
        rows = self.parts[part].rows
        step = max(1, budget // max(row_bytes, 1))
        for r0 in range(0, rows, step):
            yield r0, min(rows, r0 + step)


def _real_dtype(dtype: Any, name: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in "iuf" or dtype.itemsize > 8:
        raise SignalFileError(f"{name}: holds {dtype} values; welchpeaks reads real numbers (integers or floats)")
    return real_dtype(dtype)  # as a call converts it


def _rows_samples(shape: tuple[int, ...], name: str) -> tuple[int, int]:
    if len(shape) == 0 or any(int(d) < 0 for d in shape):
        raise SignalFileError(f"{name}: has shape {shape}; welchpeaks reads signals shaped [samples] or [rows, samples]")
    samples = int(shape[-1])
    rows = int(np.prod(shape[:-1], dtype=object)) if len(shape) > 1 else 1
    if rows == 0 or samples == 0:
        raise SignalFileError(f"{name}: holds no samples (shape {shape})")
    return rows, samples


def _check_fs(fs: Any, name: str) -> float | None:
    if fs is None:
        return None
    try:
        fs = float(np.asarray(fs).reshape(-1)[0])
    except Exception:
        raise SignalFileError(f"{name}: its sample rate attribute {fs!r} is not a number") from None
    if not math.isfinite(fs) or fs <= 0:
        raise SignalFileError(f"{name}: its sample rate {fs!r} is not a positive, finite number")
    return fs


def _npy(path: Path) -> SignalSource:
    stamp = file_stamp(path)
    with open(path, "rb") as fh:
        shape, fortran, dtype = read_npy_header(fh, path)
        if dtype.hasobject:
            raise SignalFileError(f"{path}: holds Python objects, which welchpeaks never unpickles")
        out = _real_dtype(dtype, str(path))
        rows, samples = _rows_samples(shape, str(path))
        need = rows * samples * dtype.itemsize
        if need != path.stat().st_size - fh.tell():
            raise SignalFileError(f"{path}: its header declares {need} bytes of data but the file holds "
                                  f"{path.stat().st_size - fh.tell()}; it is truncated or damaged")
        offset = fh.tell()
    if fortran:  # column-major: a memory map reads it (its pages count as the process's memory);
        # signals numbered in C order of the leading axes, as np.load(path).reshape(-1, n) numbers them
        mm = np.load(path, mmap_mode="r", allow_pickle=False)
        lead = mm.shape[:-1]
        if len(lead) <= 1:
            mm = mm.reshape(rows, samples, order="F")  # 1-D or 2-D: already rows x samples (a view)
            read = lambda r0, r1, s0, s1: mm[r0:r1, s0:s1]  # noqa: E731
        else:
            read = lambda r0, r1, s0, s1: mm[np.unravel_index(np.arange(r0, r1), lead) + (slice(s0, s1),)]  # noqa: E731
    else:
        read = _pread_rows(path, offset, dtype, samples)
    return SignalSource([Part(str(path), rows, samples, read, stamp)], None, out, f"npy {path}")


def _pread_rows(path: Path, offset: int, dtype: np.dtype, samples: int) -> Callable[[int, int, int, int], np.ndarray]:
    """Blocks of a row-major array in a file, read with plain reads into fresh buffers (a memory
    map would leave every page read counted in the process's resident memory)."""
    item = dtype.itemsize

    def read(r0: int, r1: int, s0: int, s1: int) -> np.ndarray:
        out = np.empty((r1 - r0, s1 - s0), dtype)
        with open(path, "rb", buffering=0) as fh:
            if s0 == 0 and s1 == samples:
                fh.seek(offset + r0 * samples * item)
                if fh.readinto(memoryview(out).cast("B")) != out.nbytes:
                    raise SignalFileError(f"{path}: shorter than its header says; it changed while being read")
                return out
            for i, r in enumerate(range(r0, r1)):
                fh.seek(offset + (r * samples + s0) * item)
                if fh.readinto(memoryview(out[i]).cast("B")) != out[i].nbytes:
                    raise SignalFileError(f"{path}: shorter than its header says; it changed while being read")
        return out

    return read


def _zarr(path: Path) -> SignalSource:
    try:
        import zarr
    except ImportError:
        raise SignalFileError(f"{path}: reading Zarr needs zarr: pip install 'welchpeaks[io]'") from None
    _check_store_files(path)
    try:
        arr = zarr.open_array(str(path), mode="r")
    except Exception as exc:
        raise SignalFileError(f"{path}: not a Zarr array ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    out = _real_dtype(arr.dtype, str(path))
    rows, samples = _rows_samples(tuple(arr.shape), str(path))
    chunk = math.prod(int(c) for c in arr.chunks) * np.dtype(arr.dtype).itemsize
    if chunk > MAX_CHUNK_BYTES:
        raise SignalFileError(f"{path}: declares chunks of {arr.chunks}, {size_text(chunk)} each, more than welchpeaks "
                              f"decodes at once ({size_text(MAX_CHUNK_BYTES)}); rechunk the array (zarr's rechunking, "
                              "or write it with smaller chunks)")
    _check_zarr_stored(arr, path, rows * samples * np.dtype(arr.dtype).itemsize)
    fs = _check_fs(arr.attrs.get("fs", arr.attrs.get("sample_rate")), str(path))
    return SignalSource([Part(str(path), rows, samples, _nd_reader(arr, _zarr_into))], fs, out, f"zarr {path}")


def _check_store_files(path: Path) -> None:
    """Refuse a store folder holding anything but regular files and folders (links followed):
    a pipe as its metadata or a chunk would block the open or the first read forever, a link to
    a device such as /dev/zero would be read until memory runs out."""
    for root, dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            try:
                regular = stat.S_ISREG(os.stat(full).st_mode)
            except OSError:
                regular = False
            if not regular:
                raise SignalFileError(f"{path}: {os.path.relpath(full, path)} is not a regular file (a pipe, a device, "
                                      "or a link to one or to nothing); a Zarr store holds files only")


def _chunk_count(shape: tuple[int, ...], chunks: tuple[int, ...]) -> int:
    """The chunks of shape ``chunks`` covering an array of shape ``shape``."""
    return math.prod(-(-int(s) // max(1, int(c))) for s, c in zip(shape, chunks))


def _check_zarr_stored(arr: Any, path: Path, declared: int) -> None:
    """Refuse a Zarr array whose declared shape is mostly not stored: zarr leaves out chunks
    holding only the fill value, so a missing chunk may be silence, but an 8 KB store declaring
    10**13 samples would have every block of work read fill values for terabytes. Chunk files
    (shards, for a sharded array) are counted in the store's folder, at most as many as needed."""
    grid = tuple(getattr(arr, "shards", None) or arr.chunks)
    need = _chunk_count(tuple(arr.shape), grid)
    per_chunk = declared / need
    # refused when over half the chunks are missing and they stand for over MAX_UNSTORED_BYTES
    want = min(-(-need // 2), need - int(MAX_UNSTORED_BYTES // per_chunk))
    if want <= 0:
        return
    have = 0
    for _, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        have += sum(1 for f in files if f != "zarr.json" and not f.startswith("."))
        if have >= want:
            return
    raise SignalFileError(f"{path}: declares shape {tuple(arr.shape)} ({size_text(declared)} of samples) in {need:,} "
                          f"chunks of {grid}, but stores only {have:,} of them; the rest would be read as fill "
                          "values, not samples. It is damaged or was never fully written; if it really is mostly "
                          "fill value, write it with zarr's write_empty_chunks=True")


def _zarr_into(arr: Any, selection: tuple, out: np.ndarray) -> None:
    from zarr.core.buffer import default_buffer_prototype

    arr.get_basic_selection(selection, out=default_buffer_prototype().nd_buffer.from_numpy_array(out))


def _h5_into(ds: Any, selection: tuple, out: np.ndarray) -> None:
    ds.read_direct(out, source_sel=selection)


def _nd_reader(arr: Any, into: Callable[[Any, tuple, np.ndarray], None] | None = None
               ) -> Callable[[int, int, int, int], np.ndarray]:
    """A row/sample block reader over an array store of any rank (rows: the leading axes
    flattened). ``into(arr, selection, out)`` reads straight into a fresh buffer where the
    library can (several times faster than slicing, which copies through its own buffers)."""
    if arr.ndim <= 2 and into is not None:
        def read_into(r0: int, r1: int, s0: int, s1: int) -> np.ndarray:
            out = np.empty((r1 - r0, s1 - s0), arr.dtype)
            into(arr, (slice(s0, s1),) if arr.ndim == 1 else (slice(r0, r1), slice(s0, s1)),
                 out[0] if arr.ndim == 1 else out)
            return out

        return read_into
    if arr.ndim == 1:
        return lambda r0, r1, s0, s1: np.asarray(arr[s0:s1])[None, :]
    if arr.ndim == 2:
        return lambda r0, r1, s0, s1: np.asarray(arr[r0:r1, s0:s1])
    lead = tuple(arr.shape[:-1])

    def read(r0: int, r1: int, s0: int, s1: int) -> np.ndarray:
        return np.stack([np.asarray(arr[np.unravel_index(r, lead) + (slice(s0, s1),)]) for r in range(r0, r1)])

    return read


def _hdf5(path: Path, dataset: str) -> SignalSource:
    try:
        import h5py
    except ImportError:
        raise SignalFileError(f"{path}: reading HDF5 needs h5py: pip install 'welchpeaks[io]'") from None
    try:
        fh = h5py.File(path, "r")
    except Exception as exc:
        raise SignalFileError(f"{path}: not an HDF5 file ({str(exc).splitlines()[0]})") from None
    if not dataset:
        names: list[str] = []
        fh.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        raise SignalFileError(f"{path}: name the dataset as {path}:/path/to/dataset (datasets here: "
                              f"{', '.join('/' + n for n in names[:10]) or 'none'})")
    _check_h5_external_links(h5py, fh, dataset, path)
    try:  # a soft-link loop or a broken external link raises from inside h5py
        ds = fh.get(dataset)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SignalFileError(f"{path}: cannot open {dataset!r} ({reason}); it may be a link that loops or leads "
                              "nowhere") from None
    if not isinstance(ds, h5py.Dataset):
        raise SignalFileError(f"{path}: has no dataset {dataset!r}")
    out = _real_dtype(ds.dtype, f"{path}:{dataset}")
    rows, samples = _rows_samples(tuple(ds.shape), f"{path}:{dataset}")
    _check_h5_stored(h5py, ds, f"{path}:{dataset}", path.stat().st_size, rows * samples * ds.dtype.itemsize)
    fs = _check_fs(ds.attrs.get("fs", ds.attrs.get("sample_rate")), f"{path}:{dataset}")
    return SignalSource([Part(f"{path}:{dataset}", rows, samples, _nd_reader(ds, _h5_into), file_stamp(path))], fs, out,
                        f"hdf5 {path}:{dataset}")


def _check_h5_external_links(h5py: Any, fh: Any, dataset: str, path: Path) -> None:
    """Refuse a dataset path through an HDF5 external link to something other than a regular
    file: HDF5 opens the linked file itself, and a pipe there would block forever (with the
    interpreter's lock held). Only the first external link on the path is checked (what lies
    behind it is in the other file); errors of the walk are left to the dataset's own lookup."""
    group = fh
    for name in [c for c in dataset.split("/") if c]:
        try:
            link = group.get(name, getlink=True)
        except Exception:
            return
        if isinstance(link, h5py.ExternalLink):
            for target in {Path(link.filename), path.parent / link.filename}:
                if (target.exists() or target.is_symlink()) and not target.is_file():
                    raise SignalFileError(f"{path}:{dataset}: an external link on its path leads to {target}, not a "
                                          "regular file (a pipe, a device or a folder); copy the data into this file")
            return
        try:
            group = group[name]
        except Exception:
            return
        if not isinstance(group, h5py.Group):
            return


def _check_h5_stored(h5py: Any, ds: Any, name: str, file_size: int, declared: int) -> None:
    """Refuse an HDF5 dataset whose declared shape is not stored in the file: HDF5 allocates a
    chunk whenever any of it is written, so a chunk missing from a chunked dataset (compressed
    or not) was never written, and reading it gives fill values, not samples (a 26 KB file
    declaring (1, 10**12) samples is all but empty); a contiguous dataset must hold all its
    bytes within the file. A virtual dataset or one kept in external raw files stores nothing
    here to check (and parts mapped to nothing read as fill values): refused, with the fix."""
    fix = ("it is truncated, damaged or was never fully written (write every sample, or resize it to the samples "
           "written)")
    try:
        plist = ds.id.get_create_plist()
        layout = plist.get_layout()
        if layout == h5py.h5d.VIRTUAL:
            raise SignalFileError(f"{name}: a virtual dataset (its samples live in other datasets, and parts mapped to "
                                  "none read as fill values); copy it into a regular dataset first (h5repack, or "
                                  "h5py: new[name] = old[name][...])")
        if plist.get_external_count():
            raise SignalFileError(f"{name}: keeps its samples in external raw files, which welchpeaks does not follow; "
                                  "copy them into the HDF5 file first (h5repack)")
        stored = ds.id.get_storage_size()
        if stored > file_size:
            raise SignalFileError(f"{name}: its storage of {stored:,} bytes does not fit the file's {file_size:,}; it is "
                                  "truncated or damaged")
        if layout == h5py.h5d.CHUNKED:
            need = _chunk_count(tuple(ds.shape), tuple(ds.chunks))
            have = ds.id.get_num_chunks()
            if have < need:
                raise SignalFileError(f"{name}: declares shape {tuple(ds.shape)} ({size_text(declared)} of samples) in "
                                      f"{need:,} chunks of {tuple(ds.chunks)}, but stores only {have:,} of them "
                                      f"({stored:,} bytes); the rest would be read as fill values, not samples: {fix}")
        elif layout == h5py.h5d.CONTIGUOUS:
            offset = ds.id.get_offset()
            if stored < declared or offset is None or offset + declared > file_size:
                raise SignalFileError(f"{name}: declares shape {tuple(ds.shape)} ({size_text(declared)} of samples) but "
                                      f"stores {stored if offset is not None else 0:,} bytes of them in the file; the "
                                      f"rest would be read as fill values, not samples: {fix}")
    except SignalFileError:
        raise
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SignalFileError(f"{name}: cannot check how much of it is stored ({reason}); it may be damaged") from None


def _audio(paths: list[Path], what: str) -> SignalSource:
    try:
        import soundfile as sf
    except ImportError:
        raise SignalFileError(f"{what}: reading sound files needs soundfile: pip install 'welchpeaks[io]'") from None
    parts, rates = [], {}
    for path in paths:
        try:
            stamp = file_stamp(path)
            info = sf.info(str(path))
        except Exception as exc:
            raise SignalFileError(f"{path}: not a sound file soundfile can read ({str(exc).splitlines()[0]})") from None
        if info.frames <= 0 or info.channels <= 0:
            raise SignalFileError(f"{path}: holds no samples")
        _check_audio_stored(path, info)
        rates.setdefault(float(info.samplerate), []).append(path.name)

        def read(r0: int, r1: int, s0: int, s1: int, path: Path = path) -> np.ndarray:
            with sf.SoundFile(str(path)) as f:
                f.seek(s0)
                data = f.read(s1 - s0, dtype="float32", always_2d=True)
            return data[:, r0:r1].T

        parts.append(Part(str(path), int(info.channels), int(info.frames), read, stamp))
    if len(rates) > 1:
        listed = "; ".join(f"{rate:g} Hz: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
                           for rate, names in rates.items())
        raise SignalFileError(f"{what}: the files have different sample rates ({listed}); analyse each rate separately")
    return SignalSource(parts, next(iter(rates)), np.float32, f"audio {what}")


def _check_audio_stored(path: Path, info: Any) -> None:
    """Refuse a sound file declaring more frames than it can hold: uncompressed samples take
    exactly frames x channels x their size; a compressed file (FLAC, Ogg) holds at most
    ``MAX_FRAMES_PER_BYTE`` frames per byte (a forged FLAC header of 363 bytes declared 2**36)."""
    size = path.stat().st_size
    frames, channels = int(info.frames), int(info.channels)
    per = None if info.format in _COMPRESSED_AUDIO else _PCM_BYTES.get(info.subtype)
    room = size // (channels * per) if per is not None else size * MAX_FRAMES_PER_BYTE
    if frames > room:
        raise SignalFileError(f"{path}: declares {frames:,} frames of {channels} channel(s) ({info.format} "
                              f"{info.subtype}), but its {size:,} bytes hold at most {room:,}; it is truncated, "
                              "damaged or its header is wrong")


def _regular_file(path: Path) -> Path:
    """``path`` if it is a regular file (links followed); else a :class:`SignalFileError` that
    says what it is: reading a pipe would wait forever, a device would never end."""
    if path.is_file():
        return path
    if path.exists() or path.is_symlink():
        raise SignalFileError(f"{path}: not a regular file (a pipe, a device, a directory, or a link to one or to "
                              "nothing); name a file")
    raise SignalFileError(f"{path}: no such file")


def open_signals(source: str | os.PathLike) -> SignalSource:
    """A lazy, chunked view of the signals in ``source``.

    * ``x.npy``: memory-mapped; 1-D is one signal, N-D is rows of signals (last axis: samples).
    * ``x.zarr``: a Zarr array (rows: the leading axes); sample rate from its ``fs`` attribute.
    * ``x.h5:/group/dataset``: an HDF5 dataset (h5py); sample rate from its ``fs`` attribute.
    * ``x.wav``, ``.flac``, ``.ogg``, a directory, or a glob (``'rec/*.flac'``): sound files
      (soundfile), a row per channel, each file its own part; all files must share a sample rate.
    """
    kind, paths, detail = _locate(os.fspath(source))
    if kind == "hdf5":
        return _hdf5(_regular_file(paths[0]), detail)
    if kind in ("glob", "folder"):
        return _audio([_regular_file(p) for p in paths], detail)
    if kind == "zarr":
        return _zarr(paths[0])
    path = _regular_file(paths[0])
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _npy(path)
    if suffix in (".h5", ".hdf5"):
        return _hdf5(path, "")
    if suffix in AUDIO_SUFFIXES:
        return _audio([path], str(path))
    raise SignalFileError(f"{path}: unsupported file type {suffix!r}; use .npy, .zarr, .h5:/dataset, .wav, .flac or .ogg")


def _locate(text: str) -> tuple[str, list[Path], str]:
    """What ``open_signals(text)`` reads, before anything is opened: ``(kind, paths, detail)``,
    kind one of ``hdf5`` (the file; detail: the dataset), ``glob`` (the sound files matched, in
    order; detail: the pattern), ``folder`` (the sound files in it; detail: the folder), ``zarr``
    (the store) or ``file`` (a path of any suffix, not yet checked)."""
    try:
        head, sep, dataset = text.partition(":")
        if sep and Path(head).suffix.lower() in (".h5", ".hdf5"):
            return "hdf5", [Path(head)], dataset
        path = Path(text)
        if any(c in text for c in "*?["):
            paths = sorted(Path(p) for p in _glob.glob(text) if Path(p).suffix.lower() in AUDIO_SUFFIXES)
            if not paths:
                raise SignalFileError(f"{text}: the pattern matches no .wav, .flac or .ogg file")
            return "glob", paths, text
        if path.suffix.lower() == ".zarr" or (path.is_dir() and (path / "zarr.json").exists()):
            if not path.exists():
                raise SignalFileError(f"{path}: no such Zarr store")
            return "zarr", [path], str(path)
        if path.is_dir():
            paths = sorted(p for p in path.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
            if not paths:
                raise SignalFileError(f"{path}: the directory holds no .wav, .flac or .ogg file")
            return "folder", paths, str(path)
        return "file", [path], str(path)
    except OSError as exc:  # a name too long for the filesystem, a folder that cannot be listed
        raise SignalFileError(f"{text}: cannot be read ({exc.strerror or exc})") from None


@dataclass(frozen=True)
class Footprint:
    """What a source argument reads on disk (:func:`footprint`), for the command line's check
    of the paths it writes: ``files`` read, ``folders`` read whole (a Zarr store, a folder of
    sound files: anything inside is part of the input), ``pattern`` (a glob: a sound file it
    matches later is an input of a rerun) and ``names``, the names its parts carry."""

    files: tuple[Path, ...]
    folders: tuple[Path, ...]
    pattern: str | None
    names: tuple[str, ...]


def footprint(source: str | os.PathLike) -> Footprint:
    """What ``open_signals(source)`` would read, found as it finds it (nothing is opened); a
    :class:`SignalFileError` where it would fail to find anything (a glob matching no sound
    file, a folder without one)."""
    kind, paths, detail = _locate(os.fspath(source))
    if kind == "hdf5":
        return Footprint((paths[0],), (), None, (f"{paths[0]}:{detail}",))
    folders = (Path(detail),) if kind in ("folder", "zarr") else ()
    return Footprint(() if kind == "zarr" else tuple(paths), folders, detail if kind == "glob" else None,
                     tuple(str(p) for p in paths))
