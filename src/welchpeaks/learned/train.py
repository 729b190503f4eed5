"""Training, domain pruning and evaluation of :class:`ButterflyFFT` networks.

Every run is reproducible from its seed: signals come from ``numpy.random.default_rng(seed)``
and the gates' noise from ``torch.manual_seed(seed)``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from welchpeaks.learned.model import ButterflyFFT, analytic_active, check_n_fft

Progress = Callable[[dict[str, Any]], None]


# ------------------------------------------------------------------------------ reference errors


def spectrum_errors(model: ButterflyFFT, n_signals: int = 512, seed: int = 0, bins: int | None = None) -> dict:
    """Relative RMS and max-abs error of ``model.fft`` against ``numpy.fft.fft`` on complex
    Gaussian signals (over the first ``bins`` outputs when given)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_signals, model.n_fft)) + 1j * rng.standard_normal((n_signals, model.n_fft))
    ref = np.fft.fft(x, axis=-1)
    with torch.no_grad():
        got = model.fft(torch.from_numpy(x)).numpy()
    if bins is not None:
        ref, got = ref[:, :bins], got[:, :bins]
    err = got - ref
    return {"rel_rms": float(np.sqrt(np.mean(np.abs(err) ** 2) / np.mean(np.abs(ref) ** 2))),
            "max_abs": float(np.max(np.abs(err))), "max_abs_ref": float(np.max(np.abs(ref)))}


def _mse(model: ButterflyFFT, xr: torch.Tensor, xi: torch.Tensor, rr: torch.Tensor, ri: torch.Tensor) -> torch.Tensor:
    yr, yi = model(xr, xi)
    return ((yr - rr) ** 2 + (yi - ri) ** 2).mean() / (rr ** 2 + ri ** 2).mean()


def _batch(rng: np.random.Generator, rows: int, n: int) -> tuple[torch.Tensor, ...]:
    x = rng.standard_normal((rows, n)) + 1j * rng.standard_normal((rows, n))
    ref = np.fft.fft(x, axis=-1)
    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in (x.real, x.imag, ref.real, ref.imag))


def train_fft(n_fft: int = 256, init: str = "random", seed: int = 0, max_minutes: float | None = 10.0,
              target: float = 1e-4,
              tied: bool = False, sigma: float = 0.1, batch: int = 256, lr: float = 1e-2, polish: bool = True,
              q8: bool = False, progress: Progress | None = None, model: ButterflyFFT | None = None,
              max_steps: int | None = None) -> ButterflyFFT:
    """Fit the twiddles to ``numpy.fft.fft`` until the relative RMS error reaches ``target``.

    Adam on the spectrum's relative squared error over fresh random signals each step; once the
    error is below 5e-3, an L-BFGS polish on a fixed full-rank batch of ``n_fft`` signals (back
    to Adam, with a lower hand-over point, if L-BFGS stalls). ``q8``
    fine-tunes with int8 twiddles in the forward pass (straight-through). ``max_steps`` also
    stops it after that many optimiser steps, so a run repeats exactly; ``max_minutes=None``
    with ``max_steps`` bounds the run by steps alone (no clock). The result's
    ``record`` holds the run: seed, steps, seconds, and the final errors.
    """
    n = check_n_fft(n_fft)
    if not (isinstance(target, (int, float)) and target > 0):
        raise ValueError(f"target={target!r} must be a positive relative RMS error (for example 1e-4)")
    if max_minutes is None:
        if max_steps is None:
            raise ValueError("max_minutes=None needs max_steps=: the run must be bounded by time or by steps")
    elif not (isinstance(max_minutes, (int, float)) and max_minutes > 0):
        raise ValueError(f"max_minutes={max_minutes!r} must be a positive number of minutes, or None with max_steps=")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = model or ButterflyFFT(n, init=init, sigma=sigma, tied=tied, seed=seed)
    model.quantized = bool(q8)
    model.train()
    t0 = time.perf_counter()
    deadline = math.inf if max_minutes is None else t0 + 60.0 * max_minutes
    steps_left = (lambda: True) if max_steps is None else (lambda: step < max_steps)
    params = [model.twiddle]
    opt = torch.optim.Adam(params, lr=lr)
    step, err = 0, spectrum_errors(model, 256, seed + 1)
    history = []

    def report(phase: str) -> None:
        nonlocal err
        err = spectrum_errors(model, 256, seed + 1)
        rec = {"phase": phase, "step": step, "seconds": time.perf_counter() - t0, **err}
        history.append(rec)
        if progress:
            progress(rec)

    # Adam until the error is small enough for L-BFGS to converge (quadratically) from there;
    # if L-BFGS stalls, back to Adam; until the target or the deadline
    polish_at = 5e-3 if polish and not q8 else 0.0
    fixed = _batch(rng, n, n)  # full rank: zero loss on it means the exact DFT
    while err["rel_rms"] > target and time.perf_counter() < deadline and steps_left():
        while err["rel_rms"] > max(target, polish_at) and time.perf_counter() < deadline and steps_left():
            loss = _mse(model, *_batch(rng, batch, n))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 250 == 0:
                report("adam")
        if not polish_at or err["rel_rms"] <= target:
            break
        lbfgs = torch.optim.LBFGS(params, lr=1.0, max_iter=50, history_size=50, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-15, tolerance_change=1e-18)

        def closure() -> torch.Tensor:
            lbfgs.zero_grad()
            loss = _mse(model, *fixed)
            loss.backward()
            return loss

        start = err["rel_rms"]
        while err["rel_rms"] > target and time.perf_counter() < deadline and steps_left():
            lbfgs.step(closure)
            step += 1
            report("lbfgs")
            if len(history) > 3 and history[-1]["rel_rms"] > 0.9 * history[-3]["rel_rms"]:
                break  # stalled
        if err["rel_rms"] > 0.5 * start:  # L-BFGS did not help here: Adam goes on, closer next time
            polish_at = polish_at / 4
    model.eval()
    final = spectrum_errors(model, 512, seed + 2)
    model.record = {"task": "fft", "n_fft": n, "init": model.init, "seed": seed, "tied": model.tied, "q8": bool(q8),
                    "steps": step, "seconds": round(time.perf_counter() - t0, 2), "target": target,
                    "reached": final["rel_rms"] <= target, **{f"fft_{k}": v for k, v in final.items()}}
    return model


# ------------------------------------------------------------------------------ signal domains


@dataclass(frozen=True)
class Domain:
    """A family of test signals: ``kind`` lowpass/band/tones/npy and its frequency band."""

    kind: str
    lo: float = 0.0
    hi: float = 0.5
    path: str | None = None

    @classmethod
    def parse(cls, spec: str) -> "Domain":
        kind, _, arg = str(spec).partition(":")
        try:
            if kind == "lowpass":
                hi = float(arg)
                if not 0 < hi < 0.5:
                    raise ValueError
                return cls("lowpass", 0.0, hi)
            if kind == "band":
                lo, hi = (float(v) for v in arg.split("-"))
                if not 0 <= lo < hi < 0.5:
                    raise ValueError
                return cls("band", lo, hi)
            if kind == "tones" and not arg:
                return cls("tones")
            if kind == "npy" and arg:
                return cls("npy", path=arg)
        except ValueError:
            pass
        raise ValueError(f"data={spec!r} is not a signal domain; use lowpass:F (0<F<0.5, cycles per sample), "
                         "band:LO-HI, tones or npy:PATH")

    def signals(self, rows: int, length: int, seed: int, n_tones: int = 4) -> np.ndarray:
        """``rows`` signals of ``length`` samples: ``n_tones`` tones at least 3 bins (of 256)
        apart inside the band plus noise confined to the band, 20 dB below the tones."""
        rng = np.random.default_rng(seed)
        if self.kind == "npy":
            data = np.load(self.path, allow_pickle=False)
            data = np.atleast_2d(np.asarray(data, np.float64))
            if data.shape[-1] < length:
                raise ValueError(f"data={self.path!r} rows hold {data.shape[-1]} samples; {length} are needed")
            take = rng.choice(data.shape[0], size=rows, replace=data.shape[0] < rows)
            return data[take, :length]
        t = np.arange(length)
        lo, hi = self.lo, self.hi
        gap = 3.0 / 256
        span = (lo + gap, hi - gap)
        out = np.empty((rows, length))
        spec_mask = None
        for r in range(rows):
            f = np.sort(rng.uniform(*span, n_tones))
            for _ in range(100):  # resample until the tones are apart
                if n_tones < 2 or np.min(np.diff(f)) >= gap:
                    break
                f = np.sort(rng.uniform(*span, n_tones))
            amp = rng.uniform(0.5, 1.0, n_tones)
            sig = (amp[:, None] * np.sin(2 * np.pi * f[:, None] * t + rng.uniform(0, 2 * np.pi, (n_tones, 1)))).sum(0)
            noise = rng.standard_normal(length)
            if self.kind != "tones":
                spec = np.fft.rfft(noise)
                if spec_mask is None:
                    fr = np.fft.rfftfreq(length)
                    spec_mask = (fr >= lo) & (fr <= hi)
                noise = np.fft.irfft(spec * spec_mask, length) / math.sqrt(max(spec_mask.mean(), 1e-9))
            out[r] = sig + 0.1 * noise
        return out


# ------------------------------------------------------------------------------ Welch PSD through a model


def _segments(x: np.ndarray, n: int, n_seg: int) -> torch.Tensor:
    """Detrended, Hann-windowed segments [rows, n_seg, n] (hop n/2), as the reference makes them."""
    from welchpeaks.params import resolve_window
    from welchpeaks.spectral import detrend_segments, segment_view

    segs = detrend_segments(segment_view(np.ascontiguousarray(x), n, n // 2, n_seg), "constant")
    return torch.from_numpy(np.ascontiguousarray(segs * resolve_window("hann", n)))


def _psd(model: ButterflyFFT | None, segs: torch.Tensor, bins: int) -> torch.Tensor:
    """Unscaled one-sided mean power of the first ``bins`` bins (exact FFT when model is None)."""
    if model is None:
        spec = torch.fft.rfft(segs, dim=-1)[..., :bins]
        pr, pi = spec.real, spec.imag
    else:
        yr, yi = model(segs, torch.zeros_like(segs))
        pr, pi = yr[..., :bins], yi[..., :bins]
    return (pr * pr + pi * pi).mean(-2)


def _top_peaks(psd: np.ndarray, k: int) -> np.ndarray:
    from welchpeaks.spectral import reference_peaks

    return reference_peaks(psd, k, "peaks", 1, edges=False)[0]


def _band_mask(ref_bins: np.ndarray, bins: int, half_width: int = 3) -> torch.Tensor:
    """[rows, bins] mask of the bins within ``half_width`` of a reference peak (the original's)."""
    mask = np.zeros((ref_bins.shape[0], bins), bool)
    for d in range(-half_width, half_width + 1):
        idx = np.clip(ref_bins + d, 0, bins - 1)
        np.put_along_axis(mask, np.where(ref_bins >= 0, idx, 0), True, axis=1)
    return torch.from_numpy(mask)


def peak_recall(model: ButterflyFFT, x: np.ndarray, k: int, n_seg: int = 8) -> dict:
    """Top-k peak recall of ``model`` against the exact ``n_seg``-segment reference on ``x``:
    the share of reference peak bins the model also reports, and the median relative power
    error at the shared ones."""
    n = model.n_fft
    segs = _segments(x, n, n_seg)
    with torch.no_grad():
        ref = _psd(None, segs, n // 2 + 1).numpy()
        got = np.zeros_like(ref)
        got[:, : model.valid_bins] = _psd(model, segs, model.valid_bins).numpy()
    rb, gb = _top_peaks(ref, k), _top_peaks(got, k)
    hit = np.array([len(set(r[r >= 0]) & set(g[g >= 0])) for r, g in zip(rb, gb)])
    total = max(int((rb >= 0).sum()), 1)
    shared = (rb[:, :, None] == gb[:, None, :]) & (rb[:, :, None] >= 0)
    rows, i, _ = np.nonzero(shared)
    pr = ref[rows, rb[rows, i]]
    pg = got[rows, rb[rows, i]]
    return {"recall": float(hit.sum() / total), "power_rel_err_median": float(np.median(np.abs(pg - pr) / pr))
            if pr.size else float("nan")}


# ------------------------------------------------------------------------------ domain pruning


def prune_for_domain(data: str = "lowpass:0.0625", n_fft: int = 256, k: int = 4, budget: float | None = None,
                     seed: int = 0, steps: int = 400, batch: int = 32, n_seg: int = 8, held_out: int = 512,
                     lr: float = 0.05, l0: float = 0.02,
                     model: ButterflyFFT | None = None, progress: Progress | None = None) -> ButterflyFFT:
    """Learn which butterflies the top-``k`` Welch peaks of a signal domain need, and prune.

    The loss is the squared log-power error of the model's ``n_seg``-segment PSD against the
    exact one, on the bins within 3 of each reference peak (the original's band mask), plus
    an L0 penalty (weight ``l0``) on the expected fraction of active butterflies, steep above
    ``budget`` (a fraction; default 1: no budget beyond the penalty). Butterflies the masked
    bins do not depend on get no task gradient, so the penalty switches them off.
    The twiddles stay as they are (exact by default); only gates learn. Afterwards the gates
    are hardened at 0.5 and recall is measured on ``held_out`` fresh signals.
    """
    n = check_n_fft(n_fft)
    dom = Domain.parse(data)
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"k={k!r} must be a positive number of peaks")
    torch.manual_seed(seed)
    model = model or ButterflyFFT(n, init="exact")
    hi_bin = min(int(math.floor(dom.hi * n)) + 2, n // 2 + 1)  # the band and the neighbour past it
    analytic = analytic_active(n, range(hi_bin))
    analytic_frac = float(analytic.mean())
    budget = 1.0 if budget is None else float(budget)
    if not 0 < budget <= 1:
        raise ValueError(f"budget={budget!r} must be a fraction of the butterflies in (0, 1]")
    model.valid_bins = hi_bin
    model.enable_gates()
    with torch.no_grad():
        model.gate_logit.fill_(6.0)  # gates start (almost surely) on
    model.train()
    opt = torch.optim.Adam([model.gate_logit], lr=lr)
    length = n + (n_seg - 1) * (n // 2)
    total = model.stages * model.half
    t0 = time.perf_counter()
    for step in range(steps):
        x = dom.signals(batch, length, seed * 100_003 + step)
        segs = _segments(x, n, n_seg)
        with torch.no_grad():
            ref = _psd(None, segs, hi_bin)
        mask = _band_mask(_top_peaks(ref.numpy(), k), hi_bin)
        got = _psd(model, segs, hi_bin)
        floor = 1e-6 * ref.amax(-1, keepdim=True)
        task = ((torch.log(got + floor) - torch.log(ref + floor)) ** 2 * mask).sum() / mask.sum()
        frac = model.expected_active() / total
        loss = task + l0 * frac + 10.0 * torch.relu(frac - budget)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if progress and (step % 25 == 0 or step == steps - 1):
            progress({"phase": "prune", "step": step, "task": task.item(), "expected_active": frac.item(),
                      "seconds": time.perf_counter() - t0})
    active = model.prune(0.5)
    model.eval()
    held = peak_recall(model, dom.signals(held_out, length, seed + 7_777_777), k, n_seg)
    model.record = {"task": "prune", "data": data, "n_fft": n, "k": k, "seed": seed, "steps": steps,
                    "segments": n_seg, "budget": budget, "active_fraction": active,
                    "active_butterflies": int(model.active.sum()), "analytic_butterflies": int(analytic.sum()),
                    "analytic_fraction": analytic_frac, "valid_bins": hi_bin, "held_out_signals": held_out,
                    "seconds": round(time.perf_counter() - t0, 2), **held}
    return model


# ------------------------------------------------------------------------------ evaluation


def evaluate(model: ButterflyFFT, data: str | None = None, k: int = 4, batch: int = 8192, repeats: int = 7,
             seed: int = 0, n_seg: int = 8, held_out: int = 512) -> dict:
    """Reference errors, peak recall on ``data`` (when given), the active fraction, and the
    compiled executor's time on ``batch`` segments against the same executor unpruned and
    against ``scipy.fft.rfft`` (medians of ``repeats``, round robin)."""
    import scipy.fft

    from welchpeaks.timing import round_robin, summary
    from welchpeaks.learned.compiled import CompiledButterfly

    n = model.n_fft
    out: dict[str, Any] = {"n_fft": n, "active_fraction": model.active_fraction(),
                           "active_butterflies": int(model.active.sum()), "valid_bins": model.valid_bins}
    out.update({f"fft_{k2}": v for k2, v in spectrum_errors(model, 512, seed, model.valid_bins).items()})
    if data is not None:
        dom = Domain.parse(data)
        length = n + (n_seg - 1) * (n // 2)
        out.update(data=data, k=k, **peak_recall(model, dom.signals(held_out, length, seed + 7_777_777), k, n_seg))
        analytic = analytic_active(n, range(min(int(dom.hi * n) + 2, n // 2 + 1)))
        out["analytic_butterflies"] = int(analytic.sum())
    rng = np.random.default_rng(seed)
    segs = rng.standard_normal((batch, n)).astype(np.float32)
    full = ButterflyFFT(n, init="exact")
    pruned_exec, full_exec = CompiledButterfly(model), CompiledButterfly(full)
    samples = round_robin({"pruned": lambda: pruned_exec(segs), "unpruned": lambda: full_exec(segs),
                           "scipy.fft": lambda: scipy.fft.rfft(segs, axis=-1, workers=-1)}, repeats, 2)
    out["timing"] = {name: summary(s) for name, s in samples.items()}
    med = {name: float(np.median(s)) for name, s in samples.items()}
    out["pruned_over_unpruned"] = med["pruned"] / med["unpruned"]
    out["time_target"] = out["active_fraction"] + 0.1
    out["batch"] = batch
    return out
