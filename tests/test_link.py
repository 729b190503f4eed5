"""Peaks linked into tracks (TrackResult.link, welchpeaks.tracks): generated scene families
against their known frequencies (crossings from nearly parallel to steep, a steady tone among
chirps, dropouts, vibrato, hopping, a plain recording), the gap/jump/length rules on hand-made
frames, the stream against the offline result, bounded work, the summary against numpy."""

import numpy as np
import pytest

import welchpeaks
from welchpeaks import TrackResult
from welchpeaks import tracks as tracks_mod
from welchpeaks.bench import linking
from welchpeaks.tracks import MultiLinker, check_link


def _result(freqs, fs_times=None, power=None, snr=None, params=None):
    freqs = np.asarray(freqs, np.float64)
    bins = np.where(np.isfinite(freqs), 1, -1).astype(np.int32)
    power = np.where(np.isfinite(freqs), 1.0, np.nan) if power is None else np.asarray(power, np.float64)
    times = np.arange(freqs.shape[-2], dtype=np.float64) * 0.5 if fs_times is None else fs_times
    return TrackResult(bins, power, freqs, times, "test", params or {}, {} if snr is None else {"snr_db": snr})


def identity_score(scene, result, ids):
    """The score the targets are stated in: per true source, of its frame-peaks (the detected
    peaks within half a bin of its true frequency, in frames where every other source is at
    least 2 bins away), the fraction carrying its majority track id (-1 counts against it);
    sources with fewer than 5 frame-peaks are not scored (NaN). Written here, apart from the
    benchmark's copy (``welchpeaks.bench.linking.score``), which must agree."""
    res = scene.fs / scene.n_fft
    true = linking.truth(scene, result.times)
    freqs = np.asarray(result.freqs, np.float64)
    out = np.full(true.shape[0], np.nan)
    for s in range(true.shape[0]):
        others = np.delete(true, s, axis=0)
        gap = np.nanmin(np.abs(others - true[s]), axis=0, initial=np.inf) if others.size else np.inf
        d = np.nan_to_num(np.abs(freqs - true[s][:, None]), nan=np.inf)
        slot = d.argmin(axis=1)
        mine = (d[np.arange(len(slot)), slot] <= 0.5 * res) & (np.nan_to_num(gap, nan=np.inf) >= 2 * res)
        if mine.sum() < 5:
            continue
        got = ids[np.flatnonzero(mine), slot[mine]]
        ok = got[got >= 0]
        out[s] = 0.0 if ok.size == 0 else np.unique(ok, return_counts=True)[1].max() / got.size
    return out


def _scenes(family, count, snr=(15.0, 30.0), k=16):
    for i in range(count):
        sc = linking.make_scene(family, linking.scene_rng(0, family, i), snr)
        r = welchpeaks.track(sc.x, fs=sc.fs, n_fft=sc.n_fft, k=k, frame_segments=2, measures=("snr",),
                             strategy="numpy")
        yield sc, r


@pytest.mark.parametrize("family,count", [("crossing", 16), ("tone-among-chirps", 16), ("dropout", 10),
                                          ("vibrato", 10), ("hopping", 8)])
def test_each_source_keeps_its_identity_with_default_parameters(family, count):
    """Generated scenes of each family (random sample rates 4-48 kHz, n_fft 256 or 512, 2-4
    sources, SNR 15-30 dB, crossings at relative slopes 0.1 to 3 bins per frame), linked with
    the defaults: every source scores at least 0.99 in every scene (measured: 1.000 in all 60
    scenes of each family; docs/accuracy.md), and the benchmark's score agrees with the test's."""
    worst = []
    for sc, r in _scenes(family, count):
        tr = r.link()
        s = identity_score(sc, r, tr.ids)
        np.testing.assert_array_equal(s, linking.score(sc, r, tr.ids))
        worst.append(np.nanmin(s))
        assert np.nanmin(s) >= 0.99, (family, sc.fs, sc.n_fft, sc.info, sc.snr_db, s)
    assert len(worst) == count and np.all(np.isfinite(worst))


def test_the_steady_tone_among_chirps_is_one_track():
    """The tone of every tone-among-chirps scene (source 0) is one track: all its frame-peaks
    carry one id, through every crossing."""
    for sc, r in _scenes("tone-among-chirps", 12):
        tr = r.link()
        res = sc.fs / sc.n_fft
        tone = linking.truth(sc, r.times)[0]
        d = np.nan_to_num(np.abs(r.freqs - tone[:, None]), nan=np.inf)
        slot = d.argmin(axis=1)
        near = d[np.arange(slot.size), slot] <= 0.5 * res
        others = np.delete(linking.truth(sc, r.times), 0, axis=0)
        apart = np.min(np.abs(others - tone), axis=0) >= 2 * res
        ids = tr.ids[np.flatnonzero(near & apart), slot[near & apart]]
        assert np.unique(ids).size == 1 and ids[0] >= 0, (sc.info, np.unique(ids, return_counts=True))


def test_crossings_need_the_shared_peak_and_two_models():
    """The mechanisms the scores rest on: without the unresolved-track rule (MERGE_BINS 0) or
    with one motion model for every track (both steady: vibrato breaks; both curving: slopes
    are forgotten in slow crossings), some scenes lose their sources' identities."""
    scenes = [(sc, r) for fam in ("crossing", "tone-among-chirps", "vibrato") for sc, r in _scenes(fam, 10)]

    def worst():
        return min(np.nanmin(identity_score(sc, r, r.link().ids)) for sc, r in scenes)

    assert worst() >= 0.99
    for name, value in (("MERGE_BINS", 0.0), ("CURVING_Q", tracks_mod.STEADY_Q), ("STEADY_Q", tracks_mod.CURVING_Q)):
        old = getattr(tracks_mod, name)
        setattr(tracks_mod, name, value)
        try:
            assert worst() < 0.95, name
        finally:
            setattr(tracks_mod, name, old)


def test_a_plain_recording_gives_one_track_per_component():
    """Two steady tones in noise, k=16 (14 slots of noise peaks every frame): the defaults give
    exactly two tracks, each the whole recording; without the SNR floor the noise peaks make
    many more (the floor is what keeps them out)."""
    for sc, r in _scenes("plain", 8):
        tr = r.link()
        assert len(tr) == 2, (sc.fs, sc.n_fft, sc.snr_db)
        assert (tr.summary()["peaks"] >= 0.95 * len(r.times)).all()
        assert len(r.link(min_snr_db=None)) > 20


def test_without_the_snr_measure_link_says_the_floor_does_not_apply():
    sc = linking.make_scene("plain", linking.scene_rng(0, "plain", 0))
    r = welchpeaks.track(sc.x, fs=sc.fs, n_fft=sc.n_fft, k=4, frame_segments=2, strategy="numpy")
    with pytest.warns(tracks_mod.NoSnrNotice, match="measures=\\('snr',\\)"):
        r.link()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r.link(min_snr_db=None)


def test_gaps_jumps_and_lengths():
    nan = np.nan
    # one track at 100 with a gap of two frames, a jump to 200 (a new track), a lone peak at 900;
    # a result that does not name its n_fft takes max_jump_hz for a bin
    f = [[100, nan], [101, 900], [nan, nan], [nan, nan], [102, nan], [200, nan]]
    kw = dict(min_snr_db=None, min_length=1)
    got = _result(f).link(max_jump_hz=5, max_gap=2, **kw).ids
    np.testing.assert_array_equal(got, [[0, -1], [0, 1], [-1, -1], [-1, -1], [0, -1], [2, -1]])
    got = _result(f).link(max_jump_hz=5, max_gap=1, **kw).ids  # the gap closes it: 102 starts a new track
    np.testing.assert_array_equal(got[:, 0], [0, 0, -1, -1, 2, 3])
    got = _result(f).link(max_jump_hz=5, max_gap=2, min_length=2, min_snr_db=None).ids  # short ones dropped
    np.testing.assert_array_equal(got, [[0, -1], [0, -1], [-1, -1], [-1, -1], [0, -1], [-1, -1]])
    with pytest.raises(ValueError, match="max_jump_hz"):
        _result(f).link(max_jump_hz=0)
    with pytest.raises(ValueError, match="max_gap"):
        _result(f).link(max_jump_hz=1, max_gap=-1)
    with pytest.raises(ValueError, match="min_length"):
        _result(f).link(max_jump_hz=1, min_length=0)
    with pytest.raises(ValueError, match="n_fft"):
        _result(f).link()  # no scale at all
    with pytest.raises(ValueError, match="min_snr_db"):
        _result(f).link(max_jump_hz=1, min_snr_db=float("inf"))


def test_the_snr_floor_and_the_power_gate():
    """Peaks under min_snr_db join no track (id -1); a peak far weaker than its track (a noise
    peak where the tone dropped out) starts its own instead of joining it."""
    params = {"n_fft": 100, "fs": 100.0}  # bins of 1 Hz
    f = np.array([[10.0], [10.0], [10.0], [10.2], [10.0], [10.0]])
    snr = np.array([[30.0], [30.0], [5.0], [30.0], [30.0], [30.0]])
    power = np.array([[1.0], [1.0], [1.0], [1e-3], [1.0], [1.0]])
    got = _result(f, power=power, snr=snr, params=params).link(min_length=1).ids[:, 0]
    np.testing.assert_array_equal(got, [0, 0, -1, 1, 0, 0])


def test_the_assignment_is_optimal_not_greedy():
    """Tracks at 100 and 110; the next frame has 109 and 118. Nearest-first would give 109 to
    the track at 110 (1 Hz) and leave 118 18 Hz from the track at 100 (over max_jump_hz 12: a
    new track); the optimal assignment links 100-109 (9) and 110-118 (8)."""
    f = [[100, 110], [100, 110], [109, 118]]
    got = _result(f).link(max_jump_hz=12, min_snr_db=None, min_length=1).ids
    np.testing.assert_array_equal(got[2], [0, 1])


def test_crossing_tracks_follow_their_slopes_and_ids_are_unique_across_signals():
    """A rises 10 Hz per frame, B falls 10 Hz per frame; they pass each other between frames 3
    and 4 (130/140, then 140/130). By their last frequencies the ids would swap there; by
    their slopes each keeps its own. Ids are unique across signals."""
    up, down = 100.0 + 10 * np.arange(8), 170.0 - 10 * np.arange(8)
    lanes = np.c_[up, down]
    lanes[4:] = lanes[4:, ::-1]  # the slots hold the strongest first: swap them after the crossing
    got = _result(np.stack([lanes, lanes]), params={"n_fft": 400, "fs": 400.0}).link(
        min_snr_db=None, min_length=1).ids
    assert got.shape == (2, 8, 2)
    is_up = lanes == up[:, None]
    np.testing.assert_array_equal(got[0], np.where(is_up, 0, 1))
    np.testing.assert_array_equal(got[1], np.where(is_up, 2, 3))


def test_summary_against_numpy():
    times = np.array([0.0, 0.5, 1.0, 1.5])
    f = np.array([[100.0, 300.0], [101.0, 300.0], [102.5, np.nan], [103.0, 300.0]])
    power = np.where(np.isfinite(f), np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 9.0], [7.0, 2.0]]), np.nan)
    snr = np.where(np.isfinite(f), 10.0 + np.arange(8).reshape(4, 2), np.nan)
    tracks = _result(f, times, power, snr, {"n_fft": 100, "fs": 200.0}).link(min_length=1)
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


def test_the_linker_fed_frame_by_frame_is_the_offline_result():
    rng = np.random.default_rng(3)
    f = np.sort(rng.uniform(0, 100, (2, 60, 5)), axis=-1)
    f[0, :, 0] = 20 + 0.3 * np.arange(60)
    params = check_link(min_snr_db=None, min_length=1, resolution=1.0)
    power = rng.uniform(0.5, 2.0, f.shape)
    lk = MultiLinker(params)
    online = np.stack([lk.feed(f[:, t], power[:, t]) for t in range(f.shape[1])], axis=1)
    offline = _result(f, power=power, params={"n_fft": 100, "fs": 100.0}).link(min_snr_db=None, min_length=1).ids
    np.testing.assert_array_equal(online, offline)


@pytest.mark.parametrize("step", [1, 1000, 4097, 20000])
def test_a_linked_stream_gives_the_offline_ids_whatever_the_chunking(step):
    fs = 8000.0
    t = np.arange(int(3 * fs)) / fs
    x = np.stack([np.sin(2 * np.pi * (700 * t + 150 * t ** 2)) + np.sin(2 * np.pi * 1500 * t),
                  np.sin(2 * np.pi * 2500 * t)]) + 0.05 * np.random.default_rng(1).standard_normal((2, t.size))
    x = x[:, :6000] if step == 1 else x
    whole = welchpeaks.track(x, fs=fs, n_fft=256, k=3, frame_segments=2, measures=("snr",)).link(max_gap=4,
                                                                                                min_length=1)
    stream = welchpeaks.WelchPeakStream(link={"max_gap": 4}, fs=fs, n_fft=256, k=3, frame_segments=2)
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
    with pytest.raises(ValueError, match="max_gap"):
        welchpeaks.WelchPeakStream(link={"max_gap": -1})


def test_a_stream_linked_with_defaults_equals_linking_the_collected_result():
    sc = linking.make_scene("tone-among-chirps", linking.scene_rng(0, "tone-among-chirps", 1))
    stream = welchpeaks.WelchPeakStream(link=True, fs=sc.fs, n_fft=sc.n_fft, k=16, frame_segments=2,
                                        strategy="numpy")
    parts = [stream.push(c) for c in np.array_split(sc.x, 23)]
    whole = welchpeaks.track(sc.x, fs=sc.fs, n_fft=sc.n_fft, k=16, frame_segments=2, measures=("snr",),
                             strategy="numpy").link(min_length=1)
    np.testing.assert_array_equal(np.concatenate([p.ids for p in parts], axis=-2), whole.ids)
    assert parts[0].params["min_snr_db"] == 10.0


def test_summary_of_a_streams_chunk_and_the_snr_column():
    """A linked stream's chunk holds ids of the whole stream: its summary has one row per track
    with a peak in the chunk; measures=("snr",) gives snr_median."""
    fs = 8000.0
    t = np.arange(int(2 * fs)) / fs
    y = np.sin(2 * np.pi * 1000 * t) + np.sin(2 * np.pi * (2000 * t + 100 * t ** 2))
    stream = welchpeaks.WelchPeakStream(link={"max_gap": 15}, fs=fs, frame_segments=8, k=2, prominence=0,
                                        measures=("snr",))
    parts = [stream.push(c) for c in np.array_split(y, 7)]
    later = parts[4]
    s = later.summary()
    assert len(later) == len(s["track"]) == len(np.unique(later.ids[later.ids >= 0])) == 2
    np.testing.assert_array_equal(s["track"], np.unique(later.ids[later.ids >= 0]))
    assert "snr_median" in s and np.all(s["snr_median"] > 10)
    whole = welchpeaks.track(y, fs=fs, frame_segments=8, k=2, prominence=0, measures=("snr",))
    tracks = whole.link(min_length=1)
    for tid, med in zip(tracks.summary()["track"], tracks.summary()["snr_median"]):
        assert med == np.median(whole.measures["snr_db"][tracks.ids == tid])


def test_wrong_types_are_type_errors():
    r = _result([[100.0], [101.0]])
    for bad in ("5", [1]):
        with pytest.raises(TypeError, match="max_jump_hz"):
            r.link(max_jump_hz=bad)
    with pytest.raises(TypeError, match="max_gap"):
        r.link(max_jump_hz=5, max_gap=1.5)
    with pytest.raises(TypeError, match="min_snr_db"):
        r.link(max_jump_hz=5, min_snr_db="10")


def test_work_is_bounded_whatever_max_gap():
    """Noise starts about a track per peak, and with max_gap 10**9 no track ever closes by its
    gap: a signal keeps at most OPEN_PER_SLOT x k open tracks (the longest waiting close), in a
    stream however long it runs and in link() (which then costs the same per frame: linear)."""
    rng = np.random.default_rng(0)
    stream = welchpeaks.WelchPeakStream(link={"max_jump_hz": 1e-4, "max_gap": 10 ** 9, "min_snr_db": None},
                                        n_fft=64, k=16, frame_segments=1)
    for _ in range(20):
        stream.push(rng.standard_normal(64 * 50))
    assert stream._linker.count > 5000 and stream._linker.open_tracks.max() <= tracks_mod.OPEN_PER_SLOT * 16
    assert stream._linker.sizes is None
    f = rng.uniform(0, 4000, (1, 3000, 16))
    tr = _result(f, params={"n_fft": 256, "fs": 8000.0}).link(1e-12, max_gap=10 ** 9, min_snr_db=None, min_length=1)
    assert len(tr) == f.size  # every peak its own track


def test_bench_link_scores_the_families(tmp_path):
    """``welchpeaks bench link``: the scores and the cost as JSON and Markdown."""
    import json

    from typer.testing import CliRunner

    from welchpeaks.cli.main import app

    out, md = tmp_path / "link.json", tmp_path / "link.md"
    res = CliRunner().invoke(app, ["bench", "link", "--scenes", "2", "--families", "crossing,plain", "--cost-frames",
                                   "300", "--json", str(out), "--md", str(md)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert set(doc["families"]) == {"crossing", "plain"} and doc["families"]["plain"]["tracks"] == [2, 2]
    assert doc["families"]["crossing"]["worst"] >= 0.99 and doc["cost"]["frames"] == 300
    assert "| crossing | 2 |" in md.read_text()
    bad = CliRunner().invoke(app, ["bench", "link", "--families", "loud"])
    assert bad.exit_code == 2 and "--families" in bad.output
