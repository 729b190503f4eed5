"""``welch_peaks`` and ``WelchPeaks``: validate, plan, run, wrap.

Input is validated and normalised here, once (:mod:`welchpeaks.params`,
:mod:`welchpeaks.api.coerce`); every decision about how to compute a call is the planner's
(:class:`welchpeaks.plan.Planner`); the planner's compiled program computes it; this module
turns its rows into a :class:`PeakResult`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from welchpeaks import backends, memory, spec
from welchpeaks.api import lazy
from welchpeaks.api.coerce import as_real_array, as_tensors, np_dtype, real_dtype, signal_name, tensor_input
from welchpeaks.api.detailed import make_filters, merge_distance
from welchpeaks.api.options import (check_device, check_layout, check_max_memory,
                                    check_result_size, check_source_rate, learned_execution, resolve_strategy)
from welchpeaks.numeric import integer, shown
from welchpeaks.params import make_params
from welchpeaks.plan import measure
from welchpeaks.plan.call import CallPlan
from welchpeaks.plan.modes import SourcePlan
from welchpeaks.plan.planner import Planner
from welchpeaks.result import PeakResult
from welchpeaks.loaders import SignalFileError
from welchpeaks.sources import SignalSource


#: the most values of a call ``WelchPeaks.explain`` describes: its input's or its segments'
#: (complex128 arrays of them stay under 2**63 bytes, what NumPy shapes hold)
EXPLAIN_VALUES = 1 << 59


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
        n_fft: int | None = None,
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
        precision: str = "fp32",
        layout: str | None = None,
        model: Any = None,
        min_recall: float = 0.99,
        max_memory: int | None = None,
        interp: str = "auto",
        edges: bool = False,
        height: Any = None,
        threshold: Any = None,
        distance: float | None = None,
        prominence: Any = None,
        width: Any = None,
        wlen: float | None = None,
        rel_height: float = 0.5,
        snr_db: float | None = None,
        measures: Any = None,
        noise_bins: int | None = None,
        resolution_hz: float | None = None,
        max_pvalue: float | None = None,
    ):
        min_distance = merge_distance(distance, min_distance)
        filters = make_filters(height=height, threshold=threshold, prominence=prominence, width=width, wlen=wlen,
                               rel_height=rel_height, snr_db=snr_db, measures=measures, noise_bins=noise_bins,
                               max_pvalue=max_pvalue)
        self.layout = check_layout(layout, segments)
        self.params = make_params(
            k=k, n_fft=n_fft, resolution_hz=resolution_hz, hop=hop, segments=1 if self.layout else segments, fs=fs,
            window=window,
            detrend=detrend, scaling=scaling, mode=mode, min_distance=min_distance, nan_policy=nan_policy,
            dtype=dtype, precision=precision, interp=interp, edges=edges, filters=filters,
        )
        check_device(device)
        self.device = device
        self.requested = strategy
        learned = learned_execution(strategy, model, min_recall, device, self.params)
        forced = learned if strategy == "learned" else resolve_strategy(strategy, self.params)
        self.planner = Planner(self.params, device, forced, learned, min_recall, self.layout,
                               max_memory=check_max_memory(max_memory))
        self._last: tuple[int, int, np.dtype] | None = None
        self._last_call: CallPlan | None = None
        self._last_source: tuple[SignalSource, str] | None = None  # the last call's, on a source: what ran

    @property
    def strategy(self) -> str:
        """Name of the execution that ran last ('auto' before the first call under auto; after a
        call on a source, the executions its blocks ran)."""
        if self._last_source is not None:
            return self._last_source[1]
        if self._last_call is not None:
            return self._last_call.execution
        return self.planner.forced.name if self.planner.forced is not None else "auto"

    def explain(self, batch: int | None = None, length: int | None = None,
                source: SignalSource | None = None, dtype: Any = None) -> dict[str, Any]:
        """Why the execution runs: every decision of the planner with its reason, the graph that
        will run, and per execution its IO profile, fusion decision, every cost term (ns) and
        total, for ``batch`` signals of ``length`` samples (default: the last call's, else one
        signal of exactly one frame) of ``dtype`` (the input's, as a call converts it: float16 as
        float32, integers as float64; default the last call's, else ``dtype=`` or float32).
        ``mode`` says how the rows run (at once, in blocks of rows, in pieces of segments) and
        ``mode_why`` why. A call that would be refused (its result too large) is refused here too.

        With ``source`` (from :func:`welchpeaks.open_signals`; default after a call on a source,
        when nothing else is given: that source): how each of its parts is read and computed:
        its ``mode`` (``'source blocks'`` or ``'long rows'``), ``why``, its ``blocks``, and for
        blocks of rows the explanation of the first block's call (``plan``)."""
        if source is None and batch is None and length is None and dtype is None and self._last_source is not None:
            source = self._last_source[0]
        if source is not None:
            if batch is not None or length is not None or dtype is not None:
                raise ValueError("explain(source=...) explains the source's own shape and dtype; drop batch=, length= "
                                 "and dtype=")
            return self._explain_source(source)
        p = self.params
        last = self._last or (1, p.frame_length(p.segments or 1), np.dtype(p.dtype or "float32"))
        in_dtype = last[2] if dtype is None else real_dtype(dtype)
        given = {}
        for name, v in (("batch", batch), ("length", length)):
            try:
                given[name] = None if v is None else integer(name, v, 1)
            except (TypeError, ValueError):
                unit = "signals" if name == "batch" else "samples"
                raise ValueError(f"explain({name}={shown(v)}): pass a whole number of {unit} from 1 to 2**63 - 1, "
                                 "or None for the last call's") from None
        batch = last[0] if given["batch"] is None else given["batch"]
        length = last[1] if given["length"] is None else given["length"]
        try:
            p.check_length(length)
        except ValueError as exc:
            raise ValueError(f"explain(length={length}): {exc}") from None
        values = batch * max(length, p.n_segments_for(length) * p.n_fft)  # its input's, or its segments'
        if values > EXPLAIN_VALUES:
            raise ValueError(f"explain(batch={batch}, length={length}): a call of that size has {values:.3g} values, "
                             f"more than an array holds ({EXPLAIN_VALUES:.3g}, complex128); pass fewer or shorter "
                             "signals")
        try:
            _check_empty_slots(p, batch)
        except ValueError as exc:
            raise ValueError(f"explain(batch={batch}): the call would be refused: {exc}") from None
        return {"requested": self.requested, **self.planner.explain(batch, length, in_dtype), "params": p.to_dict()}

    def __call__(self, x: Any) -> PeakResult:
        if lazy.is_dask(x):
            raise TypeError("WelchPeaks is called on arrays in memory; for a dask array use "
                            "welchpeaks.welch_peaks(x, ...), which returns a lazy result")
        if isinstance(x, SignalSource):
            return self._run_source(x)
        return self._call(x, self.planner)

    def _explain_source(self, src: SignalSource) -> dict[str, Any]:
        if not isinstance(src, SignalSource):
            raise TypeError(f"source= takes what welchpeaks.open_signals returns, not {type(src).__name__}")
        budget = self.source_budget()
        parts = []
        for i, info in enumerate(src.parts):
            plan = self.source_plan(src, i, budget)
            blocks = list(plan.blocks(src, i))
            part = {"name": info.name, **plan.explain(), "blocks": len(blocks)}
            if blocks and plan.read(i, *blocks[0]) is not None:
                r0, r1 = blocks[0]
                part["plan"] = plan.planner.explain(r1 - r0, plan.frame, src.dtype)
            parts.append(part)
        return {"requested": self.requested, "source": src.description, "parts": parts, "params": self.params.to_dict()}

    def _call(self, x: Any, planner: Planner) -> PeakResult:
        """A call on ``x`` (arrays, tensors) planned by ``planner`` (this executor's, or one
        pinned from it for a batch computed in parts)."""
        t = tensor_input(x)
        if t is not None:
            if not t.is_cuda:  # host data: a zero-copy view, computed as arrays are (a GPU execution uploads it)
                res = self._call(t.detach().numpy(), planner)
                return dataclasses.replace(res, **as_tensors(res))
            return self._run(t, tensor=True, planner=planner)
        return self._run(as_real_array(x), tensor=False, planner=planner)

    def _run_source(self, src: SignalSource) -> PeakResult:
        """Peaks of every signal of a source, read in blocks of rows (only each row's analysed
        frame is read), ``[rows, k]`` in the source's row order."""
        check_result_size(self.params, src.rows, None, src.dtype, self.planner.max_memory,
                          "write it to disk as it is computed: welchpeaks peaks FILE --out results.parquet")
        budget = self.source_budget()
        per_part = [[self.source_block(src, i, r0, r1, budget) for r0, r1, _ in self.source_blocks(src, i, budget)]
                    for i in range(len(src.parts))]
        results = [r for part in per_part for r in part]
        cat = {f: np.concatenate([getattr(r, f) for r in results]) for f in ("bins", "power", "freqs")}
        measures = {n: np.concatenate([r.measures[n] for r in results]) for n in results[-1].measures}
        # parts (files) may run other executions and segments: the result says each
        strategy = ", ".join(dict.fromkeys(r.strategy for r in results))
        params = dict(results[-1].params, source=src.description)
        if len(per_part) > 1:
            params["parts"] = [{"name": info.name, "strategy": part[-1].strategy, "segments": part[-1].params["segments"],
                                "frame": part[-1].params["frame"]} for info, part in zip(src.parts, per_part)]
            for key in ("segments", "frame"):
                if len({q[key] for q in params["parts"]}) > 1:
                    params[key] = None  # differ between parts: see params['parts']
        self._last_source = (src, strategy)
        return PeakResult(strategy=strategy, params=params, measures=measures, peak_params=self.params, **cat)

    def source_budget(self) -> int:
        """Bytes of samples a source's block reads at once: ``max_memory``, else 64 MiB."""
        return self.planner.max_memory or memory.SOURCE_BLOCK_BYTES

    def source_plan(self, src: SignalSource, part: int, budget: int) -> SourcePlan:
        """The planner's plan of part ``part`` of a source within ``budget`` bytes of samples,
        after checking the part against the parameters."""
        p, info = self.params, src.parts[part]
        check_source_rate(p.fs, src, type(self).__name__)
        try:
            p.check_length(info.samples)
        except ValueError as exc:
            raise ValueError(f"{info.name}: {exc}") from None
        frame = p.frame_for(info.samples)
        if p.filters is not None and frame * src.dtype.itemsize > budget:
            raise ValueError(f"{info.name}: with filters or measures each signal's analysed frame is read at once, "
                             f"{frame * src.dtype.itemsize} bytes, over the {budget}-byte budget; pass a larger "
                             "max_memory= or fewer segments")
        return self.planner.plan_source(info.rows, info.samples, src.dtype, budget)

    def source_blocks(self, src: SignalSource, part: int, budget: int) -> list[tuple[int, int, tuple | None]]:
        """How part ``part`` of a source is computed within ``budget`` bytes of samples: blocks
        ``(r0, r1, read)``, ``read`` the ``(part, r0, r1, s0, s1)`` a block reads at once, or
        None for rows read in pieces by :meth:`source_block`."""
        plan = self.source_plan(src, part, budget)
        return [(r0, r1, plan.read(part, r0, r1)) for r0, r1 in plan.blocks(src, part)]

    def source_block(self, src: SignalSource, part: int, r0: int, r1: int, budget: int,
                     data: np.ndarray | None = None) -> PeakResult:
        """Peaks of rows ``r0:r1`` of part ``part`` (a block of :meth:`source_blocks`); ``data``:
        its samples when already read."""
        info = src.parts[part]
        plan = self.planner.plan_source(info.rows, info.samples, src.dtype, budget)
        try:
            read = plan.read(part, r0, r1)
            if read is None:
                return self._long_rows(plan, plan.run_pieces(src, part, r0, r1), src, part, r0)
            return self._run(src.read(*read) if data is None else data, tensor=False, first_row=r0,
                             planner=plan.planner)
        except SignalFileError:
            raise  # it names the file
        except ValueError as exc:
            raise ValueError(f"{info.name}, rows {r0}..{r1 - 1}: {exc}") from None

    def _long_rows(self, plan: SourcePlan, out: Any, src: SignalSource, part: int, r0: int) -> PeakResult:
        """The peaks of a block of long rows (:meth:`SourcePlan.run_pieces`'s rows), wrapped. A
        row left empty whose frame is finite overflowed the compute precision: an error, as in
        memory (:meth:`_check_rows`); one with NaN or infinity is an error under 'raise'."""
        p = plan.planner.params
        dtype = src.dtype
        compute = plan.planner.compute_dtype(dtype)
        bad = np.union1d(out.bad_rows, np.flatnonzero(np.isinf(out.power).any(1)))
        if bad.size:
            peaks = plan.frame_peaks(src, part, r0, bad)
            finite = np.isfinite(peaks)
            if finite.any():
                i = int(np.argmax(finite))
                raise ValueError(f"the power spectrum of signal {r0 + int(bad[i])} overflows {compute.name} (|x| up "
                                 f"to {peaks[i]:.3g}); {self._overflow_fix(compute, plan.execution)}")
            if p.nan_policy == "raise":
                raise ValueError(f"signal {r0 + int(bad[0])} holds NaN or infinity within the analysed frame (first "
                                 f"{plan.frame} samples); clean the data or pass nan_policy='propagate' to get empty "
                                 "slots (-1/NaN) for those signals")
        info = dict(p.to_dict(), segments=plan.n_seg, frame=plan.frame, compute_dtype=compute.name,
                    execution_mode=f"long rows: over the {plan.budget}-byte budget, blocks of {plan.block_rows} "
                                   f"signals read {plan.segments_per_read} segments at a time into "
                                   f"{plan.execution}'s pass, which carries its sums between pieces")
        return PeakResult(out.bins, out.power.astype(dtype), out.fbins * p.freq_scale(), plan.execution, info,
                          peak_params=p)

    def _overflow_fix(self, compute: np.dtype, execution: str) -> str:
        """What to do about a power spectrum that overflows ``compute`` under ``execution``."""
        if compute != np.float32:
            return "scale the data down"
        if backends.get(execution).unsupported_reason(dataclasses.replace(self.params, dtype="float64")):
            return "scale the data down, or pass dtype='float64' with an execution that computes in it"
        return "pass dtype='float64' or scale the data down"

    def _check_rows(self, rows: Any, bad_rows: np.ndarray, power: Any, lead: tuple, call: CallPlan,
                    first_row: int | None = None) -> None:
        """Rows left empty or holding infinite power: a row whose frame is finite overflowed the
        compute precision (always an error, one behaviour for every execution); a row with NaN or
        infinity is an error under ``nan_policy='raise'``. ``first_row``: the rows are a block of
        a source's, starting at that signal (errors name the source's signal)."""

        def which(row: int) -> str:
            if first_row is not None:
                return f"signal {first_row + row}"
            return signal_name(row, lead)

        host = rows if isinstance(rows, np.ndarray) else rows.detach().cpu().numpy()
        frame = host[:, :call.frame]
        inf_rows = np.flatnonzero(np.isinf(power if isinstance(power, np.ndarray) else power.cpu().numpy()).any(1))
        candidates = np.union1d(bad_rows, inf_rows)
        finite = np.isfinite(frame[candidates]).all(axis=1)

        if finite.any():
            row = int(candidates[np.argmax(finite)])
            peak = float(np.max(np.abs(frame[row])))
            raise ValueError(f"the power spectrum of {which(row)} overflows {call.compute.name} (|x| up to "
                             f"{peak:.3g}); {self._overflow_fix(call.compute, call.execution)}")
        if bad_rows.size and self.params.nan_policy == "raise":
            first = int(bad_rows[0])
            raise ValueError(
                f"x has NaN or infinity in {which(first)} ({bad_rows.size} signal(s) in all"
                f"{'' if first_row is None else ' in this block'}) within the analysed frame (first {call.frame} samples); "
                "clean the data or pass nan_policy='propagate' to get empty slots (-1/NaN) for those signals"
            )

    def _run(self, arr: Any, tensor: bool, first_row: int | None = None, planner: Planner | None = None) -> PeakResult:
        """Validate the length, plan (by ``planner``, default this executor's), run the plan's
        program, wrap its rows (``first_row``: they are a block of a source's rows, from that
        signal on)."""
        planner = self.planner if planner is None else planner
        p = planner.params
        length = arr.shape[-1]
        p.check_length(length)
        lead = tuple(arr.shape[:-1])
        rows = arr.reshape(-1, length)
        in_dtype = np_dtype(arr)
        _check_empty_slots(p, rows.shape[0])
        call = planner.plan(rows.shape[0], length, in_dtype, tensor)
        if not tensor and not rows.flags.c_contiguous:
            rows = np.ascontiguousarray(rows[:, :call.frame])
        out = planner.run(call, rows)
        self._last, self._last_call, self._last_source = (rows.shape[0], length, in_dtype), call, None
        bins, power, fbins, measures = out.bins, out.power, out.fbins, dict(out.measures or {})
        if not tensor and not isinstance(bins, np.ndarray):
            bins, power, fbins = bins.cpu().numpy(), power.cpu().numpy(), fbins.cpu().numpy()
            measures = {n: v.cpu().numpy() for n, v in measures.items()}
        # Every CPU kernel leaves a row whose power is not finite empty and reports it; a GPU
        # kernel may report infinite power instead, so tensors are checked for it.
        if out.bad_rows.size or (not isinstance(out.power, np.ndarray) and _tensor_has_inf(out.power)):
            self._check_rows(rows, out.bad_rows, power, lead, call, first_row)
        if tensor:
            import torch

            power = power.to(torch.float64 if in_dtype == np.float64 else torch.float32)
        else:
            if power.dtype != in_dtype:
                with np.errstate(over="ignore"):
                    power = power.astype(in_dtype)
            # computed in a wider precision than x: a power may not fit x's (kernels write it there)
            if call.compute.itemsize > in_dtype.itemsize and np.isinf(power).any():
                row = int(np.flatnonzero(np.isinf(power).any(axis=1))[0])
                raise ValueError(f"the power of {signal_name(row, lead)} "
                                 f"is computed in {call.compute.name} but does not fit {in_dtype.name}, the precision "
                                 f"of x (results come back in it); pass x as float64 or scale it down")
        shape = lead + (p.k,)
        measures = p.with_derived({n: v.reshape(shape) for n, v in measures.items()}, call.n_seg)
        info = p.to_dict()
        info.update(segments=call.n_seg, frame=call.frame, compute_dtype=call.compute.name)
        if call.layout is not None:
            info.update(layout=call.layout[0], layout_choice=call.layout[1])
        return PeakResult(
            bins=bins.reshape(shape),
            power=power.reshape(shape),
            freqs=(fbins * p.freq_scale()).reshape(shape),
            strategy=call.execution,
            params=info,
            measures=measures,
            peak_params=p,
        )


def _tensor_has_inf(power: Any) -> bool:
    """True when a power a GPU kernel reported is infinite (its row overflowed the precision)."""
    import torch

    return bool(torch.isinf(power).any())


def _check_empty_slots(p: Any, rows: int) -> None:
    """Refuse a call whose ``k`` past the bins would fill gigabytes with empty slots."""
    if p.k > p.n_bins and rows * p.k * 16 > memory.MAX_EMPTY_SLOT_BYTES:
        raise ValueError(f"k={p.k} asks for {rows * p.k * 16 / 2**30:.1f} GiB of results, but n_fft={p.n_fft} "
                         f"has only {p.n_bins} bins, so every slot past {p.n_bins} is empty; pass k <= {p.n_bins}")


def welch_peaks(
    x: Any,
    *,
    k: int = 16,
    n_fft: int | None = None,
    resolution_hz: float | None = None,
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
    precision: str = "fp32",
    layout: str | None = None,
    model: Any = None,
    min_recall: float = 0.99,
    max_memory: int | None = None,
    interp: str = "auto",
    edges: bool = False,
    height: Any = None,
    threshold: Any = None,
    distance: float | None = None,
    prominence: Any = None,
    width: Any = None,
    wlen: float | None = None,
    rel_height: float = 0.5,
    snr_db: float | None = None,
    measures: Any = None,
    noise_bins: int | None = None,
    max_pvalue: float | None = None,
) -> PeakResult:
    """The ``k`` strongest spectral peaks of every signal in a batch.

    The PSD is exactly ``welch(x[..., :frame], fs=fs or 1.0, window=window, nperseg=n_fft,
    noverlap=n_fft - hop, detrend=detrend, scaling=scaling)`` with
    ``frame = n_fft + (segments - 1) * hop``.

    Parameters
    ----------
    x : array_like ``[..., samples]`` or SignalSource
        Real signals; every leading dimension is batch. A source from
        :func:`welchpeaks.open_signals` is read block by block (``max_memory`` bytes, default
        64 MiB) and gives ``[rows, k]``; its sample rate is used when ``fs`` is None.
    k : int
        Peaks per signal.
    n_fft : int, optional
        Segment length (any size >= 4; powers of two are fastest); default 256, or from
        ``resolution_hz``.
    resolution_hz : float, optional
        The widest bin wanted, in Hz, instead of ``n_fft``: the smallest power of two whose
        bins (``fs / n_fft`` wide) are at most this wide (needs ``fs``).
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
        ``'peaks'``: the strongest local maxima, their frequencies refined within a bin
        (``interp``); ``'bins'``: the strongest bins (the original system's semantics).
    min_distance : int
        In ``'peaks'`` mode, drop peaks closer than this many bins to a stronger kept one.
    strategy : str
        ``'auto'``, or an execution from :func:`available_strategies`.
    device : {'cpu', 'cuda'}
        Where ``'auto'`` may compute host data: ``'cpu'`` (default) picks among the CPU
        executions; ``'cuda'`` also ranks the GPU executions, counting the upload. Data
        already on a CUDA device is computed there. A GPU execution named by ``strategy`` on
        host data (arrays, CPU tensors) uploads it when torch sees a CUDA device (``explain()``
        says so) and returns host results; without one, ``triton-fused`` and ``triton-block``
        are refused unless ``TRITON_INTERPRET=1`` (Triton's interpreter on CPU tensors), and
        ``torch`` computes on the CPU.
    nan_policy : {'raise', 'propagate'}
        What to do with signals holding NaN or infinity within the frame: raise a ValueError
        naming the first, or leave their slots empty (-1 / NaN) and compute the others.
    dtype : {'float32', 'float64'}, optional
        Compute precision. Default: the input's precision (``fused-cpu`` requested by name
        computes in float32 unless told otherwise).
    precision : {'fp32', 'tf32', 'bf16'}
        Precision of the DFT products of the ``triton-fused`` GPU kernel on the tensor cores:
        ``'fp32'`` (default, within 5e-5 of the float64 power; three tf32 products per product);
        ``'tf32'`` is faster and less accurate (about 1e-3 of a row's strongest bin); ``'bf16'``
        less again (about 1e-2; measured errors in docs/performance-history.md). CPU
        executions, ``torch`` and ``triton-block`` (cuFFT) always compute in ``dtype``.
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
    max_memory : int, optional
        Bytes of working memory (intermediate arrays, beyond the input and the results) a call
        may use; default half the memory available. ``'auto'`` does not pick an execution that
        needs more; a requested one, or the best one when none fits, runs in blocks of rows.
    interp : {'auto', 'window', 'power-parabola', 'log-parabola', 'none'}
        How a peak's frequency is refined from the PSD at its bin and its two neighbours.
        ``'window'``: the window's exact estimator (the periodic Hann window's 3-point
        magnitude ratio, exact for one tone, with a real tone's negative-frequency image
        removed where the peak is clean enough to see it; the boxcar's); ``'power-parabola'``: a parabola
        through ``psd ** alpha``, ``alpha`` fitted to the window; ``'log-parabola'``: through
        the log-power (earlier versions; biased by up to 1.6e-2 bins with Hann); ``'none'``:
        the bin. ``'auto'`` (default): the window's estimator where it has one, else the power
        parabola. Every execution refines alike; peaks at DC or Nyquist are not refined, and a
        neighbour more than 120 dB under the peak counts as zero (rounding, such as the DC bin
        after detrending). With ``'auto'`` and ``'window'``, peaks next to DC and Nyquist (where
        a real tone's image and the detrend bias three bins) that stand 10 dB over their row's
        floor are refitted to the tone's exact Welch PSD (:mod:`welchpeaks.edgefit`; not on the
        Triton executions). ``PeakResult.approximate()`` says which peaks may be off by more
        than 1e-3 bins on a clean tone. Accuracy per window: docs/accuracy.md.
    edges : bool
        In ``'peaks'`` mode, whether DC and Nyquist may be peaks (their missing neighbour counts
        as -inf). Default False, as ``scipy.signal.find_peaks``: a spectrum's edges are not
        peaks (earlier versions reported them, and DC often ranked among the strongest).
    height, threshold, distance, prominence, width, wlen, rel_height
        ``scipy.signal.find_peaks``' filters on the PSD, in scipy's order and with its
        definitions (a number is the minimum, or a ``(min, max)`` pair with None for an open
        end; in bins and PSD units); then the ``k`` strongest survivors. ``distance`` is
        ``min_distance`` under scipy's name (give one of them).
    snr_db : float, optional
        Keep only peaks at least this many dB over their row's noise floor (after scipy's
        filters, before the ``k`` strongest).
    max_pvalue : float, optional
        Keep only peaks whose ``pvalue`` (below) is at most this: the SNR minimum it amounts to
        at the call's degrees of freedom (the stricter of it and ``snr_db``).
    measures : sequence of {'snr', 'prominence', 'width', 'pvalue'}, optional
        Per-peak measures returned in ``result.measures``: ``snr_db`` (power over the noise
        floor), ``prominence`` (scipy's, with ``wlen``), ``width`` in bins at ``rel_height``
        (scipy's ``peak_widths``) and ``width_hz`` when ``fs`` is given, ``pvalue``: the
        probability that noise alone gives a bin at least this far over the noise floor, the
        floor's own noise included (the law of a Welch bin over the median of the bins the
        floor takes, with the overlap of the segments and of neighbouring bins;
        :mod:`welchpeaks.significance` states it, its assumptions and references). A per-bin
        probability: about ``n_bins * alpha`` noise bins of a row fall under ``alpha``.
    noise_bins : int, optional
        The noise floor of ``snr_db``: the median PSD over the ``2 noise_bins + 1`` bins
        centred on the peak (shifted inward at the row's ends, never its first or last bin; at
        most the row's inner bins); default the median of the row's whole PSD.

        With any filter or measure, every execution's graph computes the PSD (fused-cpu in its
        one pass, the others by their own kernels; the learned model by its butterfly FFT) and
        ends in a ``find_peaks`` node: the kernel of :func:`welchpeaks.find_peaks` (numba on
        the host, Triton on a CUDA device), measuring and refining only the peaks it keeps.
        ``strategy='auto'`` prices these graphs with the measured cost models and picks as for
        any call (``WelchPeaks(...).explain()`` says why); on this project's 2-core test VM the
        filtered call costs about 3x the fused pass alone. Sources are read in blocks of rows
        (each signal's analysed frame at once); dask arrays give lazy measures too. Calls
        without filters or measures keep every execution's fast path.

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
    if fs is None and isinstance(x, SignalSource):
        fs = x.fs
    kw = spec.pick(locals(), "welch_peaks")
    if lazy.is_dask(x):
        if model is not None or device != "cpu" or strategy == "learned":
            raise ValueError("dask arrays run on the CPU executions in this version (not the learned one); drop "
                             "model=, device= and strategy='learned'")
        return lazy.welch_peaks(x, WelchPeaks, kw)
    return WelchPeaks(**kw)(x)


def _call_for(name: str) -> Callable[[], Any]:
    """One call through :class:`WelchPeaks` with execution ``name`` on one 64-sample signal
    (what calibration times as the fixed cost of a call)."""
    wp = WelchPeaks(n_fft=64, k=1, segments=1, strategy=name, dtype="float32")
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    return lambda: wp(x)


measure.set_call_timer(_call_for)
