"""The fused kernel's error per precision against the float64 reference, in Triton's
interpreter (which rounds the operands as the tensor cores do, and accumulates in fp32):
noise, a sine and an offset at random levels (tests/test_gpu_exec.py ``_signals``), n_fft 64,
256, 1024 and 4096, 3 segments, k 16, 64 rows (6 at 1024 and 4096), seed 11 + n_fft.

Run from the repository root: ``python docs/bench/precision_interp.py`` (about 10 minutes on 2 cores).
"""

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "tests")

import numpy as np  # noqa: E402

import welchpeaks  # noqa: E402
from helpers import reference_psd  # noqa: E402
from test_gpu_exec import _signals  # noqa: E402
from welchpeaks.params import make_params  # noqa: E402
from welchpeaks.spectral import reference_peaks  # noqa: E402

for precision in ("fp32", "tf32", "bf16"):
    e_peak = e_row = 0.0
    same = total = 0
    for n in (64, 256, 1024, 4096):
        p = make_params(n_fft=n, k=16, segments=3, precision=precision)
        x = _signals(np.random.default_rng(11 + n), 64 if n <= 256 else 6, p.frame_length(3))
        got = welchpeaks.welch_peaks(x, strategy="triton-fused", precision=precision, n_fft=n, k=16, segments=3)
        psd = reference_psd(x, p, 3)
        bins, _, _ = reference_peaks(psd, p.k, p.mode, p.min_distance, p.interp_spec, p.edges)
        ok = got.bins >= 0
        at = np.take_along_axis(psd, np.where(ok, got.bins, 0), 1)
        err = np.abs(got.power - at)
        e_peak = max(e_peak, float(np.max((err / at)[ok])))
        e_row = max(e_row, float(np.max((err / psd.max(1, keepdims=True))[ok])))
        same += int(((got.bins == bins) & (bins >= 0)).sum())
        total += int((bins >= 0).sum())
    print(f"{precision}: max error / peak power {e_peak:.2g}, / row's strongest bin {e_row:.2g}, "
          f"slots equal {same / total:.1%} of {total}")
