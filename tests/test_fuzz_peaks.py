"""Fuzzing the public call: random inputs and parameters for every CPU execution.

Asserted for every example: only ValueError or TypeError escape; where executions succeed they
agree in float64 (the same bins with the same power, or at a near tie or at the round-off floor
powers equal within the precision); no result holds infinite power, a bin outside
[-1, n_bins), or a NaN power in a slot whose bin is not -1. The other subjects are in
test_fuzz_*.py (docs/reliability.md, "The fuzz suite"); the strategies they share are in
fuzzing.py, whose ``WELCHPEAKS_FUZZ_EXAMPLES`` sets every count.

CI runs at least 2,000 examples in all; the deep profile runs 50,000 or more by hand:

    WELCHPEAKS_FUZZ_EXAMPLES=20000 WELCHPEAKS_FUZZ_RANDOM=1 pytest tests/test_fuzz_*.py -q
"""

import pytest
from hypothesis import given

from fuzzing import _agree, _check, _run, calls, fuzz


@pytest.mark.slow
@fuzz
@given(calls())
def test_cpu_executions_fail_cleanly_or_agree(call):
    x, kw = call
    out = {s: _run(x, kw, s, "float64") for s in ("numpy", "fused-cpu")}
    for res, _ in out.values():
        if res is not None:
            _check(res, kw["n_fft"])
    (a, ea), (b, eb) = out["numpy"], out["fused-cpu"]
    assert (a is None) == (b is None), (ea, eb)
    if a is not None:
        _agree(a, b, x, kw)


@pytest.mark.slow
@fuzz
@given(calls())
def test_float32_compute_fails_cleanly(call):
    x, kw = call
    for s in ("numpy", "fused-cpu"):
        res, _ = _run(x, kw, s, "float32")
        if res is not None:
            _check(res, kw["n_fft"])
