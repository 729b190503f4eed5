"""Peaks linked into tracks (TrackResult.link, welchpeaks.tracks): crossing chirps against
their known frequencies, the gap/jump/length rules on hand-made frames, the summary against
numpy."""

import numpy as np
import pytest

import welchpeaks
from welchpeaks import TrackResult
from welchpeaks.tracks import MultiLinker


def _result(freqs, fs_times=None, power=None, snr=None):
    freqs = np.asarray(freqs, np.float64)
    bins = np.where(np.isfinite(freqs), 1, -1).astype(np.int32)
    power = np.where(np.isfinite(freqs), 1.0, np.nan) if power is None else np.asarray(power, np.float64)
    times = np.arange(freqs.shape[-2], dtype=np.float64) * 0.5 if fs_times is None else fs_times
    return TrackResult(bins, power, freqs, times, "test", {}, {} if snr is None else {"snr_db": snr})


def test_crossing_chirps_keep_their_ids_and_a_steady_tone_is_one_track():
    """Two linear chirps crossing each other and a steady tone (each at 20 dB SNR): every
    frame's peak of each component (where it is apart from the others by 2 bins) carries the
    component's id, through the crossings, and there are exactly three tracks."""
    fs, dur = 8000.0, 10.0
    t = np.arange(int(dur * fs)) / fs
    truth = {"up": lambda s: 500 + 250 * s, "down": lambda s: 3000 - 250 * s, "tone": lambda s: 1000 + 0 * s}
    x = (np.sin(2 * np.pi * (500 * t + 125 * t ** 2)) + np.sin(2 * np.pi * (3000 * t - 125 * t ** 2))
         + np.sin(2 * np.pi * 1000 * t))
    x += np.random.default_rng(0).standard_normal(t.size) * np.sqrt(0.5 / 100)
    tr = welchpeaks.track(x, fs=fs, n_fft=256, k=3, frame_segments=2)
    tracks = tr.link(max_jump_hz=30, max_gap=15, min_length=5)
    assert len(tracks) == 3
    res = fs / 256
    for name, f in truth.items():
        want = f(tr.times)
        apart = np.min([np.abs(g(tr.times) - want) for n, g in truth.items() if n != name], axis=0) > 2 * res
        d = np.abs(np.nan_to_num(tr.freqs, nan=np.inf) - want[:, None])
        j = d.argmin(axis=1)
        found = apart & (d[np.arange(j.size), j] < res)
        assert found.sum() > 0.9 * j.size - 1  # the component's peak is there in most frames
        ids = tracks.ids[np.arange(j.size), j][found]
        assert (ids == ids[0]).mean() >= 0.99 and ids[0] >= 0, (name, np.unique(ids, return_counts=True))
    summary = tracks.summary()
    np.testing.assert_allclose(np.sort(summary["drift"]), [-250, 0, 250], atol=3)
    assert (summary["peaks"] >= 0.9 * len(tr)).all()


def test_gaps_jumps_and_lengths():
    nan = np.nan
    # one track at 100 with a gap of two frames, a jump to 200 (a new track), a lone peak at 900
    f = [[100, nan], [101, 900], [nan, nan], [nan, nan], [102, nan], [200, nan]]
    got = _result(f).link(max_jump_hz=5, max_gap=2).ids
    np.testing.assert_array_equal(got, [[0, -1], [0, 1], [-1, -1], [-1, -1], [0, -1], [2, -1]])
    got = _result(f).link(max_jump_hz=5, max_gap=1).ids  # the gap closes it: 102 starts a new track
    np.testing.assert_array_equal(got[:, 0], [0, 0, -1, -1, 2, 3])
    got = _result(f).link(max_jump_hz=5, max_gap=2, min_length=2).ids  # short tracks dropped, renumbered
    np.testing.assert_array_equal(got, [[0, -1], [0, -1], [-1, -1], [-1, -1], [0, -1], [-1, -1]])
    with pytest.raises(ValueError, match="max_jump_hz"):
        _result(f).link(max_jump_hz=0)
    with pytest.raises(ValueError, match="max_gap"):
        _result(f).link(max_jump_hz=1, max_gap=-1)
    with pytest.raises(ValueError, match="min_length"):
        _result(f).link(max_jump_hz=1, min_length=0)


def test_the_assignment_is_optimal_not_greedy():
    """Tracks at 100 and 110; the next frame has 109 and 118. Nearest-first would give 109 to
    the track at 110 (1 Hz) and leave 118 18 Hz from the track at 100 (over max_jump_hz 12: a
    new track); the optimal assignment links 100-109 (9) and 110-118 (8)."""
    f = [[100, 110], [100, 110], [109, 118]]
    got = _result(f).link(max_jump_hz=12).ids
    np.testing.assert_array_equal(got[2], [0, 1])


def test_crossing_tracks_follow_their_slopes_and_ids_are_unique_across_signals():
    """A rises 10 Hz per frame, B falls 10 Hz per frame; they pass each other between frames 3
    and 4 (130/140, then 140/130). By their last frequencies the ids would swap there; by
    their lines each keeps its own. Ids are unique across signals."""
    up, down = 100.0 + 10 * np.arange(8), 170.0 - 10 * np.arange(8)
    lanes = np.c_[up, down]
    lanes[4:] = lanes[4:, ::-1]  # the slots hold the strongest first: swap them after the crossing
    got = _result(np.stack([lanes, lanes])).link(max_jump_hz=12).ids
    assert got.shape == (2, 8, 2)
    is_up = lanes == up[:, None]
    np.testing.assert_array_equal(got[0], np.where(is_up, 0, 1))
    np.testing.assert_array_equal(got[1], np.where(is_up, 2, 3))


def test_summary_against_numpy():
    times = np.array([0.0, 0.5, 1.0, 1.5])
    f = np.array([[100.0, 300.0], [101.0, 300.0], [102.5, np.nan], [103.0, 300.0]])
    power = np.where(np.isfinite(f), np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 9.0], [7.0, 2.0]]), np.nan)
    snr = np.where(np.isfinite(f), 10.0 + np.arange(8).reshape(4, 2), np.nan)
    tracks = _result(f, times, power, snr).link(max_jump_hz=2)
    s = tracks.summary()
    assert list(s) == ["track", "signal", "start", "end", "duration", "peaks", "freq_median", "freq_min",
                       "freq_max", "drift", "power_mean", "snr_median"]
    np.testing.assert_array_equal(s["track"], [0, 1])
    np.testing.assert_array_equal(s["peaks"], [4, 3])
    np.testing.assert_allclose(s["start"], [0, 0])
    np.testing.assert_allclose(s["end"], [1.5, 1.5])
    np.testing.assert_allclose(s["drift"], [np.polyfit(times, f[:, 0], 1)[0], 0.0], atol=1e-9)
    np.testing.assert_allclose(s["freq_median"], [np.median(f[:, 0]), 300.0])
    np.testing.assert_allclose(s["power_mean"], [4.0, 2.0])
    np.testing.assert_allclose(s["snr_median"], [np.median(snr[:, 0]), np.median(snr[[0, 1, 3], 1])])


def test_the_linker_alone_is_the_offline_result_frame_by_frame():
    f = np.array([[100.0, 300.0], [101.0, 302.0], [102.0, np.nan], [103.0, 306.0]])
    lk = MultiLinker(5, 1)
    online = np.stack([lk.feed(row[None])[0] for row in f])
    np.testing.assert_array_equal(online, _result(f).link(max_jump_hz=5, max_gap=1).ids)


@pytest.mark.parametrize("step", [1000, 4097, 20000])
def test_a_linked_stream_gives_the_offline_ids_whatever_the_chunking(step):
    fs = 8000.0
    t = np.arange(int(3 * fs)) / fs
    x = np.stack([np.sin(2 * np.pi * (700 * t + 150 * t ** 2)) + np.sin(2 * np.pi * 1500 * t),
                  np.sin(2 * np.pi * 2500 * t)]) + 0.05 * np.random.default_rng(1).standard_normal((2, t.size))
    whole = welchpeaks.track(x, fs=fs, n_fft=256, k=3, frame_segments=2).link(max_jump_hz=30, max_gap=4)
    stream = welchpeaks.WelchPeakStream(link={"max_jump_hz": 30, "max_gap": 4}, fs=fs, n_fft=256, k=3,
                                        frame_segments=2)
    parts = [stream.push(x[:, i:i + step]) for i in range(0, x.shape[1], step)]
    assert all(isinstance(p, welchpeaks.Tracks) for p in parts)
    np.testing.assert_array_equal(np.concatenate([p.ids for p in parts], axis=1), whole.ids)
    np.testing.assert_array_equal(np.concatenate([p.result.bins for p in parts], axis=1), whole.result.bins)
    assert len(whole) >= 3 and (whole.ids >= 0).any()
    stream.flush()  # a new stream: its tracks are numbered from 0 again
    again = stream.push(x[:, :4096])
    np.testing.assert_array_equal(again.ids, whole.ids[:, :again.ids.shape[1]])
    with pytest.raises(ValueError, match="min_length"):
        welchpeaks.WelchPeakStream(link={"max_jump_hz": 30, "min_length": 3})


def test_summary_of_a_streams_chunk_and_the_snr_column():
    """A linked stream's chunk holds ids of the whole stream: its summary has one row per track
    with a peak in the chunk; measures=("snr",) gives snr_median."""
    fs = 8000.0
    t = np.arange(int(2 * fs)) / fs
    y = np.sin(2 * np.pi * 1000 * t) + np.sin(2 * np.pi * (2000 * t + 100 * t ** 2))
    stream = welchpeaks.WelchPeakStream(link={"max_jump_hz": 30, "max_gap": 15}, fs=fs, frame_segments=8, k=2,
                                        prominence=0, measures=("snr",))
    parts = [stream.push(c) for c in np.array_split(y, 7)]
    later = parts[4]
    s = later.summary()
    assert len(later) == len(s["track"]) == len(np.unique(later.ids[later.ids >= 0])) == 2
    np.testing.assert_array_equal(s["track"], np.unique(later.ids[later.ids >= 0]))
    assert "snr_median" in s and np.all(s["snr_median"] > 10)
    whole = welchpeaks.track(y, fs=fs, frame_segments=8, k=2, prominence=0, measures=("snr",))
    tracks = whole.link(max_jump_hz=30)
    for tid, med in zip(tracks.summary()["track"], tracks.summary()["snr_median"]):
        assert med == np.median(whole.measures["snr_db"][tracks.ids == tid])


def test_wrong_types_are_type_errors():
    r = _result([[100.0], [101.0]])
    for bad in ("5", None):
        with pytest.raises(TypeError, match="max_jump_hz"):
            r.link(max_jump_hz=bad)
    with pytest.raises(TypeError, match="max_gap"):
        r.link(max_jump_hz=5, max_gap=1.5)


def test_a_linked_stream_keeps_only_its_open_tracks():
    """Noise starts about a track per peak: a stream's linkers hold the open ones only (at most
    k x (max_gap + 2) per signal), however long it runs."""
    rng = np.random.default_rng(0)
    stream = welchpeaks.WelchPeakStream(link={"max_jump_hz": 1e-4, "max_gap": 1}, n_fft=64, k=16, frame_segments=1)
    for _ in range(20):
        stream.push(rng.standard_normal(64 * 50))
    (linker,) = stream._linker.linkers
    assert stream._linker.count > 5000 and linker.ids.size <= 16 * 3 and stream._linker.sizes is None
