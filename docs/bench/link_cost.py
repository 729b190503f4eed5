"""The cost of TrackResult.link per 10,000 frames of 16 peaks (docs/performance.md): python docs/bench/link_cost.py"""
import time, numpy as np, welchpeaks
from welchpeaks import TrackResult
rng = np.random.default_rng(0)
T, k = 10000, 16
fr = np.sort(rng.uniform(0, 4000, (1, T, k)), axis=-1)
fr[0, :, :3] = [1000.0, 2000.0, 3000.0] + rng.normal(0, 1, (T, 3))  # three steady tones among noise peaks
res = TrackResult(np.ones(fr.shape, np.int32), np.ones(fr.shape), fr, np.arange(T) * 0.032, "x", {"fs": 8000.0})
for jump, gap in ((5, 1), (30, 15)):
    ts = []
    for _ in range(3):
        t0 = time.perf_counter(); L = res.link(max_jump_hz=jump, max_gap=gap, min_length=5); ts.append(time.perf_counter() - t0)
    print(f"k {k}, {T} frames, max_jump {jump}, max_gap {gap}: median {np.median(ts):.2f} s (min {min(ts):.2f}, max {max(ts):.2f}), tracks {len(L)}")
L = res.link(max_jump_hz=5, max_gap=1, min_length=1)
t0 = time.perf_counter(); S = L.summary(); print(f"summary of {len(S['track'])} tracks: {time.perf_counter() - t0:.2f} s")
