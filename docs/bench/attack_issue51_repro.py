"""Reproducers of issue 51's open defects D1-D5 (a fresh helper's attack, 2026-12-02); writes .npy files
in the working directory: run it from a scratch folder, e.g. cd $(mktemp -d) && python <this file>."""
import numpy as np, welchpeaks, warnings, tracemalloc
warnings.simplefilter("ignore")
rng = np.random.default_rng(1)
# D1: fused-cpu float64, non-pow2 n_fft, segments=1: bits depend on input row stride -> source != memory
x = rng.standard_normal((70, 9999)); np.save("d1.npy", x)
kw = dict(k=5, n_fft=200, segments=1)
a = welchpeaks.welch_peaks(x, **kw); b = welchpeaks.welch_peaks(welchpeaks.open_signals("d1.npy"), **kw)
c = welchpeaks.welch_peaks(np.ascontiguousarray(x[:, :200]), **kw, strategy="fused-cpu", dtype="float64")
print("D1", a.strategy, b.strategy, "src==mem:", np.array_equal(a.power, b.power), " trimmed==mem:", np.array_equal(a.power, c.power))
# D2: numpy pieces of segments (max_memory) not bitwise equal to at once; sources inherit it
y = rng.standard_normal((1, 300001)).astype(np.float32)
r0 = welchpeaks.welch_peaks(y, k=5, segments=None, strategy="numpy")
r1 = welchpeaks.welch_peaks(y, k=5, segments=None, strategy="numpy", max_memory=1 << 20)
print("D2 at once == pieces:", np.array_equal(r0.power, r1.power), np.abs(r0.power - r1.power).max())
# D3: long rows + nan_policy='propagate' silently empties an overflowing finite row
z = rng.standard_normal((10, 70001)).astype(np.float32); z[1] *= 1e19; np.save("d3.npy", z)
kw = dict(k=4, segments=None, strategy="fused-cpu", nan_policy="propagate", max_memory=1 << 20)
print("D3 source:", welchpeaks.welch_peaks(welchpeaks.open_signals("d3.npy"), **kw).bins[1])
try: welchpeaks.welch_peaks(z, **kw)
except ValueError as e: print("D3 memory:", e)
# D4: Tracker.explain(dtype=) accepts dtypes the call accepts but crashes inside the IR
tr = welchpeaks.Tracker(n_fft=256, k=4)
for d in ["int16", "float16", "int32", "complex64"]:
    try: tr.explain(batch=1, length=5000, dtype=d)
    except Exception as e: print("D4", d, type(e).__name__, e)
print("D4 but the call works on int16:", tr((rng.standard_normal((1, 5000)) * 100).astype(np.int16)).strategy)
# D5: track ignores max_memory for its frame blocks
w = rng.standard_normal((1, 400000)).astype(np.float32)
tr = welchpeaks.Tracker(n_fft=256, k=4, frame_segments=8, frame_hop=1, strategy="numpy", max_memory=1 << 20); tr(w[:, :5000])
tracemalloc.start(); tr(w); print("D5 peak MiB with max_memory=1MiB:", tracemalloc.get_traced_memory()[1] / 2**20); tracemalloc.stop()
