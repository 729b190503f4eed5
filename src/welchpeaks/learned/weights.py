"""Weights of a :class:`ButterflyFFT` as a safetensors file with JSON metadata.

The file is the plain safetensors layout (an 8-byte little-endian header length, a JSON header
naming each tensor's dtype, shape and byte range, then the raw little-endian bytes), written
and read here with NumPy alone, so loading never executes code. The header's ``__metadata__``
holds ``welchpeaks`` (JSON: n_fft, init, tied, Q8, gates, valid bins, the training record and
measured errors) and ``sha256`` over the tensor table, that JSON and the tensor bytes.

What the checksum proves: that the file is the one ``save`` wrote (not truncated, damaged or
edited by hand). It is no signature: anyone can recompute it, so it says nothing about who
wrote the file. A file is therefore treated as untrusted whatever its checksum: every
metadata field is checked for type and range, every tensor for dtype, shape, byte range and
finiteness, against each other and the model's invariants, before anything is allocated from
it or compiled; ``valid_bins`` (the one value that bounds a loop in the compiled program) must
lie in ``[1, n_fft/2 + 1]``. An invalid file raises :class:`WeightsError` naming the field.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from welchpeaks.files import MAX_JSON_DEPTH, FileContentError, json_depth, read_regular, write_atomic
from welchpeaks.params import is_int

FORMAT = 2  # 2: the checksum covers the tensor table
#: the largest n_fft a weights file may declare (the network holds log2(n) * n/2 twiddles)
MAX_N_FFT = 1 << 16
_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "I8": np.dtype("i1"), "BOOL": np.dtype("?")}
_NAMES = {v: k for k, v in _DTYPES.items()}
_MAX_HEADER = 1 << 24
_MAX_FILE = 64 << 20


class WeightsError(ValueError):
    """A weights file that cannot be trusted: corrupt, edited, or not for this model."""


def _digest(table: dict[str, Any], meta_json: str, data: bytes) -> str:
    """sha256 over the tensor table (canonical JSON), the metadata JSON and the tensor bytes."""
    canon = json.dumps(table, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode() + b"\0" + meta_json.encode() + b"\0" + data).hexdigest()


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
    header["__metadata__"] = {"welchpeaks": meta_json, "sha256": _digest(header, meta_json, data)}
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    write_atomic(path, struct.pack("<Q", len(head)) + head + data)
    return path


def read(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metadata, tensors) of a weights file, after every check."""
    path = Path(path)
    try:  # a regular file only (a FIFO would block, /dev/zero behind a link reports size 0), size capped
        blob = read_regular(path, _MAX_FILE, "weights")
    except FileContentError as exc:
        raise WeightsError(f"cannot read {exc}; a welchpeaks weights file (n_fft <= {MAX_N_FFT}) is a regular file "
                           f"of at most {_MAX_FILE} bytes and this is not one: pass the path of weights that "
                           "welchpeaks learn fft / learn prune wrote") from None
    bad = f"{str(path)!r} is not a welchpeaks weights file"
    if len(blob) < 8:
        raise WeightsError(f"{bad} (only {len(blob)} bytes)")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > min(_MAX_HEADER, len(blob) - 8):
        raise WeightsError(f"{bad} (header length {n} does not fit the file's {len(blob)} bytes)")
    try:
        header = _shallow_json(blob[8 : 8 + n])
        meta_json = header["__metadata__"]["welchpeaks"]
        if not isinstance(header, dict) or not isinstance(meta_json, str):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise WeightsError(f"{bad} (its header is not safetensors JSON with welchpeaks metadata, nested at most "
                           f"{MAX_JSON_DEPTH} deep); pass weights that welchpeaks learn fft / learn prune wrote") from None
    return _checked(path, header, meta_json, blob[8 + n :])


def _shallow_json(text: bytes | str) -> Any:
    """``text`` parsed as JSON nested at most ``MAX_JSON_DEPTH`` deep, else a ValueError (deep
    nesting raised RecursionError). Parsed first: on valid JSON ``json_depth`` is linear."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    if json_depth(text.encode() if isinstance(text, str) else bytes(text)) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return doc


def _checked(path: Path, header: dict, meta_json: str, data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    where = f"weights {str(path)!r}"
    stored = header.pop("__metadata__", None)
    if not isinstance(stored, dict) or stored.get("sha256") != _digest(header, meta_json, data):
        raise WeightsError(f"{where} fail their checksum: the file was edited or damaged after it was written; "
                           "train or prune again (welchpeaks learn ...)")
    try:
        meta = _shallow_json(meta_json)
    except ValueError:
        raise WeightsError(f"{where}: the welchpeaks metadata is not JSON nested at most {MAX_JSON_DEPTH} deep; "
                           "train or prune again (welchpeaks learn ...)") from None
    if not isinstance(meta, dict):
        raise WeightsError(f"{where}: the welchpeaks metadata is a JSON {type(meta).__name__}, not an object")
    if meta.get("format") != FORMAT:
        raise WeightsError(f"{where} have format {meta.get('format')!r}; this welchpeaks reads format {FORMAT} "
                           "(train or prune again with this version)")
    n = meta.get("n_fft")
    if not is_int(n) or n < 4 or n & (n - 1) or n > MAX_N_FFT:
        raise WeightsError(f"{where}: n_fft={n!r} in the metadata is not a power of two in [4, {MAX_N_FFT}]")
    stages, half = n.bit_length() - 1, n // 2
    want = {"twiddle": ("F64", (stages, half, 2)), "gate_logit": ("F64", (stages, half)),
            "active": ("BOOL", (stages, half))}
    if meta.get("quantized") is True:
        want.update(twiddle_q8=("I8", (stages, half, 2)), twiddle_scale=("F64", (stages,)))
    extra = set(header) - set(want)
    if extra:
        raise WeightsError(f"{where}: unexpected tensors {sorted(extra)}")
    tensors, spans = {}, []
    for name, (dtype, shape) in want.items():
        info = header.get(name)
        if not isinstance(info, dict):
            raise WeightsError(f"{where}: tensor {name!r} is missing or is not a tensor description")
        offsets, got_shape = info.get("data_offsets"), info.get("shape")
        if (info.get("dtype") != dtype or not isinstance(got_shape, list) or not all(map(is_int, got_shape))
                or tuple(got_shape) != shape
                or not isinstance(offsets, list) or len(offsets) != 2 or not all(map(is_int, offsets))):
            raise WeightsError(f"{where}: tensor {name!r} must be {dtype} of shape {list(shape)} with two integer "
                               f"data_offsets; the file says {info!r}"[:300])
        lo, hi = offsets
        dt = _DTYPES[dtype]
        if not 0 <= lo <= hi <= len(data) or hi - lo != dt.itemsize * int(np.prod(shape)):
            raise WeightsError(f"{where}: tensor {name!r} has byte range {offsets} outside the file's data")
        spans.append((lo, hi, name))
        tensors[name] = np.frombuffer(data, dt, count=int(np.prod(shape)), offset=lo).reshape(shape).copy()
    spans.sort()
    for (_, hi, a), (lo, _, b) in zip(spans, spans[1:]):
        if lo < hi:
            raise WeightsError(f"{where}: tensors {a!r} and {b!r} overlap")
    for name in ("twiddle", "gate_logit", "twiddle_scale"):
        if name in tensors and not np.all(np.isfinite(tensors[name])):
            raise WeightsError(f"{where}: tensor {name!r} holds NaN or infinity")
    _check_meta(where, meta, n)
    return meta, tensors


def _check_meta(where: str, meta: dict, n: int) -> None:
    """Types and ranges of every metadata field a model is built from."""
    from welchpeaks.learned.model import INITS

    vb = meta.get("valid_bins", n // 2 + 1)
    if not is_int(vb) or not 1 <= vb <= n // 2 + 1:
        raise WeightsError(f"{where}: valid_bins={vb!r} must be an integer in [1, {n // 2 + 1}] for n_fft={n}")
    if meta.get("init", "exact") not in INITS:
        raise WeightsError(f"{where}: init={meta.get('init')!r} is not one of {list(INITS)}")
    sigma = meta.get("sigma", 0.1)
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not np.isfinite(sigma) or sigma < 0:
        raise WeightsError(f"{where}: sigma={sigma!r} must be a finite number >= 0")
    for flag in ("tied", "quantized", "gated"):
        if not isinstance(meta.get(flag, False), bool):
            raise WeightsError(f"{where}: {flag}={meta.get(flag)!r} must be true or false")
    seed = meta.get("seed")
    if seed is not None and not is_int(seed):
        raise WeightsError(f"{where}: seed={seed!r} must be an integer or null")
    record = meta.get("record") or {}
    if not isinstance(record, dict):
        raise WeightsError(f"{where}: record must be a JSON object, not {type(record).__name__}")
    recall = record.get("recall")
    if recall is not None and (isinstance(recall, bool) or not isinstance(recall, (int, float))
                               or not 0.0 <= recall <= 1.0):
        raise WeightsError(f"{where}: record.recall={recall!r} must be a fraction in [0, 1]")


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
    model.valid_bins = int(meta.get("valid_bins", meta["n_fft"] // 2 + 1))  # checked in [1, n/2 + 1]
    model.record = dict(meta.get("record") or {})
    model.eval()
    return model
