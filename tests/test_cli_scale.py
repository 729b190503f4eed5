"""The out-of-core command line (track, peaks --out): results equal the API's, every output
format holds the same rows, memory-bounded chunks, and an interrupted or killed run resumes
to an output byte-identical to an uninterrupted run's."""

import importlib
import json
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import welchpeaks
from welchpeaks.cli import app

pytest.importorskip("pyarrow", reason="the io extra is part of the test install")
zarr = pytest.importorskip("zarr", reason="the io extra is part of the test install")
job_mod = importlib.import_module("welchpeaks.cli.job")
runner = CliRunner()


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    x = np.random.default_rng(41).standard_normal((6, 300_000)).astype(np.float32)
    x[4] += np.sin(2 * np.pi * 0.05 * np.arange(300_000)).astype(np.float32)
    np.save(d / "x.npy", x)
    return d / "x.npy", x


@pytest.fixture(scope="module")
def long_recording(tmp_path_factory):
    """32 MB: at --memory 16MiB, a job of about 8 chunks."""
    path = tmp_path_factory.mktemp("long") / "long.npy"
    np.save(path, np.random.default_rng(42).standard_normal((4, 2_000_000)).astype(np.float32))
    return path


def _canonical(df, by):
    return df.sort_values(by).reset_index(drop=True)


def test_track_cli_equals_api_in_every_format(recording, tmp_path):
    path, x = recording
    ref = pd.DataFrame(welchpeaks.track(x, n_fft=128, k=3, frame_segments=4, strategy="fused-cpu").long_form())
    frames = {}
    for fmt in (".parquet", ".csv", ".jsonl", ".zarr"):
        out = tmp_path / f"t{fmt}"
        res = runner.invoke(app, ["track", str(path), "--out", str(out), "--n-fft", "128", "--k", "3",
                                  "--frame-segments", "4", "--strategy", "fused-cpu", "--memory", "16MiB", "--quiet"])
        assert res.exit_code == 0, res.output
        if fmt == ".parquet":
            df = pd.read_parquet(out)
        elif fmt == ".csv":
            df = pd.read_csv(out)
        elif fmt == ".jsonl":
            df = pd.read_json(out, lines=True)
        else:
            g = zarr.open_group(str(out), mode="r")
            df = pd.DataFrame({c: g[c][:] for c in job_mod.COLUMNS["track"]})
            df["file"] = np.array(g.attrs["files"])[df["file"]]
        frames[fmt] = df
        assert not job_mod.staging_dir(out).exists()
    got = _canonical(frames[".parquet"], ["signal", "time", "rank"])
    for c in ("signal", "time", "rank", "bin"):
        np.testing.assert_array_equal(got[c].to_numpy(), ref[c].to_numpy())
    np.testing.assert_array_equal(got["power"].to_numpy(), ref["power"].to_numpy().astype(np.float64))
    assert set(got["file"]) == {str(path)}
    for fmt, df in frames.items():  # every format: the same rows in the same order
        for c in ("signal", "time", "rank", "bin"):
            np.testing.assert_array_equal(df[c].to_numpy(), frames[".parquet"][c].to_numpy(), err_msg=fmt)
        np.testing.assert_allclose(df["power"].to_numpy(), frames[".parquet"]["power"].to_numpy(), rtol=1e-15)


@pytest.mark.parametrize("strategy, memory", [("numpy", "64MiB"), ("fused-cpu", "16MiB")])
def test_peaks_out_of_core(recording, tmp_path, strategy, memory):
    """numpy: blocks of 3 whole rows (16 MiB of samples each); fused-cpu at 16MiB: the 6 rows
    together exceed the 4 MiB per block, so they are read in pieces of segments."""
    path, x = recording
    out = tmp_path / "p.csv"
    res = runner.invoke(app, ["peaks", str(path), "--out", str(out), "--k", "4", "--segments", "all",
                              "--memory", memory, "--quiet", "--strategy", strategy])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(out)
    ref = welchpeaks.welch_peaks(x, k=4, segments=None, strategy=strategy)
    np.testing.assert_array_equal(df["bin"].to_numpy().reshape(6, 4), ref.bins)
    np.testing.assert_array_equal(df["power"].to_numpy().reshape(6, 4), ref.power)


def test_filters_and_measures_out_of_core(recording, tmp_path):
    """peaks --out and track with filters write the measures as columns, equal to the API's
    (float32 PSDs: to 1e-5 relative, 1e-4 absolute)."""
    path, x = recording
    opts = ["--k", "3", "--prominence", "0", "--measures", "snr,width", "--quiet"]
    out = tmp_path / "p.csv"
    res = runner.invoke(app, ["peaks", str(path), "--out", str(out), "--memory", "16MiB", *opts])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(out)
    assert list(df.columns) == ["file", "signal", "rank", "bin", "freq", "power", "snr_db", "width", "width_hz"]
    ref = welchpeaks.welch_peaks(x, k=3, prominence=0, measures=("snr", "width"))
    ok = ref.bins >= 0
    assert ok.sum() == 18
    np.testing.assert_array_equal(df["bin"].to_numpy(), ref.bins[ok])
    np.testing.assert_allclose(df["snr_db"].to_numpy(), ref.measures["snr_db"][ok], rtol=1e-5, atol=1e-4)  # float32
    np.testing.assert_allclose(df["width"].to_numpy(), ref.measures["width"][ok], rtol=1e-5, atol=1e-4)
    assert df["width_hz"].isna().all()  # no sample rate: no width in Hz
    y = x[3:5, :20_000].copy()
    np.save(tmp_path / "y.npy", y)
    out = tmp_path / "t.jsonl"
    res = runner.invoke(app, ["track", str(tmp_path / "y.npy"), "--out", str(out), "--n-fft", "128",
                              "--frame-segments", "4", "--fs", "1000", "--snr-db", "3", *opts])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    t = welchpeaks.track(y, n_fft=128, k=3, frame_segments=4, fs=1000.0, prominence=0, snr_db=3,
                         measures=("snr", "width"))
    ok = t.bins >= 0
    assert len(rows) == int(ok.sum()) and set(rows[0]) == {"file", "signal", "time", "rank", "bin", "freq", "power",
                                                           "snr_db", "width", "width_hz"}
    snr = np.array([r["snr_db"] for r in rows])
    np.testing.assert_allclose(snr, t.measures["snr_db"][ok], rtol=1e-5, atol=1e-4)
    assert snr.min() >= 3.0 and len(rows) > 10
    np.testing.assert_allclose([r["width_hz"] for r in rows], t.measures["width_hz"][ok], rtol=1e-5, atol=1e-4)


def test_interrupted_then_resumed_is_byte_identical(long_recording, tmp_path, monkeypatch):
    path = long_recording
    args = ["track", str(path), "--n-fft", "64", "--k", "2", "--frame-segments", "2", "--memory", "16MiB", "--quiet"]
    clean = tmp_path / "clean.parquet"
    assert runner.invoke(app, args + ["--out", str(clean)]).exit_code == 0
    out = tmp_path / "resumed.parquet"
    real, calls = job_mod.compute_unit, []

    def ctrl_c_on_third(spec, unit, data=None):
        calls.append(unit)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(spec, unit, data)

    monkeypatch.setattr(job_mod, "compute_unit", ctrl_c_on_third)
    res = runner.invoke(app, args + ["--out", str(out)])
    assert res.exit_code == 130 and not out.exists()
    stage = job_mod.staging_dir(out)
    saved = sorted(stage.glob("unit-*.npz"))
    assert len(saved) == 2
    # what a kill in the middle of a write leaves: a temporary file, and a damaged unit
    (stage / ".unit-0000002.npz.x.tmp").write_bytes(b"half")
    saved[1].write_bytes(saved[1].read_bytes()[:20])
    monkeypatch.setattr(job_mod, "compute_unit", real)
    res = runner.invoke(app, args + ["--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == clean.read_bytes() and not stage.exists()


def test_other_arguments_do_not_resume_a_run(recording, tmp_path, monkeypatch):
    path, _ = recording
    out = tmp_path / "o.csv"
    monkeypatch.setattr(job_mod, "compute_unit", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    base = ["track", str(path), "--out", str(out), "--n-fft", "64", "--quiet"]
    assert runner.invoke(app, base).exit_code == 130
    res = runner.invoke(app, base[:-1] + ["--k", "3", "--quiet"])
    assert res.exit_code == 2 and "other arguments or inputs" in res.output and "o.csv.partial" in res.output


# A child that runs the command line and kills itself (SIGKILL: no clean-up of any kind) as the
# third chunk starts computing: a real kill at a known step, not at a moment in time.
KILL_AT_THIRD = """
import os, signal, sys
from welchpeaks.cli import app, job
real, calls = job.compute_unit, []
def kill_at_third(*args):
    calls.append(1)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args)
job.compute_unit = kill_at_third
app(sys.argv[1:], prog_name="welchpeaks")
"""


def test_killed_process_resumes(long_recording, tmp_path):
    """A real SIGKILL after two chunks are saved; the rerun completes to the same bytes."""
    path = long_recording
    args = ["track", str(path), "--n-fft", "32", "--k", "2", "--frame-segments", "1", "--memory", "16MiB",
            "--quiet", "--strategy", "numpy"]
    clean, out = tmp_path / "clean.jsonl", tmp_path / "killed.jsonl"
    subprocess.run([sys.executable, "-m", "welchpeaks", *args, "--out", str(clean)], check=True, capture_output=True)
    killed = subprocess.run([sys.executable, "-c", KILL_AT_THIRD, *args, "--out", str(out)], capture_output=True)
    stage = job_mod.staging_dir(out)
    assert killed.returncode == -signal.SIGKILL and not out.exists()
    assert len(list(stage.glob("unit-*.npz"))) == 2
    subprocess.run([sys.executable, "-m", "welchpeaks", *args, "--out", str(out)], check=True, capture_output=True)
    assert out.read_bytes() == clean.read_bytes() and not stage.exists()


def test_errors_are_one_line(recording, tmp_path):
    path, _ = recording
    res = runner.invoke(app, ["track", str(path), "--out", str(tmp_path / "x.txt")])
    assert res.exit_code == 2 and "unknown format '.txt'" in res.output
    res = runner.invoke(app, ["track", str(path), "--out", str(tmp_path / "x.csv"), "--memory", "1kB"])
    assert res.exit_code == 2 and "at least 16MiB" in res.output
    res = runner.invoke(app, ["track", str(tmp_path / "nope.npy"), "--out", str(tmp_path / "x.csv")])
    assert res.exit_code == 2 and "no such file" in res.output
    res = runner.invoke(app, ["peaks", str(path), "--out", str(tmp_path / "x.csv"), "--json", str(tmp_path / "j")])
    assert res.exit_code == 2 and "drop --json" in res.output
    res = runner.invoke(app, ["track", str(path), "--out", str(tmp_path / "x.csv"), "--workers", "1",
                              "--scheduler", "tcp://127.0.0.1:1"])
    assert res.exit_code == 2 and "pass one of them" in res.output


def test_a_file_failing_while_a_job_runs_is_one_line_and_exit_2(tmp_path, monkeypatch):
    """SignalFileError is a ValueError (issue 35, defect 12): a file that turns unreadable
    while a job reads it (truncated, say) is reported like any bad input, not as a traceback."""
    from welchpeaks.loaders import SignalFileError
    from welchpeaks.sources import SignalSource

    assert issubclass(SignalFileError, ValueError)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((4, 4096)).astype(np.float32))

    def truncated(self, part, r0, r1, s0, s1):
        raise SignalFileError(f"{self.parts[part].name}: reading rows {r0}..{r1 - 1} failed (file truncated)")

    monkeypatch.setattr(SignalSource, "read", truncated)
    for cmd in (["track", "--n-fft", "128"], ["peaks", "--n-fft", "128"]):
        res = runner.invoke(app, [cmd[0], str(tmp_path / "x.npy"), "--out", str(tmp_path / f"{cmd[0]}.csv"), *cmd[1:]])
        assert res.exit_code == 2 and "file truncated" in res.output and "Traceback" not in res.output, res.output
