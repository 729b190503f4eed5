"""Pictures of results (welchpeaks.plot), rendered with Agg: what was drawn is checked, not
only that a file exists: axes and units, one marker per peak at its frequency and power, the
PSD under them, one line per track, the spectrogram."""

import numpy as np
import pytest

import welchpeaks

matplotlib = pytest.importorskip("matplotlib", reason="the plot extra is part of the test install")
matplotlib.use("Agg")
plt = pytest.importorskip("matplotlib.pyplot")
from matplotlib.collections import PathCollection, QuadMesh  # noqa: E402

FS = 8000.0
T = np.arange(int(2 * FS)) / FS


def _marker_line(ax):
    (line,) = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
    return line


def test_peaks_are_marked_on_the_signals_psd():
    x = np.stack([np.sin(2 * np.pi * 1000 * T) + 0.5 * np.sin(2 * np.pi * 2500 * T), np.sin(2 * np.pi * 700 * T)])
    x += 0.01 * np.random.default_rng(0).standard_normal(x.shape)
    r = welchpeaks.welch_peaks(x, fs=FS, k=2, prominence=0, measures=("snr",))
    ax = r.plot(x, index=0)
    assert ax.get_xlabel() == "frequency (Hz)" and ax.get_ylabel() == "power (dB/Hz)"
    line = _marker_line(ax)
    np.testing.assert_allclose(line.get_xdata(), r.freqs[0])
    np.testing.assert_allclose(line.get_ydata(), 10 * np.log10(r.power[0]), rtol=1e-6)
    psd_line = [ln for ln in ax.get_lines() if ln.get_label() == "Welch PSD"][0]
    f, psd = welchpeaks.welch(x[0], fs=FS, nperseg=256)
    np.testing.assert_allclose(psd_line.get_xdata(), f)
    np.testing.assert_allclose(psd_line.get_ydata(), 10 * np.log10(psd), rtol=1e-9)  # the analysed frame's PSD
    labels = [t.get_text() for t in ax.texts]
    assert len(labels) == 2 and labels[0].startswith("1000") and "dB SNR" in labels[0]
    ax = r.plot(index=1)  # no signal: the peaks alone
    assert [ln.get_label() for ln in ax.get_lines()] == ["peaks (2)"]
    np.testing.assert_allclose(_marker_line(ax).get_xdata(), r.freqs[1])
    plt.close("all")


def test_peaks_without_fs_say_cycles_per_sample_and_empty_slots_are_not_drawn():
    x = np.sin(2 * np.pi * 0.1 * np.arange(4096))
    r = welchpeaks.welch_peaks(x, k=4, height=1e-3)  # one peak passes; three empty slots
    ax = r.plot(x)
    assert ax.get_xlabel() == "frequency (cycles/sample)"
    assert len(_marker_line(ax).get_xdata()) == int((r.bins >= 0).sum()) == 1
    with pytest.raises(IndexError, match="holds 1 signal"):
        r.plot(index=3)
    plt.close("all")


def test_peaks_over_time_with_tracks_and_spectrogram():
    y = np.sin(2 * np.pi * (500 * T + 500 * T ** 2)) + np.sin(2 * np.pi * 3000 * T)
    y += 0.05 * np.random.default_rng(1).standard_normal(T.size)
    tr = welchpeaks.track(y, fs=FS, n_fft=256, k=2, frame_segments=2)
    tracks = tr.link(max_jump_hz=40, max_gap=3, min_length=5)
    ax = tracks.plot(y)
    assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "frequency (Hz)"
    (dots,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    ok = np.isfinite(tr.freqs)
    assert dots.get_offsets().shape[0] == int(ok.sum())
    np.testing.assert_allclose(np.sort(dots.get_offsets()[:, 1]), np.sort(tr.freqs[ok]))
    lines = [ln for ln in ax.get_lines()]
    assert len(lines) == len(tracks) == 2
    for line in lines:  # each track's line goes through its own peaks, in time order
        assert np.all(np.diff(line.get_xdata()) > 0)
    assert any(isinstance(c, QuadMesh) for c in ax.collections)  # the spectrogram
    ax = tr.plot(y, spectrogram=False)
    assert not any(isinstance(c, QuadMesh) for c in ax.collections) and not ax.get_lines()
    plt.close("all")


def test_a_picture_of_many_frames_is_thinned(monkeypatch):
    from welchpeaks import plot

    y = np.sin(2 * np.pi * 1000 * T)
    tr = welchpeaks.track(y, fs=FS, n_fft=64, k=2, frame_segments=1)
    monkeypatch.setattr(plot, "MAX_POINTS", 100)
    ax = tr.plot()
    (dots,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert 50 < dots.get_offsets().shape[0] <= 100 < int(np.isfinite(tr.freqs).sum())
    assert "every" in ax.get_title()
    plt.close("all")


def test_missing_matplotlib_names_the_extra(monkeypatch):
    import sys

    from welchpeaks import plot

    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    r = welchpeaks.welch_peaks(np.sin(np.arange(1024.0)), k=1)
    with pytest.raises(ImportError, match=r"pip install 'welchpeaks\[plot\]'"):
        r.plot()
    assert plot.MAX_POINTS > 0
