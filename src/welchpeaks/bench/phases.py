"""``welchpeaks bench phases``: the original system's fusion-phase benchmark, measured honestly.

Three graphs compute the same peaks for one batch:

* ``baseline``: separate steps (frames, window, rfft, power, segment mean, scale, top-k) on
  NumPy, with the full complex spectrum returned to the caller beside the peaks;
* ``block``: the library FFT writes the spectrum into one buffer, then one numba pass forms
  the power, averages the segments and selects (one ``spectrum_peaks`` node, peaks only);
* ``fused``: one ``welch_peaks`` node on the raw rows (peaks only).

``block`` and ``fused`` are the fusion pass's rewrites of the chain. Each phase is compiled
for its backend and run as a program (what the planner profiles is what runs),
timed round robin for at least 10 repeats after warm-up, and reported as the median with
min-max beside the cost model's prediction for its graph. The gate's view is the benefit of
going from ``baseline`` to the most fused phase.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PHASES = ("baseline", "block", "fused")
#: the backend that runs each phase (the names of the executions users see)
BACKEND = {"baseline": "numpy", "block": "fused-cpu", "fused": "fused-cpu"}


def phase_graphs(params: Any, batch: int, n_seg: int, dtype: Any = "float32") -> dict[str, Any]:
    """The phase graphs for ``batch`` rows of exactly one frame: the Welch chain with its
    spectrum as an output too, and the fusion pass's rewrites of the chain for the ``fused-cpu``
    backend (``fused`` only for a power-of-two ``n_fft``)."""
    from welchpeaks import backends
    from welchpeaks.ir import Op, welch_chain_fusions, welch_chain_graph

    dt = np.dtype(dtype)
    length = params.frame_length(n_seg)
    chain = welch_chain_graph(params, batch, length, n_seg, dt, name="baseline")
    fusions = dict(welch_chain_fusions(chain, backends.get("fused-cpu").backend))
    base = welch_chain_graph(params, batch, length, n_seg, dt, name="baseline")
    spec = next(n.id for n in base.nodes if n.op is Op.rfft)
    base.set_outputs([spec, *base.outputs])
    out = {"baseline": base}
    for name, op in (("block", Op.spectrum_peaks), ("fused", Op.welch_peaks)):
        if op in fusions:  # fused-cpu fuses the whole chain for power-of-two n_fft only
            out[name] = fusions[op]
            out[name].name = name
    return out


def run_phases(batch: int, n_fft: int = 256, k: int = 16, segments: int = 2, mode: str = "peaks",
               repeats: int = 15, device: str = "cpu") -> dict[str, Any]:
    """Profiles, gate decision, and predicted vs measured time of every phase for one batch."""
    from welchpeaks import backends, ir
    from welchpeaks.params import make_params
    from welchpeaks.plan.cost import estimate_graph_cost_with_io
    from welchpeaks.plan.models import cost_model_for
    from welchpeaks.plan.fusion import fusion_benefit
    from welchpeaks.plan.io import profile_graph_io
    from welchpeaks.plan.picker import pick_strategy
    from welchpeaks.timing import round_robin, summary

    if device != "cpu":
        raise ValueError(f"device={device!r}: the phase benchmark runs on 'cpu' in this version")
    params = make_params(n_fft=n_fft, k=k, segments=segments, mode=mode)
    graphs = phase_graphs(params, batch, segments)
    model = cost_model_for(device)
    length = params.frame_length(segments)
    x = np.random.default_rng(42 + batch).standard_normal((batch, length)).astype(np.float32)
    programs = {name: ir.compile(g, backends.get(BACKEND[name]).backend) for name, g in graphs.items()}
    fns = {name: (lambda p=p: p(x=x)) for name, p in programs.items()}
    samples = round_robin(fns, max(repeats, 10), warmup=2, min_repeats=10)
    profiles = {name: profile_graph_io(g) for name, g in graphs.items()}
    benefit = fusion_benefit(profiles["baseline"], profiles[list(graphs)[-1]])
    gate = model.gate()
    score = gate.score_ns(benefit)
    rows = []
    for name, g in graphs.items():
        m = summary(samples[name])
        pred = estimate_graph_cost_with_io(g, model, profiles[name], backends.get(BACKEND[name]).backend)
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
