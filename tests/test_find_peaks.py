"""welchpeaks.find_peaks against scipy.signal.find_peaks, row by row (the oracle)."""

import math

import numpy as np
import pytest
import scipy.signal as ss

import welchpeaks


def _rows(rng, n_rows, n, quantized=False):
    """Noise plus a few tones; ``quantized`` rounds to few levels (plateaus, equal heights)."""
    t = np.arange(n)
    x = rng.standard_normal((n_rows, n)) * rng.uniform(0.1, 2.0, (n_rows, 1))
    for _ in range(3):
        x += rng.uniform(0, 3, (n_rows, 1)) * np.sin(2 * np.pi * rng.uniform(0, 0.5, (n_rows, 1)) * t)
    return np.round(x * 2) / 2 if quantized else x


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _random_filters(rng, quantized):
    kw = {}
    if rng.random() < 0.5:
        kw["height"] = _pick(rng, [rng.uniform(-1, 1), (rng.uniform(-1, 0), None), (None, rng.uniform(1, 4)),
                                   (rng.uniform(-1, 0.5), rng.uniform(1, 4))])
    if rng.random() < 0.4:
        kw["threshold"] = _pick(rng, [rng.uniform(0, 0.5), (None, rng.uniform(0.5, 3)), (0.1, 2.0)])
    if rng.random() < 0.5 and not quantized:  # equal heights: scipy's distance order is its sort's
        kw["distance"] = _pick(rng, [1, 2, rng.uniform(1, 20)])
    if rng.random() < 0.6:
        kw["prominence"] = _pick(rng, [None, rng.uniform(0, 2), (None, None), (rng.uniform(0, 1), rng.uniform(2, 5))])
        if kw["prominence"] is None:
            del kw["prominence"]
    if rng.random() < 0.4:
        kw["width"] = _pick(rng, [(None, None), rng.uniform(0.5, 3), (1.0, rng.uniform(2, 10))])
        kw["rel_height"] = _pick(rng, [0.5, rng.uniform(0, 1.5)])
    if rng.random() < 0.3 and ("prominence" in kw or "width" in kw):
        kw["wlen"] = _pick(rng, [rng.integers(2, 50), rng.uniform(1.5, 80)])
    if rng.random() < 0.3:
        kw["plateau_size"] = _pick(rng, [(None, None), 1, 2, (None, 1), (2, 4), (1.5, None)])
    return kw


def _random_cases(seed, total, max_n, max_rows, quantized_share, k_none_share, max_k):
    """(rows, filters, k) of random lengths, row counts and filters, ``total`` rows in all."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < total:
        n = int(rng.integers(3, max_n))
        n_rows = int(rng.integers(1, max_rows))
        quantized = rng.random() < quantized_share
        x = _rows(rng, n_rows, n, quantized)
        kw = _random_filters(rng, quantized)
        k = None if rng.random() < k_none_share else int(rng.integers(1, max_k))
        yield x, kw, k
        done += n_rows


def _tied_under_distance(row, kw):
    """Whether ``distance`` applies to ``row`` and two of its peaks before distance (after
    height and threshold) are equal in height: there scipy's answer depends on its unstable
    sort (issue 35, defect 17), so the oracle compares only rows without such ties, and
    :func:`test_distance_ties_go_to_the_lower_index` checks those against the stated rule."""
    if "distance" not in kw:
        return False
    heights = row[ss.find_peaks(row, **{f: kw[f] for f in ("height", "threshold") if f in kw})[0]]
    return np.unique(heights).size < heights.size


def _check_rows(x, got, kw, k):
    """Every row equals scipy's peaks, then the top k by height (ties to the lower index)."""
    props_kw = {f: kw[f] for f in ("height", "threshold", "distance", "prominence", "width", "wlen", "rel_height",
                                   "plateau_size") if f in kw}
    rows = got.to_list()
    for r in range(x.shape[0]):
        assert not _tied_under_distance(x[r], kw), "equal peak heights under distance: scipy's answer is its sort's"
        peaks, props = ss.find_peaks(x[r], **props_kw)
        order = np.lexsort((peaks, -x[r][peaks]))[:k]  # highest first, ties to the lower index
        assert got.counts[r] == len(order)
        np.testing.assert_array_equal(got.indices[r, :len(order)], peaks[order])
        assert np.all(got.indices[r, len(order):] == -1)
        mine_peaks, mine = rows[r]
        np.testing.assert_array_equal(mine_peaks, np.sort(peaks[order]))
        keep = np.sort(order)
        assert list(mine) == list(props)  # scipy's properties, in its order
        for name, v in props.items():
            want = v[keep]
            if name in ("left_bases", "right_bases", "plateau_sizes", "left_edges", "right_edges"):
                np.testing.assert_array_equal(mine[name], want)
            else:
                np.testing.assert_allclose(mine[name], want, rtol=1e-9, atol=0)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:some peaks have")
def test_oracle_10000_random_rows():
    """10,000 rows of random lengths and filters (plateaus included): scipy's indices exactly,
    prominences and widths to 1e-9 relative."""
    for x, kw, k in _random_cases(2026, 10_000, 1500, 200, 0.25, 0.5, 20):
        got = welchpeaks.find_peaks(x, k=k, **kw)
        _check_rows(x, got, kw, k if k is not None else x.shape[1])



@pytest.mark.slow
def test_prominences_of_every_peak_on_rows_of_few_levels():
    """The one-sweep prominences (k large against the row) and the per-peak walks (k small):
    scipy's prominences and bases exactly, on rows of 2 to 5 levels (plateaus that are peaks
    and that are not, equal lows on both sides, plateaus at the ends) and on noise. The long
    rows rank by a threshold with many ties at it (then by insertion) or few (by counting)."""
    rng = np.random.default_rng(5)
    for levels in (2, 3, 5, 1000):
        for n in (3, 4, 5, 7, 16, 33, 200, 1000):
            x = rng.integers(0, levels, (300, n)).astype(float)
            for k, kw in ((None, {"prominence": (None, None)}), (1, {"prominence": 1.0}),
                          (2, {"prominence": (None, None), "height": 1.0}), (16, {})):
                _check_rows(x, welchpeaks.find_peaks(x, k=k, **kw), kw, n if k is None else k)

def test_padded_shapes_tensors_and_edges():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 400))
    r = welchpeaks.find_peaks(x, k=5, prominence=0.5)
    assert r.shape == (2, 3, 5) and r.counts.shape == (2, 3) and r.properties["prominences"].shape == (2, 3, 5)
    flat = welchpeaks.find_peaks(x.reshape(6, 400), k=5, prominence=0.5)
    np.testing.assert_array_equal(flat.indices, r.indices.reshape(6, 5))
    t = welchpeaks.find_peaks(torch.from_numpy(x.astype(np.float32)), k=5, prominence=0.5)
    assert torch.is_tensor(t.indices) and torch.is_tensor(t.properties["prominences"])
    ref = welchpeaks.find_peaks(x.astype(np.float32), k=5, prominence=0.5)  # float32 rows, as float64
    np.testing.assert_array_equal(t.indices.numpy(), ref.indices)
    # k=None pads to the fullest row; k larger than any row pads with -1/NaN
    full = welchpeaks.find_peaks(x, k=None)
    assert full.shape[-1] == full.counts.max()
    big = welchpeaks.find_peaks(x[0, 0, :10], k=50)
    assert big.shape == (50,) and np.all(big.indices[big.counts:] == -1) and np.isnan(big.heights[big.counts:]).all()
    # edges: the first and last samples are peaks only with edges=True
    e = np.array([5.0, 1.0, 3.0, 1.0, 4.0])
    assert welchpeaks.find_peaks(e).indices.tolist() == [2]
    assert welchpeaks.find_peaks(e, edges=True).indices.tolist() == [0, 4, 2]
    with_prom = welchpeaks.find_peaks(e, edges=True, prominence=(None, None))
    assert with_prom.properties["prominences"].tolist() == [4.0, 3.0, 2.0]


def test_errors():
    x = np.random.default_rng(2).standard_normal((3, 50))
    bad = x.copy()
    bad[2, 7] = np.nan
    with pytest.raises(ValueError, match=r"row 2 \(of 3\)"):
        welchpeaks.find_peaks(bad)
    with pytest.raises(ValueError, match=r"row \(1, 0\) \(of \(2, 3\)\)"):  # in the input's own indices
        welchpeaks.find_peaks(np.stack([x, bad[[2, 0, 1]]]))
    with pytest.raises(ValueError, match="distance=0.5 must be >= 1"):
        welchpeaks.find_peaks(x, distance=0.5)
    with pytest.raises(ValueError, match="distance=-1 must be >= 1"):
        welchpeaks.find_peaks(x, distance=-1)
    with pytest.raises(ValueError, match="rows is a scalar"):
        welchpeaks.find_peaks(np.array(1.0))
    with pytest.raises(TypeError, match="plateau_size='x' must be a number"):
        welchpeaks.find_peaks(x, plateau_size="x")
    with pytest.raises(TypeError, match="distance='x' must be a number or None$"):
        welchpeaks.find_peaks(x, distance="x")


def test_arguments_read_as_scipy_reads_them():
    """wlen as scipy rounds it (a Python float up, any other number down: np.float32(3.5) is
    3), a (2,) array as a (min, max) pair, a 0-d array distance as a number."""
    x = np.array([0, 5, 0, 1, 2, 1, 0, 6, 0.0])
    for kw in (dict(prominence=0, wlen=np.float32(3.5)), dict(prominence=0, wlen=3.5), dict(prominence=0, wlen=4),
               dict(threshold=np.array([0.5, 5.5])), dict(height=1.0, width=np.array([0.5, 3.0]), distance=np.array(2.0))):
        peaks, props = ss.find_peaks(x, **kw)
        got_peaks, got = welchpeaks.find_peaks(x, **kw).to_list()[0]
        np.testing.assert_array_equal(got_peaks, peaks)
        assert list(got) == list(props)
        for name, v in props.items():
            np.testing.assert_array_equal(got[name], v)
    with pytest.raises(ValueError, match="wlen=1 must be larger than 1"):
        welchpeaks.find_peaks(x, prominence=1, wlen=1)
    with pytest.raises(ValueError, match="rel_height=-1 must be >= 0"):
        welchpeaks.find_peaks(x, width=1, rel_height=-1)
    with pytest.raises(ValueError, match="height=.*pair"):
        welchpeaks.find_peaks(x, height=(1, 2, 3))
    with pytest.raises(TypeError, match="height='a' must be a number"):
        welchpeaks.find_peaks(x, height="a")
    with pytest.raises(ValueError, match="per-sample arrays"):
        welchpeaks.find_peaks(x, height=np.zeros(50))
    with pytest.raises(ValueError, match="k=0 must be a positive integer"):
        welchpeaks.find_peaks(x, k=0)
    with pytest.raises(TypeError, match=r"rows is complex .*pass np.abs\(rows\)") as complex_rows:
        welchpeaks.find_peaks(x + 1j)
    assert "welch" not in str(complex_rows.value)  # find_peaks' own advice, not welch_peaks'


def test_bench_find_peaks_cli(tmp_path):
    import json

    from typer.testing import CliRunner

    from welchpeaks.cli.main import app

    out = tmp_path / "fp.json"
    res = CliRunner().invoke(app, ["bench", "find-peaks", "--rows", "40", "--n", "129", "--repeats", "1",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert [r["config"] for r in data["results"]][:2] == ["local maxima", "distance"]
    assert all(r["same_peaks"] and r["speedup"] > 0 for r in data["results"])
    every = CliRunner().invoke(app, ["bench", "find-peaks", "--rows", "40", "--n", "129", "--repeats", "1", "--k",
                                     "0", "--json", str(out)])
    assert every.exit_code == 0, every.output
    data = json.loads(out.read_text())
    assert data["k"] is None and all(r["same_peaks"] for r in data["results"])
    bad = CliRunner().invoke(app, ["bench", "find-peaks", "--n", "2"])
    assert bad.exit_code != 0 and "--n >= 3" in bad.output


def test_k_highest_decided_lazily_equal_all_filtered_then_cut():
    """With a small k the kernel decides distance, prominence and width from the highest peak
    down and stops at k, the candidates listed from the block index a tier of heights at a
    time (unless neighbours are equal); that must be exactly filtering every peak and keeping
    the k highest (k=None takes that path), ties in height included (quantized rows, and rows
    of four levels without equal neighbours), edges too."""
    rng = np.random.default_rng(77)
    # no two neighbours equal, yet few levels: many equal heights ranked from the block index
    steps = np.cumsum(rng.integers(1, 4, (300, 600)), axis=1) % 4
    for rows in ("distinct", "quantized", "levels"):
        if rows == "levels":
            x = steps.astype(float)
        else:
            x = np.round(rng.standard_normal((300, 600)) * (3 if rows == "quantized" else 1e3)) / 3
        for kw in ({"distance": 4}, {"distance": 9, "prominence": 0.5}, {"prominence": (0.2, None), "width": 1.5},
                   {"distance": 3, "width": (None, None), "wlen": 40}, {"height": 0.5, "threshold": 0.2},
                   {"edges": True, "distance": 5, "prominence": 0.1}, {}):
            every = welchpeaks.find_peaks(x, k=None, **kw)
            for k in (1, 5, 17):
                few = welchpeaks.find_peaks(x, k=k, **kw)
                m = min(k, every.indices.shape[1])
                np.testing.assert_array_equal(few.indices[:, :m], every.indices[:, :m])
                np.testing.assert_array_equal(few.counts, np.minimum(every.counts, k))
                for name, v in few.properties.items():
                    np.testing.assert_array_equal(v[:, :m], every.properties[name][:, :m])


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:some peaks have")
def test_triton_kernel_matches_scipy_and_the_numba_kernel():
    """Rows as tensors go to the Triton kernel (compiled on a GPU; here Triton's interpreter on
    CPU tensors): scipy's peaks on random rows of random lengths and filters, plateaus and equal
    heights included; with edges=True and k=None it equals the numba kernel; NaN rows are
    refused by number, as on the host."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from welchpeaks.backends.triton import find_peaks_available

    probe = torch.zeros(2, 8, device="cuda" if torch.cuda.is_available() else "cpu")
    assert find_peaks_available(probe, 8)
    for x, kw, k in _random_cases(17, 60, 160, 8, 0.3, 0.15, 8):
        got = welchpeaks.find_peaks(torch.from_numpy(x).to(probe.device), k=k, **kw)
        assert torch.is_tensor(got.indices) and got.indices.device == probe.device
        host = type(got)(got.indices.cpu().numpy(), got.heights.cpu().numpy(), got.counts.cpu().numpy(),
                         {name: v.cpu().numpy() for name, v in got.properties.items()})
        _check_rows(x, host, kw, k if k is not None else x.shape[1])
        edges = welchpeaks.find_peaks(torch.from_numpy(x).to(probe.device), k=6, edges=True, **kw)
        ref = welchpeaks.find_peaks(x, k=6, edges=True, **kw)
        np.testing.assert_array_equal(edges.indices.cpu().numpy(), ref.indices)
        for name, v in ref.properties.items():
            np.testing.assert_allclose(edges.properties[name].cpu().numpy(), v, rtol=1e-12, atol=0)
    x = _rows(np.random.default_rng(5), 3, 50)  # limits past any row, and past int32, mean "none"
    huge = dict(distance=1e12, prominence=0.1, wlen=1e15, k=3)
    np.testing.assert_array_equal(welchpeaks.find_peaks(torch.from_numpy(x).to(probe.device), **huge).indices.cpu(),
                                  welchpeaks.find_peaks(x, **huge).indices)
    bad = torch.zeros(3, 20, dtype=torch.float64, device=probe.device)
    bad[1, 4] = float("inf")
    with pytest.raises(ValueError, match="row 1"):
        welchpeaks.find_peaks(bad)


def test_block_index_of_a_row():
    """The block index (16-lane vector blocks inside, sample by sample at the ends) equals
    numpy's per block: least and greatest sample, highest local maximum and the maxima as
    bits (edges counted only with edges=True), for every length around the block size and a
    long row; NaN, infinity and equal neighbours anywhere are flagged."""
    from welchpeaks.backends.numba import simd
    from welchpeaks.backends.numba.find_peaks import common, extrema

    rng = np.random.default_rng(3)
    b = common.BLOCK
    for n in list(range(1, 4 * b + 3)) + [1025]:
        nb = (n + b - 1) // b
        for edges in (False, True):
            row = rng.standard_normal(n)
            out = np.full(nb, np.nan), np.full(nb, np.nan), np.full(nb, np.nan), np.full(nb, -7, np.int64)
            assert extrema.scan_blocks(row, edges, *out) == 0
            peak = np.zeros(n, bool)
            peak[1:-1] = (row[:-2] < row[1:-1]) & (row[1:-1] >= row[2:])
            if edges and n >= 2:
                peak[0], peak[-1] = row[0] > row[1], row[-1] > row[-2]
            pad = nb * b - n
            blocks = np.concatenate([row, np.full(pad, np.nan)]).reshape(nb, b)
            peaks = np.concatenate([np.where(peak, row, -np.inf), np.full(pad, -np.inf)]).reshape(nb, b)
            bits = (np.concatenate([peak, np.zeros(pad, bool)]).reshape(nb, b) << np.arange(b)).sum(axis=1)
            np.testing.assert_array_equal(out[0], np.nanmin(blocks, axis=1))
            np.testing.assert_array_equal(out[1], np.nanmax(blocks, axis=1))
            np.testing.assert_array_equal(out[2], peaks.max(axis=1))
            np.testing.assert_array_equal(out[3], bits)
            for bad in (np.nan, np.inf, -np.inf):
                spoilt = row.copy()
                spoilt[rng.integers(n)] = bad
                assert extrema.scan_blocks(spoilt, edges, *out) & simd.NOT_FINITE
            if n >= 2:
                equal = row.copy()
                i = rng.integers(n - 1)
                equal[i + 1] = equal[i]
                assert extrema.scan_blocks(equal, edges, *out) == simd.EQUAL_NEIGHBOURS


def test_tier_ranking_in_lanes_and_loops():
    """A tier's ranking (in vector lanes up to 32 candidates, by counting or a stable sort
    beyond) is numpy's stable descending order, ties to the lower position, wherever the tier
    starts; the rest of ``order`` is left alone."""
    from welchpeaks.backends.numba.find_peaks import rank

    rng = np.random.default_rng(11)
    for size in list(range(1, 40)) + [64, 65, 90, 300]:
        for levels in (3, 1000):
            m0 = int(rng.integers(0, 20))
            hts = rng.integers(0, levels, m0 + size + 40).astype(float)
            order = np.full(hts.size, -5, np.int64)
            rank.rank_tier(hts, m0, m0 + size, order, np.empty(4 * size + 2048, np.int64))
            want = m0 + np.argsort(-hts[m0:m0 + size], kind="stable")
            np.testing.assert_array_equal(order[m0:m0 + size], want)
            assert (order[:m0] == -5).all() and (order[m0 + size:] == -5).all()


def test_long_rows_small_k():
    """Rows of 50,000 samples (3,125 blocks: the tier threshold by selection, not counting)
    with a few peaks asked: scipy's, then the k highest."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((3, 50_000)) ** 2
    for k, kw in ((1, {}), (5, {"distance": 3, "prominence": 0.5}), (40, {"prominence": (1.0, None), "wlen": 300})):
        _check_rows(x, welchpeaks.find_peaks(x, k=k, **kw), kw, k)


def test_row_median_by_bracket_and_by_selection():
    """The SNR's noise floor is ``np.median`` of the row, exactly: rows of 64 to 192 values try
    a bracket, the last row's when it held the last middle, else one from a sample (it misses
    on sorted rows, rows of few levels and some random ones, and then a selection decides);
    other lengths go to the selection directly. Rows of one kind run in turn, so the last
    row's bracket is tried, hits and misses."""
    from numba import njit

    from welchpeaks.backends.numba.find_peaks import median

    @njit
    def medians(rows):
        tmp = np.empty(3 * rows.shape[1])
        last = np.full(4, np.nan)
        out = np.empty(rows.shape[0])
        for r in range(rows.shape[0]):
            out[r] = median.median_of(rows[r], tmp, last)
        return out

    rng = np.random.default_rng(12)
    for n in (1, 2, 3, 63, 64, 65, 100, 129, 130, 192, 193, 300):
        for rows in (rng.standard_normal((60, n)), rng.integers(0, 3, (60, n)).astype(float),
                     np.sort(rng.standard_normal((60, n)), axis=1), rng.chisquare(4, (60, n))):
            np.testing.assert_array_equal(medians(np.ascontiguousarray(rows)), np.median(rows, axis=1))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_medians_in_lanes(dtype):
    """The fused pass's medians of a block's PSD rows, all at once by bisection on the values'
    bits (``_lane_medians``): ``np.median`` of each column exactly, for odd lengths, with zeros,
    repeated values, columns of one value, tiny and huge values; and the column intrinsics it
    is made of against numpy."""
    from numba import njit

    from welchpeaks.backends.numba import simd
    from welchpeaks.backends.numba.find_peaks import median

    ints = np.int32 if dtype == np.float32 else np.int64

    @njit
    def medians(tiles, n_bins, bits):
        out = np.empty((tiles.shape[0], tiles.shape[2]))
        med = np.empty(tiles.shape[2])
        for b in range(tiles.shape[0]):
            median.lane_medians(tiles[b], n_bins, bits, med)
            out[b] = med
        return out

    @njit
    def columns(tile, first, last, at, out):
        simd.column_bounds(tile, first, last, out[0], out[1])
        simd.column_counts(tile, first, last, at, out[2])
        simd.column_least_from(tile, first, last, at, out[3])

    rng = np.random.default_rng(8)
    lanes = simd.COLUMNS
    for n_bins in (1, 3, 5, 129, 513):
        tiles = rng.chisquare(4, (6, n_bins + 2, lanes)) * 10.0 ** rng.uniform(-30, 30, (6, 1, lanes))
        tiles[0, :, :8] = np.round(tiles[0, :, :8] / tiles[0, :, :8].max(0) * 3)  # few levels, zeros
        tiles[1, :, 3] = 2.5  # one value
        tiles[1, ::3, 4] = 0.0
        tiles[2, 1:, 5] = np.finfo(dtype).tiny * rng.integers(0, 4, n_bins + 1)
        tiles = tiles.astype(dtype)
        got = medians(tiles, n_bins, np.zeros((6, lanes), ints))
        np.testing.assert_array_equal(got, np.median(tiles[:, 1:n_bins + 1], axis=1).astype(np.float64))
        tile = tiles[3]
        at = tile[1 + n_bins // 2].view(ints).copy()
        out = np.zeros((4, lanes), ints)
        columns(tile, 1, n_bins + 1, at, out)
        bits = tile[1:n_bins + 1].view(ints)
        np.testing.assert_array_equal(out[0], bits.min(0))
        np.testing.assert_array_equal(out[1], bits.max(0))
        np.testing.assert_array_equal(out[2], (bits <= at).sum(0))
        np.testing.assert_array_equal(out[3], np.where(bits >= at, bits, np.iinfo(ints).max).min(0))


def test_snr_logarithm_in_lanes_and_one_at_a_time():
    """The SNRs' 10 log10 without the C library (a loop that vectorises) is within 4 ulp of
    numpy's on positive normal numbers over the whole range and near 1 (where the series does
    the work); a batch holding 0, a subnormal, infinity, NaN or a negative number goes one
    value at a time, each as the scalar path gives it (the SNR filter's): the same bits."""
    from numba import njit

    from welchpeaks.backends.numba.find_peaks import snr

    @njit
    def scalar(v):
        out = np.empty_like(v)
        for i in range(v.shape[0]):
            out[i] = 10.0 * snr.log10(v[i])
        return out

    rng = np.random.default_rng(5)
    for lo, hi in ((1e-300, 1e300), (0.5, 2.0), (1 - 1e-6, 1 + 1e-6), (1e-3, 1e3)):
        v = np.exp(rng.uniform(np.log(lo), np.log(hi), 20_000))
        got = v.copy()
        for a in range(0, v.size, 16):  # batches of a row's 16 SNRs
            snr.ten_log10_each(got[a:a + 16], 16)
        want = 10.0 * np.log10(v)
        assert np.all(np.abs(got - want) <= 4 * np.spacing(np.abs(want)))
        np.testing.assert_array_equal(got, scalar(v))
    odd = np.array([4.0, 0.0, 5e-320, np.inf, np.nan, -2.0, 1e-3, 1.0])
    got = odd.copy()
    snr.ten_log10_each(got, odd.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = 10.0 * np.log10(odd)
    np.testing.assert_array_equal(got, scalar(odd))
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)


# exact helpers inside the fused pass, each for a reason: a segment's trend is summed in one fixed
# order, whatever the input's strides (issue 51, D1)
EXACT_IN_THE_FUSED_PASS = {"welchpeaks.backends.numba.fused.fft._segment_trend"}


def test_every_kernel_helper_states_whether_it_has_numba_runtime():
    """A numba dispatcher compiles a signature once, with the runtime flag of whichever caller
    compiles it first unless it states its own (numba_base's ``*_HELPER`` and ``*_RUNTIME``
    sets): a helper that allocates, first compiled under one without the runtime, fails to
    compile; one that does not, first compiled under one with it, pays reference counts. So each
    states it. And each family compiles with its one kind of arithmetic: fast-math in the fused
    pass (but for EXACT_IN_THE_FUSED_PASS), exact in the find_peaks kernel (and the linker's step)."""
    from numba.core.registry import CPUDispatcher

    import importlib
    import pkgutil

    from welchpeaks.backends import numba as kernels
    from welchpeaks.backends.numba.find_peaks import rank, rows
    from welchpeaks.learned import compiled

    numba_modules = [importlib.import_module(m.name) for m in pkgutil.walk_packages(kernels.__path__,
                                                                                    kernels.__name__ + ".")]
    assert len(numba_modules) >= 20  # the two families (faces and modules) and simd
    unstated = []
    for mod in (*numba_modules, compiled):
        for name, d in vars(mod).items():
            if isinstance(d, CPUDispatcher) and d.py_func.__module__ == mod.__name__:
                o = d.targetoptions
                if not (o.get("parallel") or o.get("inline") == "always" or "_nrt" in o):
                    unstated.append(f"{mod.__name__}.{name}")
    assert unstated == []
    assert rows.row_step.targetoptions["_nrt"] is False
    assert rank.sorted_order.targetoptions["_nrt"] is False  # it sorts in its scratch
    # one set of options a kind: fast-math in the fused pass, exact in the find_peaks kernel and the linker
    from welchpeaks import linkstep, numba_base

    for mod in numba_modules:
        for name, d in vars(mod).items():
            if isinstance(d, CPUDispatcher) and d.py_func.__module__ == mod.__name__:
                fast = d.targetoptions.get("fastmath")
                if f"{mod.__name__}.{name}" in EXACT_IN_THE_FUSED_PASS:
                    assert not fast, f"{mod.__name__}.{name}"
                elif ".fused." in mod.__name__:
                    assert fast == numba_base.FASTMATH["fastmath"], f"{mod.__name__}.{name}"
                elif ".find_peaks." in mod.__name__:
                    assert not fast, f"{mod.__name__}.{name}"
    assert not any(getattr(d, "targetoptions", {}).get("fastmath") for d in vars(linkstep).values())


def _lower_index_rule(row, k, distance, height=None, prominence=None):
    """The stated tie rule in plain Python: scipy's peaks before distance (local maxima, plateaus
    at their middle, then ``height``); then from the highest, ties by index ascending, each peak
    still kept removes the peaks closer than ``distance``; then scipy's prominence minimum; the
    ``k`` highest, ties to the lower index."""
    peaks = [int(p) for p in ss.find_peaks(row, height=height)[0]]
    reach = math.ceil(distance)
    removed = set()
    for p in sorted(peaks, key=lambda p: (-row[p], p)):
        if p not in removed:
            removed.update(q for q in peaks if q != p and abs(q - p) < reach)
    kept = [p for p in peaks if p not in removed]
    if prominence is not None and kept:
        prom = ss.peak_prominences(row, kept)[0]
        kept = [p for p, v in zip(kept, prom) if v >= prominence]
    return sorted(kept, key=lambda p: (-row[p], p))[:k]


def _tied_rows(rng):
    """Rows with many equal peak heights under distance: integers of few levels (plateaus, equal
    neighbours), and steps of four levels without equal neighbours (long enough for the block
    index with a small k)."""
    ints = rng.integers(0, 4, (300, 50)).astype(float)
    steps = (np.cumsum(rng.integers(1, 4, (100, 600)), axis=1) % 4).astype(float)
    return ints, steps


def _check_tie_rule(x, got, k, kw):
    ties = 0
    for r in range(x.shape[0]):
        want = _lower_index_rule(x[r], x.shape[1] if k is None else k, **kw)
        assert got.counts[r] == len(want), (r, kw, k)
        np.testing.assert_array_equal(got.indices[r, :len(want)], want, err_msg=f"row {r}, {kw}, k={k}")
        ties += _tied_under_distance(x[r], kw)
    assert ties > x.shape[0] // 2  # the rows do tie


@pytest.mark.slow
def test_distance_ties_go_to_the_lower_index():
    """Issue 35, defect 17: of peaks of equal height under ``distance`` the lower index wins
    (scipy breaks such ties with numpy's unstable sort: its answer depends on the CPU). Every
    path of the numba kernel (every maximum then the distance sweep for k=None; the visits
    from the highest for a small k, candidates listed or from the block index; prominences
    walked or in lanes; distances up to 10 by neighbours, farther ranked first) equals the rule
    written plainly, on rows full of ties."""
    rng = np.random.default_rng(35)
    for x in _tied_rows(rng):
        for kw in (dict(distance=2), dict(distance=3), dict(distance=4.5), dict(distance=7, height=1.0),
                   dict(distance=3, prominence=1.0), dict(distance=5, prominence=2.0), dict(distance=11),
                   dict(distance=40, prominence=1.0)):
            for k in (None, 1, 3, 8):
                _check_tie_rule(x, welchpeaks.find_peaks(x, k=k, **kw), k, kw)


@pytest.mark.slow
@pytest.mark.gpu
def test_triton_distance_ties_go_to_the_lower_index():
    """The Triton kernel's tie rule under ``distance`` is the numba kernel's: the lower index
    wins (Triton's interpreter on CPU tensors without a GPU)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from welchpeaks.backends.triton import find_peaks_available

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = np.random.default_rng(36).integers(0, 4, (12, 40)).astype(float)
    assert find_peaks_available(torch.from_numpy(x).to(dev), x.shape[1])
    for kw in (dict(distance=3), dict(distance=4, prominence=1.0)):
        for k in (None, 2):
            got = welchpeaks.find_peaks(torch.from_numpy(x).to(dev), k=k, **kw)
            host = type(got)(got.indices.cpu().numpy(), got.heights.cpu().numpy(), got.counts.cpu().numpy(), {})
            _check_tie_rule(x, host, k, kw)


def test_read_only_rows_run_the_compiled_kernel(tmp_path):
    """Issue 35, defect 16: read-only rows (a memory map opened 'r', an array with
    writeable=False) run the find_peaks kernel compiled for writeable rows: numba compiles no
    read-only specialisation (20-60 s), and the peaks are the same. The rows reach the kernel
    as a writeable-typed view of the same memory, not a copy."""
    import numba

    from welchpeaks.backends.numba import find_peaks as kern
    from welchpeaks.numba_base import kernel_input

    x = np.random.default_rng(16).standard_normal((50, 300))
    np.save(tmp_path / "rows.npy", x)
    mapped = np.load(tmp_path / "rows.npy", mmap_mode="r")
    frozen = x.copy()
    frozen.setflags(write=False)
    for ro in (mapped, frozen):
        view = kernel_input(ro)
        assert not ro.flags.writeable and view.flags.writeable and np.shares_memory(view, ro)
        assert numba.typeof(view) == numba.typeof(x) != numba.typeof(ro)
    assert kernel_input(x) is x and kernel_input(3) == 3
    kw = dict(distance=3, prominence=0.5, width=(None, None), k=6)
    want = welchpeaks.find_peaks(x, **kw)
    signatures = list(kern.host_find_peaks.signatures)
    for ro in (mapped, frozen):
        got = welchpeaks.find_peaks(ro, **kw)
        assert kern.host_find_peaks.signatures == signatures  # nothing compiled for read-only rows
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.counts, want.counts)
        for name, v in want.properties.items():
            np.testing.assert_array_equal(got.properties[name], v)
    assert not any(getattr(t, "readonly", False) for sig in kern.host_find_peaks.signatures for t in sig)


class _ScipyFindPeaksThroughOneRow:
    """``scipy.signal.find_peaks`` for scipy's tests: one row through the batched
    ``welchpeaks.find_peaks`` (``x[None]``, row 0 of ``to_list()``), counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x, **kw):
        self.calls += 1
        return welchpeaks.find_peaks(np.asarray(x)[None], **kw).to_list()[0]


scipy_tests = pytest.importorskip("scipy.signal.tests.test_peak_finding")


class TestScipyFindPeaks(scipy_tests.TestFindPeaks):
    """SciPy's own ``TestFindPeaks`` (the installed scipy's ``test_peak_finding.py``) with its
    ``find_peaks`` replaced by :class:`_ScipyFindPeaksThroughOneRow`. Not run: ``test_raises``
    (a 2-D ``x`` is a batch of rows here, not an error; its other checks, a 0-D ``x`` and
    ``distance=-1``, are in :func:`test_errors`)."""

    @pytest.fixture(autouse=True)
    def _through_welchpeaks(self, monkeypatch):
        adapter = _ScipyFindPeaksThroughOneRow()
        monkeypatch.setattr(scipy_tests, "find_peaks", adapter)
        yield
        assert adapter.calls > 0  # the test ran welchpeaks, not scipy

    test_raises = None


def test_the_k_highest_of_many_peaks_are_the_first_k_of_every_peak():
    """A k over 64 but under an eighth of a row's maxima is ranked by a stable sort of the
    heights above a threshold (``find_peaks.rank._top``; insertion, before, was quadratic on
    rows whose heights rise): the same peaks, in the same order, as the first k of k=None, on
    random rows with ties and on rising and falling rows."""
    rng = np.random.default_rng(41)
    n = 20000
    rising = np.zeros(n)
    rising[1::2] = np.arange(n // 2) + 1.0
    x = np.stack([np.round(rng.standard_normal(n) * 4), rng.standard_normal(n), rising, rising[::-1]])
    for kw in ({}, {"distance": 3}, {"prominence": 0.5}):
        whole = welchpeaks.find_peaks(x, **kw)
        for k in (65, 200, 1000):
            got = welchpeaks.find_peaks(x, k=k, **kw)
            want = np.minimum(whole.counts, k)
            np.testing.assert_array_equal(got.counts, want)
            for r in range(x.shape[0]):
                np.testing.assert_array_equal(got.indices[r, :want[r]], whole.indices[r, :want[r]],
                                              err_msg=f"row {r}, k={k}, {kw}")
                for name, v in whole.properties.items():
                    np.testing.assert_array_equal(got.properties[name][r, :want[r]], v[r, :want[r]])


def test_every_peak_guesses_the_width_and_redoes_fuller_rows(monkeypatch):
    """k=None writes straight into results as wide as a guess: the first rows
    (``EVERY_PEAK_PROBE``) are launched with few slots (``EVERY_PEAK_FIRST``, never every
    slot: memory in the peaks found), their counts give the others' width, and the rows
    whose counts pass their slots are redone with every slot (in blocks of
    ``EVERY_PEAK_BYTES``): the same peaks and properties as one launch with every slot,
    whatever the probe, its slots and the blocks."""
    from welchpeaks.backends import filtered
    from welchpeaks.plan import found as fp

    launches = []
    real = filtered.launch_host

    def counted(x, cfg, out):
        launches.append((x.shape[0], out.idx.shape[1]))
        return real(x, cfg, out)

    rng = np.random.default_rng(40)
    x = _rows(rng, 37, 200)
    x[::5] = np.round(x[::5] * 2) / 2  # plateaus and ties in some rows
    kw = dict(distance=2, prominence=0.2, width=(None, None), threshold=(None, None), plateau_size=(1, None))
    x = x[np.argsort(welchpeaks.find_peaks(x, **kw).counts, kind="stable")]  # fuller rows later: past the guess
    x[:2] = 0.0  # (first rows without a peak)
    whole = welchpeaks.find_peaks(x, k=x.shape[1], **kw)  # one launch, every slot
    width, slots = int(whole.counts.max()), x.shape[1] // 2 + 2
    monkeypatch.setattr(filtered, "launch_host", counted)
    redone = set()
    for probe, first, block in ((1, 64, 1), (3, 4, 3), (10, 64, 1 << 30), (1 << 30, 4, 2), (1 << 30, None, 1)):
        first = width if first is None else first  # (None: as many slots as the fullest row holds)
        monkeypatch.setattr(fp, "EVERY_PEAK_PROBE", probe)
        monkeypatch.setattr(fp, "EVERY_PEAK_FIRST", first)
        monkeypatch.setattr(fp, "EVERY_PEAK_BYTES", block * slots * (16 + 24 + 32))
        launches.clear()
        got = welchpeaks.find_peaks(x, **kw)
        probed = min(probe, 37)
        assert launches[0] == (probed, min(first, slots))  # never every slot for the probe
        shown = np.full(37, min(first, slots))
        rest = launches[1:]
        if probed < 37:
            guess = min(slots, int(whole.counts[:probed].max()) * 5 // 4 + 8)
            assert rest[0] == (37 - probed, guess)
            shown[probed:] = guess
            rest = rest[1:]
        over = int((whole.counts > shown).sum())
        assert sum(r for r, _ in rest) == over and all(s == slots for _, s in rest)
        assert len(rest) == -(-over // block)
        redone.add(over > 0)
        np.testing.assert_array_equal(got.counts, whole.counts)
        np.testing.assert_array_equal(got.indices, whole.indices[:, :width])
        assert list(got.properties) == list(whole.properties)
        for name, v in whole.properties.items():
            np.testing.assert_array_equal(got.properties[name], v[:, :width])
    assert redone == {True, False}  # (rows past their slots redone, and a probe wide enough for all)
