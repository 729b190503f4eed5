"""Public API: ``welch``, ``welch_peaks``, ``WelchPeaks`` and ``available_strategies``.

Input is validated and normalised here, once; executions receive C-contiguous float rows.
"""

from __future__ import annotations

import copy
import numbers
import threading
from typing import Any

import numpy as np

from welchpeaks import backends
from welchpeaks.params import PeakParams, is_int, make_params
from welchpeaks.result import PeakResult

DEVICES = ("cpu", "cuda")
#: strategy='auto' on CUDA data until a CUDA cost model is measured: the first that can run
CUDA_PREFERENCE = ("triton-fused", "triton-block", "torch")


# ------------------------------------------------------------------------------ input


def _tensor_input(x: Any, name: str = "x") -> Any:
    """A torch tensor for torch and CuPy inputs (CuPy through DLPack, no copy); None otherwise.

    Checks what :func:`_as_real_array` checks, and keeps the data on its device.
    """
    mod = type(x).__module__
    if isinstance(x, np.ndarray) or not mod.startswith(("torch", "cupy")):
        return None
    from welchpeaks.backends.torch_exec import import_torch

    torch = import_torch()
    t = x if torch.is_tensor(x) else torch.from_dlpack(x)
    if t.is_complex():
        raise TypeError(f"{name} is complex ({t.dtype}); welch_peaks analyses real signals: pass x.real")
    if t.dtype == torch.bool:
        raise TypeError(f"{name} has dtype {t.dtype}; pass real numbers (float32, float64 or integers)")
    if t.dim() == 0 or t.numel() == 0:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; pass signals shaped [..., samples]")
    if t.dtype in (torch.float32, torch.float64):
        return t
    return t.to(torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else torch.float64)


def _np_dtype(arr: Any) -> np.dtype:
    """The NumPy dtype of an array or of a float tensor (torch.float32 -> float32)."""
    return np.dtype(str(arr.dtype).replace("torch.", ""))


def _as_real_array(x: Any, name: str = "x") -> np.ndarray:
    """``x`` as a float32 or float64 array, or a TypeError/ValueError that says what to do."""
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{name} could not be read as an array ({exc}); pass equal-length rows") from None
    if np.iscomplexobj(arr):
        raise TypeError(
            f"{name} is complex ({arr.dtype}); welch_peaks analyses real signals: pass the real part "
            "(x.real) or, for analytic signals, use scipy.signal.welch(..., return_onesided=False)"
        )
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} has dtype {arr.dtype}; pass real numbers (float32, float64 or integers)")
    if arr.ndim == 0:
        raise ValueError(f"{name} is a scalar; pass signals shaped [..., samples]")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); pass at least one signal with samples")
    if arr.dtype == np.float32 or arr.dtype == np.float64:
        return arr
    if arr.dtype == np.float16:
        return arr.astype(np.float32)
    return arr.astype(np.float64)


# ------------------------------------------------------------------------------ welch


def welch(
    x: Any,
    fs: float = 1.0,
    window: Any = "hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend: Any = "constant",
    return_onesided: bool = True,
    scaling: str = "density",
    axis: int = -1,
    average: str = "mean",
) -> tuple[np.ndarray, np.ndarray]:
    """Welch power spectral density, with the signature and results of ``scipy.signal.welch``.

    Real input with a window (by name or array), ``detrend`` in ``'constant'``, ``'linear'``
    or ``False``, ``average`` ``'mean'`` or ``'median'`` and a one-sided result runs on
    welchpeaks' own vectorised path (all cores); anything else (complex input, a callable
    detrend, two-sided output, ``nperseg`` longer than the signal, ...) is passed to SciPy,
    so every call SciPy accepts works and gives SciPy's result.

    Returns
    -------
    freqs : float64 ``[nfft//2 + 1]``
    psd : ``x``'s shape with ``axis`` replaced by the frequencies (float32 for float32 input)

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> t = np.arange(4096) / 1000.0
    >>> f, p = welchpeaks.welch(np.sin(2 * np.pi * 50 * t), fs=1000.0, nperseg=256)
    >>> float(f[np.argmax(p)])
    50.78125
    """
    import scipy.signal

    args = dict(
        fs=fs, window=window, nperseg=nperseg, noverlap=noverlap, nfft=nfft, detrend=detrend,
        return_onesided=return_onesided, scaling=scaling, axis=axis, average=average,
    )
    fast = _welch_fast_args(x, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis, average)
    if fast is None:
        return scipy.signal.welch(x, **args)
    arr, ax, win, seg, ovl, n_fft_out = fast

    from welchpeaks.spectral import welch_psd

    moved = np.moveaxis(arr, ax, -1)
    lead = moved.shape[:-1]
    rows = np.ascontiguousarray(moved).reshape(-1, moved.shape[-1])
    hop = seg - ovl
    n_seg = (rows.shape[1] - seg) // hop + 1
    psd = welch_psd(
        rows, np.asarray(win, np.float64), hop, n_seg, detrend=detrend, scaling=scaling,
        fs=float(fs), nfft=int(n_fft_out), average=average,
    )
    freqs = np.fft.rfftfreq(int(n_fft_out), 1.0 / fs)
    psd = np.moveaxis(psd.reshape(lead + (psd.shape[-1],)), -1, ax)
    return freqs, psd


def _welch_fast_args(x, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis, average):
    """(array, axis, window, nperseg, noverlap, nfft) when our path computes this call, else None."""
    import scipy.signal

    arr = np.asarray(x)
    real = arr.dtype.kind in "iuf" and arr.dtype != np.float16 and arr.dtype.itemsize <= 8
    if not (real and arr.ndim >= 1 and arr.size > 0 and return_onesided is True):
        return None
    if average not in ("mean", "median") or scaling not in ("density", "spectrum"):
        return None
    if not (detrend is False or (isinstance(detrend, str) and detrend in ("constant", "linear"))):
        return None
    if not (isinstance(fs, numbers.Real) and np.isfinite(fs) and fs > 0):
        return None
    if not (is_int(axis) and -arr.ndim <= axis < arr.ndim):
        return None
    ax = axis % arr.ndim
    seg = 256 if nperseg is None else nperseg
    if not (is_int(seg) and 0 < seg <= arr.shape[ax]):
        return None
    ovl = seg // 2 if noverlap is None else noverlap
    n_out = seg if nfft is None else nfft
    if not (is_int(ovl) and 0 <= ovl < seg and is_int(n_out) and n_out >= seg):
        return None
    try:
        win = scipy.signal.get_window(window, seg) if isinstance(window, (str, tuple)) else np.asarray(window)
    except (ValueError, TypeError):
        return None
    if not (win.ndim == 1 and win.shape[0] == seg and win.dtype.kind in "iuf"):
        return None
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.result_type(arr.dtype, np.float32))  # scipy's promotion: int16 -> float32
    return arr, ax, win, int(seg), int(ovl), int(n_out)


# ------------------------------------------------------------------------------ peaks


def available_strategies(device: str = "cpu") -> list[str]:
    """Executions installed and usable here on ``device`` (for example ``['numpy', 'fused-cpu']``)."""
    _check_device(device)
    return backends.available(device)


def _check_device(device: str) -> None:
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is unknown; use one of {list(DEVICES)}")
    if device == "cuda":
        try:
            from welchpeaks.backends.torch_exec import import_torch

            ok = import_torch().cuda.is_available()
        except ImportError as exc:
            raise ValueError(f"device='cuda' needs torch: {exc}") from None
        if not ok:
            raise ValueError("device='cuda': torch sees no CUDA device here; use device='cpu'")


def _resolve_strategy(strategy: str, device: str, params: PeakParams) -> backends.Execution | None:
    """The execution a strategy name asks for; None for 'auto' (the planner picks per call)."""
    if not isinstance(strategy, str):
        raise TypeError(f"strategy={strategy!r} must be a string: 'auto' or one of {backends.names()}")
    if strategy == "auto":
        return None
    if strategy not in backends.names():
        raise ValueError(f"strategy={strategy!r} is unknown; use 'auto' or one of {backends.names()}")
    ex = backends.get(strategy)
    why = ex.unavailable_reason()
    if why is not None:
        raise ValueError(f"strategy={strategy!r} is unavailable here: {why}")
    why = ex.unsupported_reason(params)
    if why is not None:
        raise ValueError(f"strategy={strategy!r} cannot compute these options: {why}; use strategy='auto'")
    return ex


def _learned_execution(strategy: str, model: Any, min_recall: Any, device: str,
                       params: PeakParams) -> backends.Execution | None:
    """The learned execution of ``model`` (None without one), after checking its options."""
    if isinstance(min_recall, bool) or not isinstance(min_recall, numbers.Real) or not 0 <= min_recall <= 1:
        raise ValueError(f"min_recall={min_recall!r} must be a fraction in [0, 1] (default 0.99)")
    if model is None:
        if strategy == "learned":
            raise ValueError("strategy='learned' needs model=: a ButterflyFFT or the path of its weights "
                             "(welchpeaks learn fft / learn prune write them)")
        return None
    if device != "cpu":
        raise ValueError(f"model= runs on the CPU in this version; use device='cpu', not {device!r}")
    from welchpeaks.backends.learned_exec import LearnedExec

    ex = LearnedExec(model)
    why = ex.unsupported_reason(params)
    if why is not None:
        raise ValueError(f"model= cannot compute these options: {why}; pass a model trained for n_fft={params.n_fft}")
    return ex


def _learned_recall(ex: backends.Execution) -> float | None:
    from welchpeaks.backends.learned_exec import model_recall

    return model_recall(ex.model)


def _check_layout(layout: str | None, segments: Any) -> str | None:
    if layout is None:
        return None
    if layout != "auto":
        raise ValueError(f"layout={layout!r} is unknown; use layout='auto' (or choose a layout with "
                         "segments='ultra', 'fast' or 'reference')")
    if segments not in (None, 2, "fast"):
        raise ValueError(f"layout='auto' chooses the number of segments itself; drop segments={segments!r}")
    return layout


class WelchPeaks:
    """A reusable Welch-peaks executor: validate once, plan once, call many times.

    Parameters are those of :func:`welch_peaks` (``segments`` defaults to 2, the original
    system's ``fast`` layout). Calling it on arrays ``[..., samples]`` returns a
    :class:`PeakResult`. Windows, twiddles and scratch buffers are kept between calls, and
    one instance may be called from several threads at once.

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> wp = welchpeaks.WelchPeaks(n_fft=256, k=4, segments=2, fs=1000.0)
    >>> t = np.arange(384) / 1000.0
    >>> x = np.stack([np.sin(2 * np.pi * f * t) for f in (100.0, 250.0)])
    >>> r = wp(x)
    >>> r.bins[:, 0].tolist()
    [26, 64]
    """

    def __init__(
        self,
        n_fft: int = 256,
        k: int = 16,
        segments: int | str | None = 2,
        hop: int | None = None,
        fs: float | None = None,
        mode: str = "peaks",
        strategy: str = "auto",
        device: str = "cpu",
        *,
        window: Any = "hann",
        detrend: str | bool = "constant",
        scaling: str = "density",
        min_distance: int = 1,
        nan_policy: str = "raise",
        dtype: str | None = None,
        layout: str | None = None,
        model: Any = None,
        min_recall: float = 0.99,
    ):
        self.layout = _check_layout(layout, segments)
        if self.layout == "auto":
            segments = 2
        self.params = make_params(
            k=k, n_fft=n_fft, hop=hop, segments=segments, fs=fs, window=window, detrend=detrend,
            scaling=scaling, mode=mode, min_distance=min_distance, nan_policy=nan_policy, dtype=dtype,
        )
        _check_device(device)
        self.device = device
        self.requested = strategy
        self._learned = _learned_execution(strategy, model, min_recall, device, self.params)
        self.min_recall = float(min_recall)
        self._forced = self._learned if strategy == "learned" else _resolve_strategy(strategy, device, self.params)
        self._plans: dict[tuple[str, int, str], Any] = {}
        self._picks: dict[tuple[int, int, int, str], str] = {}
        self._last: tuple[int, int, int, str] | None = None
        self._lock = threading.Lock()
        self._layouts: dict[str, WelchPeaks] = {}
        self._last_layout: str | None = None
        self._layout_picks: dict[tuple[int, int, str], tuple[str, str]] = {}
        if self.layout == "auto":
            opts = dict(n_fft=n_fft, k=k, hop=hop, fs=fs, mode=mode, strategy=strategy, device=device, window=window,
                        detrend=detrend, scaling=scaling, min_distance=min_distance, nan_policy=nan_policy, dtype=dtype,
                        model=self._learned.model if self._learned else None, min_recall=min_recall)
            self._layouts = {"ultra": WelchPeaks(segments=1, **opts), "fast": WelchPeaks(segments=2, **opts)}

    @property
    def strategy(self) -> str:
        """Name of the execution that ran last ('auto' before the first call under auto)."""
        if self._last_layout is not None:
            return self._layouts[self._last_layout].strategy
        if self._forced is not None:
            return self._forced.name
        return self._picks[self._last] if self._last in self._picks else "auto"

    def _pick(self, rows: int, n_seg: int, length: int, compute: np.dtype) -> backends.Execution:
        if self._forced is not None:
            return self._forced
        key = (rows, n_seg, length, compute.name)
        name = self._picks.get(key)
        if name is None:
            from welchpeaks.plan.picker import pick_for

            name = pick_for(self.params, n_seg, rows, length, compute, self.device)[0]
            if self._learned is not None and self._learned_eligible() is None:
                name = self._race_learned(name, rows, n_seg, length, compute)
            with self._lock:
                if len(self._picks) > 256:
                    self._picks.clear()
                self._picks[key] = name
        self._last = key
        return self._learned if name == "learned" else backends.get(name)

    def _learned_eligible(self) -> str | None:
        """None when auto may run the model, else why not."""
        recall = _learned_recall(self._learned)
        if recall is None:
            return "its peak recall was never measured (welchpeaks learn prune records it)"
        if recall < self.min_recall:
            return f"its held-out peak recall {recall:.4f} is below min_recall={self.min_recall}"
        return None

    def _race_learned(self, best: str, rows: int, n_seg: int, length: int, compute: np.dtype) -> str:
        """Measure the model against the planner's pick on a synthetic batch like the call's
        (at most 1024 signals, median of 3 after a warm-up); the faster wins."""
        import time

        sample = np.random.default_rng(0).standard_normal((min(rows, 1024), length)).astype(compute)
        times = {}
        for name, ex in ((best, backends.get(best)), ("learned", self._learned)):
            plan = self._plan(ex, n_seg, compute)
            ex.run_plan(plan, sample, compute)
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                ex.run_plan(plan, sample, compute)
                runs.append(time.perf_counter() - t0)
            times[name] = float(np.median(runs))
        return "learned" if times["learned"] < times[best] else best

    def explain(self, batch: int | None = None, length: int | None = None) -> dict[str, Any]:
        """Why the execution runs: per execution, its IO profile, every cost term (ns) and total,
        and the fusion gate's score, for ``batch`` signals of ``length`` samples (default: the
        last call's, else one signal of exactly one frame)."""
        from welchpeaks.plan.cost import cost_model_for
        from welchpeaks.plan.picker import pick_for

        p = self.params
        if batch is None or length is None:
            last = self._last or (1, p.segments or 1, p.n_fft + ((p.segments or 1) - 1) * p.hop, "float32")
            batch = last[0] if batch is None else batch
            length = last[2] if length is None else length
        p.check_length(length)
        n_seg = p.n_segments_for(length)
        compute = np.dtype(p.dtype or (self._last[3] if self._last else "float32"))
        model = cost_model_for(self.device)
        chosen, costs, why = pick_for(p, n_seg, batch, length, compute, self.device, model)
        costs = copy.deepcopy(costs)  # the picker keeps its answers; the caller may edit this
        if self._forced is not None:
            chosen, why = self._forced.name, "requested"
        return {
            "strategy": chosen,
            "requested": self.requested,
            "device": self.device,
            "why": why,
            "batch": batch,
            "length": length,
            "segments": n_seg,
            "compute_dtype": compute.name,
            "cost_model": {"status": model.status, "dispatch_ns": model.dispatch_ns, "roundtrip_ns": model.roundtrip_ns,
                           "memory_bw_gbps": model.memory_bw, "threads": model.threads},
            "costs": costs,
            "available": available_strategies(self.device),
            "params": p.to_dict(),
            **({"learned": {"recall": _learned_recall(self._learned), "min_recall": self.min_recall,
                            "active_fraction": self._learned.model.active_fraction(),
                            "eligible_for_auto": self._learned_eligible() or "yes: races the planner's pick on first call"}}
               if self._learned is not None else {}),
        }

    def _compute_dtype(self, input_dtype: np.dtype) -> np.dtype:
        if self.params.dtype is not None:
            return np.dtype(self.params.dtype)
        if self._forced is None:
            return np.dtype(input_dtype)  # auto never lowers the input's precision
        return self._forced.default_dtype(input_dtype)

    def _plan(self, ex: backends.Execution, n_seg: int, compute: np.dtype) -> Any:
        key = (ex.name, n_seg, compute.name)
        plan = self._plans.get(key)
        if plan is None:
            with self._lock:
                plan = self._plans.get(key)
                if plan is None:
                    plan = ex.make_plan(self.params, n_seg, compute)
                    self._plans[key] = plan
        return plan

    def _pick_layout(self, rows: int, length: int, dtype: np.dtype) -> tuple[str, str]:
        """layout='auto': the original's speed-only choice between 1 and 2 segments."""
        key = (rows, length, dtype.name)
        if key not in self._layout_picks:
            from welchpeaks.plan.picker import pick_for

            fast = self._layouts["fast"]
            if length < fast.params.n_fft + fast.params.hop:
                choice = ("ultra", f"layout auto: ultra, the signals are too short for 2 segments ({length} samples)")
            else:
                best = {}
                for name, wp in self._layouts.items():
                    n_seg = wp.params.segments
                    compute = wp._compute_dtype(dtype)
                    ex, costs, _ = pick_for(wp.params, n_seg, rows, length, compute, self.device)
                    # a forced execution the cost model does not price (learned) is compared
                    # through the planner's pick for the same layout
                    forced = wp._forced.name if wp._forced is not None else ex
                    best[name] = costs[forced if forced in costs else ex]["total_ns"]
                name = min(best, key=best.get)
                choice = (name, f"layout auto (speed only, as the original system; accuracy is not weighed): {name}, "
                                f"predicted ultra {best['ultra'] / 1e6:.3g} ms vs fast {best['fast'] / 1e6:.3g} ms")
            with self._lock:
                if len(self._layout_picks) > 256:
                    self._layout_picks.clear()
                self._layout_picks[key] = choice
        return self._layout_picks[key]

    def _run_tensor(self, t: Any) -> PeakResult:
        """Tensor input: results are tensors on the input's device."""
        import torch

        if not t.is_cuda and (self._forced is None or self._forced.device == "cpu"):
            res = self(t.detach().numpy())  # zero-copy view; a host execution computes it
            conv = {f: torch.from_numpy(np.ascontiguousarray(getattr(res, f))) for f in ("bins", "power", "freqs")}
            return PeakResult(strategy=res.strategy, params=res.params, **conv)
        if self._forced is not None and self._forced.device == "cpu":
            raise ValueError(f"strategy={self._forced.name!r} runs on host arrays and x is on {t.device}; use "
                             "strategy='auto' or a GPU execution, or pass x.cpu()")
        ex = self._forced
        if ex is None:
            for name in CUDA_PREFERENCE:
                cand = backends.get(name)
                if cand.unavailable_reason() is None and cand.unsupported_reason(self.params) is None:
                    ex = cand
                    break
            if ex is None:
                why = "; ".join(f"{n}: {backends.get(n).unavailable_reason() or backends.get(n).unsupported_reason(self.params)}"
                                for n in CUDA_PREFERENCE)
                raise ValueError(f"no GPU execution can compute this call ({why})")
        return self._finish(t, ex)

    def __call__(self, x: Any) -> PeakResult:
        t = _tensor_input(x)
        if t is not None and not self._layouts:
            return self._run_tensor(t)
        if self._layouts:
            arr = _as_real_array(x) if t is None else t
            name, why = self._pick_layout(int(np.prod(arr.shape[:-1])), arr.shape[-1], _np_dtype(arr))
            res = self._layouts[name](arr)
            res.params.update(layout=name, layout_choice=why)
            self._last_layout = name
            return res
        return self._finish(_as_real_array(x))

    def _finish(self, arr: Any, ex: backends.Execution | None = None) -> PeakResult:
        """Run ``arr`` (a host array, or a tensor with ``ex`` given) and build the result."""
        p = self.params
        length = arr.shape[-1]
        p.check_length(length)
        n_seg = p.n_segments_for(length)
        frame = p.frame_for(length)
        lead = tuple(arr.shape[:-1])
        rows = arr.reshape(-1, length)
        host = isinstance(arr, np.ndarray)
        in_dtype = _np_dtype(arr)
        if host and not rows.flags.c_contiguous:
            rows = np.ascontiguousarray(rows[:, :frame])
        compute = self._compute_dtype(in_dtype)
        if ex is None:
            ex = self._pick(rows.shape[0], n_seg, rows.shape[1], compute)
        if host and ex.device == "cuda" and self.device == "cuda":
            import torch

            rows = torch.from_numpy(rows).to("cuda")  # upload; the result comes back to the host
        out = ex.run_plan(self._plan(ex, n_seg, compute), rows, in_dtype)
        if host and not isinstance(out.bins, np.ndarray):
            out = out._replace(bins=out.bins.cpu().numpy(), power=out.power.cpu().numpy(), fbins=out.fbins.cpu().numpy())
        if out.bad_rows.size and p.nan_policy == "raise":
            first = int(out.bad_rows[0])
            where = np.unravel_index(first, lead) if lead else ()
            raise ValueError(
                f"x has NaN or infinity in signal {tuple(int(i) for i in where)} (row {first} of "
                f"{rows.shape[0]}; {out.bad_rows.size} signal(s) in all) within the analysed frame "
                f"(first {frame} samples); clean the data or pass nan_policy='propagate' to get "
                "empty slots (-1/NaN) for those signals"
            )
        shape = lead + (p.k,)
        info = p.to_dict()
        info.update(segments=n_seg, frame=frame, compute_dtype=compute.name)
        return PeakResult(
            bins=out.bins.reshape(shape),
            power=out.power.reshape(shape),
            freqs=(out.fbins * p.freq_scale()).reshape(shape),
            strategy=ex.name,
            params=info,
        )


def welch_peaks(
    x: Any,
    *,
    k: int = 16,
    n_fft: int = 256,
    hop: int | None = None,
    segments: int | str | None = None,
    fs: float | None = None,
    window: Any = "hann",
    detrend: str | bool = "constant",
    scaling: str = "density",
    mode: str = "peaks",
    min_distance: int = 1,
    strategy: str = "auto",
    device: str = "cpu",
    nan_policy: str = "raise",
    dtype: str | None = None,
    layout: str | None = None,
    model: Any = None,
    min_recall: float = 0.99,
) -> PeakResult:
    """The ``k`` strongest spectral peaks of every signal in a batch.

    The PSD is exactly ``welch(x[..., :frame], fs=fs or 1.0, window=window, nperseg=n_fft,
    noverlap=n_fft - hop, detrend=detrend, scaling=scaling)`` with
    ``frame = n_fft + (segments - 1) * hop``.

    Parameters
    ----------
    x : array_like ``[..., samples]``
        Real signals; every leading dimension is batch.
    k : int
        Peaks per signal.
    n_fft : int
        Segment length (any size >= 4; powers of two are fastest).
    hop : int, optional
        Samples between segment starts; default ``n_fft // 2``.
    segments : int, str or None
        ``None`` uses every whole segment that fits (SciPy); an int uses the first ``segments``;
        presets ``'ultra'`` (1), ``'fast'`` (2) and ``'reference'`` (8).
    fs : float, optional
        Sample rate; frequencies are in Hz when given, else in cycles per sample.
    window, detrend, scaling
        As in ``scipy.signal.welch`` (detrend: ``'constant'``, ``'linear'`` or ``False``).
    mode : {'peaks', 'bins'}
        ``'peaks'``: the strongest local maxima, frequency refined by log-parabolic
        interpolation; ``'bins'``: the strongest bins (the original system's semantics).
    min_distance : int
        In ``'peaks'`` mode, drop peaks closer than this many bins to a stronger kept one.
    strategy : str
        ``'auto'``, or an execution from :func:`available_strategies`.
    device : str
        ``'cpu'``.
    nan_policy : {'raise', 'propagate'}
        What to do with signals holding NaN or infinity within the frame: raise a ValueError
        naming the first, or leave their slots empty (-1 / NaN) and compute the others.
    dtype : {'float32', 'float64'}, optional
        Compute precision. Default: the input's precision (``fused-cpu`` requested by name
        computes in float32 unless told otherwise).
    layout : {'auto'}, optional
        ``'auto'`` reproduces the original system's speed-only choice between 1 and 2
        segments (``'ultra'`` and ``'fast'``): the layout predicted to run faster, which
        changes the numbers returned. The result's ``params['layout']`` and
        ``params['layout_choice']`` say what was chosen and why. Default: ``segments`` decides.
    model : ButterflyFFT or path, optional
        A learned butterfly FFT (``welchpeaks learn``). ``strategy='learned'`` runs it;
        under ``'auto'`` it competes on measured time, but only when its recorded held-out
        peak recall is at least ``min_recall``.
    min_recall : float
        The lowest peak recall ``'auto'`` accepts from a learned model (default 0.99).

    Returns
    -------
    PeakResult
        ``bins``, ``power``, ``freqs`` of shape ``[..., k]``, strongest first; empty slots
        hold bin -1 and NaN.

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> t = np.arange(2048) / 8000.0
    >>> x = np.sin(2 * np.pi * 1000.0 * t) + 0.5 * np.sin(2 * np.pi * 2500.0 * t)
    >>> r = welchpeaks.welch_peaks(x, k=2, fs=8000.0)
    >>> np.round(r.freqs, 0).tolist()
    [1000.0, 2500.0]
    """
    executor = WelchPeaks(
        n_fft=n_fft, k=k, segments=segments, hop=hop, fs=fs, mode=mode, strategy=strategy, device=device,
        window=window, detrend=detrend, scaling=scaling, min_distance=min_distance,
        nan_policy=nan_policy, dtype=dtype, layout=layout, model=model, min_recall=min_recall,
    )
    return executor(x)
