"""Reading signals from files for the command line: .npy, .wav and .csv."""

from __future__ import annotations

import warnings
from typing import Any
from pathlib import Path

import numpy as np


class SignalFileError(ValueError):
    """A file could not be read as signals; the message says why, in one line."""


#: the longest .npy header welchpeaks reads (NumPy writes a few hundred bytes; its own reader
#: stops at 10,000, but only after reading as many bytes as the header claims)
MAX_NPY_HEADER = 1 << 16


def read_npy_header(fh: Any, path: Path) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of the .npy file open as ``fh``, its header's stated length
    checked before the header is read (a 100-byte file stating 2**31 made NumPy allocate 2 GiB);
    a :class:`SignalFileError` for anything that is not a NumPy array header."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(fh)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(version)
        start = fh.tell()
        size = 2 if version == (1, 0) else 4
        raw = fh.read(size)
        stated = int.from_bytes(raw, "little") if len(raw) == size else -1
        if not 0 < stated <= MAX_NPY_HEADER:
            raise ValueError(stated)
        fh.seek(start)
        return (npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0)(fh)
    except Exception:
        raise SignalFileError(f"{path}: not a valid .npy file (no NumPy array header of at most {MAX_NPY_HEADER} "
                              "bytes); save signals with numpy.save") from None


def _load_npy(path: Path) -> np.ndarray:
    """A numeric .npy array, its header checked against the file before anything is allocated;
    files holding Python objects are refused (never unpickled)."""
    with open(path, "rb") as fh:
        shape, fortran, dtype = read_npy_header(fh, path)
        if dtype.hasobject:
            raise SignalFileError(f"{path}: holds Python objects, which welchpeaks never unpickles; save a numeric "
                                  "array (float32 or float64)")
        need = int(np.prod(shape, dtype=object)) * dtype.itemsize
        have = path.stat().st_size - fh.tell()
        if need != have:
            raise SignalFileError(f"{path}: its header declares {need} bytes of data but the file holds {have}; "
                                  "it is truncated or damaged")
    return np.load(path, allow_pickle=False)


def load_signals(path: str | Path) -> tuple[np.ndarray, float | None]:
    """Signals ``[rows, samples]`` (or ``[..., samples]`` for .npy) and the sample rate if known.

    * ``.npy``: 1-D (one signal) or N-D (rows of signals); no pickles.
    * ``.wav``: each channel is a row; integer PCM is scaled to [-1, 1); fs from the file.
    * ``.csv``: one signal per row, comma-separated numbers.
    """
    path = Path(path)
    if not path.exists():
        raise SignalFileError(f"{path}: no such file")
    if not path.is_file():
        raise SignalFileError(f"{path}: not a file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            data = _load_npy(path)
            fs = None
        elif suffix == ".wav":
            from scipy.io import wavfile

            fs, data = wavfile.read(path)
            if data.dtype.kind in "iu":
                info = np.iinfo(data.dtype)
                data = (data.astype(np.float64) - (info.max + info.min + 1) / 2) / ((info.max - info.min + 1) / 2)
            data = data.T if data.ndim == 2 else data
            fs = float(fs)
        elif suffix == ".csv":
            with warnings.catch_warnings():  # an empty file is reported below, as one line
                warnings.simplefilter("ignore")
                data = np.loadtxt(path, delimiter=",", ndmin=2)
            fs = None
        else:
            raise SignalFileError(f"{path}: unsupported file type {suffix!r}; use .npy, .wav or .csv")
    except SignalFileError:
        raise
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SignalFileError(f"{path}: cannot read it as {suffix[1:]} ({reason})") from None
    data = np.asarray(data)
    if data.size == 0:
        raise SignalFileError(f"{path}: holds no samples")
    return data, fs
