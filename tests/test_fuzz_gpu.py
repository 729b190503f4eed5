"""Fuzzing the GPU executions against numpy: torch, and the Triton kernels in the interpreter
(CPU tensors) on small shapes."""


import pytest
from hypothesis import given, settings

from fuzzing import EXAMPLES, _agree, _check, _run, calls


torch = pytest.importorskip("torch")


@pytest.mark.slow
@settings(max_examples=max(EXAMPLES // 2, 10), deadline=None, derandomize=True)
@given(calls())
def test_torch_agrees_with_numpy(call):
    x, kw = call
    a, ea = _run(x, kw, "numpy", "float64")
    b, eb = _run(x, kw, "torch", "float64")
    assert (a is None) == (b is None), (ea, eb)
    if a is not None:
        _check(b, kw["n_fft"])
        _agree(a, b, x, kw)


pytest.importorskip("triton")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["triton-block", "triton-fused"])
def test_triton_kernels_fail_cleanly_or_agree(strategy):
    """The Triton kernels in the interpreter (CPU tensors), on small shapes, against numpy in
    float32 (they compute in float32)."""

    @settings(max_examples=max(EXAMPLES // 8, 10), deadline=None, derandomize=True)
    @given(calls())
    def run(call):
        x, kw = call
        if kw["n_fft"] > 64 or (strategy == "triton-fused" and kw["n_fft"] != 64):  # its smallest segment
            kw["n_fft"], kw["hop"], kw["window"] = 64, None, "hann"
        if strategy == "triton-fused":
            kw["k"] = min(kw["k"], 64)
        a, ea = _run(x, kw, "numpy", "float32")
        b, eb = _run(x, kw, strategy, "float32")
        if b is not None:
            _check(b.numpy(), kw["n_fft"])
        if a is not None and b is not None:
            _agree(a, b.numpy(), x, kw, compute="float32")
        elif (a is None) != (b is None):
            # the one the other refuses: an overflow seen by one precision path and not the other
            assert "overflow" in str(ea or eb) or "does not fit" in str(ea or eb), (ea, eb)

    run()
