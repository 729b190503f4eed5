"""[rows, samples] float32, n_fft 1024, segments=None: auto vs each execution; memory."""
import json, resource, sys, time, warnings
import numpy as np
import welchpeaks
rows, samples, strategy = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
x = np.random.default_rng(0).standard_normal((rows, samples)).astype(np.float32)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
warnings.simplefilter("ignore")
ts = []
for _ in range(int(sys.argv[4]) if len(sys.argv) > 4 else 3):
    t = time.perf_counter(); r = welchpeaks.welch_peaks(x, n_fft=1024, k=16, segments=None, strategy=strategy); ts.append(time.perf_counter() - t)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rows": rows, "samples": samples, "strategy": strategy, "ran": r.strategy, "first_s": round(ts[0], 3),
                  "median_s": round(float(np.median(ts)), 3), "min_s": round(min(ts), 3), "max_s": round(max(ts), 3),
                  "extra_mb": round((peak - base) / 1024)}))
