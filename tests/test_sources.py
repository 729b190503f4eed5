"""Out-of-core sources (open_signals): welch_peaks and track read them block by block and give
exactly the in-memory results; hostile and damaged files get one-line errors."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import welchpeaks
from welchpeaks.loaders import SignalFileError

zarr = pytest.importorskip("zarr", reason="the io extra (zarr) is part of the test install")
h5py = pytest.importorskip("h5py", reason="the io extra (h5py) is part of the test install")
sf = pytest.importorskip("soundfile", reason="the io extra (soundfile) is part of the test install")

KW = dict(n_fft=64, k=4, strategy="fused-cpu")


@pytest.fixture(scope="module")
def signals():
    x = np.random.default_rng(11).standard_normal((5, 6000)).astype(np.float32)
    x[2] += np.sin(2 * np.pi * 0.2 * np.arange(6000)).astype(np.float32)
    return x


@pytest.fixture(scope="module")
def stores(tmp_path_factory, signals):
    d = tmp_path_factory.mktemp("stores")
    np.save(d / "x.npy", signals)
    z = zarr.create_array(str(d / "x.zarr"), shape=signals.shape, chunks=(2, 1000), dtype="float32")
    z[:] = signals
    z.attrs["fs"] = 1000.0
    with h5py.File(d / "x.h5", "w") as fh:
        fh.create_dataset("/group/x", data=signals).attrs["fs"] = 1000.0
    return d


def _same(a, b):
    for f in ("bins", "power", "freqs"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


@pytest.mark.parametrize("name", ["x.npy", "x.zarr", "x.h5:/group/x"])
def test_sources_equal_in_memory(stores, signals, name):
    src = welchpeaks.open_signals(f"{stores}/{name}")
    assert src.rows == 5 and src.dtype == np.float32
    fs = src.fs
    # blocks of one row (1 MiB budget), then the in-memory call
    _same(welchpeaks.welch_peaks(src, segments=None, max_memory=1 << 20, **KW),
          welchpeaks.welch_peaks(signals, segments=None, fs=fs, **KW))
    _same(welchpeaks.track(src, frame_segments=4, max_memory=1 << 20, **KW),
          welchpeaks.track(signals, frame_segments=4, fs=fs, **KW))


def test_filters_and_measures_on_a_source_equal_in_memory(stores, signals, tmp_path):
    src = welchpeaks.open_signals(f"{stores}/x.zarr")
    kw = dict(KW, segments=None, prominence=1e-4, snr_db=1.0, measures=("snr", "prominence", "width"))
    got = welchpeaks.welch_peaks(src, max_memory=1 << 20, **kw)  # blocks of rows
    ref = welchpeaks.welch_peaks(signals, fs=src.fs, **kw)
    _same(got, ref)
    assert set(got.measures) == set(ref.measures) == {"snr_db", "prominence", "width", "width_hz"}
    for name, v in ref.measures.items():
        np.testing.assert_array_equal(got.measures[name], v)
    np.save(tmp_path / "long.npy", np.zeros((2, 300_000), np.float32))  # 1.2 MB frames
    with pytest.raises(ValueError, match="analysed frame is read at once.*max_memory="):
        welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "long.npy"), max_memory=1 << 20, **kw)
@settings(max_examples=15, deadline=None, derandomize=True)
@given(budget=st.integers(1 << 20, 3 << 20), frame_segments=st.integers(1, 9), frame_hop=st.sampled_from([None, 1, 2]))
def test_track_of_a_long_file_in_any_blocks(tmp_path_factory, budget, frame_segments, frame_hop):
    d = tmp_path_factory.mktemp("long")
    x = np.random.default_rng(frame_segments).standard_normal((3, 200_000)).astype(np.float32)
    np.save(d / "x.npy", x)
    kw = dict(KW, frame_segments=frame_segments, frame_hop=frame_hop)
    _same(welchpeaks.track(welchpeaks.open_signals(d / "x.npy"), max_memory=budget, **kw), welchpeaks.track(x, **kw))


def test_audio_directory(tmp_path):
    rng = np.random.default_rng(12)
    a, b = rng.uniform(-0.5, 0.5, (2, 4000, 2)).astype(np.float32)
    sf.write(tmp_path / "a.flac", a, 8000, subtype="PCM_24")
    sf.write(tmp_path / "b.wav", b, 8000, subtype="FLOAT")
    src = welchpeaks.open_signals(tmp_path)
    assert src.fs == 8000.0 and src.rows == 4 and len(src.parts) == 2
    got = welchpeaks.welch_peaks(src, **KW)
    rows = np.concatenate([sf.read(tmp_path / "a.flac", dtype="float32")[0].T, b.T])
    _same(got, welchpeaks.welch_peaks(rows, fs=8000.0, **KW))
    sf.write(tmp_path / "c.wav", b, 16000)
    with pytest.raises(SignalFileError, match=r"different sample rates \(8000 Hz: a.flac, b.wav; 16000 Hz: c.wav\)"):
        welchpeaks.open_signals(tmp_path / "*.*")


def test_hostile_files(tmp_path, signals):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(SignalFileError, match="never unpickles"):
        welchpeaks.open_signals(tmp_path / "obj.npy")
    np.save(tmp_path / "t.npy", signals)
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(SignalFileError, match="truncated or damaged"):
        welchpeaks.open_signals(tmp_path / "t.npy")
    zarr.create_array(str(tmp_path / "c.zarr"), shape=(4,), dtype="complex64")
    with pytest.raises(SignalFileError, match="holds complex64 values"):
        welchpeaks.open_signals(tmp_path / "c.zarr")
    with h5py.File(tmp_path / "x.h5", "w") as fh:
        fh.create_dataset("a", data=signals).attrs["fs"] = -3.0
    with pytest.raises(SignalFileError, match=r"name the dataset as .*datasets here: /a"):
        welchpeaks.open_signals(tmp_path / "x.h5")
    with pytest.raises(SignalFileError, match="has no dataset '/b'"):
        welchpeaks.open_signals(f"{tmp_path}/x.h5:/b")
    with pytest.raises(SignalFileError, match="sample rate -3.0 is not a positive"):
        welchpeaks.open_signals(f"{tmp_path}/x.h5:/a")
    (tmp_path / "junk.wav").write_bytes(b"RIFF0000WAVEjunk")
    with pytest.raises(SignalFileError, match="junk.wav: not a sound file"):
        welchpeaks.open_signals(tmp_path / "junk.wav")
    with pytest.raises(SignalFileError, match="unsupported file type '.txt'"):
        (tmp_path / "a.txt").write_text("1,2")
        welchpeaks.open_signals(tmp_path / "a.txt")


def test_source_errors_name_the_file(tmp_path):
    np.save(tmp_path / "short.npy", np.zeros((2, 100), np.float32))
    src = welchpeaks.open_signals(tmp_path / "short.npy")
    with pytest.raises(ValueError, match=r"short.npy: signals have 100 samples"):
        welchpeaks.welch_peaks(src)
    with pytest.raises(ValueError, match="fs=10 but npy .* is sampled"):
        src2 = welchpeaks.open_signals(tmp_path / "short.npy")
        src2.fs = 20.0
        welchpeaks.WelchPeaks(fs=10.0, n_fft=16)(src2)


@pytest.mark.parametrize("detrend", ["constant", "linear", False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_long_rows_in_pieces_bit_for_bit(tmp_path, detrend, dtype):
    """Rows longer than the budget go through the fused pass in pieces of segments, carrying the
    power sums: bit for bit the in-memory fused pass (float64 data computed in float64 by auto)."""
    x = (np.random.default_rng(13).standard_normal((3, 200_000)) + 4).astype(dtype)
    x[1, 123_456] = np.nan
    np.save(tmp_path / "x.npy", x)
    kw = dict(n_fft=256, k=6, segments=None, detrend=detrend, nan_policy="propagate")
    got = welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "x.npy"), max_memory=1 << 20, **kw)
    ref = welchpeaks.welch_peaks(x, strategy="fused-cpu", dtype=np.dtype(dtype).name, **kw)
    assert got.strategy == "fused-cpu" and got.params["compute_dtype"] == np.dtype(dtype).name
    _same(got, ref)
    assert np.all(got.bins[1] == -1) and np.all(got.bins[[0, 2]] >= 0)
    with pytest.raises(ValueError, match="signal 1 holds NaN or infinity"):
        welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "x.npy"), max_memory=1 << 20,
                               **dict(kw, nan_policy="raise"))


def test_pipes_devices_and_dangling_links_are_refused_by_name(tmp_path):
    """Issue 35, defect 11: a glob matching a FIFO hung (the folder branch checked for regular
    files, the glob branch did not); a .wav linked to /dev/zero said "no such file". Run in a
    child process, so that a regression fails by its time limit instead of hanging the tests."""
    import subprocess
    import sys

    rec = tmp_path / "rec"
    rec.mkdir()
    os.mkfifo(rec / "a.wav")
    (tmp_path / "z.wav").symlink_to("/dev/zero")
    (tmp_path / "gone.wav").symlink_to(tmp_path / "nothing-here.wav")
    script = f"""
from welchpeaks.loaders import SignalFileError
from welchpeaks.sources import open_signals
for src in ({str(rec / '*.wav')!r}, {str(rec)!r}, {str(tmp_path / 'z.wav')!r}, {str(tmp_path / 'gone.wav')!r}):
    try:
        open_signals(src)
        print("opened", src)
    except SignalFileError as exc:
        print(exc)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and len(lines) == 4, proc.stdout + proc.stderr
    assert all("not a regular file" in line for line in lines), lines
    assert "a.wav" in lines[0] and "a.wav" in lines[1] and "z.wav" in lines[2] and "gone.wav" in lines[3]


def test_an_hdf5_link_loop_is_a_file_error(tmp_path):
    """Issue 35, defect 11: a soft-link loop in an HDF5 file let h5py's RuntimeError escape."""
    path = tmp_path / "loop.h5"
    with h5py.File(path, "w") as fh:
        fh["a"] = h5py.SoftLink("/b")
        fh["b"] = h5py.SoftLink("/a")
        fh["ok"] = np.zeros((2, 64), np.float32)
    with pytest.raises(SignalFileError, match=r"loop\.h5: cannot open '/a'.*loops or leads nowhere"):
        welchpeaks.open_signals(f"{path}:/a")
    assert welchpeaks.open_signals(f"{path}:/ok").rows == 2
