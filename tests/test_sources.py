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
@pytest.mark.slow
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


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(2, 9), scale=st.floats(1e19, 1e30),
       policy=st.sampled_from(["raise", "propagate"]), nan_too=st.booleans())
def test_long_rows_overflow_is_an_error_as_in_memory(tmp_path_factory, seed, rows, scale, policy, nan_too):
    """Issue 51, D3: a finite signal whose float32 power overflows is an error in long rows, as
    in memory, under either nan_policy (it came back as empty slots under 'propagate'); the
    message names the same signal and says overflow. A row holding NaN beside it is still empty
    slots under 'propagate', and without the overflowing row the call succeeds."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 150_001)).astype(np.float32)  # two rows' frames over the budget
    big, nan_row = rng.choice(rows, 2, replace=False)
    x[big] *= np.float32(scale)
    if nan_too:
        x[nan_row, rng.integers(0, 150_001)] = np.nan
    path = tmp_path_factory.mktemp("overflow") / "x.npy"
    np.save(path, x)
    kw = dict(k=4, segments=None, strategy="fused-cpu", nan_policy=policy, max_memory=1 << 20)
    src = welchpeaks.open_signals(path)
    assert welchpeaks.WelchPeaks(**kw).explain(source=src)["parts"][0]["mode"] == "long rows"
    with pytest.raises(ValueError) as in_memory:
        welchpeaks.welch_peaks(x, **kw)
    with pytest.raises(ValueError) as long_rows:
        welchpeaks.welch_peaks(src, **kw)
    assert "overflows float32" in str(long_rows.value) and f"signal {big} " in str(long_rows.value)
    assert "overflows float32" in str(in_memory.value) and f"signal x[{big}]" in str(in_memory.value)
    x[big] /= np.float32(scale)
    np.save(path, x)
    if nan_too and policy == "raise":
        with pytest.raises(ValueError, match=f"signal {nan_row} holds NaN"):
            welchpeaks.welch_peaks(welchpeaks.open_signals(path), **kw)
        return
    got = welchpeaks.welch_peaks(welchpeaks.open_signals(path), **kw)
    _same(got, welchpeaks.welch_peaks(x, **kw))
    assert np.all(got.bins[nan_row] == -1) == nan_too


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


def test_declared_sizes_are_checked_against_what_is_stored(tmp_path):
    """Issue 35, defect 10: a 26 KB HDF5 dataset declaring shape (1, 10**12), or an 8 KB Zarr
    array declaring 10**13 samples, was opened, and welch_peaks on it read fill values for
    terabytes (track allocated 1.71 TiB up front); only .npy was checked. Now every store's
    declared size is checked against what it stores when it is opened, before any work; stores
    that hold their data (compressed, sharded, Zarr's skipped fill-value chunks) still open."""
    path = tmp_path / "tiny.h5"
    with h5py.File(path, "w") as fh:
        fh.create_dataset("huge", shape=(1, 10**12), chunks=(1, 1000), dtype="float32")[0, :1000] = 1.0
        fh.create_dataset("blank", shape=(2, 100_000), dtype="float32")  # contiguous, never written
        fh.create_dataset("zeros", data=np.zeros((2, 20_000), np.float32), chunks=(1, 1000), compression="gzip")
        layout = h5py.VirtualLayout(shape=(2, 20_000), dtype="float32")
        layout[0] = h5py.VirtualSource(".", "zeros", shape=(2, 20_000))[0]
        fh.create_virtual_dataset("virtual", layout, fillvalue=0)
    assert path.stat().st_size < 64_000
    with pytest.raises(SignalFileError, match=r"tiny\.h5:/huge: declares shape \(1, 1000000000000\) .*stores only 1 "
                                              r"of them.*fill values"):
        welchpeaks.open_signals(f"{path}:/huge")
    with pytest.raises(SignalFileError, match=r"tiny\.h5:/blank: declares shape .* stores 0 bytes"):
        welchpeaks.open_signals(f"{path}:/blank")
    with pytest.raises(SignalFileError, match=r"tiny\.h5:/virtual: a virtual dataset"):
        welchpeaks.open_signals(f"{path}:/virtual")
    src = welchpeaks.open_signals(f"{path}:/zeros")  # compressed to a few KB: every chunk stored
    assert src.rows == 2 and np.all(welchpeaks.welch_peaks(src, **KW).bins == -1)

    z = zarr.create_array(str(tmp_path / "huge.zarr"), shape=(10**13,), chunks=(10**6,), dtype="float32")
    z[:1000] = 1.0
    assert sum(f.stat().st_size for f in (tmp_path / "huge.zarr").rglob("*") if f.is_file()) < 16_000
    with pytest.raises(SignalFileError, match=r"huge\.zarr: declares shape \(10000000000000,\) .*stores only 1 of "
                                              r"them.*write_empty_chunks=True"):
        welchpeaks.open_signals(tmp_path / "huge.zarr")
    silent = zarr.create_array(str(tmp_path / "silent.zarr"), shape=(4, 10_000), chunks=(1, 1000), dtype="float32")
    silent[:] = 0.0  # zarr stores no chunk of fill values: small, so still opened
    sharded = zarr.create_array(str(tmp_path / "sharded.zarr"), shape=(4, 10_000), chunks=(1, 1000),
                                shards=(2, 5000), dtype="float32")
    sharded[:] = np.random.default_rng(3).standard_normal((4, 10_000)).astype(np.float32)
    assert welchpeaks.open_signals(tmp_path / "silent.zarr").rows == 4
    _same(welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "sharded.zarr"), **KW),
          welchpeaks.welch_peaks(sharded[:], **KW))

    sf.write(tmp_path / "ok.flac", np.zeros((100_000, 1), np.float32), 8000, subtype="PCM_16")
    blob = bytearray((tmp_path / "ok.flac").read_bytes())
    fields = int.from_bytes(blob[18:26], "big")  # STREAMINFO: ... 36 bits of total samples
    blob[18:26] = (fields | ((1 << 36) - 1)).to_bytes(8, "big")
    (tmp_path / "forged.flac").write_bytes(bytes(blob))
    assert sf.info(str(tmp_path / "forged.flac")).frames == (1 << 36) - 1
    with pytest.raises(SignalFileError, match=r"forged\.flac: declares 68,719,476,735 frames .* bytes hold at most"):
        welchpeaks.open_signals(tmp_path / "forged.flac")
    assert welchpeaks.open_signals(tmp_path / "ok.flac").parts[0].samples == 100_000


def test_long_rows_take_the_chosen_executions_long_rows_mode(tmp_path, monkeypatch):
    """The API asks the execution that runs a source's rows for its long-rows mode
    (``Execution.long_rows``) and never names one: fused-cpu's takes them in pieces, bit for bit
    its pass over whole rows; numpy has none, so its rows are read whole, one block at a time."""
    from welchpeaks import backends

    x = np.random.default_rng(21).standard_normal((2, 150_000)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    kw = dict(n_fft=256, k=4, segments=None)
    asked = []
    for name in ("fused-cpu", "numpy"):
        cls = type(backends.get(name))
        real = cls.long_rows
        monkeypatch.setattr(cls, "long_rows", lambda self, *a, _real=real: asked.append(self.name) or _real(self, *a))
    for name in ("fused-cpu", "numpy"):
        asked.clear()
        got = welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "x.npy"), strategy=name, max_memory=1 << 20,
                                     **kw)
        assert asked == [name], asked  # asked once per row length, whatever the number of blocks
        assert got.strategy == name
        want = welchpeaks.welch_peaks(x, strategy=name, **kw)
        if name == "fused-cpu":
            _same(got, want)
        else:  # numpy's float32 mean over segments rounds differently on one row than on two
            np.testing.assert_array_equal(got.bins, want.bins)
            np.testing.assert_allclose(got.power, want.power, rtol=2e-6)


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
def test_a_nan_in_a_source_is_named_by_its_signal_in_the_file(tmp_path, strategy):
    """Blocks of rows are read one at a time; the error names the file's signal, not the row
    within its block."""
    x = np.random.default_rng(8).standard_normal((3, 200_000)).astype(np.float32)
    x[2, 5000] = np.nan
    np.save(tmp_path / "x.npy", x)
    with pytest.raises(ValueError, match=r"x.npy, rows [0-9.]+: .*signal 2\b"):
        welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "x.npy"), n_fft=1024, strategy=strategy,
                               max_memory=1 << 20)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(60_000, 160_000), n_fft=st.sampled_from([128, 256, 1000]),
       detrend=st.sampled_from(["constant", "linear", False]), dtype=st.sampled_from([np.float32, np.float64]))
def test_numpy_long_rows_in_pieces_equal_at_once_to_rounding(tmp_path_factory, seed, length, n_fft, detrend, dtype):
    """numpy under a budget too small for a row (in memory, or a source's long rows) sums its
    segments' power in pieces: the same segments, added in another order, so the PSD equals
    the at-once one to rounding, not bit for bit as fused-cpu's carried sums are: a sum of S
    segments added in two orders differs by about sqrt(S) roundings, so relative 2e-6 in
    float32 and 1e-13 in float64, or 4 sqrt(S) epsilons where more (seen: 2.0e-6 at 1412
    segments of n_fft 128 in float32). Fails if a piece is lost, doubled or mis-scaled (an
    error of 1/pieces or more)."""
    x = (np.random.default_rng(seed).standard_normal((2, length)) + 3).astype(dtype)
    path = tmp_path_factory.mktemp("pieces") / "x.npy"
    np.save(path, x)
    kw = dict(n_fft=n_fft, k=5, segments=None, detrend=detrend, strategy="numpy", dtype=np.dtype(dtype).name)
    ref = welchpeaks.welch_peaks(x, **kw)
    tol = max(2e-6 if dtype == np.float32 else 1e-13, 4 * np.finfo(dtype).eps * np.sqrt(ref.params["segments"]))
    for got in (welchpeaks.welch_peaks(x, max_memory=1 << 20, **kw),
                welchpeaks.welch_peaks(welchpeaks.open_signals(path), max_memory=1 << 20, **kw)):
        assert got.params["segments"] == ref.params["segments"]
        scale = np.abs(ref.power).max(axis=-1, keepdims=True)
        assert np.all(np.abs(got.power - ref.power) <= tol * scale)
        np.testing.assert_array_equal(got.bins, ref.bins)


@pytest.mark.parametrize("change", ["same size, other shape", "same size, other dtype", "rewritten as it was",
                                    "removed"])
def test_a_file_changed_after_open_signals_is_an_error_naming_it(tmp_path, change):
    """A .npy, WAV or HDF5 file replaced or rewritten after open_signals (even with the same
    size and header, which reads would decode under the old one) is refused in one line naming
    the file, never read as if unchanged."""
    import h5py
    from scipy.io import wavfile

    x = np.random.default_rng(3).standard_normal((4, 4096)).astype(np.float32)
    paths = {"npy": tmp_path / "a.npy", "wav": tmp_path / "a.wav", "h5": tmp_path / "a.h5"}
    def h5(p, a):  # written beside and moved over it (HDF5 cannot truncate a file it holds open)
        with h5py.File(tmp_path / "new.h5", "w") as fh:
            fh.create_dataset("x", data=a)
        os.replace(tmp_path / "new.h5", p)

    write = {"npy": lambda p, a: np.save(p, a), "wav": lambda p, a: wavfile.write(p, 8000, a.reshape(-1, 4)), "h5": h5}
    for kind, path in paths.items():
        write[kind](path, x)
        src = welchpeaks.open_signals(f"{path}:/x" if kind == "h5" else path)
        if change == "removed":
            path.unlink()
        elif change == "same size, other shape":
            write[kind](path, x.reshape(8, 2048) if kind != "wav" else x[::-1].copy())
        elif change == "same size, other dtype":
            write[kind](path, x.view(np.int32))
        else:
            write[kind](path, x)
        if change != "removed":
            os.utime(path, ns=(1, 10**18 + len(kind)))  # a time that differs whatever the clock's resolution
        with pytest.raises(ValueError, match=rf"a\.{kind}: (changed since open_signals|can no longer be read)") as e:
            welchpeaks.welch_peaks(src, k=2, n_fft=256)
        assert str(e.value).count(str(path)) == 1, e.value  # named once


def test_big_endian_floats_compute_in_their_precision(tmp_path):
    """'>f4' signals (in memory or a .npy) compute in float32 and give the native array's bits."""
    x = np.random.default_rng(4).standard_normal((5, 3000)).astype(">f4")
    np.save(tmp_path / "be.npy", x)
    want = welchpeaks.welch_peaks(x.astype(np.float32), k=3)
    for got in (welchpeaks.welch_peaks(x, k=3), welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "be.npy"), k=3)):
        assert got.power.dtype == np.float32
        np.testing.assert_array_equal(got.power, want.power)
        np.testing.assert_array_equal(got.bins, want.bins)
