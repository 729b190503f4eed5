"""The linker's frame step, compiled (numba): every signal's open tracks predicted, gated, costed,
assigned and updated, frame after frame, in one call (:func:`run`), which returns to Python only
when a signal's frame needs an optimal assignment that is not evident (then
:func:`scipy.optimize.linear_sum_assignment` decides it and :func:`run` resumes where it
stopped). The model and its constants are :mod:`welchpeaks.tracks`'.

State of ``S`` signals with room for ``C`` open tracks each (rows ``[:count[s]]`` of signal
``s`` are its open tracks, in the order they started):

* ``ids [S, C]`` (int64), ``last [S, C]`` (int64: the frame of each one's last peak),
  ``x [S, C, 2, 2]`` (per model: frequency in bins and slope in bins per frame, at the frame
  last predicted), ``cov [S, C, 2, 3]`` (per model: var f, cov, var slope), ``mu [S, C, 2]``
  (the models' probabilities), ``power [S, C]`` (smoothed dB), ``count [S]``, ``next_id [1]``.

Scratch of one signal's frame (held while Python assigns it): ``pairs [C, K, 4]`` (cost, allowed,
and per model the innovation's squared deviation), ``shared [C]`` (unresolved from another
track), ``rows [K]``/``cols [K]``, and per peak ``z``, ``lp`` (dB), ``slot``, ``taken`` and
per track ``keep`` (flags).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from welchpeaks.numba_base import EXACT

# exact, with numpy's error model (a division by zero gives infinity or NaN, unchecked)
_OPTS = dict(EXACT, error_model="numpy")

#: ``cfg``'s fields (float64 ``[len]``)
(C_RES, C_MAX_JUMP, C_MAX_GAP, C_MIN_SNR, C_MEASURE_SD, C_SHARED_SD, C_NEW_SLOPE_SD, C_Q0, C_Q1, C_P00, C_P01,
 C_P10, C_P11, C_MU0, C_GATE_SD, C_ROBUST_SD, C_MERGE, C_POWER_SD, C_POWER_SMOOTH, C_POWER_GATE) = range(20)
CFG_LEN = 20


@njit(**_OPTS)
def _valid(freqs, pw, has_power, snr, has_snr, cfg, z, lp, slot):
    """The frame's peaks that are linked (a frequency finite in bins, a finite power where the
    power is known, an SNR of at least ``min_snr`` where it is known): their frequencies in
    bins into ``z``, their powers in dB into ``lp`` (0 without powers), their slots into
    ``slot``; returns how many."""
    m = 0
    min_snr = cfg[C_MIN_SNR]
    for j in range(freqs.shape[0]):
        f = freqs[j] / cfg[C_RES]
        if not math.isfinite(f) or abs(f) > 1e15:  # (past it, a bin's arithmetic loses its fractions)
            continue
        if has_snr and not (snr[j] >= min_snr):
            continue
        level = 10.0 * math.log10(max(pw[j], 1e-300)) if has_power else 0.0
        if not math.isfinite(level):
            continue
        z[m], lp[m], slot[m] = f, level, j
        m += 1
    return m


@njit(**_OPTS)
def _drop(ids, last, x, cov, mu, power, n, keep):
    """Keep the rows ``keep[:n]`` marks, in order; returns how many remain."""
    w = 0
    for i in range(n):
        if keep[i]:
            if w != i:
                ids[w], last[w], power[w] = ids[i], last[i], power[i]
                for j in range(2):
                    mu[w, j] = mu[i, j]
                    for c in range(2):
                        x[w, j, c] = x[i, j, c]
                    for c in range(3):
                        cov[w, j, c] = cov[i, j, c]
            w += 1
    return w


@njit(**_OPTS)
def _mixed(x, cov, i, w0, q):
    """Model states of track ``i`` mixed with weights ``(w0, 1 - w0)``, then predicted one frame
    with process noise ``q``: ``(f, v, var f, cov, var v)``."""
    w1 = 1.0 - w0
    f = w0 * x[i, 0, 0] + w1 * x[i, 1, 0]
    v = w0 * x[i, 0, 1] + w1 * x[i, 1, 1]
    df0, dv0, df1, dv1 = x[i, 0, 0] - f, x[i, 0, 1] - v, x[i, 1, 0] - f, x[i, 1, 1] - v
    a = w0 * (cov[i, 0, 0] + df0 * df0) + w1 * (cov[i, 1, 0] + df1 * df1)
    b = w0 * (cov[i, 0, 1] + df0 * dv0) + w1 * (cov[i, 1, 1] + df1 * dv1)
    c = w0 * (cov[i, 0, 2] + dv0 * dv0) + w1 * (cov[i, 1, 2] + dv1 * dv1)
    return f + v, v, a + 2 * b + c + q / 3, b + c + q / 2, c + q


@njit(**_OPTS)
def _predict(x, cov, mu, n, cfg):
    """Every open track one frame on: the two models mixed (IMM), then each predicted with its
    own process noise."""
    p00, p01, p10, p11 = cfg[C_P00], cfg[C_P01], cfg[C_P10], cfg[C_P11]
    for i in range(n):
        m0, m1 = mu[i, 0], mu[i, 1]
        c0 = m0 * p00 + m1 * p10
        c1 = m0 * p01 + m1 * p11
        s0 = _mixed(x, cov, i, m0 * p00 / c0 if c0 > 0 else 0.5, cfg[C_Q0])
        s1 = _mixed(x, cov, i, m0 * p01 / c1 if c1 > 0 else 0.5, cfg[C_Q1])
        x[i, 0, 0], x[i, 0, 1], cov[i, 0, 0], cov[i, 0, 1], cov[i, 0, 2] = s0
        x[i, 1, 0], x[i, 1, 1], cov[i, 1, 0], cov[i, 1, 1], cov[i, 1, 2] = s1
        mu[i, 0], mu[i, 1] = c0, c1


@njit(**_OPTS)
def _combined(x, mu, i):
    return mu[i, 0] * x[i, 0, 0] + mu[i, 1] * x[i, 1, 0]


@njit(**_OPTS)
def _costs(x, cov, mu, power, n, z, lp, m, has_power, cfg, pairs, shared):
    """The cost of every track-peak pair into ``pairs[:n, :m]``: ``[cost, allowed, d2 model 0,
    d2 model 1]``; ``shared``: the tracks unresolved from another. Returns 0 when no pair is
    allowed, 1 when the allowed pairs are a matching already (no track or peak in two), else 2."""
    merge = cfg[C_MERGE]
    for i in range(n):
        shared[i] = False
    for i in range(n):
        pi = _combined(x, mu, i)
        for h in range(i + 1, n):
            if abs(_combined(x, mu, h) - pi) < merge:
                shared[i] = True
                shared[h] = True
    gate2 = cfg[C_GATE_SD] ** 2
    any_allowed = False
    for i in range(n):
        r = cfg[C_SHARED_SD] ** 2 if shared[i] else cfg[C_MEASURE_SD] ** 2
        pred = _combined(x, mu, i)
        s0, s1 = cov[i, 0, 0] + r, cov[i, 1, 0] + r
        spread = mu[i, 0] * (s0 + (x[i, 0, 0] - pred) ** 2) + mu[i, 1] * (s1 + (x[i, 1, 0] - pred) ** 2)
        for j in range(m):
            d = z[j] - pred
            ok = d * d <= gate2 * spread
            if cfg[C_MAX_JUMP] > 0:
                ok = ok and abs(d) * cfg[C_RES] <= cfg[C_MAX_JUMP]
            dp = lp[j] - power[i]
            if has_power:
                ok = ok and abs(dp) <= cfg[C_POWER_GATE]
            pairs[i, j, 1] = 1.0 if ok else 0.0
            if not ok:
                continue
            n0, n1 = z[j] - x[i, 0, 0], z[j] - x[i, 1, 0]
            d20, d21 = n0 * n0 / s0, n1 * n1 / s1
            # -2 log of the two models' mixed likelihood (up to a constant), then the power's
            e0 = -0.5 * d20 - 0.5 * math.log(s0) + math.log(max(mu[i, 0], 1e-300))
            e1 = -0.5 * d21 - 0.5 * math.log(s1) + math.log(max(mu[i, 1], 1e-300))
            top = max(e0, e1)
            cost = -2.0 * (top + math.log(math.exp(e0 - top) + math.exp(e1 - top)))
            if has_power:
                cost += (dp / cfg[C_POWER_SD]) ** 2
            if not math.isfinite(cost):  # (a prediction or variance that overflowed: no pair)
                pairs[i, j, 1] = 0.0
                continue
            pairs[i, j, 0] = cost
            pairs[i, j, 2] = d20
            pairs[i, j, 3] = d21
            any_allowed |= ok
    if not any_allowed:
        return 0
    for i in range(n):
        c = 0
        for j in range(m):
            c += pairs[i, j, 1] > 0
        if c > 1:
            return 2
    for j in range(m):
        c = 0
        for i in range(n):
            c += pairs[i, j, 1] > 0
        if c > 1:
            return 2
    return 1


@njit(**_OPTS)
def _model_update(x, cov, i, k, z, r, mu):
    """Model ``k`` of track ``i`` updated with the peak ``z`` of variance ``r``; returns the log of
    its probability times the peak's likelihood under it."""
    a, b, c = cov[i, k, 0], cov[i, k, 1], cov[i, k, 2]
    sr = a + r
    gf, gv = a / sr, b / sr
    innov = z - x[i, k, 0]
    x[i, k, 0] += gf * innov
    x[i, k, 1] += gv * innov
    cov[i, k, 0], cov[i, k, 1], cov[i, k, 2] = a - a * gf, b - b * gf, c - b * gv
    return math.log(max(mu, 1e-300)) - 0.5 * innov * innov / sr - 0.5 * math.log(sr)


@njit(**_OPTS)
def _update(x, cov, mu, power, last, n, z, lp, has_power, cfg, pairs, shared, rows, cols, npairs, t):
    """The assigned tracks updated with their peaks (each model's Kalman update, the models'
    probabilities by their likelihoods; an outlier or a peak whose power is off its track's
    weighs as that much noisier, Huber), then a track unresolved from one that took a peak
    counted as seen."""
    robust2 = cfg[C_ROBUST_SD] ** 2
    for q in range(npairs):
        i, j = rows[q], cols[q]
        r = cfg[C_SHARED_SD] ** 2 if shared[i] else cfg[C_MEASURE_SD] ** 2
        weight = max(1.0, min(pairs[i, j, 2], pairs[i, j, 3]) / robust2)
        dp = lp[j] - power[i]
        if has_power:
            weight *= 1.0 + (dp / cfg[C_POWER_SD]) ** 2
        e0 = _model_update(x, cov, i, 0, z[j], r * weight, mu[i, 0])
        e1 = _model_update(x, cov, i, 1, z[j], r * weight, mu[i, 1])
        top = max(e0, e1)
        w0, w1 = math.exp(e0 - top), math.exp(e1 - top)
        mu[i, 0], mu[i, 1] = w0 / (w0 + w1), w1 / (w0 + w1)
        if has_power:
            power[i] += cfg[C_POWER_SMOOTH] * dp
        last[i] = t
    merge = cfg[C_MERGE]
    for i in range(n):
        if not shared[i] or last[i] == t:
            continue
        pi = _combined(x, mu, i)
        for q in range(npairs):
            h = rows[q]
            # (h's combined prediction is now its update: compare with the frame's peak it took)
            if abs(z[cols[q]] - pi) < merge and h != i:
                last[i] = t
                break


@njit(**_OPTS)
def _start(ids, last, x, cov, mu, power, n, cap, z, lp, m, taken, t, cfg, next_id, slot, out_row, keep):
    """Peaks no track took start tracks, in slot order; when the open tracks would pass ``cap``,
    those that waited longest (then the younger) close first. Returns the open tracks."""
    new = 0
    for j in range(m):
        new += not taken[j]
    if new == 0:
        return n
    over = n + new - cap
    if over > 0:  # close the longest waiting
        for i in range(n):
            keep[i] = True
        for _ in range(over):
            worst = -1
            for i in range(n):
                if keep[i] and (worst < 0 or last[i] < last[worst] or (last[i] == last[worst] and ids[i] > ids[worst])):
                    worst = i
            keep[worst] = False
        n = _drop(ids, last, x, cov, mu, power, n, keep)
    for j in range(m):
        if taken[j]:
            continue
        ids[n] = next_id[0]
        out_row[slot[j]] = next_id[0]
        next_id[0] += 1
        last[n] = t
        power[n] = lp[j]
        for k in range(2):
            x[n, k, 0], x[n, k, 1] = z[j], 0.0
            cov[n, k, 0], cov[n, k, 1], cov[n, k, 2] = cfg[C_MEASURE_SD] ** 2, 0.0, cfg[C_NEW_SLOPE_SD] ** 2
        mu[n, 0], mu[n, 1] = cfg[C_MU0], 1.0 - cfg[C_MU0]
        n += 1
    return n


@njit(**_OPTS)
def _dense(pairs, n, m, dense, ri, ci):
    """The tracks and peaks in some allowed pair (``ri``, ``ci``) and their costs as a dense
    matrix for :func:`scipy.optimize.linear_sum_assignment` (``dense[:nr, :nc]``): an allowed
    pair's cost less the least, a pair not allowed a cost no assignment with more links can
    reach. Returns ``(nr, nc)``."""
    nr = 0
    for i in range(n):
        for j in range(m):
            if pairs[i, j, 1] > 0:
                ri[nr] = i
                nr += 1
                break
    nc = 0
    for j in range(m):
        for i in range(n):
            if pairs[i, j, 1] > 0:
                ci[nc] = j
                nc += 1
                break
    lo, hi = math.inf, -math.inf
    for a in range(nr):
        for b in range(nc):
            if pairs[ri[a], ci[b], 1] > 0:
                lo = min(lo, pairs[ri[a], ci[b], 0])
                hi = max(hi, pairs[ri[a], ci[b], 0])
    big = (hi - lo + 1.0) * (nr + nc)
    for a in range(nr):
        for b in range(nc):
            dense[a, b] = pairs[ri[a], ci[b], 0] - lo if pairs[ri[a], ci[b], 1] > 0 else big
    return nr, nc


@njit(**_OPTS)
def run(ids, last, x, cov, mu, power, count, next_id, freqs, pw, snr, has_power, has_snr, cfg, base, t0, s0, resume,
        rows, cols, npairs, out, pairs, shared, z, lp, slot, taken, keep, dense, ri, ci):
    """Link frames ``t0..`` of every signal (``freqs``/``pw``/``snr [S, T, k]``; ``out [S, T, k]``
    receives the ids, -1 where none; ``base``: the frames linked before these, so frame ``t``
    is the stream's ``base + t``), from signal ``s0`` of frame ``t0``. With ``resume``,
    signal ``s0``'s frame ``t0`` was stopped at its assignment: ``rows/cols[:npairs]`` is it.
    Returns ``(t, s, nr, nc)``: the frame and signal whose assignment Python must decide on the
    costs ``dense[:nr, :nc]`` (its answer, rows and columns of that matrix, is resumed with),
    or ``(-1, -1, 0, 0)`` when every frame is linked."""
    n_sig, n_t, k = freqs.shape
    cap = ids.shape[1]
    max_gap = cfg[C_MAX_GAP]
    for t in range(t0, n_t):
        for s in range(s0 if t == t0 else 0, n_sig):
            ii, ll, xx, cc, mm, pp = ids[s], last[s], x[s], cov[s], mu[s], power[s]
            row = out[s, t]
            for j in range(k):
                row[j] = -1
            m = _valid(freqs[s, t], pw[s, t] if has_power else pw[0, 0], has_power, snr[s, t] if has_snr else snr[0, 0],
                       has_snr, cfg, z, lp, slot)
            n = count[s]
            if not (resume and t == t0 and s == s0):
                if n:  # closed: the tracks that missed more than max_gap frames
                    for i in range(n):
                        keep[i] = (base + t - ll[i]) <= max_gap + 1
                    n = _drop(ii, ll, xx, cc, mm, pp, n, keep)
                    count[s] = n
                if n:
                    _predict(xx, cc, mm, n, cfg)
                npairs = 0
                if n and m:
                    kind = _costs(xx, cc, mm, pp, n, z, lp, m, has_power, cfg, pairs, shared)
                    if kind == 2:
                        nr, nc = _dense(pairs, n, m, dense, ri, ci)
                        return t, s, nr, nc
                    if kind == 1:
                        for i in range(n):
                            for j in range(m):
                                if pairs[i, j, 1] > 0:
                                    rows[npairs], cols[npairs] = i, j
                                    npairs += 1
            else:  # the assignment Python decided on the dense costs: back to tracks and peaks
                w = 0
                for q in range(npairs):
                    i, j = ri[rows[q]], ci[cols[q]]
                    if pairs[i, j, 1] > 0:
                        rows[w], cols[w] = i, j
                        w += 1
                npairs = w
            for j in range(m):
                taken[j] = False
            if npairs:
                _update(xx, cc, mm, pp, ll, n, z, lp, has_power, cfg, pairs, shared, rows, cols, npairs, base + t)
                for q in range(npairs):
                    row[slot[cols[q]]] = ii[rows[q]]
                    taken[cols[q]] = True
            count[s] = _start(ii, ll, xx, cc, mm, pp, n, cap, z, lp, m, taken, base + t, cfg, next_id, slot, row,
                              keep)
            npairs = 0
    return -1, -1, 0, 0
