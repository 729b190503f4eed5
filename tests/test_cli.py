"""The command line, through typer's CliRunner, on real files written here."""

import json
import re

import numpy as np
import pytest
from scipy.io import wavfile
from typer.testing import CliRunner

import welchpeaks
from welchpeaks.cli import app

runner = CliRunner()


@pytest.fixture
def tone():
    fs = 8000.0
    t = np.arange(4096) / fs
    return fs, np.sin(2 * np.pi * 1000.0 * t) + 0.3 * np.sin(2 * np.pi * 2000.0 * t)


def test_peaks_on_npy_wav_csv(tmp_path, tone):
    fs, x = tone
    np.save(tmp_path / "a.npy", np.stack([x, x[::-1]]))
    wavfile.write(tmp_path / "b.wav", int(fs), (np.stack([x, 0.5 * x], axis=1) * 16000).astype(np.int16))
    np.savetxt(tmp_path / "c.csv", np.stack([x, x]), delimiter=",")
    out = tmp_path / "out.json"
    res = runner.invoke(app, ["peaks", str(tmp_path / "a.npy"), str(tmp_path / "b.wav"), str(tmp_path / "c.csv"),
                              "--k", "2", "--json", str(out), "--csv", str(tmp_path / "out.csv")])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    wav = data[str(tmp_path / "b.wav")]
    assert wav["params"]["fs"] == fs  # from the file
    np.testing.assert_allclose(np.array(wav["freqs"]), [[1000, 2000]] * 2, atol=5)
    npy = welchpeaks.welch_peaks(np.stack([x, x[::-1]]), k=2)
    assert data[str(tmp_path / "a.npy")]["bins"] == npy.bins.tolist()
    lines = (tmp_path / "out.csv").read_text().splitlines()
    # the long form's columns (rank 0 the strongest); files without a rate beside one with: every
    # frequency in cycles per sample, the WAV's Hz divided by its rate
    assert lines[0] == "file,signal,rank,bin,freq_cycles,power" and len(lines) == 1 + 6 * 2
    rows = [line.split(",") for line in lines[1:]]
    assert {r[2] for r in rows} == {"0", "1"}
    wav_freqs = sorted(float(r[4]) for r in rows if r[0] == str(tmp_path / "b.wav"))
    np.testing.assert_allclose(wav_freqs, np.array([1000, 1000, 2000, 2000]) / fs, atol=5 / fs)
    alone = runner.invoke(app, ["peaks", str(tmp_path / "b.wav"), "--k", "2", "--csv", str(tmp_path / "wav.csv")])
    assert alone.exit_code == 0 and (tmp_path / "wav.csv").read_text().startswith("file,signal,rank,bin,freq,power")


def test_peaks_options_are_passed(tmp_path, tone):
    fs, x = tone
    np.save(tmp_path / "a.npy", x)
    res = runner.invoke(app, ["peaks", str(tmp_path / "a.npy"), "--k", "3", "--n-fft", "128", "--segments", "fast",
                              "--fs", "8000", "--mode", "bins", "--strategy", "numpy", "--json", str(tmp_path / "o.json")])
    assert res.exit_code == 0, res.output
    d = json.loads((tmp_path / "o.json").read_text())[str(tmp_path / "a.npy")]
    assert d["strategy"] == "numpy" and d["params"]["segments"] == 2 and d["params"]["mode"] == "bins"
    assert d["params"]["n_fft"] == 128 and len(d["bins"]) == 3


@pytest.mark.parametrize(
    "setup, match",
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_bytes(b"not a numpy file"), "not a valid .npy file"),
        (lambda p: np.save(p, np.ones(10)), "10 samples but 256 are needed"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, setup, match):
    path = tmp_path / "x.npy"
    setup(path)
    res = runner.invoke(app, ["peaks", str(path)])
    assert res.exit_code == 2
    assert match in res.output and "Traceback" not in res.output


def test_unsupported_suffix(tmp_path):
    (tmp_path / "x.txt").write_text("1,2,3")
    res = runner.invoke(app, ["peaks", str(tmp_path / "x.txt")])
    assert res.exit_code == 2 and "unsupported file type" in res.output


def test_demo_and_plot(tmp_path):
    res = runner.invoke(app, ["demo", "--batch", "64", "--plot", str(tmp_path / "d.png")])
    assert res.exit_code == 0, res.output
    assert "recall 100.0%" in res.output
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
    # the error of each sub-bin estimator: log-parabola's bias floor shows against the Hann ratio
    line = " ".join(res.output.split())
    errs = dict(re.findall(r"(auto \(hann\)|log-parabola|none) ([0-9.]+)", line))
    assert float(errs["auto (hann)"]) < float(errs["log-parabola"]) < float(errs["none"])


def test_bench_json(tmp_path):
    out = tmp_path / "b.json"
    res = runner.invoke(app, ["bench", "--batch", "8,16", "--n-fft", "64", "--k", "4", "--repeats", "3",
                              "--mode", "peaks,bins", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["machine"]["versions"]["welchpeaks"] == welchpeaks.__version__
    names = {r["execution"] for r in data["rows"]}
    assert {"scipy", "fft-floor", "numpy", "fused-cpu", "auto", "auto-oneshot"} <= names
    for r in data["rows"]:
        assert r["min_ms"] <= r["median_ms"] <= r["max_ms"] and r["repeats"] == 3
        assert set(r) >= {"batch", "n_fft", "k", "segments", "mode", "speedup_vs_scipy", "floor_ratio"}
    assert len(data["rows"]) == 2 * 2 * len(names)


def test_bench_rejects_bad_ranges():
    res = runner.invoke(app, ["bench", "--batch", "a-b"])
    assert res.exit_code == 2 and "--batch" in res.output


def test_strategies_lists_executions(monkeypatch):
    res = runner.invoke(app, ["strategies"])
    assert res.exit_code == 0 and "fused-cpu" in res.output and "available" in res.output
    # an install hint names its extra in brackets, which the table prints as text
    from welchpeaks import backends

    torch_ex = backends.get("torch")
    monkeypatch.setattr(type(torch_ex), "unavailable_reason", lambda self: "needs torch: pip install 'welchpeaks[gpu]'")
    res = runner.invoke(app, ["strategies"])
    assert res.exit_code == 0 and "welchpeaks[gpu]" in res.output, res.output  # (one word: never wrapped)


def test_bench_phases_json(tmp_path):
    out = tmp_path / "p.json"
    res = runner.invoke(app, ["bench", "phases", "--batch", "4,8", "--n-fft", "64", "--k", "4", "--repeats", "10",
                              "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "crossover" in res.output
    reports = json.loads(out.read_text())["reports"]
    assert [r["batch"] for r in reports] == [4, 8]
    for rep in reports:
        by = {r["phase"]: r for r in rep["rows"]}
        assert set(by) == {"baseline", "block", "fused"}
        assert by["baseline"]["io"]["kernel_launches"] == 6 and by["fused"]["io"]["kernel_launches"] == 1
        assert rep["fusion_benefit"]["launches_saved"] == 5 and rep["gate"]["fuse"] is True
        b = rep["batch"]
        # baseline returns the complex spectrum [b, 2, 33] c64 and the records [b, 4, 3] f64
        assert by["baseline"]["io"]["host_output_bytes"] == b * 2 * 33 * 8 + b * 4 * 3 * 8
        for r in rep["rows"]:
            assert r["repeats"] >= 10 and r["min_ms"] <= r["median_ms"] <= r["max_ms"] and r["predicted_ms"] > 0


def test_bench_picker_json(tmp_path):
    out = tmp_path / "q.json"
    res = runner.invoke(app, ["bench", "picker", "--batch", "3", "--n-fft", "64,128", "--k", "4", "--repeats", "3",
                              "--budget", "0.01", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["summary"]["cells"] == 2 and len(data["cells"]) == 2
    for c in data["cells"]:
        assert set(c["predicted_ns"]) == {"numpy", "fused-cpu"} and c["picked"] in c["predicted_ns"]
        best = min(m["median_ms"] for n, m in c["measured"].items() if n != "auto")
        assert c["regret"] == pytest.approx(c["measured"][c["picked"]]["median_ms"] / best)
    assert data["summary"]["regret_worst"] >= data["summary"]["regret_geomean"] >= 1.0


def test_peaks_filters_and_measures(tmp_path):
    import csv

    t = np.arange(8000) / 8000.0
    x = np.stack([np.sin(2 * np.pi * 1000 * t), 0.5 * np.sin(2 * np.pi * 2500 * t)])
    x += 0.1 * np.random.default_rng(4).standard_normal(x.shape)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "p.csv"
    res = CliRunner().invoke(app, ["peaks", str(tmp_path / "x.npy"), "--fs", "8000", "--k", "3", "--snr-db", "6",
                                   "--measures", "snr,width", "--csv", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    want = welchpeaks.welch_peaks(x, fs=8000.0, k=3, snr_db=6, measures=("snr", "width"))
    got = [(int(r["signal"]), int(r["bin"]), float(r["snr_db"]), float(r["width_hz"])) for r in rows]
    ok = want.bins >= 0
    assert got == [(s, int(want.bins[s, j]), float(want.measures["snr_db"][s, j]),
                    float(want.measures["width_hz"][s, j])) for s in range(2) for j in range(3) if ok[s, j]]
    assert all(float(r["snr_db"]) >= 6 for r in rows) and len(rows) >= 2
    bad = CliRunner().invoke(app, ["peaks", str(tmp_path / "x.npy"), "--out", str(tmp_path / "o.csv"),
                                   "--measures", "snr,loudness"])
    assert bad.exit_code == 2 and "loudness" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "o.csv.partial").exists()


def test_explain_shows_the_filtered_graphs():
    res = runner.invoke(app, ["explain", "--batch", "64", "--json", "--prominence", "0", "--measures", "snr,width"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert "find_peaks" in info["graph"] and info["params"]["measures"] == ["snr", "width"]
    assert info["costs"]["numpy"]["graph"][-1] == "find_peaks"
    assert info["costs"]["fused-cpu"]["graph"] == ["input", "welch_peaks"]
    table = runner.invoke(app, ["explain", "--batch", "64", "--snr-db", "3"])
    assert table.exit_code == 0 and "picked" in table.output and "mode rows: the whole batch at once" in table.output
    bad = runner.invoke(app, ["explain", "--measures", "snrr"])
    assert bad.exit_code != 0 and "'snrr' is unknown" in bad.output


def test_explain_a_file_frames_and_a_budget_as_the_api_does(tmp_path):
    """`welchpeaks explain FILE`, `--frame-segments`/`--frame-hop`, `--length` and `--max-memory`
    print (and with --json give) what the API's explain gives for the same call: a file's parts
    with their modes, frames with theirs, a call within the budget; errors are one line."""
    x = np.random.default_rng(7).standard_normal((6, 200_000)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = runner.invoke(app, ["explain", str(tmp_path / "x.npy"), "--segments", "all", "--max-memory", "1MiB",
                              "--json"])
    assert res.exit_code == 0, res.output
    want = welchpeaks.WelchPeaks(segments=None, max_memory=1 << 20).explain(
        source=welchpeaks.open_signals(tmp_path / "x.npy"))
    got = json.loads(res.output)
    assert [p["mode"] for p in got["parts"]] == [p["mode"] for p in want["parts"]] == ["long rows"]
    assert got["parts"][0]["segments_per_read"] == want["parts"][0]["segments_per_read"]
    table = runner.invoke(app, ["explain", str(tmp_path / "x.npy"), "--segments", "all"])
    assert table.exit_code == 0 and "mode source blocks" in table.output and "its first block" in table.output
    frames = runner.invoke(app, ["explain", "--frame-hop", "2", "--length", "50000", "--batch", "3", "--json"])
    assert frames.exit_code == 0, frames.output
    want = welchpeaks.Tracker(frame_segments=8, frame_hop=2).explain(batch=3, length=50000)
    got = json.loads(frames.output)
    assert (got["mode"], got["frames"], got["execution"]) == (want["mode"], want["frames"], want["execution"])
    call = json.loads(runner.invoke(app, ["explain", "--batch", "512", "--length", "100000", "--max-memory", "2MiB",
                                          "--json"]).output)
    assert call["memory_budget_bytes"] == 2 << 20 and call["length"] == 100000
    assert call["working_bytes"] <= 2 << 20 or call["mode"] in ("blocks of rows", "pieces of segments")
    for args, words in ((["explain", str(tmp_path / "none.npy")], "none.npy"),
                        (["explain", "--max-memory", "10"], "--max-memory '10'"),
                        (["explain", "--batch", "0"], "--batch 0: pass a whole number >= 1"),
                        (["explain", str(tmp_path / "x.npy"), "--batch", "8"], "drop them"),
                        (["explain", "--frame-segments", "4", str(tmp_path / "x.npy")], "drop the FILE")):
        bad = runner.invoke(app, args)
        assert bad.exit_code == 2 and words in bad.output and "Traceback" not in bad.output, (args, bad.output)


def test_version_is_the_distributions():
    """``welchpeaks --version`` prints the version pip installed (pyproject.toml reads it from
    welchpeaks/_version.py, so the two cannot differ) and runs no command."""
    from importlib.metadata import version

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"welchpeaks {welchpeaks.__version__}"
    assert version("welchpeaks") == welchpeaks.__version__
    res = runner.invoke(app, ["--version", "peaks", "missing.npy"])  # eager: the command is not run
    assert res.exit_code == 0 and "missing" not in res.output


def test_peaks_plot_draws_one_panel_per_signal(tmp_path):
    """--plot: the first signals of each file (up to 4), each its PSD and peaks, one PNG."""
    pytest.importorskip("matplotlib")
    import matplotlib.image

    t = np.arange(4096) / 8000.0
    np.save(tmp_path / "x.npy", np.stack([np.sin(2 * np.pi * f * t) for f in (500.0, 1000.0, 1500.0)]))
    png = tmp_path / "p.png"
    res = runner.invoke(app, ["peaks", str(tmp_path / "x.npy"), "--fs", "8000", "--k", "1", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    img = matplotlib.image.imread(png)
    assert img.shape[:2] == (3 * 3 * 90, 8 * 90)  # three panels of 8 x 3 inches at 90 dpi
    res = runner.invoke(app, ["peaks", str(tmp_path / "x.npy"), "--plot", str(tmp_path / "no" / "p.png")])
    assert res.exit_code != 0 and "--plot" in res.output


def test_a_commands_notices_are_one_plain_line_each_on_the_error_console(capsys, caplog):
    """The library's notices (welchpeaks.notices: a compile, a background measurement) print
    during a command as one line each on the error console, styled, never as a warning with a
    line of source, and not also through the application's handlers; after the command, the
    logger is as it was."""
    import logging

    from welchpeaks.cli.common import notices_on_console
    from welchpeaks.notices import log, notify

    caplog.set_level(logging.WARNING, logger="welchpeaks")
    before = (list(log.handlers), log.propagate)
    with notices_on_console():
        notify("welchpeaks: compiling [the kernel] (once)")
    err = capsys.readouterr().err
    assert err.strip() == "welchpeaks: compiling [the kernel] (once)" and "Warning" not in err
    assert not [r for r in caplog.records if "compiling" in r.getMessage()]  # not also propagated
    assert (list(log.handlers), log.propagate) == before


def test_calibrate_unless_cached_measures_nothing_when_a_model_is_cached():
    """The detached first measurement runs ``calibrate --quick --unless-cached``: a second one,
    started by a program that raced the first to the lock, finds the model cached once the
    lock is its own and measures nothing."""
    from helpers import synthetic_cpu_model
    from welchpeaks.plan import calibrate

    calibrate.save(synthetic_cpu_model(dispatch_ns=777.0))
    res = runner.invoke(app, ["calibrate", "--quick", "--unless-cached"])
    assert res.exit_code == 0 and "cached already" in res.output, res.output
    assert calibrate.load("cpu").dispatch_ns == 777.0  # not measured again
    assert not calibrate.MachineLock("cpu").held_elsewhere()  # and the lock is released
