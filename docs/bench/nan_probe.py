"""The fused kernel's *own* output (its flag, before the runner's frame check) on rows holding
NaN or infinity, and bf16 at n_fft 512-4096, on a CUDA device:
``OUT=dir python docs/bench/nan_probe.py`` (writes ``dir/nan-probe.json``).

Run 1 (H100, 2026-11-26 morning, docs/bench/device-2026-11-26/nan-probe.json): the kernel's
flag stayed 0 for every row, a NaN segment vanished (the GPU's NaN 0x7FFFFFFF rounded to -0.0),
and bf16 at 2048 flagged a finite row. Since then the rounding keeps NaN and the flag is an
integer test of the exponent bits; this probe says whether the kernel's own flag now works
(``kernel_bad``) and, for bf16, which rows the kernel flags and whether a flagged row is
flagged again alone. docs/performance-history.md has the account."""
import json
import os
import traceback

import numpy as np
import torch

import welchpeaks
from welchpeaks.backends import triton_exec as te
from welchpeaks.params import make_params

out = {}


def raw(x, n_fft, prec, seg):
    """The kernel's outputs as it wrote them (no frame check)."""
    p = make_params(n_fft=n_fft, k=4, segments=seg, precision=prec)
    xt = torch.from_numpy(x).cuda()
    t = te._outputs(x.shape[0], p.k, xt.device)
    const = te.TritonConstants(p, seg, dft=True)
    te.launch(te.fused_launch(p, seg, x.shape[0], xt.stride(0), {"x": xt, **const.on(xt.device), **t}))
    torch.cuda.synchronize()
    return {k: v.cpu().numpy() for k, v in t.items()}


def case(name, x, n_fft=256, prec="fp32", seg=2):
    try:
        r = raw(x, n_fft, prec, seg)
        p = make_params(n_fft=n_fft, k=4, segments=seg, precision=prec)
        ran = te.fused_runner(p, seg)(torch.from_numpy(x).cuda())
        torch.cuda.synchronize()
        flagged = np.flatnonzero(r["bad"]).tolist()
        rec = {"kernel_bad": flagged, "runner_bad": ran.bad_rows.tolist(),
               "frames_nonfinite": np.flatnonzero(~np.isfinite(x).all(1)).tolist(),
               "bins": r["bins"][:8].tolist(), "power": r["power"][:8].tolist()}
        # a finite row flagged: is it flagged alone too, and where is its spectrum large?
        for row in [i for i in flagged if np.isfinite(x[i]).all()][:2]:
            alone = raw(x[row:row + 1].copy(), n_fft, prec, seg)
            rec[f"row{row}_alone_bad"] = int(alone["bad"][0])
            rec[f"row{row}_absmax"] = float(np.abs(x[row]).max())
            rec[f"row{row}_tf32_bad"] = int(raw(x[row:row + 1].copy(), n_fft, "tf32", seg)["bad"][0])
        out[name] = rec
    except Exception:
        out[name] = {"error": traceback.format_exc()[-1500:]}
    print(name, json.dumps(out[name])[:600], flush=True)


rng = np.random.default_rng(5)
x = rng.standard_normal((6, 384)).astype(np.float32)
case("finite", x.copy())
for prec in ("fp32", "tf32", "bf16"):
    y = x.copy(); y[2, 10] = np.nan; case(f"nan_row2_{prec}", y, prec=prec)
    y = x.copy(); y[4, 300] = np.inf; case(f"inf_row4_{prec}", y, prec=prec)
    y = x.copy(); y[1, 5] = 1e30; y[1, 6] = -1e30; case(f"overflow_row1_{prec}", y, prec=prec)
for n in (512, 1024, 2048, 4096):
    z = (rng.standard_normal((4096, n + n // 2)) * 5 + 10).astype(np.float32)
    case(f"bf16_{n}", z, n_fft=n, prec="bf16")
y = x.copy(); y[2, 10] = np.nan
try:
    res = welchpeaks.welch_peaks(y, k=4, segments=2, strategy="triton-fused")
    out["api_raise"] = "no error"
except Exception as e:
    out["api_raise"] = f"{type(e).__name__}: {e}"
print("api_raise", out["api_raise"], flush=True)
open(os.path.join(os.environ.get("OUT", "/tmp"), "nan-probe.json"), "w").write(json.dumps(out, indent=1))
