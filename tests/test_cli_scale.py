"""The out-of-core command line (track, peaks --out): results equal the API's, every output
format holds the same rows, memory-bounded chunks, and an interrupted or killed run resumes
to an output byte-identical to an uninterrupted run's."""

import importlib
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import welchpeaks
from welchpeaks.cli import app

from helpers import interrupted as _interrupted

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
            df = pd.DataFrame({c: g[c][:] for c in ({"time": "time_samples", "freq": "freq_cycles"}.get(c, c)
                                                    for c in job_mod.COLUMNS["track"])})
            df["file"] = np.array(g.attrs["files"])[df["file"]]
        frames[fmt] = df
        assert not job_mod.staging_dir(out).exists()
    # no sample rate: the time and frequency columns are per sample, and say so, as the API's long form
    assert "time" not in ref and "time" not in frames[".csv"] and list(frames[".csv"])[2] == "time_samples"
    assert list(frames[".csv"])[5] == "freq_cycles" and "freq" not in frames[".csv"]
    got = _canonical(frames[".parquet"], ["signal", "time_samples", "rank"])
    for c in ("signal", "time_samples", "rank", "bin", "freq_cycles"):
        np.testing.assert_array_equal(got[c].to_numpy(), ref[c].to_numpy())
    np.testing.assert_array_equal(got["power"].to_numpy(), ref["power"].to_numpy().astype(np.float64))
    assert set(got["file"]) == {str(path)}
    for fmt, df in frames.items():  # every format: the same rows in the same order
        for c in ("signal", "time_samples", "rank", "bin"):
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
    assert list(df.columns) == ["file", "signal", "rank", "bin", "freq_cycles", "power", "snr_db", "width", "width_hz"]
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
    n_units = _units_of(stage)
    rerun = []
    monkeypatch.setattr(job_mod, "compute_unit", lambda spec, unit, data=None: rerun.append(unit) or real(spec, unit, data))
    res = runner.invoke(app, args + ["--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == clean.read_bytes() and not stage.exists()
    # the intact unit was reused, the damaged one computed again, and the run said so
    assert len(rerun) == n_units - 1 and calls[0] not in rerun and calls[1] in rerun
    assert f"resuming: 1 of {n_units} chunks already done" in res.output


def _units_of(stage):
    return json.loads((stage / "manifest.json").read_text())["units"]


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


@pytest.mark.slow
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
    n_units = _units_of(stage)
    rerun = subprocess.run([sys.executable, "-m", "welchpeaks", *args, "--out", str(out)], check=True,
                           capture_output=True, text=True)
    assert out.read_bytes() == clean.read_bytes() and not stage.exists()
    assert f"resuming: 2 of {n_units} chunks already done" in rerun.stdout and f"the other {n_units - 2}" in rerun.stdout


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


# ---------------------------------------------------------------- jobs that resume (issue 35)
TRACK = ["track", "--n-fft", "64", "--k", "2", "--frame-segments", "2", "--quiet"]


def _counting(monkeypatch):
    real, calls = job_mod.compute_unit, []
    monkeypatch.setattr(job_mod, "compute_unit", lambda spec, unit, data=None: calls.append((unit, spec)) or
                        real(spec, unit, data))
    return calls


@pytest.mark.slow
def test_auto_is_pinned_once_so_memory_and_cost_model_do_not_change_the_output(long_recording, tmp_path,
                                                                               monkeypatch, plan_state):
    """Under auto a job runs one execution, chosen once without its memory bound and pinned in
    the manifest: two --memory values give the same bytes, and a resume runs the manifest's
    execution even when the cost model has changed since (on a fresh machine the model lands
    while the first run works)."""
    from welchpeaks.plan import set_cost_model

    args = TRACK + [str(long_recording), "--strategy", "auto"]
    small, large = tmp_path / "small.csv", tmp_path / "large.csv"
    calls = _counting(monkeypatch)
    assert runner.invoke(app, args + ["--memory", "16MiB", "--out", str(small)]).exit_code == 0
    ran = {spec["kw"][0]["strategy"] for _, spec in calls}
    assert len(ran) == 1 and ran != {"auto"}  # every unit ran the one pinned execution
    assert runner.invoke(app, args + ["--memory", "256MiB", "--out", str(large)]).exit_code == 0
    assert small.read_bytes() == large.read_bytes()
    # interrupted; then the cost model changes (here: none at all, as on a fresh machine while it
    # is measured, when auto would run numpy); the resume keeps the manifest's execution
    out = tmp_path / "resumed.csv"
    _interrupted(monkeypatch, args + ["--memory", "16MiB", "--out", str(out)])
    pins = json.loads((job_mod.staging_dir(out) / "manifest.json").read_text())["pins"]
    assert [p["strategy"] for p in pins] == list(ran)
    monkeypatch.setattr(job_mod, "pin_execution", lambda *a: pytest.fail("a resume chose the execution again"))
    set_cost_model(None, "cpu")
    plan_state.start_measurement = lambda device, replacing: None  # as while it is measured: nothing starts
    calls.clear()
    calls = _counting(monkeypatch)
    assert runner.invoke(app, args + ["--memory", "16MiB", "--out", str(out)]).exit_code == 0
    assert {spec["kw"][0]["strategy"] for _, spec in calls} == ran
    assert out.read_bytes() == small.read_bytes()


def test_a_second_run_on_the_same_output_is_refused_while_the_first_holds_it(recording, tmp_path):
    path, _ = recording
    out = tmp_path / "o.csv"
    args = TRACK + [str(path), "--out", str(out)]
    from welchpeaks.cli.scale import open_sources

    sources, rates = open_sources([str(path)], None)
    first = job_mod.Job("track", [str(path)], sources, [dict(n_fft=64, k=2, frame_segments=2, max_memory=1 << 28,
                                                             fs=rates[0])], out, 1 << 30)
    first.prepare()  # holds the lock, as a running job does
    try:
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "another welchpeaks run is writing" in res.output, res.output
        assert "Traceback" not in res.output and not out.exists()
    finally:
        first.close()
    job_mod.shutil.rmtree(job_mod.staging_dir(out))  # the first job's arguments differ from the CLI's
    assert runner.invoke(app, args).exit_code == 0 and out.exists()


@pytest.mark.slow
def test_units_are_trusted_only_if_listed_regular_and_unchanged(long_recording, tmp_path, monkeypatch):
    """A unit replaced by a link to another valid unit, by a pipe, or edited, is computed again;
    a folder in its place is refused with the fix; the output is the clean run's."""
    args = TRACK + [str(long_recording), "--memory", "16MiB", "--strategy", "numpy"]
    clean, out = tmp_path / "clean.csv", tmp_path / "o.csv"
    assert runner.invoke(app, args + ["--out", str(clean)]).exit_code == 0
    _interrupted(monkeypatch, args + ["--out", str(out)], after=4)
    stage = job_mod.staging_dir(out)
    units = sorted(stage.glob("unit-*.npz"))
    assert len(units) == 4
    outside = tmp_path / "outside.npz"
    outside.write_bytes(units[0].read_bytes())
    units[1].unlink()
    units[1].symlink_to(outside)  # a valid unit, but not this one, and outside the folder
    units[2].unlink()
    os.mkfifo(units[2])
    data = bytearray(units[3].read_bytes())
    data[-30] ^= 1  # one flipped bit
    units[3].write_bytes(bytes(data))
    os.mkdir(stage / "unit-0000005.npz")
    res = runner.invoke(app, args + ["--out", str(out)])
    assert res.exit_code == 2 and "unit-0000005.npz is a folder" in res.output and "delete that folder" in res.output
    os.rmdir(stage / "unit-0000005.npz")
    n_units = _units_of(stage)
    calls = _counting(monkeypatch)
    res = runner.invoke(app, args + ["--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"resuming: 1 of {n_units}" in res.output and len(calls) == n_units - 1  # only unit 0 was kept
    assert out.read_bytes() == clean.read_bytes() and outside.exists()


@pytest.mark.parametrize("plant", ["fifo", "dev_zero", "folder", "deep_json", "other_version"])
def test_hostile_manifests_are_one_line_errors_not_hangs(recording, tmp_path, monkeypatch, plant):
    path, _ = recording
    out = tmp_path / "o.csv"
    args = TRACK + [str(path), "--out", str(out)]
    _interrupted(monkeypatch, args, after=0)
    manifest = job_mod.staging_dir(out) / "manifest.json"
    doc = json.loads(manifest.read_text())
    manifest.unlink()
    if plant == "fifo":
        os.mkfifo(manifest)
    elif plant == "dev_zero":
        manifest.symlink_to("/dev/zero")
    elif plant == "folder":
        manifest.mkdir()
    elif plant == "deep_json":
        manifest.write_text("[" * 200_000 + "]" * 200_000)
    else:
        manifest.write_text(json.dumps(dict(doc, format=1, pins=None)))
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "manifest" in res.output and "delete that folder" in res.output and len(res.output.strip().splitlines()) <= 3


def test_the_staging_folder_appears_whole_or_not_at_all(recording, tmp_path, monkeypatch):
    """A kill while the staging folder is made (before its manifest is written) leaves nothing
    that blocks the rerun."""
    path, _ = recording
    out = tmp_path / "o.csv"
    args = TRACK + [str(path), "--out", str(out)]
    real = job_mod.write_atomic

    def killed(path_, data):
        if str(path_).endswith("manifest.json"):
            raise KeyboardInterrupt
        return real(path_, data)

    monkeypatch.setattr(job_mod, "write_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        job_mod.Job("track", [str(path)], *_sources(path), out, 1 << 30).prepare()
    assert not job_mod.staging_dir(out).exists() and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(job_mod, "write_atomic", real)
    assert runner.invoke(app, args).exit_code == 0 and out.exists()


def _sources(path):
    from welchpeaks.cli.scale import open_sources

    sources, rates = open_sources([str(path)], None)
    return sources, [dict(n_fft=64, k=2, frame_segments=2, max_memory=1 << 28, fs=rates[0])]


def test_zarr_output_is_swapped_by_renaming_the_old_one_aside(recording, tmp_path, monkeypatch):
    path, _ = recording
    out = tmp_path / "o.zarr"
    args = TRACK + [str(path), "--out", str(out)]
    passes, columns = [], job_mod.Job.columns
    monkeypatch.setattr(job_mod.Job, "columns", lambda job: passes.append(1) or columns(job))
    assert runner.invoke(app, args).exit_code == 0
    assert passes == [1]  # each saved unit read (checked, linked) once
    first = zarr.open_group(str(out), mode="r")["power"][:]
    # a kill between the two renames: the old output is aside, whole, and the rerun finishes
    real = job_mod.os.replace

    def killed(src, dst):  # os.replace everywhere (units are saved with it too)
        if str(dst) == str(out):  # the new folder's rename, after the old one went aside
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(job_mod.os, "replace", killed)
    res = runner.invoke(app, args + ["--k", "3"])
    monkeypatch.setattr(job_mod.os, "replace", real)
    assert res.exit_code != 0
    aside = list(tmp_path.glob(".o.zarr.old.*"))
    assert len(aside) == 1 and np.array_equal(zarr.open_group(str(aside[0]), mode="r")["power"][:], first)
    assert runner.invoke(app, args + ["--k", "3"]).exit_code == 0
    assert zarr.open_group(str(out), mode="r").attrs["kind"] == "track" and not list(tmp_path.glob(".o.zarr.old.*"))
    # a .zarr output that is a link is refused before any work
    link = tmp_path / "link.zarr"
    link.symlink_to(out)
    calls = _counting(monkeypatch)
    res = runner.invoke(app, TRACK + [str(path), "--out", str(link)])
    assert res.exit_code == 2 and "a link" in res.output and calls == [] and link.is_symlink()


def test_outputs_refused_before_any_work_and_what_killed_assemblies_left_is_removed(recording, tmp_path,
                                                                                     monkeypatch):
    """A missing extra, a folder with a .zarr name that is not a Zarr store (kept as it is), a
    .zarr output in a missing folder (named as given): refused before a unit is computed. The
    temporary files and folders a killed assembly leaves beside the output are removed by the
    next one; a user's file of a like name is kept."""
    path, _ = recording
    calls = _counting(monkeypatch)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # (an import of it fails)
    res = runner.invoke(app, TRACK + [str(path), "--out", str(tmp_path / "o.parquet")])
    assert res.exit_code == 2 and "needs pyarrow: pip install 'welchpeaks[io]'" in res.output
    monkeypatch.delitem(sys.modules, "pyarrow")
    folder = tmp_path / "notes.zarr"
    folder.mkdir()
    (folder / "notes.txt").write_text("precious")
    res = runner.invoke(app, TRACK + [str(path), "--out", str(folder)])
    assert res.exit_code == 2 and "not a Zarr store" in res.output and (folder / "notes.txt").read_text() == "precious"
    res = runner.invoke(app, TRACK + [str(path), "--out", str(tmp_path / "nope" / "x.zarr")])
    assert res.exit_code == 2 and "x.zarr" in res.output and "does not exist" in res.output and ".check" not in res.output
    assert calls == [] and not list(tmp_path.glob("*.partial"))
    left = [tmp_path / ".o.csv.55mgsf4d.tmp", tmp_path / ".o.csv.partial.done.123"]
    left[0].write_text("half")
    left[1].mkdir()
    kept = [tmp_path / ".o.csv.backup", tmp_path / ".o.csv.old"]
    for f in kept:
        f.write_text("mine")
    assert runner.invoke(app, TRACK + [str(path), "--out", str(tmp_path / "o.csv")]).exit_code == 0
    assert calls and not any(f.exists() for f in left) and all(f.read_text() == "mine" for f in kept)


def test_a_changed_input_or_an_output_over_an_input_is_refused(tmp_path, monkeypatch):
    """The review after issue 35: a .npy rewritten with the same size and mtime (touch -r), or a
    Zarr store rewritten in place, used to resume from stale units; an --out naming the input
    replaced the recording."""
    x = np.random.default_rng(3).standard_normal((2, 600_000)).astype(np.float32)
    np.save(tmp_path / "a.npy", x)
    zarr.create_array(str(tmp_path / "a.zarr"), shape=x.shape, dtype="float32", chunks=(2, 100_000))[:] = x
    for name in ("a.npy", "a.zarr"):
        src, out = tmp_path / name, tmp_path / f"{name}.csv"
        args = TRACK + [str(src), "--memory", "16MiB", "--strategy", "numpy", "--out", str(out)]
        _interrupted(monkeypatch, args, after=1)
        stat = os.stat(src)
        if name == "a.npy":
            np.save(tmp_path / "b.npy", x[::-1].copy())
            os.replace(tmp_path / "b.npy", src)
            os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        else:
            zarr.open_array(str(src), mode="r+")[:] = x[::-1]
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "other arguments or inputs" in res.output, res.output
    before = (tmp_path / "a.npy").read_bytes()
    for out in ("a.npy", "a.zarr"):
        res = runner.invoke(app, TRACK + [str(tmp_path / out), "--out", str(tmp_path / out)])
        assert res.exit_code == 2 and "which writing it would replace" in res.output
    assert (tmp_path / "a.npy").read_bytes() == before and zarr.open_array(str(tmp_path / "a.zarr"), mode="r").shape


@pytest.mark.parametrize("kind", ["track", "peaks"])
def test_an_input_rewritten_while_a_job_runs_is_refused_not_mixed(tmp_path, monkeypatch, kind):
    """A .npy rewritten in place with the same size while a job computes its units (after the
    first) is refused in one line naming it: no unit reads the new samples beside the old. And
    a process that ran a job on a file of the same relative name in another folder opens the
    file of this job, not the one it had cached."""
    x = np.random.default_rng(4).standard_normal((200, 20_000)).astype(np.float32)  # 16 MB: units of 4 MiB
    args = [kind, "a.npy", "--n-fft", "64", "--k", "2", "--memory", "16MiB", "--quiet", "--out", "o.csv"]
    if kind == "track":
        args += ["--frame-segments", "2"]
    real, calls = job_mod.compute_unit, []

    def rewrite_after_first(spec, unit, data=None):
        calls.append(unit)
        if len(calls) == 2:
            np.save("a.npy", x[::-1].copy())  # the same size, in place
            os.utime("a.npy", ns=(1, 10**18))
        return real(spec, unit, data)

    for folder, hook in (("first", None), ("second", rewrite_after_first)):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        np.save("a.npy", x if folder == "first" else x * 2)
        if hook is None:
            assert runner.invoke(app, args).exit_code == 0
            continue
        monkeypatch.setattr(job_mod, "compute_unit", hook)
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "a.npy: changed since this job started" in res.output, res.output
        assert len(calls) == 2 and not os.path.exists("o.csv")


def test_a_resume_keeps_the_first_runs_memory_bound_and_os_errors_are_one_line(tmp_path, monkeypatch):
    """numpy sums a row too long for its working memory in pieces (other last bits): a resume
    with another --memory keeps the manifest's bound, so it gives the first run's bytes. A torn
    line of the unit list costs nothing; a link planted as the unit list is one line, exit 2."""
    np.save(tmp_path / "rows.npy", np.random.default_rng(5).standard_normal((24, 400_000)).astype(np.float32))
    base = ["peaks", str(tmp_path / "rows.npy"), "--n-fft", "64", "--k", "2", "--segments", "all", "--quiet",
            "--strategy", "numpy"]
    clean, out = tmp_path / "clean.csv", tmp_path / "o.csv"
    assert runner.invoke(app, base + ["--memory", "16MiB", "--out", str(clean)]).exit_code == 0
    _interrupted(monkeypatch, base + ["--memory", "16MiB", "--out", str(out)], after=2)
    stage = job_mod.staging_dir(out)
    with open(stage / "done.jsonl", "a") as fh:
        fh.write('{"unit": 9, "sha')  # a kill in the middle of a line
    _interrupted(monkeypatch, base + ["--memory", "1GB", "--out", str(out)], after=1)
    n_units = _units_of(stage)
    calls = _counting(monkeypatch)
    res = runner.invoke(app, base + ["--memory", "1GB", "--out", str(out)])
    assert res.exit_code == 0 and f"resuming: 3 of {n_units}" in res.output and len(calls) == n_units - 3
    assert out.read_bytes() == clean.read_bytes()
    _interrupted(monkeypatch, base + ["--out", str(tmp_path / "p.csv")], after=1)
    done = job_mod.staging_dir(tmp_path / "p.csv") / "done.jsonl"
    (tmp_path / "elsewhere.jsonl").write_bytes(done.read_bytes())
    done.unlink()
    done.symlink_to(tmp_path / "elsewhere.jsonl")
    res = runner.invoke(app, base + ["--out", str(tmp_path / "p.csv")])
    assert res.exit_code == 2 and "Traceback" not in res.output and "done.jsonl" in res.output, res.output


def test_a_job_mixing_sources_with_and_without_a_sample_rate_writes_every_time_in_samples(tmp_path):
    from scipy.io import wavfile

    x = np.random.default_rng(5).standard_normal((1, 6000)).astype(np.float32)
    wavfile.write(tmp_path / "a.wav", 1000, x[0])
    np.save(tmp_path / "b.npy", x)
    out = tmp_path / "t.csv"
    res = runner.invoke(app, ["track", str(tmp_path / "a.wav"), str(tmp_path / "b.npy"), "--out", str(out),
                              "--n-fft", "128", "--k", "2", "--frame-segments", "4", "--quiet"])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(out)
    assert "time" not in df and "time_samples" in df
    centres = welchpeaks.track(x, n_fft=128, k=2, frame_segments=4).times  # in samples
    for name in ("a.wav", "b.npy"):
        got = np.unique(df[df["file"].str.endswith(name)]["time_samples"])
        np.testing.assert_allclose(got, centres)  # the .wav's seconds times its rate


def _chirp_and_tones(path):
    """Ten seconds at 8 kHz, saved at ``path``: a chirp crossing a steady 3 kHz tone, and a
    1.5 kHz tone (the recording of the linking tests); returns the samples and the rate."""
    fs = 8000.0
    t = np.arange(int(10 * fs)) / fs
    x = np.stack([np.sin(2 * np.pi * (500 * t + 60 * t ** 2)) + np.sin(2 * np.pi * 3000 * t),
                  np.sin(2 * np.pi * 1500 * t)]).astype(np.float32)
    x += 0.05 * np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)
    np.save(path, x)
    return x, fs


def test_track_link_column_is_the_apis_tracks_across_time_units(tmp_path, monkeypatch):
    """--link: each peak's track, linked across the job's time units (many, with small units) as
    TrackResult.link links the whole recording (one block of rows, so the very same numbers),
    with its defaults (the SNR floor's snr_db column written, min_length over a first pass) or
    options given."""
    monkeypatch.setattr(job_mod, "UNIT_BYTES", 64 << 10)
    calls = []
    real = job_mod._BlockLinker.__call__
    monkeypatch.setattr(job_mod._BlockLinker, "__call__", lambda self, unit, cols: calls.append(unit) or
                        real(self, unit, cols))
    x, fs = _chirp_and_tones(tmp_path / "x.npy")
    base = ["track", str(tmp_path / "x.npy"), "--fs", "8000", "--n-fft", "256", "--k", "4", "--frame-segments", "2",
            "--quiet"]
    ref = welchpeaks.track(x, fs=fs, n_fft=256, k=4, frame_segments=2, measures=("snr",))
    ok = ref.bins >= 0
    for i, (opts, want) in enumerate([(["--link", "auto"], ref.link()),
                                      (["--link", "30", "--max-gap", "3", "--min-length", "1", "--min-snr-db", "6"],
                                       ref.link(max_jump_hz=30, max_gap=3, min_length=1, min_snr_db=6))]):
        out = tmp_path / f"t{i}.csv"
        calls.clear()
        res = runner.invoke(app, base + ["--out", str(out)] + opts)
        assert res.exit_code == 0, res.output
        assert len({(u.r0, u.r1) for u in calls}) == 1 and len({u.t0 for u in calls}) > 3  # one block, many units
        df = pd.read_csv(out)
        assert list(df.columns) == ["file", "signal", "time", "rank", "bin", "freq", "power", "track", "snr_db"]
        got = _canonical(df, ["signal", "time", "rank"])  # the API's order: signal, frame, rank
        np.testing.assert_array_equal(got["bin"].to_numpy(), ref.bins[ok])
        np.testing.assert_array_equal(got["track"].to_numpy(), want.ids[ok])
        if i == 0:  # the defaults: the recording's three components (the chirp in two at its crossing at most)
            assert 3 <= df["track"].max() + 1 <= 4
    res = runner.invoke(app, base + ["--out", str(tmp_path / "u.csv"), "--link", "0"])
    assert res.exit_code == 2 and "--link=0" in res.output
    res = runner.invoke(app, base + ["--out", str(tmp_path / "u.csv"), "--link", "soon"])
    assert res.exit_code == 2 and "--link 'soon'" in res.output
    res = runner.invoke(app, base + ["--out", str(tmp_path / "u.csv"), "--max-gap", "3"])
    assert res.exit_code == 2 and "go with --link" in res.output


def test_track_plot_draws_the_jobs_first_signal_thinned_and_bounded(tmp_path, monkeypatch):
    """--plot: the first signal's peaks over time as the job wrote them (the CSV is the
    oracle), frames thinned to every step-th so that at most MAX_FRAMES are held, each track a
    line; seconds and Hz on the axes."""
    plot_mod = importlib.import_module("welchpeaks.plot")
    jobplot = importlib.import_module("welchpeaks.cli.jobplot")
    monkeypatch.setattr(job_mod, "UNIT_BYTES", 64 << 10)  # many time units
    monkeypatch.setattr(jobplot, "MAX_FRAMES", 100)
    drawn = []
    real = plot_mod.draw_peaks_over_time
    monkeypatch.setattr(plot_mod, "draw_peaks_over_time", lambda ax, *a, **kw: drawn.append(ax) or real(ax, *a, **kw))
    x, fs = _chirp_and_tones(tmp_path / "x.npy")
    out, png = tmp_path / "t.csv", tmp_path / "t.png"
    res = runner.invoke(app, ["track", str(tmp_path / "x.npy"), "--out", str(out), "--fs", "8000", "--n-fft", "256",
                              "--k", "2", "--frame-segments", "2", "--link", "30", "--plot", str(png), "--quiet"])
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (ax,) = drawn
    df = pd.read_csv(out)
    first = df[df["signal"] == 0]
    times = np.unique(first["time"])
    step = 1
    while len(times[::step]) > 100:
        step *= 2
    kept = first[np.isin(first["time"], times[::step])]
    assert step > 1 and f"every {step}th frame" in ax.get_title()
    assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "frequency (Hz)"
    (dots,) = ax.collections
    np.testing.assert_allclose(np.sort(dots.get_offsets()[:, 1]), np.sort(kept["freq"].to_numpy()))
    assert len(ax.lines) == kept["track"][kept["track"] >= 0].nunique() >= 2
    res = runner.invoke(app, ["track", str(tmp_path / "x.npy"), "--out", str(tmp_path / "u.csv"), "--plot",
                              str(tmp_path / "no" / "p.png")])
    assert res.exit_code != 0 and "--plot" in res.output and not (tmp_path / "u.csv").exists()


def test_a_job_with_a_named_execution_starts_no_measurement(plan_state):
    """The manifest records the CPU cost model that chose a job's executions; with none on
    disk (a fresh machine) and the executions named, recording it starts no measurement of
    the machine (which a command then waits for, minutes on 2 cores)."""
    from welchpeaks.plan import set_cost_model

    started = []
    set_cost_model(None)  # none set, none in the test's (empty) cache, nobody measuring
    plan_state.start_measurement = lambda device, replacing: started.append(device)
    assert job_mod.model_identity() is None and started == [] and not plan_state.background
