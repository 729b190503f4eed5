"""`welchpeaks gpu-check`: the Triton kernels compiled for an H100 (sm_90) without one, as the
JIT compiles them, under the newest Triton installed here and under Triton 3.6.0 (the version
the lent GPU machines run; installed with pip into the cache directory, used by the child
processes through ``--triton``)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton")

from welchpeaks.backends import triton_exec as te  # noqa: E402
from welchpeaks.bench import gpu_check as gc  # noqa: E402
from welchpeaks.bench.gpu_check import Config  # noqa: E402

#: every fused n_fft class in fp32 (each radix layout; padded contractions under Triton 3.6),
#: with different k, segment counts and modes (the JIT specialises k == 1 and segments == 1);
#: one tf32 and one bf16; the block kernel
SUBSET = [Config("fused", 64, 16, 2, "peaks", "sm_90"), Config("fused", 128, 1, 1, "bins", "sm_90"),
          Config("fused", 256, 16, 2, "peaks", "sm_90"), Config("fused", 512, 64, 8, "peaks", "sm_90"),
          Config("fused", 1024, 16, 2, "bins", "sm_90"), Config("fused", 2048, 4, 64, "peaks", "sm_90"),
          Config("fused", 4096, 16, 2, "peaks", "sm_90"), Config("fused", 1024, 16, 2, "peaks", "sm_90", "tf32"),
          Config("fused", 128, 16, 2, "peaks", "sm_90", "bf16"), Config("block", 256, 16, 2, "peaks", "sm_90"),
          Config("block", 4096, 64, 8, "bins", "sm_90")]
pytestmark = pytest.mark.gpu


def _assert_compiles_clean(rows, found, version_prefix):
    for row in rows + found:
        label = row.get("kernel", "find_peaks"), row.get("n_fft", row.get("n")), row.get("precision")
        assert row["status"] == "ok", (label, row["status"])
        assert row["triton"].startswith(version_prefix), (label, row["triton"])
        assert row["stack"] == 0 and row["local_memory"] == 0, (label, row["stack"])
        assert 0 < row["reg"] <= 255 and row["ctas_per_sm"] >= 1, (label, row["reg"], row["ctas_per_sm"])
        assert row["divisibility_16"] > 0, label  # compiled with the launch's alignment hints, as the JIT does
        assert gc.verdict(row, clock=False) == [], (label, gc.verdict(row, clock=False))
    for row in rows:
        assert row["uses_dot"] == (row["kernel"] == "fused"), row["kernel"]
        assert row["tensor_core_instructions"] == row["uses_dot"] and (row["tensor_core_sass"] > 0) == row["uses_dot"]
        roof = row["roofline"]
        assert roof["us_issue_bound"] > 0 and roof["warp_instructions_per_row"] > 0 and roof["barriers_per_row"] > 0


#: under the newest Triton (ahead of the lent machine's 3.6, which compiles all of SUBSET): the
#: smallest and largest fused layouts, bf16 and the block kernel
NEWEST = [c for c in SUBSET if (c.kernel, c.n_fft, c.precision) in
          {("fused", 64, "fp32"), ("fused", 4096, "fp32"), ("fused", 128, "bf16"), ("block", 256, "fp32")}]


def _check_subset(triton_path, subset=SUBSET):
    rows = gc.check_all(subset, timeout_s=600, triton_path=triton_path, jobs=2)
    found = gc.find_peaks_all([1025], ["sm_90"], timeout_s=600, triton_path=triton_path)
    return rows, found


@pytest.mark.slow
def test_the_shipped_kernels_compile_for_an_h100_under_the_newest_triton():
    import triton

    rows, found = _check_subset(None, NEWEST)
    assert len(rows) == len(NEWEST) == 4
    _assert_compiles_clean(rows, found, triton.__version__)


@pytest.mark.slow
def test_the_shipped_kernels_compile_for_an_h100_under_triton_3_6():
    """Triton 3.6's NVIDIA backend takes K >= 16 for every 32-bit ``tl.dot``: the fused
    kernel's radix-8 steps compile because each is one real product of ``[re | im]`` (K 16)."""
    # installed once per machine (not in the test's private cache directory); needs the index once
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "welchpeaks-tests"
    try:
        folder = gc.triton_folder("3.6.0", root)
    except RuntimeError as exc:  # no package index here: this check cannot run (reported as skipped)
        pytest.skip(f"Triton 3.6.0 is not installed under {root} and could not be: {exc}")
    rows, found = _check_subset(folder)
    _assert_compiles_clean(rows, found, "3.6.0")
    fused = [r for r in rows if r["kernel"] == "fused"]
    assert {r["dot_min_k"] for r in fused} == {16} and min(min(r["contractions"]) for r in fused) == 16


def test_gpu_check_compiles_the_launch_the_execution_makes(monkeypatch):
    """The launch gpu-check compiles is the one the runner makes for the same call: the same
    kernel, constexprs, options, grid and integer arguments (hence the same specialisation).
    The runner's launch is recorded, not run."""
    from welchpeaks.params import make_params

    seen = []
    monkeypatch.setattr(te, "launch", seen.append)
    for cfg in (Config("fused", 256, 16, 2, "peaks", "sm_90", "fp32", 48), Config("fused", 64, 1, 1, "bins", "sm_90",
                                                                              "bf16", 1),
                Config("block", 512, 4, 3, "peaks", "sm_90", "fp32", 33)):
        p = make_params(n_fft=cfg.n_fft, k=cfg.k, segments=cfg.segments, mode=cfg.mode, precision=cfg.precision)
        x = np.zeros((cfg.batch, p.frame_length(cfg.segments)), np.float32)
        if cfg.kernel == "fused":
            te.fused_runner(p, cfg.segments)(x)
        else:
            import torch

            te.block_runner(p, cfg.segments)(torch.fft.rfft(torch.zeros(cfg.batch, cfg.segments, cfg.n_fft), dim=-1))
        ran, checked = seen[-1], gc.config_launch(cfg)
        assert (ran.module, ran.kernel, ran.grid, ran.constexprs, ran.options) == (
            checked.module, checked.kernel, checked.grid, checked.constexprs, checked.options), cfg
        ints = lambda spec: {n: v for n, v in spec.args.items() if isinstance(v, int)}  # noqa: E731
        assert ints(ran) == ints(checked) and ran.args.keys() == checked.args.keys(), cfg
        assert gc.compile_key(ran) == gc.compile_key(checked)


def test_a_triton_that_needs_larger_products_is_refused_with_the_fix(monkeypatch):
    """The fused kernel's products are checked against the installed Triton's least ``tl.dot``
    K before anything compiles: a version needing more than the kernel contracts gets a
    one-line error naming the way out, not a compiler traceback."""
    import welchpeaks

    assert te.contractions(64) == [16, 16] and te.contractions(128) == [32, 16]
    assert te.contractions(4096) == [32, 32, 32]
    monkeypatch.setattr(te, "dot_min_k", lambda precision, target=None: 32)
    x = np.zeros((2, 96), np.float32)
    with pytest.raises(ValueError, match=r"n_fft=64.*at least 32.*\[16, 16\].*triton-block"):
        welchpeaks.welch_peaks(x, n_fft=64, k=4, segments=2, strategy="triton-fused")


def test_dot_min_k_is_the_installed_tritons():
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", 90, 32)
    major, minor = (int(v) for v in triton.__version__.split(".")[:2])
    assert te.dot_min_k("bf16", target) == 16
    assert te.dot_min_k("fp32", target) == (8 if (major, minor) >= (3, 8) else 16)


@pytest.mark.slow
def test_gpu_check_cli_reports_the_prediction(tmp_path):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    out = tmp_path / "gc.json"
    res = CliRunner().invoke(app, ["gpu-check", "--kernel", "fused", "--n-fft", "256", "--k", "16", "--segments", "1,2",
                                   "--mode", "peaks", "--arch", "sm_90", "--precision", "tf32", "--jobs", "1",
                                   "--json", str(out), "--strict"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    rows = doc["configurations"]
    assert doc["summary"]["compiled"] == 2 and [r["stack"] for r in rows] == [0, 0]
    assert not rows[1].get("shared_compile")  # segments == 1 is specialised by the JIT: two compiles
    roof = rows[1]["roofline"]
    assert roof["batch"] == 65536 and roof["us_memory_floor"] == pytest.approx(65536 * 384 * 4 / 3350 / 1e3)
    assert 0 < roof["of_bandwidth_predicted"] <= 1
    assert "SASS/row" in res.output and "us issue" in res.output
    res = CliRunner().invoke(app, ["gpu-check", "--triton", str(tmp_path)])
    assert res.exit_code == 2 and "holds no triton package" in res.output


def test_roofline_of_the_fused_kernel():
    roof = gc.roofline(Config("fused", 256, 16, 2, "peaks", "sm_90", "fp32"))
    assert roof["bytes_read_per_row"] == 384 * 4  # 50% overlap: every sample read once
    # fp32: 3 passes; each radix r one real product [rows, 2r] @ [2r, 2r] (8 n r flops); radices 16 x 16
    assert roof["tensor_flops_per_row"] == 3 * 8 * 256 * (16 + 16)
    assert roof["ns_per_row_memory_floor"] == pytest.approx(384 * 4 / 3350)
    assert gc.check(Config("fused", 300, 4, 2, "peaks", "sm_90"))["status"].startswith("unsupported")
