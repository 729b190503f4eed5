"""The fused CPU pass on few, long rows: a call with fewer blocks of 32 rows than workers shares
each block's segments out to the workers by chunks, and the results are the same bits whatever
the number of workers and threads, with or without that split, and whatever the pieces a long
row is fed in (the summation order is fixed by the segment indices: chunks of
``numba.fused.CHUNK`` segments, each summed from zero, added in order)."""

import contextlib
import dataclasses
import types

import numba
import numpy as np
import pytest

import welchpeaks
from welchpeaks.backends import fused_cpu
from welchpeaks.backends.numba.fused import CHUNK
from welchpeaks.params import make_params

from helpers import assert_matches_reference, reference_psd

THREADS = (1, 2) if numba.config.NUMBA_NUM_THREADS >= 2 else (1,)


@pytest.fixture(autouse=True)
def restore_threads():
    before = numba.get_num_threads()
    yield
    numba.set_num_threads(before)


@pytest.fixture
def workers(monkeypatch):
    """``with workers(w):`` the fused pass uses ``w`` workers (the kernel's worker count, one per
    numba thread otherwise), whatever the cores of this machine; the threads run them."""

    @contextlib.contextmanager
    def use(w):
        with monkeypatch.context() as m:
            m.setattr(fused_cpu, "numba_threads", lambda: w)
            yield

    return use


def in_pieces(plan, x, sizes):
    """The rows ``x`` fed to ``plan`` in pieces of ``sizes`` segments (cycled; the last piece
    takes what is left)."""
    p, n_seg = plan.params, plan.n_seg
    rows = plan.pieces(x.shape[0], x.dtype)
    s0, i = 0, 0
    while s0 < n_seg:
        cnt = min(sizes[i % len(sizes)], n_seg - s0)
        rows.feed(x[:, s0 * p.hop: s0 * p.hop + p.frame_length(cnt)], cnt, last=s0 + cnt == n_seg)
        s0, i = s0 + cnt, i + 1
    return rows.result()


def assert_same(got, want, what):
    for f in ("bins", "power", "fbins", "bad_rows"):
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f"{what}: {f}")


def signal(rng, rows, length, dtype):
    """Noise and a tone on a large offset (the shift on loading matters), one row with a NaN."""
    t = np.arange(length)
    x = rng.standard_normal((rows, length)) + 0.5 * np.sin(0.3 * t) + 100.0
    if rows >= 3:
        x[1, length // 2] = np.nan
    return x.astype(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("detrend", ["constant", "linear", False])
def test_threads_split_and_pieces_give_the_same_bits(workers, dtype, detrend):
    """1 or 2 numba threads, 1, 2 or 4 workers (4: more than this machine's threads, so that two
    blocks are split too), and long rows fed in pieces (on chunk boundaries or not, some pieces
    split, some not): every result equals the one-worker call, bit for bit."""
    rng = np.random.default_rng(7)
    n_fft, n_seg = 64, 10 * CHUNK - 40  # ten chunks, the last one short
    p = make_params(n_fft=n_fft, k=6, detrend=detrend)
    plan = fused_cpu.FusedCpuPlan(p, n_seg, np.dtype(dtype))
    assert not plan.whole  # long frames: LongRows takes this plan
    for rows in (1, 3, 17, 33):
        x = signal(rng, rows, p.frame_length(n_seg), dtype)
        with workers(1):
            want = plan.run(x)
        assert plan.last_workers == 1
        assert list(want.bad_rows) == ([1] if rows >= 3 else [])
        for threads in THREADS:  # one worker a thread
            numba.set_num_threads(threads)
            assert_same(plan.run(x), want, f"rows {rows}, {threads} threads")
            assert plan.last_workers == fused_cpu.split_workers(rows, n_seg, threads)
        for w in (2, 4):
            for threads in THREADS:
                numba.set_num_threads(threads)
                with workers(w):
                    assert_same(plan.run(x), want, f"rows {rows}, {w} workers, {threads} threads")
                assert plan.last_workers == w  # split, but for 33 rows (two blocks) on 2 workers
        for sizes in ([CHUNK], [50], [97, 13], [n_seg - 1], [1, 2 * CHUNK + 5]):
            for w in (1, 2, 4):
                with workers(w):
                    assert_same(in_pieces(plan, x, sizes), want, f"rows {rows}, pieces {sizes}, {w} workers")


def test_whole_frames_split_give_the_same_bits(workers):
    """Short frames whose whole frame fits the tile (small n_fft, many segments): split or not,
    the same bits."""
    rng = np.random.default_rng(8)
    n_seg = 8 * CHUNK + 3  # nine chunks: four workers split one block too
    p = make_params(n_fft=16, hop=4, k=4)
    plan = fused_cpu.FusedCpuPlan(p, n_seg, np.dtype(np.float32))
    assert plan.whole
    for rows in (2, 40):
        x = signal(rng, rows, p.frame_length(n_seg) + 5, np.float32)
        with workers(1):
            want = plan.run(x)
        for w in (1, 2, 4):
            for threads in THREADS:
                numba.set_num_threads(threads)
                with workers(w):
                    assert_same(plan.run(x), want, f"rows {rows}, {w} workers, {threads} threads")
                assert plan.last_workers == w  # split, but for 40 rows (two blocks) on 2 workers


def test_few_rows_use_every_worker(workers):
    """16 rows of many segments are one block, computed by both workers of two (each worker
    computes at least one chunk a round: ``work`` counts them), on pieces of long rows too; too
    few chunks or one worker leave it to one."""
    p = make_params(n_fft=64, k=4)
    n_seg = 8 * CHUNK
    plan = fused_cpu.FusedCpuPlan(p, n_seg, np.dtype(np.float32))
    x = signal(np.random.default_rng(9), 16, p.frame_length(n_seg), np.float32)
    with workers(2):
        plan.run(x)
        assert plan.last_workers == 2 and plan.work[:2].min() > 0 and plan.work[:2].sum() == 8  # eight chunks
        rows = plan.pieces(16, np.float32)
        rows.feed(x[:, :p.frame_length(4 * CHUNK + 7)], 4 * CHUNK + 7)  # five chunks, or parts of them
        assert plan.last_workers == 2 and plan.work[:2].sum() == 5
        short = fused_cpu.FusedCpuPlan(p, CHUNK + 1, np.dtype(np.float32))
        short.run(x[:, :p.frame_length(CHUNK + 1)])
        assert short.last_workers == 1  # two chunks on two workers: not worth a split
    with workers(1):
        plan.run(x)
        assert plan.last_workers == 1


def test_split_workers():
    assert fused_cpu.split_workers(16, 7811, 1) == 1
    assert fused_cpu.split_workers(16, 7811, 2) == 2  # one block, split by chunks
    assert fused_cpu.split_workers(32, 4 * CHUNK, 2) == 2
    assert fused_cpu.split_workers(32, 4 * CHUNK - 1, 2) == 2  # four chunks, the last one short
    assert fused_cpu.split_workers(16, 3 * CHUNK, 2) == 1  # fewer than 2 chunks a worker
    assert fused_cpu.split_workers(64, 7811, 2) == 2  # two blocks: one each, no split
    assert fused_cpu.split_workers(33, 7811, 4) == 4
    assert fused_cpu.split_workers(1000, 10, 4) == 4
    assert fused_cpu.split_workers(100, 10, 8) == 4  # four blocks, too few segments to split
    assert fused_cpu.split_workers(0, 10, 4) == 1


def test_an_unfinished_call_needs_the_completed_chunks():
    p = make_params(n_fft=64, k=4)
    plan = fused_cpu.FusedCpuPlan(p, 2 * CHUNK, np.dtype(np.float32))
    x = np.zeros((2, p.frame_length(CHUNK)), np.float32)
    none = np.empty((0, p.n_bins), np.float32)
    carry = np.zeros((2, p.n_bins), np.float32)
    with pytest.raises(ValueError, match="complete a chunk"):
        plan._call(x, CHUNK, (none,) * 3, carry, none, False, False, np.empty(0, np.float32))


@pytest.mark.parametrize("dtype,rows", [(np.float64, 3), (np.float32, 17)])
def test_split_rows_match_the_reference(workers, dtype, rows):
    """Rows split by chunks stay within the usual tolerance of the float64 reference (scipy's
    Welch PSD): exact bins in float64, float32 to its tolerance; through the plan on two
    workers and through the public API."""
    rng = np.random.default_rng(10)
    n_fft = 256
    p = make_params(n_fft=n_fft, k=8, segments=None)
    n_seg = 9 * CHUNK + 11
    x = signal(rng, rows, p.frame_length(n_seg), dtype)
    x[1] = rng.standard_normal(x.shape[1])  # every row finite here
    psd = reference_psd(x, p, n_seg)
    plan = fused_cpu.FusedCpuPlan(p, n_seg, np.dtype(dtype))
    with workers(2):
        got = plan.run(x)
        api = welchpeaks.welch_peaks(x, n_fft=n_fft, k=8, segments=None, strategy="fused-cpu",
                                     dtype=np.dtype(dtype).name)
    assert plan.last_workers == 2
    res = types.SimpleNamespace(bins=got.bins, power=got.power, freqs=got.fbins * p.freq_scale())
    assert_matches_reference(res, psd, p, exact=dtype == np.float64)
    assert_matches_reference(api, psd, p, exact=dtype == np.float64)
    np.testing.assert_array_equal(api.bins, got.bins)


def test_filtered_pass_sums_in_the_same_order(workers):
    """The fused pass with scipy's filters sums the segments in the same chunks as the plain
    pass (``block_sums`` on the same records), so it still equals the PSD pass (here split on two workers) then
    find_peaks, bit for bit, on rows of many chunks."""
    from welchpeaks.api.detailed import make_filters
    from welchpeaks.backends import filtered

    n_seg = 3 * CHUNK + 9
    p = make_params(n_fft=64, k=5, segments=n_seg, filters=make_filters(prominence=0.0, measures=("snr",)))
    x = signal(np.random.default_rng(11), 5, p.frame_length(n_seg), np.float32)
    got = fused_cpu.FusedFindPeaks(p, n_seg, np.float32).run(x)
    psd = fused_cpu.FusedCpuPlan(dataclasses.replace(p, mode="psd", k=p.n_bins), n_seg, np.dtype(np.float32))
    with workers(2):
        want = filtered.host_rows(p)(psd.run(x).power)
    assert psd.last_workers == 2
    for f in ("bins", "power", "fbins"):
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
