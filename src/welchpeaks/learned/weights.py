"""Weights of a :class:`ButterflyFFT` as a safetensors file with JSON metadata.

The file is the plain safetensors layout (an 8-byte little-endian header length, a JSON header
naming each tensor's dtype, shape and byte range, then the raw little-endian bytes), written
and read here with NumPy alone, so loading never executes code. The header's ``__metadata__``
holds ``welchpeaks`` (JSON: n_fft, init, tied, Q8, gates, valid bins, the training record and
measured errors) and ``sha256`` over that JSON and the tensor bytes: an edited, truncated or
mismatched file is rejected with an error that says what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "I8": np.dtype("i1"), "BOOL": np.dtype("?")}
_NAMES = {v: k for k, v in _DTYPES.items()}
_MAX_HEADER = 1 << 24


class WeightsError(ValueError):
    """A weights file that cannot be trusted: corrupt, edited, or not for this model."""


def _digest(meta_json: str, data: bytes) -> str:
    return hashlib.sha256(meta_json.encode() + b"\0" + data).hexdigest()


def save(model: Any, path: str | os.PathLike) -> Path:
    """Write ``model`` to ``path`` (conventionally ``*.safetensors``); returns the path."""
    from welchpeaks.learned.model import q8_levels

    path = Path(path)
    tensors = {
        "twiddle": model.twiddle.detach().cpu().numpy().astype("<f8"),
        "gate_logit": model.gate_logit.detach().cpu().numpy().astype("<f8"),
        "active": model.active.cpu().numpy().astype("?"),
    }
    if model.quantized:
        levels, scale = q8_levels(model.twiddles().detach())
        tensors["twiddle_q8"] = levels.cpu().numpy().astype("i1")
        tensors["twiddle_scale"] = scale.reshape(-1).cpu().numpy().astype("<f8")
    meta = {
        "format": FORMAT, "n_fft": model.n_fft, "init": model.init, "sigma": model.sigma, "tied": model.tied,
        "seed": model.seed, "quantized": model.quantized, "gated": model.gated, "valid_bins": model.valid_bins,
        "active_fraction": model.active_fraction(), "record": model.record,
    }
    meta_json = json.dumps(meta, sort_keys=True, default=float)
    header: dict[str, Any] = {}
    blobs, offset = [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": _NAMES[arr.dtype], "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    data = b"".join(blobs)
    header["__metadata__"] = {"welchpeaks": meta_json, "sha256": _digest(meta_json, data)}
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(struct.pack("<Q", len(head)) + head + data)
    os.replace(tmp, path)  # never leaves a half-written file under the real name
    return path


def read(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metadata, tensors) of a weights file, after every check."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise WeightsError(f"cannot read weights {str(path)!r}: {exc.strerror or exc}") from None
    bad = f"{str(path)!r} is not a welchpeaks weights file"
    if len(blob) < 8:
        raise WeightsError(f"{bad} (only {len(blob)} bytes)")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > min(_MAX_HEADER, len(blob) - 8):
        raise WeightsError(f"{bad} (header length {n} does not fit the file's {len(blob)} bytes)")
    try:
        header = json.loads(blob[8 : 8 + n])
        meta_json = header["__metadata__"]["welchpeaks"]
        if not isinstance(header, dict) or not isinstance(meta_json, str):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise WeightsError(f"{bad} (its header is not safetensors JSON with welchpeaks metadata)") from None
    return _checked(path, header, meta_json, blob[8 + n :])


def _checked(path: Path, header: dict, meta_json: str, data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    where = f"weights {str(path)!r}"
    stored = (header.pop("__metadata__", None) or {}).get("sha256")
    if stored != _digest(meta_json, data):
        raise WeightsError(f"{where} fail their checksum: the file was edited or damaged after it was written; "
                           "train or prune again (welchpeaks learn ...)")
    meta = json.loads(meta_json)
    if meta.get("format") != FORMAT:
        raise WeightsError(f"{where} have format {meta.get('format')!r}; this welchpeaks reads format {FORMAT}")
    tensors = {}
    for name, info in header.items():
        if not isinstance(info, dict):
            raise WeightsError(f"{where}: header entry {name!r} is not a tensor description")
        dt = _DTYPES.get(info.get("dtype"))
        lo, hi = info.get("data_offsets", [0, -1])
        shape = tuple(info.get("shape", ()))
        if dt is None or not 0 <= lo <= hi <= len(data) or (hi - lo) != dt.itemsize * int(np.prod(shape)):
            raise WeightsError(f"{where}: tensor {name!r} has an invalid dtype or byte range")
        tensors[name] = np.frombuffer(data, dt, count=int(np.prod(shape)), offset=lo).reshape(shape).copy()
    n = meta.get("n_fft")
    if not isinstance(n, int) or n < 4 or n & (n - 1):
        raise WeightsError(f"{where}: n_fft={n!r} in the metadata is not a power of two >= 4")
    stages, half = n.bit_length() - 1, n // 2
    want = {"twiddle": (stages, half, 2), "gate_logit": (stages, half), "active": (stages, half)}
    for name, shape in want.items():
        if name not in tensors or tensors[name].shape != shape:
            got = tensors[name].shape if name in tensors else "missing"
            raise WeightsError(f"{where}: tensor {name!r} is {got}, but n_fft={n} needs {shape}")
    return meta, tensors


def load(path: str | os.PathLike) -> Any:
    """The :class:`ButterflyFFT` saved at ``path`` (every check of :func:`read` applies)."""
    import torch

    from welchpeaks.learned.model import ButterflyFFT

    meta, tensors = read(path)
    model = ButterflyFFT(meta["n_fft"], init=meta.get("init", "exact"), sigma=meta.get("sigma", 0.1),
                         tied=bool(meta.get("tied", False)), seed=meta.get("seed"))
    with torch.no_grad():
        model.twiddle.copy_(torch.from_numpy(tensors["twiddle"]))
        model.gate_logit.copy_(torch.from_numpy(tensors["gate_logit"]))
        model.active.copy_(torch.from_numpy(tensors["active"]))
    model.quantized = bool(meta.get("quantized", False))
    model.gated = bool(meta.get("gated", False))
    model.valid_bins = int(meta.get("valid_bins", meta["n_fft"] // 2 + 1))
    model.record = dict(meta.get("record") or {})
    model.eval()
    return model
