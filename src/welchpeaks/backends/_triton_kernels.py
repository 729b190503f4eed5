"""The Triton kernels of :mod:`welchpeaks.backends.triton_exec` (imports triton: load lazily)."""

import triton
import triton.language as tl


@triton.jit
def select_store(psd, f, rows, rmask, NB: tl.constexpr, K: tl.constexpr, PEAKS: tl.constexpr,
                 MIN_DIST: tl.constexpr, bad, bins_ptr, pow_ptr, fb_ptr):
    ninf = float("-inf")
    fb2 = f[None, :]
    psd = tl.where(fb2 < NB, psd, ninf)
    if PEAKS:
        left = tl.gather(psd, tl.maximum(fb2 - 1, 0) + 0 * rows[:, None], 1)
        right = tl.gather(psd, tl.minimum(fb2 + 1, NB - 1) + 0 * rows[:, None], 1)
        left = tl.where(fb2 == 0, ninf, left)
        right = tl.where(fb2 == NB - 1, ninf, right)
        cand = tl.where((psd > left) & (psd >= right) & (psd > 0), psd, ninf)  # zero power: no peak
    else:
        cand = psd
    for j in tl.static_range(K):
        m = tl.max(cand, 1)
        idx = tl.argmax(cand, 1, tie_break_left=True)
        ok = (m > ninf) & (bad == 0)
        sel = fb2 == idx[:, None]
        b = tl.sum(tl.where(sel, psd, 0.0), 1)
        frac = idx.to(tl.float64)
        if PEAKS:
            a = tl.sum(tl.where(fb2 == idx[:, None] - 1, psd, 0.0), 1).to(tl.float64)
            c = tl.sum(tl.where(fb2 == idx[:, None] + 1, psd, 0.0), 1).to(tl.float64)
            b64 = b.to(tl.float64)
            inner = (idx > 0) & (idx < NB - 1) & (a > 0) & (b64 > 0) & (c > 0)
            la = tl.log(tl.where(inner, a, 1.0))
            lb = tl.log(tl.where(inner, b64, 1.0))
            lc = tl.log(tl.where(inner, c, 1.0))
            den = la - 2.0 * lb + lc
            inner = inner & (den < 0)
            frac = frac + tl.where(inner, 0.5 * (la - lc) / tl.where(inner, den, -1.0), 0.0)
        tl.store(bins_ptr + rows * K + j, tl.where(ok, idx, -1).to(tl.int32), mask=rmask)
        tl.store(pow_ptr + rows * K + j, tl.where(ok, b, float("nan")), mask=rmask)
        tl.store(fb_ptr + rows * K + j, tl.where(ok, frac, float("nan")), mask=rmask)
        if PEAKS and MIN_DIST > 1:
            near = (fb2 > idx[:, None] - MIN_DIST) & (fb2 < idx[:, None] + MIN_DIST)
        else:
            near = sel
        cand = tl.where(near, ninf, cand)

@triton.jit
def fused(x_ptr, stride, B, hop, win_ptr, cos_ptr, sin_ptr, scale_ptr, bins_ptr, pow_ptr, fb_ptr, bad_ptr,
          N: tl.constexpr, NP: tl.constexpr, NB: tl.constexpr, NBP: tl.constexpr, S: tl.constexpr,
          BK: tl.constexpr, BR: tl.constexpr, DETREND: tl.constexpr, K: tl.constexpr, PEAKS: tl.constexpr,
          MIN_DIST: tl.constexpr, PRECISION: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    rmask = rows < B
    f = tl.arange(0, NBP)
    kk = tl.arange(0, BK)
    acc = tl.zeros((BR, NBP), tl.float32)
    bad = tl.zeros((BR,), tl.int32)
    tmid = (N - 1) / 2.0
    tss = N * (N * N - 1) / 12.0  # sum of (n - tmid)^2
    for s in tl.static_range(S):
        base = x_ptr + rows[:, None] * stride + s * hop
        tot = tl.zeros((BR,), tl.float32)
        tmom = tl.zeros((BR,), tl.float32)
        for n0 in tl.static_range(0, NP, BK):
            n = n0 + kk
            m = rmask[:, None] & (n[None, :] < N)
            v = tl.load(base + n[None, :], mask=m, other=0.0)
            bad += tl.sum(tl.where(m & ((v != v) | (tl.abs(v) == float("inf"))), 1, 0), 1)
            v = tl.where(v == v, v, 0.0)
            v = tl.where(tl.abs(v) == float("inf"), 0.0, v)
            tot += tl.sum(v, 1)
            tmom += tl.sum(v * (n[None, :] - tmid), 1)
        mean = tot / N
        slope = tmom / tss
        re = tl.zeros((BR, NBP), tl.float32)
        im = tl.zeros((BR, NBP), tl.float32)
        for n0 in tl.static_range(0, NP, BK):
            n = n0 + kk
            m = rmask[:, None] & (n[None, :] < N)
            v = tl.load(base + n[None, :], mask=m, other=0.0)
            v = tl.where((v == v) & (tl.abs(v) != float("inf")), v, 0.0)
            if DETREND == 1:
                v = v - mean[:, None]
            if DETREND == 2:
                v = v - mean[:, None] - slope[:, None] * (n[None, :] - tmid)
            w = tl.load(win_ptr + n, mask=n < N, other=0.0)
            v = tl.where(m, v * w[None, :], 0.0)
            cs = tl.load(cos_ptr + n[:, None] * NBP + f[None, :])
            sn = tl.load(sin_ptr + n[:, None] * NBP + f[None, :])
            re += tl.dot(v, cs, input_precision=PRECISION)
            im += tl.dot(v, sn, input_precision=PRECISION)
        acc += re * re + im * im
    scale = tl.load(scale_ptr + f, mask=f < NB, other=0.0)
    psd = acc * scale[None, :]
    tl.store(bad_ptr + rows, bad, mask=rmask)
    select_store(psd, f, rows, rmask, NB, K, PEAKS, MIN_DIST, bad, bins_ptr, pow_ptr, fb_ptr)

@triton.jit
def block(spec_ptr, B, scale_ptr, bins_ptr, pow_ptr, fb_ptr, bad_ptr, NB: tl.constexpr, NBP: tl.constexpr,
          S: tl.constexpr, BR: tl.constexpr, K: tl.constexpr, PEAKS: tl.constexpr, MIN_DIST: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    rmask = rows < B
    f = tl.arange(0, NBP)
    m = rmask[:, None] & (f[None, :] < NB)
    acc = tl.zeros((BR, NBP), tl.float32)
    for s in tl.static_range(S):
        off = ((rows[:, None] * S + s) * NB + f[None, :]) * 2
        re = tl.load(spec_ptr + off, mask=m, other=0.0)
        im = tl.load(spec_ptr + off + 1, mask=m, other=0.0)
        acc += re * re + im * im
    scale = tl.load(scale_ptr + f, mask=f < NB, other=0.0)
    bad = tl.load(bad_ptr + rows, mask=rmask, other=0)
    select_store(acc * scale[None, :], f, rows, rmask, NB, K, PEAKS, MIN_DIST, bad, bins_ptr, pow_ptr, fb_ptr)
