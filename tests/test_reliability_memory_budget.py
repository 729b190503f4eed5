"""Regression tests for the defects found by fuzzing (issue 13 and after): memory budget. Each names the
case it keeps from coming back."""

import numpy as np
import pytest

import welchpeaks


def test_working_memory_is_the_planned_batch_s_whatever_batch_compiled_the_program():
    """Programs are shared by every batch of one graph structure; the memory a call needs is
    its own batch's (a program first compiled for 2 rows once hid a 40-row call's need)."""
    x = np.random.default_rng(8).standard_normal((40, 2048))
    welchpeaks.WelchPeaks(segments=None, strategy="numpy", n_fft=128)(x[:2])
    wp = welchpeaks.WelchPeaks(segments=None, strategy="numpy", n_fft=128, max_memory=1 << 20)
    res = wp(x)
    assert wp._last_call.working_bytes > 1 << 20 and 1 <= wp._last_call.block_rows < 40
    np.testing.assert_array_equal(res.bins, welchpeaks.welch_peaks(x, strategy="numpy", n_fft=128).bins)


def test_working_memory_budget_blocks_rows_and_steers_auto():
    from welchpeaks.ir import tracing
    from welchpeaks.plan.io import peak_working_bytes

    x = np.random.default_rng(6).standard_normal((40, 2048))
    ref = welchpeaks.welch_peaks(x, strategy="numpy")  # every segment: 15 per row
    wp = welchpeaks.WelchPeaks(segments=None, strategy="numpy", max_memory=1 << 20)
    res = wp(x)
    call = wp._last_call
    assert call.working_bytes == peak_working_bytes(call.graph) > 1 << 20
    assert call.block_rows is not None and call.block_rows < 40 and "blocks of" in wp.explain()["why"]
    np.testing.assert_array_equal(res.bins, ref.bins)  # the same answer, computed in bounded blocks
    np.testing.assert_array_equal(res.power, ref.power)
    # auto does not pick an execution over the budget: numpy's working set is refused here
    auto = welchpeaks.WelchPeaks(segments=None, max_memory=1 << 20)
    auto(x)
    exp = auto.explain()
    assert exp["strategy"] == "fused-cpu" and exp["block_rows"] is None
    assert "over the budget" in exp["costs"]["numpy"]["why"]
    # a row over the budget: its segments run in pieces through the same graph's kernels
    long = np.random.default_rng(7).standard_normal((3, 300_000))
    long[1] += 0.1 * np.sin(0.3 * np.arange(300_000))
    oracle = welchpeaks.welch_peaks(long, strategy="numpy", segments=None, k=40)
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-6)):
        wp = welchpeaks.WelchPeaks(segments=None, strategy="numpy", max_memory=1 << 20, k=40)
        with tracing() as log:
            got = wp(long.astype(dtype))
        call = wp._last_call
        assert call.segment_piece is not None and call.segment_piece < call.n_seg
        assert "in pieces of" in wp.explain()["why"]
        pieces = -(-call.n_seg // call.segment_piece)
        ops = [op for _, op, _ in log]
        assert ops.count("rfft") == ops.count("segment_mean") == pieces and ops.count("topk") == 1
        assert peak_working_bytes(call.graph) * call.segment_piece / call.n_seg <= 1 << 20
        np.testing.assert_array_equal(got.bins, oracle.bins)
        np.testing.assert_allclose(got.power, oracle.power, rtol=rtol)
    with pytest.raises(ValueError, match="below 1 MiB"):
        welchpeaks.WelchPeaks(max_memory=10)


def test_an_execution_that_cannot_split_a_row_over_the_budget_is_refused_with_a_fix_that_works():
    """fused-cpu at a non-power-of-two n_fft needs each row's segments at once: over the budget
    it is refused naming max_memory, and the advice it gives (strategy='auto') runs within the
    budget, equal to the unbounded call."""
    x = np.random.default_rng(9).standard_normal((2, 600_000)).astype(np.float32)
    kw = dict(n_fft=200, k=3, segments=None)
    with pytest.raises(ValueError, match=r"over the budget of 1 MiB.*cannot compute a row's segments in pieces.*"
                                         r"max_memory=.*strategy='auto'"):
        welchpeaks.welch_peaks(x, strategy="fused-cpu", max_memory=1 << 20, **kw)
    wp = welchpeaks.WelchPeaks(max_memory=1 << 20, **kw)
    got = wp(x)
    assert wp._last_call.mode == "pieces of segments"
    want = welchpeaks.welch_peaks(x, strategy=got.strategy, **kw)
    np.testing.assert_array_equal(got.bins, want.bins)
