"""``welchpeaks.peak_prominences`` and ``welchpeaks.peak_widths`` are scipy's, row by row.

1. SciPy's own ``TestPeakProminences`` and ``TestPeakWidths`` run against welchpeaks, through
   one-row adapters put in place of the module globals their tests call.
2. Batched rows (ties, plateaus, empty rows, padding anywhere) against scipy's functions row by
   row, bit for bit, for several ``wlen`` and ``rel_height``, with ``prominence_data`` too.
3. Hostile input: each a clear error naming what is wrong.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.signal as ss
import scipy.signal.tests.test_peak_finding as sp_tests
from scipy.signal._peak_finding_utils import PeakPropertyWarning

import welchpeaks

# the hostile inputs measure non-peaks on the way; tests that check warnings record them themselves
pytestmark = pytest.mark.filterwarnings("ignore::scipy.signal._peak_finding_utils.PeakPropertyWarning")

# ---------------------------------------------------------------------------------------------
# 1. scipy's tests through one-row adapters

#: scipy tests that cannot pass by design, with why (each is overridden below by a skip)
DESELECTED = {
    "TestPeakProminences::test_exceptions": (
        "scipy's test expects peak index -1 to be an error; in welchpeaks -1 marks an empty slot (the padding of "
        "rows with fewer peaks), so it is skipped, not rejected. Its other checks (the other invalid indices, "
        "shapes, float peaks, wlen) are in test_hostile_* and test_minus_one_is_padding below."),
}


def _prominences_adapter(x, peaks, wlen=None):
    """scipy's call on one row -> the batched call on ``[1, n]`` rows, row 0 back."""
    out = welchpeaks.peak_prominences(np.asarray(x)[None], np.asarray(peaks)[None], wlen)
    return tuple(a[0] for a in out)


def _widths_adapter(x, peaks, rel_height=0.5, prominence_data=None, wlen=None):
    if prominence_data is not None:  # each array gets the row axis; a None stays (welchpeaks rejects it)
        prominence_data = tuple(None if a is None else np.asarray(a)[None] for a in prominence_data)
    out = welchpeaks.peak_widths(np.asarray(x)[None], np.asarray(peaks)[None], rel_height, prominence_data, wlen)
    return tuple(a[0] for a in out)


class _ThroughWelchpeaks:
    """Puts the adapters in place of scipy's functions in scipy's test module, counting calls;
    each test must have called them (so what ran is welchpeaks)."""

    @pytest.fixture(autouse=True)
    def _adapters(self, monkeypatch):
        calls = []

        def counted(fn):
            def call(*args, **kwargs):
                calls.append(fn.__name__)
                return fn(*args, **kwargs)
            return call

        monkeypatch.setattr(sp_tests, "peak_prominences", counted(_prominences_adapter))
        monkeypatch.setattr(sp_tests, "peak_widths", counted(_widths_adapter))
        yield
        assert calls, "scipy's test did not go through the welchpeaks adapters"


class TestPeakProminences(_ThroughWelchpeaks, sp_tests.TestPeakProminences):
    @pytest.mark.skip(reason=DESELECTED["TestPeakProminences::test_exceptions"])
    def test_exceptions(self):
        pass


class TestPeakWidths(_ThroughWelchpeaks, sp_tests.TestPeakWidths):
    pass


def test_the_adapters_are_what_scipy_tests_call(monkeypatch):
    """The scipy tests' globals are the ones the fixture replaces: an adapter that answers
    wrongly makes scipy's test fail."""
    monkeypatch.setattr(sp_tests, "peak_prominences",
                        lambda x, p, wlen=None: tuple(a + 1 for a in _prominences_adapter(x, p, wlen)))
    with pytest.raises(AssertionError):
        sp_tests.TestPeakProminences().test_basic()
    monkeypatch.setattr(sp_tests, "peak_widths", lambda *a, **k: tuple(v * 2 for v in _widths_adapter(*a, **k)))
    with pytest.raises(AssertionError):
        sp_tests.TestPeakWidths().test_non_contiguous()


# ---------------------------------------------------------------------------------------------
# 2. batched rows against scipy, row by row

def _rows(rng, lead=(7, 3), n=200):
    """Rows with ties and plateaus (small integers), smooth ones, and rows with no peaks."""
    x = rng.integers(0, 5, lead + (n,)).astype(np.float64)
    flat = x.reshape(-1, n)
    flat[1::4] = np.cumsum(rng.standard_normal((len(flat[1::4]), n)), axis=1)
    flat[2::5] = np.repeat(rng.integers(0, 4, (len(flat[2::5]), n // 8)), 8, axis=1)[:, :n]  # wide plateaus
    flat[3] = 1.5  # constant: no peaks
    flat[4] = np.arange(n)  # monotonic: no peaks
    return x


def _padded(x, rng, extra=3, shuffle=True):
    """scipy's find_peaks of each row, padded with -1 (``extra`` more slots), slots shuffled so
    that padding sits anywhere in a row; also the per-row lists."""
    flat = x.reshape(-1, x.shape[-1])
    lists = [ss.find_peaks(r)[0] for r in flat]
    k = max(len(p) for p in lists) + extra
    pk = np.full((len(flat), k), -1, np.intp)
    for i, p in enumerate(lists):
        pk[i, :len(p)] = p
        if shuffle:
            rng.shuffle(pk[i])
    return pk.reshape(x.shape[:-1] + (k,))


def _kinds(got):
    """The PeakPropertyWarnings among ``got``, by what they are about ("prominence", "width")."""
    return [("prominence" if str(w.message).startswith("some peaks have a prominence of 0") else "width") for w in got
            if issubclass(w.category, PeakPropertyWarning)]


def _scipy_rows(fn, x, pk, *args, **kwargs):
    """scipy's ``fn`` per row, placed in the rows' slots (NaN / -1 in empty ones), and the kinds
    of PeakPropertyWarning scipy gave for some row (a sorted list, each once)."""
    flat, pflat = x.reshape(-1, x.shape[-1]), pk.reshape(-1, pk.shape[-1])
    outs, warned = None, set()
    for i, (row, p) in enumerate(zip(flat, pflat)):
        keep = p >= 0
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            res = fn(row, p[keep], *args, **kwargs)
        warned.update(_kinds(got))
        if outs is None:
            outs = [np.full(pflat.shape, -1 if a.dtype.kind == "i" else np.nan, a.dtype) for a in res]
        for o, a in zip(outs, res):
            o[i, keep] = a
    return [o.reshape(pk.shape) for o in outs], sorted(warned)


def _ours(fn, *args, **kwargs):
    """welchpeaks' ``fn`` and the kinds of PeakPropertyWarning it gave (sorted, as many as it gave)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        res = fn(*args, **kwargs)
    return res, sorted(_kinds(got))


def _same(ours, theirs):
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b, strict=True)  # NaN where NaN, every float bit for bit


@pytest.mark.parametrize("wlen", [None, 2, 3, 4.5, 21, 1000.0])
def test_prominences_match_scipy_row_by_row(rng, wlen):
    x = _rows(rng)
    pk = _padded(x, rng)
    ours, ours_warned = _ours(welchpeaks.peak_prominences, x, pk, wlen)
    theirs, warned = _scipy_rows(ss.peak_prominences, x, pk, wlen)
    _same(ours, theirs)
    assert ours_warned == warned  # once per call, where scipy warns for some row


@pytest.mark.parametrize("rel_height", [0.0, 0.5, 1.0, 1.7])
@pytest.mark.parametrize("wlen", [None, 3, 20.5])
def test_widths_match_scipy_row_by_row(rng, wlen, rel_height):
    x = _rows(rng)
    pk = _padded(x, rng)
    ours, ours_warned = _ours(welchpeaks.peak_widths, x, pk, rel_height, wlen=wlen)
    theirs, warned = _scipy_rows(ss.peak_widths, x, pk, rel_height, wlen=wlen)
    _same(ours, theirs)
    # each kind once per call where scipy gives it for some row (the prominences' when they are
    # measured here and some are 0, the widths')
    assert ours_warned == warned
    assert ("width" in warned) == (rel_height == 0 or "prominence" in warned)


@pytest.mark.parametrize("wlen", [None, 5])
def test_widths_from_prominence_data_match_scipy(rng, wlen):
    """``prominence_data`` passed in (welchpeaks' own, then one scipy would not compute, scaled):
    the widths are scipy's with that data, and ``wlen`` is not used."""
    x = _rows(rng)
    pk = _padded(x, rng)
    prom = welchpeaks.peak_prominences(x, pk, wlen)
    ours, _ = _ours(welchpeaks.peak_widths, x, pk, 0.8, prom, wlen=1000)
    theirs, _ = _scipy_rows(ss.peak_widths, x, pk, 0.8, wlen=wlen)
    _same(ours, theirs)
    scaled = (prom[0] * 0.37, prom[1], prom[2])
    ours, _ = _ours(welchpeaks.peak_widths, x, pk, 0.8, scaled)
    flat, pflat = x.reshape(-1, x.shape[-1]), pk.reshape(-1, pk.shape[-1])
    sflat = [a.reshape(pflat.shape) for a in scaled]
    for i, (row, p) in enumerate(zip(flat, pflat)):
        keep = p >= 0
        want = ss.peak_widths(row, p[keep], 0.8, prominence_data=tuple(np.ascontiguousarray(a[i, keep])
                                                                          for a in sflat))
        for a, b in zip(ours, want):
            np.testing.assert_array_equal(a.reshape(pflat.shape)[i, keep], b, strict=True)


def test_any_index_and_the_row_ends_are_measured_as_scipy_does(rng):
    """Every index counts, a maximum or not, the first and last samples included (scipy walks
    both sides there, so their prominence is 0; find_peaks' ``edges`` walks one side)."""
    for n in (1, 2, 3, 15, 16, 17, 33, 47, 64, 300):
        x = np.stack([rng.integers(0, 3, n).astype(float), rng.standard_normal(n), np.arange(n, 0, -1.0)])
        pk = np.tile(np.arange(n), (3, 1))
        pk[:, 0], pk[:, -1] = 0, n - 1
        for wlen in (None, 2, 6):
            _same(_ours(welchpeaks.peak_prominences, x, pk, wlen)[0],
                  _scipy_rows(ss.peak_prominences, x, pk, wlen)[0])
            _same(_ours(welchpeaks.peak_widths, x, pk, 0.6, wlen=wlen)[0],
                  _scipy_rows(ss.peak_widths, x, pk, 0.6, wlen=wlen)[0])
    prom, left, right = welchpeaks.peak_prominences(np.array([[5.0, 1, 3, 0, 4]]), [[0, 4]])
    assert prom.tolist() == [[0.0, 0.0]] and left.tolist() == [[0, 3]] and right.tolist() == [[3, 4]]


def test_many_rows_in_runs(rng):
    """Enough rows that workers take runs of several rows: each row still its own."""
    x = rng.integers(0, 6, (600, 40)).astype(float)
    pk = _padded(x, rng, shuffle=False)
    _same(_ours(welchpeaks.peak_prominences, x, pk, 7)[0], _scipy_rows(ss.peak_prominences, x, pk, 7)[0])
    _same(_ours(welchpeaks.peak_widths, x, pk, 1.0)[0], _scipy_rows(ss.peak_widths, x, pk, 1.0)[0])


def test_empty_rows_and_no_slots(rng):
    x = _rows(rng)
    none = np.full(x.shape[:-1] + (4,), -1)  # no peaks anywhere
    prom, left, right = welchpeaks.peak_prominences(x, none)
    assert np.isnan(prom).all() and (left == -1).all() and (right == -1).all()
    assert all(np.isnan(a).all() for a in welchpeaks.peak_widths(x, none))
    for fn in (welchpeaks.peak_prominences, welchpeaks.peak_widths):  # k = 0
        out = fn(x, np.zeros(x.shape[:-1] + (0,), np.intp))
        assert all(a.shape == (7, 3, 0) for a in out)
        assert [a.dtype for a in out] == ([np.float64, np.intp, np.intp] if fn is welchpeaks.peak_prominences
                                          else [np.float64] * 4)
    out = welchpeaks.peak_prominences(np.zeros((2, 0)), np.full((2, 3), -1))  # rows of no samples
    assert np.isnan(out[0]).all() and (out[1] == -1).all()
    assert welchpeaks.peak_widths(np.zeros((0, 5)), np.zeros((0, 2), int))[0].shape == (0, 2)


def test_one_row_is_scipys_call():
    x = [0, 1, 0, 3, 1, 3, 0, 4, 0]
    for a, b in zip(welchpeaks.peak_prominences(x, [5, 3], wlen=3.1), ss.peak_prominences(x, [5, 3], wlen=3.1)):
        np.testing.assert_array_equal(a, b, strict=True)
    for a, b in zip(welchpeaks.peak_widths(x, [5, 3], 0.9), ss.peak_widths(x, [5, 3], 0.9)):
        np.testing.assert_array_equal(a, b, strict=True)


def test_minus_one_is_padding(rng):
    """The one documented difference from scipy: -1 is an empty slot, not an invalid index."""
    prom, left, right = welchpeaks.peak_prominences([[1, 0, 2]], [[-1]])
    assert np.isnan(prom[0, 0]) and left[0, 0] == -1 and right[0, 0] == -1
    with pytest.raises(ValueError, match="not a valid index"):
        ss.peak_prominences([1, 0, 2], [-1])


def test_wlen_is_rounded_as_scipy_rounds_it():
    """A float rounds up, other numbers truncate (scipy's np.intp); an even window acts as the
    next odd one."""
    x = np.array([[0, 1, 2, 3, 4, 5, 4, 3, 2, 1, 0.5, 0.25]])
    for wlen in (2, 3, 3.0, 3.01, 4, 5, np.float64(4.5), np.float32(4.9), np.int16(6), 8.2, float("inf")):
        ours = welchpeaks.peak_prominences(x, [[5]], wlen)
        want = ss.peak_prominences(x[0], [5], None if wlen == float("inf") else wlen)
        assert [a[0].tolist() for a in ours] == [a.tolist() for a in want], wlen


def test_zero_warnings_name_rows_and_peaks(rng):
    x = np.ones((2, 3, 6))
    x[1, 2, 2] = 3.0
    pk = np.full((2, 3, 2), -1)
    pk[1, 2] = [2, 0]  # a real peak and the row's first sample
    with pytest.warns(PeakPropertyWarning, match=r"prominence of 0: peak 0 in row \(1, 2\)") as got:
        welchpeaks.peak_prominences(x, pk)
    assert len([w for w in got if issubclass(w.category, PeakPropertyWarning)]) == 1
    with pytest.warns(PeakPropertyWarning, match=r"width of 0: peak 2 in row \(1, 2\), peak 0 in row \(1, 2\)"):
        welchpeaks.peak_widths(x, pk, rel_height=0)


def test_torch_cpu_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    x = _rows(rng, lead=(6,), n=64)
    pk = _padded(x, rng)
    ours = welchpeaks.peak_widths(torch.from_numpy(x), torch.from_numpy(pk), 0.5)
    assert all(torch.is_tensor(a) for a in ours)
    _same([a.numpy() for a in ours], welchpeaks.peak_widths(x, pk, 0.5))


# ---------------------------------------------------------------------------------------------
# 3. hostile input

def test_hostile_out_of_range_peak_names_row_index_and_fix(rng):
    x = rng.standard_normal((2, 3, 10))
    for bad in (10, 1000, -2, -100):
        pk = np.full((2, 3, 2), 4)
        pk[1, 2, 1] = bad
        for fn in (welchpeaks.peak_prominences, welchpeaks.peak_widths):
            with pytest.raises(ValueError, match=rf"peaks in row \(1, 2\) holds {bad} .*not a valid index.*"
                                                 r"\[0, 10\), or -1 for an empty slot"):
                fn(x, pk)
    with pytest.raises(ValueError, match="peaks holds 3 .*not a valid index"):
        welchpeaks.peak_prominences([1.0, 0, 2], [3])


def test_hostile_shapes_name_the_parameter(rng):
    x = rng.standard_normal((4, 10))
    for pk in (np.zeros((3, 2), int), np.zeros(4, int), np.zeros((4, 2, 1), int), np.zeros((1, 2), int)):
        for fn in (welchpeaks.peak_prominences, welchpeaks.peak_widths):
            with pytest.raises(ValueError, match=r"peaks has shape .* x has shape \(4, 10\)"):
                fn(x, pk)
    pk = np.full((4, 2), 3)
    prom = welchpeaks.peak_prominences(x, pk)
    for data in ((prom[0][:3], prom[1], prom[2]), (prom[0], prom[1][:, :1], prom[2]), (prom[0], prom[1], prom[2].T)):
        with pytest.raises(ValueError, match=r"arrays in `prominence_data` must have the same shape as `peaks`"):
            welchpeaks.peak_widths(x, pk, prominence_data=data)
    with pytest.raises(TypeError, match="prominence_data"):
        welchpeaks.peak_widths(x, pk, prominence_data=prom[:2])


def test_hostile_invalid_prominence_data_names_the_peak(rng):
    x = rng.standard_normal((4, 10))
    pk = np.full((4, 2), 3)
    prom, left, right = welchpeaks.peak_prominences(x, pk)
    for lb, rb in ((-1, 5), (4, 5), (0, 2), (0, 10)):
        bad_left, bad_right = left.copy(), right.copy()
        bad_left[2, 1], bad_right[2, 1] = lb, rb
        with pytest.raises(ValueError, match=r"prominence data is invalid for peak 3 in row 2 \(slot 1\)"):
            welchpeaks.peak_widths(x, pk, prominence_data=(prom, bad_left, bad_right))
    pk[2, 1] = -1  # an empty slot's prominence data is not read
    bad_left = left.copy()
    bad_left[2, 1] = 99
    assert np.isnan(welchpeaks.peak_widths(x, pk, prominence_data=(prom, bad_left, right))[0][2, 1])


def test_hostile_non_finite_rows_are_named(rng):
    x = rng.standard_normal((3, 4, 50))
    pk = np.full((3, 4, 1), 7)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[2, 1, 30] = bad
        for call in (lambda: welchpeaks.peak_prominences(y, pk), lambda: welchpeaks.peak_widths(y, pk),
                     lambda: welchpeaks.peak_widths(y, pk, prominence_data=welchpeaks.peak_prominences(x, pk))):
            with pytest.raises(ValueError, match=r"x has NaN or infinity in row \(2, 1\)"):
                call()


def test_hostile_float_peaks_rel_height_and_wlen(rng):
    x = rng.standard_normal((2, 10))
    for pk in (np.array([[1.0, 2.0], [3.0, 4.0]]), [[1.5, 2], [3, 4]], np.array([[1, 2], [3, 4]], np.uint64)):
        with pytest.raises(TypeError, match="cannot safely cast `peaks`"):
            welchpeaks.peak_prominences(x, pk)
    pk = np.array([[1, 2], [3, 4]])
    with pytest.raises(TypeError, match="cannot safely cast `left_bases`"):
        welchpeaks.peak_widths(x, pk, prominence_data=(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2), int)))
    for rh in (-1, -1e-300, float("nan")):
        with pytest.raises(ValueError, match="rel_height"):
            welchpeaks.peak_widths(x, pk, rel_height=rh)
    with pytest.raises(TypeError, match="rel_height"):
        welchpeaks.peak_widths(x, pk, rel_height="0.5")
    for wlen in (1, 1.0, 0, -3, float("nan"), True):
        for call in (lambda: welchpeaks.peak_prominences(x, pk, wlen),
                     lambda: welchpeaks.peak_widths(x, pk, wlen=wlen)):
            with pytest.raises(ValueError, match="wlen=.* must be larger than 1"):
                call()
    with pytest.raises(TypeError, match="wlen"):
        welchpeaks.peak_prominences(x, pk, "5")
    with pytest.raises(TypeError, match="x has dtype"):
        welchpeaks.peak_prominences(np.array([["a", "b"]]), [[0]])
    with pytest.raises(TypeError, match="x is complex"):
        welchpeaks.peak_prominences(np.ones((2, 10), complex), pk)
