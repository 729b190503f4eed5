"""The fused kernel's raw output on rows holding NaN or infinity, and bf16 at n_fft 512-2048,
on a CUDA device: ``OUT=dir python docs/bench/nan_probe.py`` (writes ``dir/probe.json``).

Run on the H100 on 2026-11-26 (docs/bench/device-2026-11-26/nan-probe.json): the kernel's
flag stayed 0 for every row, a NaN segment vanished (the GPU's NaN 0x7FFFFFFF rounded to
-0.0), and bf16 at 2048 flagged a finite row. docs/performance.md has the account."""
import json
import os
import traceback

import numpy as np
import torch

import welchpeaks
from welchpeaks.backends import triton_exec as te
from welchpeaks.params import make_params

out = {}


def case(name, x, n_fft=256, prec="fp32", seg=2):
    try:
        p = make_params(n_fft=n_fft, k=4, segments=seg, precision=prec)
        r = te.fused_runner(p, seg)(torch.from_numpy(x).cuda())
        torch.cuda.synchronize()
        out[name] = {"bad_rows": r.bad_rows.tolist(), "bins": r.bins.cpu().numpy().tolist(),
                     "power": r.power.cpu().numpy().tolist()}
    except Exception:
        out[name] = {"error": traceback.format_exc()[-1500:]}
    print(name, json.dumps(out[name])[:600], flush=True)


rng = np.random.default_rng(5)
x = rng.standard_normal((6, 384)).astype(np.float32)
case("finite", x.copy())
y = x.copy(); y[2, 10] = np.nan; case("nan_row2", y)
y = x.copy(); y[4, 300] = np.inf; case("inf_row4", y)
y = x.copy(); y[2, 10] = np.nan; y[4, 300] = np.inf; case("both", y)
y = x.copy(); y[2, 10] = np.nan; y[4, 300] = np.inf; case("both_tf32", y, prec="tf32")
z = (rng.standard_normal((64, 1536)) * 5 + 10).astype(np.float32)
for n in (512, 1024, 2048):
    case(f"bf16_{n}", z[:, : n + n // 2].copy(), n_fft=n, prec="bf16")
try:
    res = welchpeaks.welch_peaks(y, k=4, segments=2, strategy="triton-fused")
    out["api_raise"] = "no error"
except Exception as e:
    out["api_raise"] = f"{type(e).__name__}: {e}"
print("api_raise", out["api_raise"], flush=True)
open(os.path.join(os.environ.get("OUT", "/tmp"), "probe.json"), "w").write(json.dumps(out, indent=1))
