"""Dask arrays: welch_peaks, track and welch build lazy graphs (nothing computed) whose results
equal the in-memory ones for any chunking of either axis; a distributed cluster runs them with
numba's threads fitted to each worker."""

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import welchpeaks

da = pytest.importorskip("dask.array", reason="the dask extra is part of the test install")
dask = pytest.importorskip("dask")
lazy = importlib.import_module("welchpeaks.api.lazy")

X = np.random.default_rng(21).standard_normal((6, 9000)).astype(np.float32)
X[3] += np.sin(2 * np.pi * 0.15 * np.arange(9000)).astype(np.float32)




def _same(lazy_res, mem_res):
    got = lazy_res.compute()
    for f in ("bins", "power", "freqs"):
        np.testing.assert_array_equal(getattr(got, f), getattr(mem_res, f))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(rows=st.integers(1, 6), time=st.integers(200, 9000), segments=st.sampled_from([None, 2, 8]),
       strategy=st.sampled_from(["numpy", "fused-cpu"]))
def test_welch_peaks_any_chunking(rows, time, segments, strategy):
    kw = dict(n_fft=128, k=5, segments=segments, strategy=strategy)
    r = welchpeaks.welch_peaks(da.from_array(X, chunks=(rows, time)), **kw)
    assert isinstance(r.bins, da.Array) and r.bins.shape == (6, 5)
    _same(r, welchpeaks.welch_peaks(X, **kw))


@pytest.mark.slow
@settings(max_examples=20, deadline=None, derandomize=True)
@given(rows=st.integers(1, 6), time=st.integers(100, 9000), frame_hop=st.sampled_from([None, 1, 3]))
def test_track_any_chunking(rows, time, frame_hop):
    kw = dict(n_fft=64, k=3, frame_segments=4, frame_hop=frame_hop, fs=100.0)
    r = welchpeaks.track(da.from_array(X, chunks=(rows, time)), **kw)
    mem = welchpeaks.track(X, **kw)
    assert r.bins.shape == mem.bins.shape and np.array_equal(r.times, mem.times)
    _same(r, mem)


def test_auto_keeps_float64_in_every_task():
    """Under auto every task runs the execution and the precision the whole batch would: float64
    rows are computed in float64 (tasks once ran the pick in its own default, float32)."""
    x = X.astype(np.float64)
    _same(welchpeaks.welch_peaks(da.from_array(x, chunks=(2, 9000)), k=4), welchpeaks.welch_peaks(x, k=4))


def test_one_signal_as_a_1d_dask_array():
    """A 1-D dask array is one signal, as a 1-D NumPy array is (it was read as rows of one
    sample each)."""
    x = X[3]
    _same(welchpeaks.welch_peaks(da.from_array(x, chunks=4000), k=4), welchpeaks.welch_peaks(x, k=4))
    _same(welchpeaks.track(da.from_array(x, chunks=4000), k=4, frame_segments=4),
          welchpeaks.track(x, k=4, frame_segments=4))


def test_long_rows_sum_partial_psds(monkeypatch):
    """Rows longer than a task holds: per-chunk PSD sums of a planned graph, tree-reduced; equal
    to the float64 in-memory result to rounding."""
    monkeypatch.setattr(welchpeaks.memory, "TASK_BYTES", 4096)
    x = X.astype(np.float64)
    r = welchpeaks.welch_peaks(da.from_array(x, chunks=(4, 1000)), segments=None, k=6, n_fft=128).compute()
    mem = welchpeaks.welch_peaks(x, segments=None, k=6, n_fft=128, strategy="numpy")
    np.testing.assert_array_equal(r.bins, mem.bins)
    np.testing.assert_allclose(r.power, mem.power, rtol=1e-12)
    np.testing.assert_allclose(r.freqs, mem.freqs, rtol=0, atol=1e-9)


def test_filters_and_measures_lazily_equal_in_memory(monkeypatch):
    """Filtered calls on dask arrays: the measures come back lazily with the peaks, equal to the
    in-memory call for whole-row tasks and for long rows summed across time chunks."""
    kw = dict(n_fft=128, k=5, fs=100.0, distance=2, prominence=1e-4, snr_db=0.5,
              measures=("snr", "prominence", "width"))
    mem = welchpeaks.welch_peaks(X, segments=2, **kw)
    r = welchpeaks.welch_peaks(da.from_array(X, chunks=(4, 2000)), segments=2, **kw)
    assert isinstance(r.measures["snr_db"], da.Array) and set(r.measures) == set(mem.measures)
    got = r.compute()
    _same(r, mem)
    for name, v in mem.measures.items():
        np.testing.assert_array_equal(got.measures[name], v)
    monkeypatch.setattr(welchpeaks.memory, "TASK_BYTES", 4096)  # long rows: PSD sums, then the find_peaks kernel
    x = X.astype(np.float64)
    mem = welchpeaks.welch_peaks(x, segments=None, strategy="numpy", **kw)
    got = welchpeaks.welch_peaks(da.from_array(x, chunks=(4, 1000)), segments=None, **kw).compute()
    np.testing.assert_array_equal(got.bins, mem.bins)
    for name, v in mem.measures.items():
        np.testing.assert_allclose(got.measures[name], v, rtol=1e-9, atol=1e-12)


def test_filtered_track_lazily_equals_in_memory():
    kw = dict(n_fft=64, k=3, frame_segments=4, frame_hop=2, fs=100.0, prominence=0.0, measures=("snr", "width"))
    mem = welchpeaks.track(X, **kw)
    r = welchpeaks.track(da.from_array(X, chunks=(4, 2500)), **kw)
    assert isinstance(r.measures["snr_db"], da.Array) and set(r.measures) == {"snr_db", "width", "width_hz"}
    got = r.compute()
    _same(r, mem)
    for name, v in mem.measures.items():
        np.testing.assert_array_equal(got.measures[name], v)


def test_welch_lazy_equals_scipy():
    import scipy.signal

    dx = da.from_array(X.astype(np.float64), chunks=(3, 700))
    f, p = welchpeaks.welch(dx, fs=10.0, nperseg=256, axis=-1)
    assert isinstance(p, da.Array)
    f2, p2 = scipy.signal.welch(X.astype(np.float64), fs=10.0, nperseg=256)
    np.testing.assert_allclose(p.compute(), p2, rtol=1e-12)
    np.testing.assert_array_equal(f, f2)
    f, p = welchpeaks.welch(da.from_array(X.T.copy(), chunks=(500, 2)), nperseg=128, axis=0)
    np.testing.assert_allclose(p.compute(), scipy.signal.welch(X.T, nperseg=128, axis=0)[1], rtol=1e-5)
    with pytest.raises(ValueError, match="average='mean'"):
        welchpeaks.welch(dx, average="median")


def test_nothing_computes_until_asked():
    calls = []

    def spy(block):
        if block.size:  # dask may call it on empty blocks to learn the output type
            calls.append(block.shape)
        return block

    dx = da.from_array(X, chunks=(3, 3000)).map_blocks(spy, dtype=X.dtype)
    r = welchpeaks.welch_peaks(dx, segments=None)
    t = welchpeaks.track(dx, frame_segments=4)
    assert calls == [] and r.power.dtype == np.float32 and t.freqs.dtype == np.float64
    with pytest.raises(TypeError, match="welchpeaks.welch_peaks"):
        welchpeaks.WelchPeaks()(dx)


@pytest.fixture(scope="session")
def cluster_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    # not the default scheduler: the tests after this one compute in this process, with their
    # own plan state; a test that wants the cluster says so (dask.config.set(scheduler=client))
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


@pytest.mark.slow
def test_distributed_workers_fit_numba_threads(cluster_client):
    workers = list(cluster_client.scheduler_info()["workers"])
    threads = [cluster_client.submit(lazy.fit_numba_threads, workers=[w], pure=False).result() for w in workers]
    assert threads == [1, 1]
    dx = da.from_array(X, chunks=(2, 2500))
    with dask.config.set(scheduler=cluster_client):
        r = welchpeaks.welch_peaks(dx, segments=None, strategy="fused-cpu")
        _same(r, welchpeaks.welch_peaks(X, segments=None, strategy="fused-cpu"))
        t = welchpeaks.track(dx, frame_segments=4, strategy="fused-cpu")
        _same(t, welchpeaks.track(X, frame_segments=4, strategy="fused-cpu"))
    assert lazy.fit_numba_threads() is None  # not on a worker: nothing changed


def test_long_rows_that_overflow_are_errors_naming_the_signal(monkeypatch):
    """Rows split across chunks in time, whose power overflows float32: an error under any
    nan_policy (it is not a NaN), naming the signal and the fix, as in memory; computed in
    float64 but not fitting x's float32, the in-memory error too. A NaN under 'raise' names its
    signal; under 'propagate' only its row is empty."""
    monkeypatch.setattr(welchpeaks.memory, "TASK_BYTES", 4096)
    x = (X[:3] * 1e30).astype(np.float32)
    for policy in ("raise", "propagate"):
        r = welchpeaks.welch_peaks(da.from_array(x, chunks=(1, 1000)), k=3, n_fft=128, segments=None,
                                   nan_policy=policy)
        with pytest.raises(ValueError, match=r"signal x\[\d\] overflows float32.*dtype='float64'"):
            r.compute()
    r = welchpeaks.welch_peaks(da.from_array(x, chunks=(1, 1000)), k=3, n_fft=128, segments=None, dtype="float64")
    with pytest.raises(ValueError, match="computed in float64 but does not fit float32"):
        r.compute()
    y = X[:3].copy()
    y[2, 4000] = np.nan
    with pytest.raises(ValueError, match=r"NaN or infinity in signal x\[2\]"):
        welchpeaks.welch_peaks(da.from_array(y, chunks=(1, 1000)), k=3, n_fft=128, segments=None).compute()
    got = welchpeaks.welch_peaks(da.from_array(y, chunks=(1, 1000)), k=3, n_fft=128, segments=None,
                                 nan_policy="propagate").compute()
    assert np.all(got.bins[2] == -1) and np.all(got.bins[:2] >= 0)


def test_rows_split_in_time_run_when_no_cost_model_can_be_measured(plan_state, monkeypatch):
    """A fresh worker whose measurement fails (or whose cache another process holds) still
    computes rows too long for one task: the per-segment execution is priced with the labelled
    default model, as a provisional call is, not refused for want of a measured one (CI: "no
    measured cost model" where the overflow error was due). The result is the in-memory one to
    rounding; a row whose power overflows is still that error."""
    from welchpeaks.plan.cost import set_cost_model

    def broken(quick=False, progress=None):
        raise RuntimeError("the machine broke")

    plan_state.measure_cpu = broken
    set_cost_model(None)
    monkeypatch.setattr(welchpeaks.memory, "TASK_BYTES", 4096)
    got = welchpeaks.welch_peaks(da.from_array(X, chunks=(2, 2000)), k=4, n_fft=128, segments=None).compute()
    assert got.strategy.startswith("dask (") and got.strategy.endswith(")")
    want = welchpeaks.welch_peaks(X, k=4, n_fft=128, segments=None, strategy=got.strategy[6:-1])
    np.testing.assert_array_equal(got.bins, want.bins)
    np.testing.assert_allclose(got.power, want.power, rtol=1e-5)
    loud = da.from_array((X[:3] * 1e30).astype(np.float32), chunks=(1, 1000))
    with pytest.raises(ValueError, match=r"signal x\[\d\] overflows float32"):
        welchpeaks.welch_peaks(loud, k=3, n_fft=128, segments=None).compute()
