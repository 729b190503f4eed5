"""Fuzzing peaks over time: track against welch_peaks per frame, the stream against track
(issue 35), and linking on hand-made results and parameters (issue 50)."""

import warnings

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import welchpeaks
from fuzzing import EXAMPLES, ROW_VALUES, _agree, _check, _quiet, fuzz


_PARAM_NAMES = ("k", "n_fft", "hop", "segments", "fs", "window", "detrend", "scaling", "mode", "min_distance",
                "nan_policy", "dtype", "interp", "edges")


@st.composite
def track_calls(draw):
    """(x, keyword arguments of track and WelchPeakStream) over random frame geometries:
    overlapping frames, adjacent ones and frames with gaps between them (``frame_hop * hop >
    frame``), signals shorter than a frame, NaN inside frames or only in the gaps and the tail
    (which no frame reads), any dtype, execution, window and filter; now and then a bad
    ``frame_hop`` or ``k``."""
    n_fft = draw(st.sampled_from([4, 5, 8, 12, 16, 31, 32, 64]))
    hop = draw(st.sampled_from([None, 1, max(1, n_fft // 3), n_fft // 2, n_fft - 1, n_fft]))
    h = hop or n_fft // 2
    frame_segments = draw(st.integers(1, 5))
    frame_hop = draw(st.sampled_from([None, 1, 2, 3, 5, 8, 13]))
    frame = n_fft + (frame_segments - 1) * h
    step = (frame_hop or frame_segments) * h
    if draw(st.integers(0, 9)) == 0:
        length = draw(st.integers(1, frame))  # at most one frame, often none
    else:
        length = frame + draw(st.integers(0, 6)) * step + draw(st.integers(0, step + frame))
    rows = draw(st.integers(1, 3))
    lead = draw(st.sampled_from([(), (rows,), (2, rows)]))
    kind = draw(st.sampled_from(["noise", "tone", "const", "values", "nan_in_frame", "nan_in_gap"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    shape = lead + (length,)
    if kind == "tone":
        x = np.sin(2 * np.pi * draw(st.floats(0, 0.5)) * np.arange(length)) + 0.01 * rng.standard_normal(shape)
    elif kind == "const":
        x = np.full(shape, draw(st.sampled_from([0.0, 1.0, -7.5, 1.7e308])))
    elif kind == "values":
        x = np.where(rng.random(shape) < 0.3, rng.choice(ROW_VALUES, shape), rng.standard_normal(shape))
    else:
        x = rng.standard_normal(shape) * draw(st.sampled_from([1e-20, 1.0, 1e10]))
    if kind == "nan_in_frame":
        x[..., int(rng.integers(length))] = draw(st.sampled_from([np.nan, np.inf]))
    elif kind == "nan_in_gap":  # samples no frame reads: between frames and past the last
        read = np.zeros(length, bool)
        for t in range(0, max(0, (length - frame) // step + 1)):
            read[t * step: t * step + frame] = True
        if (~read).any():
            x[..., rng.choice(np.flatnonzero(~read))] = np.nan
    dtype = draw(st.sampled_from([np.float64, np.float32, np.int16]))
    with np.errstate(over="ignore", invalid="ignore"):
        x = (np.nan_to_num(x * 1000, posinf=0, neginf=0) if dtype == np.int16 else x).astype(dtype)
    measures = draw(st.sampled_from([None, None, None, ("snr", "prominence", "width")]))
    kw = dict(
        n_fft=n_fft, hop=hop, frame_segments=frame_segments, frame_hop=frame_hop,
        k=draw(st.sampled_from([1, 2, 5, 40] + [0] * (draw(st.integers(0, 19)) == 0))),
        mode=draw(st.sampled_from(["peaks", "bins"])),
        window=draw(st.sampled_from(["hann", "boxcar", ("kaiser", 8.0), "array"])),
        detrend=draw(st.sampled_from(["constant", "linear", False])),
        scaling=draw(st.sampled_from(["density", "spectrum"])),
        fs=draw(st.sampled_from([None, 1.0, 3.0, 48000.0])),
        min_distance=draw(st.sampled_from([1, 2, 5])),
        edges=draw(st.booleans()),
        nan_policy=draw(st.sampled_from(["raise", "propagate"])),
        strategy=draw(st.sampled_from(["numpy", "fused-cpu"])),
        dtype=draw(st.sampled_from([None, "float64", "float32"])),
    )
    if kw["window"] == "array":
        kw["window"] = rng.standard_normal(n_fft) if draw(st.booleans()) else np.hanning(n_fft)
    if measures:
        kw.update(measures=measures, prominence=(None, None), snr_db=draw(st.sampled_from([None, 3.0])))
    if draw(st.integers(0, 19)) == 0:
        kw["frame_hop"] = draw(st.sampled_from([0, -1, 2.5]))
    return x, kw


def _tracker(kw):
    return _quiet(lambda: welchpeaks.Tracker(**kw))[0]


@settings(fuzz, max_examples=max(EXAMPLES // 8, 20))
@given(track_calls())
def test_track_is_welch_peaks_of_each_frame(call):
    """Every frame of track is welch_peaks on that frame alone (bit for bit; to the precision
    where fused-cpu's overlapping frames share their segments), at the stated times; track
    refuses exactly when a frame does, or no frame fits (a bad parameter, NaN inside a frame
    under 'raise': not NaN in a gap or past the last frame)."""
    x, kw = call
    whole, err = _quiet(lambda: welchpeaks.track(x, **kw))
    tr = _tracker(kw)
    if tr is None:
        assert err is not None, "track took parameters Tracker refuses"
        return
    n_frames = tr.n_frames(x.shape[-1])
    one = {name: v for name, v in kw.items() if name not in ("frame_segments", "frame_hop")}
    one["segments"] = kw["frame_segments"]
    frames = [_quiet(lambda t=t: welchpeaks.welch_peaks(x[..., t * tr.step: t * tr.step + tr.frame], **one))
              for t in range(n_frames)]
    event(f"gaps: {tr.step > tr.frame}")
    if err is not None:
        event("refused")
        assert n_frames == 0 or any(e is not None for _, e in frames), f"track refused, no frame does: {err!r}"
        return
    assert n_frames > 0 and all(e is None for _, e in frames), [e for _, e in frames if e is not None][:1]
    assert whole.bins.shape == x.shape[:-1] + (n_frames, kw["k"])
    np.testing.assert_allclose(whole.times, (np.arange(n_frames) * tr.step + tr.frame / 2) / (kw["fs"] or 1.0),
                               rtol=1e-12)
    _check(whole, kw["n_fft"])
    shared = kw["strategy"] == "fused-cpu" and (kw["frame_hop"] or kw["frame_segments"]) < kw["frame_segments"]
    if shared and "measures" not in kw:  # overlapping frames share their segments: to the precision
        params = {name: v for name, v in one.items() if name in _PARAM_NAMES}
        compute = kw["dtype"] or "float32"
        for t, (res, _) in enumerate(frames):
            a = type("Frame", (), dict(bins=whole.bins[..., t, :], power=whole.power[..., t, :]))
            _agree(a, res, x[..., t * tr.step: t * tr.step + tr.frame], params,
                   compute="float64" if compute == "float64" else "float32")
        return
    for field in ("bins", "power", "freqs"):
        np.testing.assert_array_equal(getattr(whole, field), np.stack([getattr(r, field) for r, _ in frames], -2),
                                      err_msg=field)
    for name, v in whole.measures.items():
        np.testing.assert_array_equal(v, np.stack([r.measures[name] for r, _ in frames], -2), err_msg=name)


@settings(fuzz, max_examples=max(EXAMPLES // 8, 20))
@given(track_calls(), st.integers(0, 2 ** 32 - 1), st.integers(0, 64))
def test_stream_is_track_for_any_pushes(call, seed, singles):
    """WelchPeakStream, fed the signal in pushes of random sizes (the first ``singles`` samples
    one at a time, then chunks of 1 to a few frames), gives track's frames bit for bit, over the
    same random geometries, dtypes and parameters; it refuses where track does (a frame track
    refuses), and with fewer samples than a frame it gives no frame."""
    x, kw = call
    whole, err = _quiet(lambda: welchpeaks.track(x, **kw))
    stream, s_err = _quiet(lambda: welchpeaks.WelchPeakStream(**kw))
    if stream is None:
        assert err is not None, f"the stream refused what track takes: {s_err!r}"
        return
    tr = stream.tracker
    rng = np.random.default_rng(seed)
    length = x.shape[-1]
    cuts = list(range(1, min(singles, length) + 1))
    while cuts[-1:] != [length] and (not cuts or cuts[-1] < length):
        big = int(rng.integers(1, 2 * tr.frame + tr.step + 1))
        cuts.append(min(length, (cuts[-1] if cuts else 0) + (int(rng.integers(1, 5)) if rng.random() < 0.3 else big)))
    parts = []

    def feed():
        start = 0
        for end in cuts:
            parts.append(stream.push(x[..., start:end]))
            start = end
        parts.append(stream.flush())

    _, p_err = _quiet(feed)
    if tr.n_frames(length) == 0:
        assert err is not None and p_err is None and sum(len(p) for p in parts) == 0
        return
    assert (err is None) == (p_err is None), (err, p_err)
    event(f"gaps: {tr.step > tr.frame}")
    event(f"pushes: {'1-4' if len(cuts) < 5 else '5-49' if len(cuts) < 50 else '50+'}")
    if err is not None:
        event("refused")
        return
    np.testing.assert_array_equal(np.concatenate([p.times for p in parts]), whole.times)
    for field in ("bins", "power", "freqs"):
        got = np.concatenate([getattr(p, field) for p in parts], axis=-2)
        assert got.dtype == getattr(whole, field).dtype, field
        np.testing.assert_array_equal(got, getattr(whole, field), err_msg=field)
    for name, v in whole.measures.items():
        np.testing.assert_array_equal(np.concatenate([p.measures[name] for p in parts], axis=-2), v, err_msg=name)


LINK_VALUES = st.one_of(st.none(), st.integers(-3, 40), st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from([10 ** 400, -10 ** 400, 5e-324, 1e308, True, "5", np.float64(3.0), np.int64(4),
                                         np.array(2.0), 2 ** 62, 2 ** 63, 10 ** 9]))


@st.composite
def link_calls(draw):
    """A hand-made TrackResult (peaks at any frequencies, powers and SNRs: NaN, 0, inf, huge,
    negative; empty frames; with or without n_fft and fs) and link parameters, valid or not."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    lead, t, k = draw(st.sampled_from([(), (1,), (3,), (2, 2)])), draw(st.integers(0, 60)), draw(st.integers(1, 6))
    shape = lead + (t, k)
    freqs = np.where(rng.random(shape) < 0.2, np.nan, rng.uniform(-10, 5000, shape))
    freqs[rng.random(shape) < 0.02] = draw(st.sampled_from([np.inf, -np.inf, 1e300, -0.0]))
    steady = rng.uniform(100, 4000, lead + (1, k))
    freqs = np.where(rng.random(shape) < 0.5, steady + rng.normal(0, 3, shape), freqs)
    power = np.where(np.isfinite(freqs), rng.exponential(1.0, shape), np.nan)
    power[rng.random(shape) < 0.03] = draw(st.sampled_from([0.0, np.inf, 1e-320, np.nan]))
    snr = np.where(np.isfinite(freqs), rng.uniform(-5, 40, shape), np.nan)
    params = draw(st.sampled_from([{}, {"n_fft": 256, "fs": 8000.0}, {"n_fft": 64}, {"n_fft": 3, "fs": 1e-300}]))
    measures = {"snr_db": snr} if draw(st.booleans()) else {}
    result = welchpeaks.TrackResult(np.where(np.isfinite(freqs), 1, -1).astype(np.int32), power, freqs,
                                    np.arange(t) * 0.1, "fuzz", params, measures)
    kw = {name: draw(LINK_VALUES) for name in ("max_jump_hz", "max_gap", "min_length", "min_snr_db")
          if draw(st.booleans())}
    return result, kw


@settings(fuzz, max_examples=max(EXAMPLES // 4, 20))
@given(link_calls())
def test_linking_fails_cleanly_or_gives_tracks(call):
    """Any peaks and any link parameters: a ValueError or TypeError naming the parameter, or
    tracks: ids the result's shape, -1 where a slot is empty (and, with the SNR floor, under
    it), no two peaks of one frame in one track, the kept tracks numbered 0.. in the order they
    started, every one at least min_length peaks; the stream fed in random pieces gives the same
    ids as link() with min_length 1."""
    result, kw = call
    import warnings as w

    try:
        with w.catch_warnings():
            w.simplefilter("ignore")
            tracks = result.link(**kw)
    except (ValueError, TypeError) as exc:
        names = [n for n in ("max_jump_hz", "max_gap", "min_length", "min_snr_db", "n_fft") if n in str(exc)]
        assert names and "\n" not in str(exc), str(exc)
        event("refused")
        return
    event("linked")
    ids = tracks.ids
    assert ids.shape == result.freqs.shape and ids.dtype == np.int64
    assert np.all(ids[~np.isfinite(result.freqs)] == -1)
    floor = tracks.params["min_snr_db"]
    if floor is not None and "snr_db" in result.measures:
        assert np.all(ids[~(result.measures["snr_db"] >= floor)] == -1)
    flat = ids.reshape((int(np.prod(ids.shape[:-2])),) + ids.shape[-2:])
    for sig in flat:
        for frame in sig:
            got = frame[frame >= 0]
            assert got.size == np.unique(got).size  # one peak per track per frame
    kept = np.unique(ids[ids >= 0])
    assert np.array_equal(kept, np.arange(kept.size))
    if kept.size:
        counts = np.bincount(ids[ids >= 0])
        assert counts.min() >= tracks.params["min_length"]
        first = [np.argwhere(ids == i)[0] for i in kept]  # (lead..., frame, slot) of each track's first peak
        order = [tuple([f[-2]] + list(f[:-2]) + [f[-1]]) for f in first]  # by frame, then signal, then slot
        assert order == sorted(order)
    from welchpeaks.tracks import MultiLinker, check_link, per_signal

    p = tracks.params
    res = p.get("max_jump_hz") if "n_fft" not in result.params else (result.params.get("fs") or 1.0) / result.params["n_fft"]
    one = check_link(p["max_jump_hz"], p["max_gap"], 1, p["min_snr_db"], res)
    whole = MultiLinker(one).feed_frames(per_signal(result.freqs), per_signal(result.power),
                                         None if "snr_db" not in result.measures else per_signal(result.measures["snr_db"]))
    pieces, at, lk = [], 0, MultiLinker(one)
    rng = np.random.default_rng(int(result.freqs.size))
    snr = result.measures.get("snr_db")
    while at < result.freqs.shape[-2]:
        step = int(rng.integers(1, 7))
        sl = (..., slice(at, at + step), slice(None))
        pieces.append(lk.feed_frames(per_signal(result.freqs[sl]), per_signal(result.power[sl]),
                                     None if snr is None else per_signal(snr[sl])))
        at += step
    if pieces:
        np.testing.assert_array_equal(np.concatenate(pieces, axis=1), whole)
