"""What the fuzz tests share: the example count (``WELCHPEAKS_FUZZ_EXAMPLES``, every test's a
fraction of it), the settings, and the public call's strategy with its checks (tests/test_fuzz_*.py)."""

import os
import warnings

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

import welchpeaks


EXAMPLES = int(os.environ.get("WELCHPEAKS_FUZZ_EXAMPLES", "800"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("WELCHPEAKS_FUZZ_RANDOM") is None)

VALUES = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False, width=32),
    st.sampled_from([0.0, np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-30, 3e38]),
)


@st.composite
def calls(draw):
    """(x, keyword arguments) of one welch_peaks call, valid or not."""
    n_fft = draw(st.sampled_from([4, 5, 8, 16, 24, 32, 64, 100, 128]))
    rows = draw(st.integers(1, 5))
    length = draw(st.integers(1, 3 * n_fft))
    kind = draw(st.sampled_from(["noise", "tone", "const", "values"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if kind == "noise":
        x = rng.standard_normal((rows, length)) * draw(st.sampled_from([1e-20, 1.0, 1e10]))
    elif kind == "tone":
        x = np.sin(2 * np.pi * draw(st.floats(0, 0.5)) * np.arange(length))[None].repeat(rows, 0)
    elif kind == "const":
        x = np.full((rows, length), draw(st.sampled_from([0.0, 1.0, -7.5])))
    else:
        x = np.array(draw(st.lists(VALUES, min_size=rows * length, max_size=rows * length))).reshape(rows, length)
    x = x.astype(draw(st.sampled_from([np.float32, np.float64])))
    kw = dict(
        n_fft=n_fft,
        k=draw(st.sampled_from([1, 2, 5, 16, 70])),
        hop=draw(st.sampled_from([None, 1, n_fft // 2 or 1, n_fft, n_fft + 1])),
        segments=draw(st.sampled_from([None, 1, 2, 3, "fast", "nope", 0])),
        mode=draw(st.sampled_from(["peaks", "bins"])),
        min_distance=draw(st.sampled_from([1, 2, 7, 10 ** 9])),
        window=draw(st.sampled_from(["hann", "boxcar", ("kaiser", 8.0), "array"])),
        detrend=draw(st.sampled_from(["constant", "linear", False])),
        scaling=draw(st.sampled_from(["density", "spectrum"])),
        fs=draw(st.sampled_from([None, 1.0, 48000.0, 1e-310, -1.0])),
        nan_policy=draw(st.sampled_from(["raise", "propagate"])),
    )
    if kw["window"] == "array":
        kw["window"] = rng.standard_normal(n_fft) if draw(st.booleans()) else np.hanning(n_fft)
    return x, kw


def _check(res, n_fft):
    bins, power = np.asarray(res.bins), np.asarray(res.power, np.float64)
    n_bins = n_fft // 2 + 1
    assert bins.dtype == np.int32 and np.all((bins >= -1) & (bins < n_bins))
    assert not np.any(np.isinf(power))
    assert np.all(np.isnan(power) == (bins == -1))


def _agree(a, b, x, kw, compute="float64"):
    """Two results of one call agree: slot by slot the same bin with the same power, or, at a
    near tie or a peak at the round-off floor, powers equal within the compute precision."""
    from welchpeaks.params import make_params

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scale = float(np.max(make_params(**kw).psd_scale()))
    pa, pb = np.nan_to_num(np.asarray(a.power, np.float64)), np.nan_to_num(np.asarray(b.power, np.float64))
    amp = np.max(np.abs(np.nan_to_num(x.astype(np.float64), posinf=0, neginf=0)), axis=-1, keepdims=True)
    eps = 1e-20 if compute == "float64" else 1e-12  # squared round-off of an FFT of this row
    floor = eps * amp ** 2 * scale * kw["n_fft"] ** 2
    # and the output's own resolution: powers under float32's normal range (1e-40 from signals of
    # 1e-20) keep a few bits, where one rounding more is a relative 2e-5
    floor = floor + 2 * float(np.finfo(np.asarray(a.power).dtype).smallest_subnormal)
    # power comes back in the input's dtype; detrending cancels, which magnifies round-off by up to ~10x
    rel = 1e-5 if np.asarray(a.power).dtype == np.float32 else 1e-8
    if compute == "float32":
        rel = 1e-4
    tol = max(rel, 1e-7) * np.maximum(pa.max(-1, keepdims=True), pb.max(-1, keepdims=True)) + floor
    same = np.asarray(a.bins) == np.asarray(b.bins)
    assert np.all(np.abs(pa - pb) <= np.where(same, rel * np.abs(pa) + floor, tol)), (a.bins, b.bins, pa, pb)


def _run(x, kw, strategy, dtype):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return welchpeaks.welch_peaks(x, strategy=strategy, dtype=dtype, **kw), None
    except (ValueError, TypeError) as exc:
        return None, exc


#: values a hostile row holds: signed zeros, the extremes of float32 and float64, subnormals
ROW_VALUES = np.array([0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 5e-324, 1e30, -1e30, 3e38, -3e38, 1.7e308, -1.7e308])


def _quiet(fn):
    """fn()'s result and None, or None and the ValueError or TypeError it raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(), None
    except (ValueError, TypeError) as exc:
        return None, exc
