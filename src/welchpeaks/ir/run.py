"""Execute a :class:`Graph` op by op.

Every op has a NumPy kernel here, so any graph runs with ``backend="numpy"``. A backend
registers faster kernels for the ops it provides with :func:`register_kernel` (the numba
backend registers the fused ``welch_peaks``); ops a backend lacks fall back to NumPy.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from welchpeaks.ir.graph import Graph, Node, Op

Kernel = Callable[[Node, list], Any]
_KERNELS: dict[str, dict[Op, Kernel]] = {"numpy": {}}
#: backend name -> module that registers its kernels (imported on first use)
_BACKEND_MODULES = {"numba": "welchpeaks.backends.fused_cpu"}


def register_kernel(backend: str, op: Op, fn: Kernel) -> None:
    _KERNELS.setdefault(backend, {})[op] = fn


def _kernel(backend: str, op: Op) -> Kernel:
    if backend not in _KERNELS and backend in _BACKEND_MODULES:
        import importlib

        importlib.import_module(_BACKEND_MODULES[backend])
    if backend not in _KERNELS:
        raise ValueError(f"backend={backend!r} is unknown; use one of {sorted(set(_KERNELS) | set(_BACKEND_MODULES))}")
    return _KERNELS[backend].get(op) or numpy_kernel(op)


def run(graph: Graph, inputs: Mapping[str, Any], backend: str = "numpy") -> tuple:
    """Values of ``graph.outputs`` for ``inputs`` (name -> array), computed on ``backend``."""
    missing = set(graph.inputs) - set(inputs)
    if missing:
        raise ValueError(f"inputs: graph {graph.name!r} needs {sorted(missing)}")
    values: list[Any] = [None] * len(graph.nodes)
    last_use = {}
    for n in graph.nodes:
        for i in n.inputs:
            last_use[i] = n.id
    keep = set(graph.outputs)
    for n in graph.nodes:
        if n.op is Op.input:
            v = np.asarray(inputs[n.attrs["name"]])
            if v.shape != n.shape:
                raise ValueError(f"inputs[{n.attrs['name']!r}]: shape {list(v.shape)}; the graph expects {list(n.shape)}")
            values[n.id] = v
        else:
            values[n.id] = _kernel(backend, n.op)(n, [values[i] for i in n.inputs])
        for i in n.inputs:  # free intermediates as soon as their last consumer ran
            if last_use.get(i) == n.id and i not in keep:
                values[i] = None
    return tuple(values[o] for o in graph.outputs)


# ---------------------------------------------------------------------------- numpy kernels


def _np(op: Op):
    def deco(fn: Kernel) -> Kernel:
        register_kernel("numpy", op, fn)
        return fn

    return deco


@_np(Op.param)
@_np(Op.constant)
def _leaf(n, a):
    return n.attrs["value"]


@_np(Op.reshape)
def _reshape(n, a):
    return a[0].reshape(n.shape)


@_np(Op.transpose)
def _transpose(n, a):
    return a[0].transpose(n.attrs["perm"])


@_np(Op.narrow)
def _narrow(n, a):
    sl = [slice(None)] * a[0].ndim
    sl[n.attrs["axis"]] = slice(n.attrs["start"], n.attrs["start"] + n.attrs["length"])
    return a[0][tuple(sl)]


@_np(Op.frames)
def _frames(n, a):
    from welchpeaks.spectral import segment_view

    return segment_view(a[0], n.attrs["n_fft"], n.attrs["hop"], n.attrs["n_segments"])


_np(Op.add)(lambda n, a: a[0] + a[1])
_np(Op.sub)(lambda n, a: a[0] - a[1])
_np(Op.mul)(lambda n, a: a[0] * a[1])
_np(Op.concat)(lambda n, a: np.concatenate(a, axis=n.attrs["axis"]))


@_np(Op.fft)
def _fft(n, a):
    x = a[0]
    half = x.shape[1] // 2
    z = x[:, :half].astype(np.complex128) + 1j * x[:, half:]
    norm = n.attrs["norm"]
    out = np.fft.ifft(z, norm=norm) if n.attrs["inverse"] else np.fft.fft(z, norm=norm)
    return np.concatenate([out.real, out.imag], axis=1).astype(x.dtype)


@_np(Op.rfft)
def _rfft(n, a):
    import scipy.fft

    return scipy.fft.rfft(a[0], axis=-1, workers=-1)


def _windowed(x: np.ndarray, detrend: Any, window: np.ndarray) -> np.ndarray:
    from welchpeaks.spectral import detrend_segments

    return (detrend_segments(x, detrend) * window).astype(x.dtype, copy=False)


_np(Op.window)(lambda n, a: _windowed(a[0], n.attrs["detrend"], n.attrs["window"]))


@_np(Op.power)
def _power(n, a):
    z = a[0]
    p = z.real * z.real + z.imag * z.imag
    return p if n.attrs["scale"] is None else p * n.attrs["scale"].astype(p.dtype)


_np(Op.segment_mean)(lambda n, a: a[0].mean(axis=-2, dtype=a[0].dtype))


def records(bins: np.ndarray, power: np.ndarray, fbins: np.ndarray) -> np.ndarray:
    """Peak records ``[rows, k, 3]`` float64 of (bin, power, fractional bin)."""
    return np.stack([bins.astype(np.float64), power.astype(np.float64), fbins], axis=-1)


def numpy_kernel(op: Op) -> Kernel:
    """The NumPy kernel of ``op`` (what other backends fall back to)."""
    return _KERNELS["numpy"][op]


def _select_records(psd: np.ndarray, k: int, mode: str, min_distance: int) -> np.ndarray:
    """Peak records of PSD rows; rows with a non-finite value are left empty."""
    from welchpeaks.backends.numpy_exec import select

    bad = ~np.isfinite(psd).all(axis=1)
    out = records(*select(np.where(bad[:, None], 0, psd), k, mode, min_distance))
    out[bad] = [-1, np.nan, np.nan]
    return out


_np(Op.topk)(lambda n, a: _select_records(a[0], n.attrs["k"], n.attrs["mode"], n.attrs["min_distance"]))


@_np(Op.welch_peaks)
def _welch_peaks(n, a):
    x = a[0]
    k, S = n.attrs["k"], n.attrs["n_segments"]
    if n.attrs["source"] == "block":
        half = x.shape[1] // 2
        nb = half // 2 + 1
        pw = x[:, :nb].astype(np.float64) ** 2 + x[:, half:half + nb].astype(np.float64) ** 2
        pw[:, 1:nb - 1] *= 2.0
        psd = pw.reshape(-1, S, nb).mean(axis=1)
        order = np.argsort(-psd, axis=1, kind="stable")[:, :k]
        out = np.zeros((psd.shape[0], k, 2), np.float32)
        out[:, : order.shape[1], 0] = order
        out[:, : order.shape[1], 1] = np.take_along_axis(psd, order, 1)
        return out.reshape(psd.shape[0], 2 * k)
    from welchpeaks.spectral import one_sided_scale

    from welchpeaks.spectral import segment_view

    p = n.attrs["params"]
    if n.attrs["source"] == "rows":
        x = segment_view(x, p.n_fft, p.hop, S)
        x = _rfft(None, [_windowed(x, p.detrend, p.window_array.astype(x.dtype))])
    scale = one_sided_scale(p.window_array, p.n_fft, 1.0 if p.fs is None else p.fs, p.scaling)
    psd = (x.real * x.real + x.imag * x.imag).mean(axis=1) * scale.astype(x.real.dtype)
    return _select_records(psd, k, p.mode, p.min_distance)


@_np(Op.log_mel)
def _log_mel(n, a):
    x = a[0]
    half = x.shape[1] // 2
    nb = half // 2 + 1
    pw = x[:, :nb] ** 2 + x[:, half:half + nb] ** 2
    return np.log10(np.maximum(pw @ n.attrs["filterbank"].T.astype(x.dtype), 1e-10)).astype(x.dtype)


_np(Op.custom)(lambda n, a: np.asarray(n.attrs["fn"](*a)))
_np(Op.matmul)(lambda n, a: a[0] @ a[1])


@_np(Op.attention)
def _attention(n, a):
    q, k, v = a
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return (s / s.sum(axis=-1, keepdims=True)) @ v
