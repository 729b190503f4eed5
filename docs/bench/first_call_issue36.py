"""First use on a fresh machine: empty numba and welchpeaks caches (set by the caller)."""
import json, sys, time, warnings
t0 = time.perf_counter()
import numpy as np
import welchpeaks
from welchpeaks.plan import calibrate
t_import = time.perf_counter() - t0
x = np.random.default_rng(0).standard_normal((64, 384)).astype(np.float32)
warnings.simplefilter("ignore")
t1 = time.perf_counter()
r = welchpeaks.welch_peaks(x, n_fft=256, segments=2)
first = time.perf_counter() - t1
t2 = time.perf_counter()
m = calibrate.wait_background("cpu")
bg = time.perf_counter() - t2
r2 = welchpeaks.welch_peaks(x, n_fft=256, segments=2)
print(json.dumps({"import_s": round(t_import, 2), "first_call_s": round(first, 2), "first_strategy": r.strategy,
                  "background_more_s": round(bg, 1), "model_seconds": m.meta.get("seconds") if m else None,
                  "then": r2.strategy}))
