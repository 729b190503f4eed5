"""Strategy costs and the picker: which execution computes a call fastest, and why.

The picker never changes the numerical contract (layout, scaling, mode): it only chooses how
to compute it. For each available execution it builds that execution's graph (the graph it
runs), profiles its IO and prices it with the device's measured cost model.

``WELCHPEAKS_PICKER=legacy`` applies the original system's fixed rules instead, and
``WELCHPEAKS_TRACE=1`` logs every pick with its breakdown (logger ``welchpeaks.plan``).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np

from welchpeaks import backends
from welchpeaks.params import PeakParams, make_params
from welchpeaks.plan.cost import BackendCostModel, cost_breakdown, cost_model_for
from welchpeaks.plan.fusion import fusion_benefit
from welchpeaks.plan.io import profile_graph_io

log = logging.getLogger("welchpeaks.plan")


def legacy_mode() -> bool:
    return os.environ.get("WELCHPEAKS_PICKER", "").strip().lower() == "legacy"


#: pick_for's answers: key -> (the cost model they were computed with, answer)
_PICKS: dict[tuple, tuple[BackendCostModel, tuple[str, dict, str]]] = {}


def _model(device: str, model: BackendCostModel | None) -> BackendCostModel:
    m = model or cost_model_for(device)
    if m is None:
        raise ValueError(f"device={device!r}: no measured cost model; run `welchpeaks calibrate --device {device}`")
    return m


def strategy_breakdown(params: PeakParams, n_seg: int, batch: int, length: int, compute: Any,
                       device: str = "cpu", model: BackendCostModel | None = None) -> dict[str, dict]:
    """Per execution: IO profile, every cost term (ns), total, and the fusion gate's view of it.

    The gate compares the unfused chain (what the ``numpy`` execution runs) with each
    execution's graph: its score is the IO time that execution saves.
    """
    from welchpeaks.ir.graph import welch_chain_graph

    m = _model(device, model)
    gate = m.gate()
    compute = np.dtype(compute)
    chain_io = profile_graph_io(welch_chain_graph(params, batch, length, n_seg, compute), sync_ops=m.sync_ops)
    out: dict[str, dict] = {}
    for name in backends.names():
        try:
            ex = backends.get(name)
        except ImportError as exc:
            out[name] = {"total_ns": math.inf, "why": str(exc)}
            continue
        why = ex.unavailable_reason() if ex.device == device else f"runs on {ex.device!r}, not {device!r}"
        why = why or ex.unsupported_reason(params)
        if why:
            out[name] = {"total_ns": math.inf, "why": why}
            continue
        g = ex.graph(params, n_seg, batch, length, compute)
        b = cost_breakdown(g, m)
        benefit = fusion_benefit(chain_io, profile_graph_io(g, sync_ops=m.sync_ops))
        b["gate"] = {"score_ns": gate.score_ns(benefit), "min_gain_ns": gate.min_gain_ns, **benefit.to_dict()}
        out[name] = b
    return out


def estimate_costs(device: str = "cpu", batch: int = 1, n_fft: int = 256, k: int = 16, segments: int | str = 2,
                   mode: str = "peaks", data_on: str = "host", dtype: str = "float32",
                   model: BackendCostModel | None = None, **options: Any) -> dict[str, float]:
    """Predicted ns per execution (``inf`` where unavailable) for one call.

    ``data_on`` is where the signals are; on the CPU that is always the host, so no transfer
    is added (device executions add theirs in their own graphs).
    """
    if data_on not in ("host", device):
        raise ValueError(f"data_on={data_on!r}; use 'host' or {device!r}")
    params = make_params(n_fft=n_fft, k=k, segments=segments, mode=mode, **options)
    n_seg = params.segments or 1
    length = params.n_fft + (n_seg - 1) * params.hop
    b = strategy_breakdown(params, n_seg, batch, length, dtype, device, model)
    return {name: v["total_ns"] for name, v in b.items()}


def _legacy_pick(names: list[str], batch: int, device: str) -> str:
    """The original's fixed rule: the compiled GPU graph at batch >= 8192 on a GPU, else the
    host streaming path (here ``fused-cpu``, else ``numpy``)."""
    if device != "cpu" and batch >= 8192:
        for name in ("triton-fused", "triton-block", "torch"):
            if name in names:
                return name
    for name in ("fused-cpu", "numpy"):
        if name in names:
            return name
    return names[0]


def pick_for(params: PeakParams, n_seg: int, batch: int, length: int, compute: Any, device: str = "cpu",
             model: BackendCostModel | None = None) -> tuple[str, dict, str]:
    """(execution, per-execution breakdown, why) for one call; ties go to the earlier execution.

    Answers are remembered per cost model (one-shot ``welch_peaks`` calls plan once per shape);
    the breakdowns returned are shared, so callers must not modify them.
    """
    resolved = _model(device, model)
    key = (params, n_seg, batch, length, np.dtype(compute).name, device, legacy_mode())
    hit = _PICKS.get(key)
    if hit is not None and hit[0] is resolved:
        return hit[1]
    info = strategy_breakdown(params, n_seg, batch, length, compute, device, resolved)
    finite = {n: v["total_ns"] for n, v in info.items() if math.isfinite(v["total_ns"])}
    if not finite:
        raise ValueError(f"no execution can compute these parameters on {device!r}: "
                         + "; ".join(f"{n}: {v.get('why')}" for n, v in info.items()))
    if legacy_mode():
        choice, why = _legacy_pick(list(finite), batch, device), "legacy rule (WELCHPEAKS_PICKER=legacy)"
    else:
        choice = min(finite, key=finite.get)
        why = f"auto: lowest predicted time on {device} ({_model(device, model).status} cost model)"
    if os.environ.get("WELCHPEAKS_TRACE", "") not in ("", "0"):
        log.warning("pick %s for batch %d, n_fft %d, k %d, %d segments, %s (%s): %s", choice, batch, params.n_fft,
                    params.k, n_seg, params.mode, why, {n: round(v) for n, v in finite.items()})
    if len(_PICKS) > 1024:
        _PICKS.clear()
    _PICKS[key] = (resolved, (choice, info, why))
    return choice, info, why


def pick_strategy(device: str = "cpu", batch: int = 1, n_fft: int = 256, k: int = 16, segments: int | str = 2,
                  mode: str = "peaks", dtype: str = "float32", model: BackendCostModel | None = None,
                  **options: Any) -> str:
    """The execution ``strategy='auto'`` runs for these parameters."""
    params = make_params(n_fft=n_fft, k=k, segments=segments, mode=mode, **options)
    n_seg = params.segments or 1
    length = params.n_fft + (n_seg - 1) * params.hop
    return pick_for(params, n_seg, batch, length, dtype, device, model)[0]
