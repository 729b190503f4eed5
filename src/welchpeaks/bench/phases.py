"""``welchpeaks bench phases``: the original system's fusion-phase benchmark, measured honestly.

Three graphs compute the same peaks for one batch:

* ``baseline``: separate steps (frames, window, rfft, power, segment mean, scale, top-k) on
  NumPy, with the full complex spectrum returned to the caller beside the peaks;
* ``block``: the library FFT writes the spectrum into one buffer, then one numba pass forms
  the power, averages the segments and selects (peaks only);
* ``fused``: one ``welch_peaks`` node on the raw rows (peaks only).

Each phase is run through :func:`welchpeaks.ir.run` (what the planner profiles is what runs),
timed round robin for at least 10 repeats after warm-up, and reported as the median with
min-max beside the cost model's prediction for its graph. The gate's view is the benefit of
going from ``baseline`` to ``fused``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PHASES = ("baseline", "block", "fused")
BACKEND = {"baseline": "numpy", "block": "numba", "fused": "numba"}


def phase_graphs(params: Any, batch: int, n_seg: int, dtype: Any = "float32") -> dict[str, Any]:
    """The three phase graphs for ``batch`` rows of exactly one frame."""
    from welchpeaks.ir.graph import Graph, Op, welch_chain_graph

    dt = np.dtype(dtype)
    length = params.n_fft + (n_seg - 1) * params.hop
    base = welch_chain_graph(params, batch, length, n_seg, dt, name="baseline")
    spec = next(n.id for n in base.nodes if n.op is Op.rfft)
    base.set_outputs([spec, *base.outputs])

    block = Graph("block")
    x = block.input("x", (batch, length), dt)
    seg = block.frames(x, params.n_fft, params.hop, n_seg)
    s = block.rfft(block.window(seg, params.window_array.astype(dt), params.detrend))
    block.set_outputs([block.welch_peaks(s, params.k, n_seg, params=params)])

    fused = Graph("fused")
    x = fused.input("x", (batch, length), dt)
    fused.set_outputs([fused.welch_peaks(x, params.k, n_seg, params=params)])
    return {"baseline": base, "block": block, "fused": fused}


def run_phases(batch: int, n_fft: int = 256, k: int = 16, segments: int = 2, mode: str = "peaks",
               repeats: int = 15, device: str = "cpu") -> dict[str, Any]:
    """Profiles, gate decision, and predicted vs measured time of every phase for one batch."""
    from welchpeaks import ir
    from welchpeaks.bench.timing import round_robin, summary
    from welchpeaks.params import make_params
    from welchpeaks.plan.cost import cost_model_for, estimate_graph_cost_with_io
    from welchpeaks.plan.fusion import fusion_benefit
    from welchpeaks.plan.io import profile_graph_io
    from welchpeaks.plan.picker import pick_strategy

    if device != "cpu":
        raise ValueError(f"device={device!r}: the phase benchmark runs on 'cpu' in this version")
    params = make_params(n_fft=n_fft, k=k, segments=segments, mode=mode)
    graphs = phase_graphs(params, batch, segments)
    model = cost_model_for(device)
    length = n_fft + (segments - 1) * params.hop
    x = np.random.default_rng(42 + batch).standard_normal((batch, length)).astype(np.float32)
    fns = {name: (lambda g=g, name=name: ir.run(g, {"x": x}, backend=BACKEND[name])) for name, g in graphs.items()}
    samples = round_robin(fns, max(repeats, 10), warmup=2, min_repeats=10)
    profiles = {name: profile_graph_io(g, sync_ops=model.sync_ops) for name, g in graphs.items()}
    benefit = fusion_benefit(profiles["baseline"], profiles["fused"])
    gate = model.gate()
    score = gate.score_ns(benefit)
    rows = []
    for name, g in graphs.items():
        m = summary(samples[name])
        pred = estimate_graph_cost_with_io(g, model, profiles[name])
        rows.append({"phase": name, "backend": BACKEND[name], **m, "predicted_ms": pred / 1e6,
                     "predicted_over_measured": pred / 1e6 / m["median_ms"],
                     "speedup_vs_baseline": float(np.median(samples["baseline"])) / m["median_ms"],
                     "io": profiles[name].to_dict()})
    return {
        "batch": batch, "n_fft": n_fft, "k": k, "segments": segments, "mode": mode, "device": device,
        "cost_model": model.status, "rows": rows, "fusion_benefit": benefit.to_dict(),
        "gate": {"score_ns": score, "min_gain_ns": gate.min_gain_ns, "fuse": score >= gate.min_gain_ns,
                 "status": gate.status},
        "auto": pick_strategy(device, batch=batch, n_fft=n_fft, k=k, segments=segments, mode=mode),
    }
