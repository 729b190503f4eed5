"""The paths a command writes (issue 50, item 4): every ``--out``, ``--plot``, ``--csv``, ``--json``
and a job's staging folder and temporaries are checked, in one place (``cli/paths.py``), before
any work, against every input (file, link, Zarr store, folder, glob) and against each other;
names the filesystem or the output cannot take are refused there, in one line. The oracle is
each reproduction of the issue: the input's bytes, which these commands used to destroy, and
the output of the same command written apart from the inputs."""

import hashlib
import importlib
import os

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from welchpeaks.cli import app

pytest.importorskip("pyarrow", reason="the io extra is part of the test install")
zarr = pytest.importorskip("zarr", reason="the io extra is part of the test install")
pytest.importorskip("matplotlib", reason="the plot extra is part of the test install")
job_mod = importlib.import_module("welchpeaks.cli.job")
runner = CliRunner()
TRACK = ["--n-fft", "64", "--k", "2", "--frame-segments", "2", "--strategy", "numpy", "--quiet"]
PEAKS = ["--n-fft", "64", "--k", "2", "--strategy", "numpy"]


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """A folder of inputs, the working directory: a .npy and a link to it, a Zarr store, a
    folder of sound files, an old Zarr output, an empty folder."""
    from scipy.io import wavfile

    monkeypatch.chdir(tmp_path)
    x = np.random.default_rng(50).standard_normal((2, 20_000)).astype(np.float32)
    np.save("sig.npy", x)
    os.symlink("sig.npy", "lnk.npy")
    for store in ("in.zarr", "old.zarr"):
        zarr.create_array(store, shape=x.shape, dtype="float32", chunks=(2, 10_000))[:] = x
    np.save("old.zarr/x.npy", x)  # an input inside a folder an output would replace
    os.mkdir("rec")
    wavfile.write("rec/a.wav", 8000, x[0])
    os.mkdir("sub")
    return tmp_path


def _snapshot(root):
    """Every file under ``root`` (links as their targets' names) -> its bytes' digest."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out[path] = os.readlink(path) if os.path.islink(path) else hashlib.sha256(open(path, "rb").read()).hexdigest()
    return out


def _counting(monkeypatch):
    real, calls = job_mod.compute_unit, []
    monkeypatch.setattr(job_mod, "compute_unit", lambda spec, unit, data=None: calls.append(unit) or
                        real(spec, unit, data))
    return calls


def _one_line(res, *fragments):
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and "Traceback" not in res.output, (res.exit_code, res.output, res.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    for f in fragments:
        assert f in res.output, (f, res.output)


#: the reproductions of N1 and N9 and their kin: each wrote over, into or beside an input, or
#: over another output, before the check (exit 0, the input lost); now one line, exit 2
HARMFUL = [
    (["track", "sig.npy", "--out", "o.csv", "--plot", "sig.npy"], "is the input 'sig.npy'"),  # N1
    (["track", "sig.npy", "--plot", "same.csv", "--out", "same.csv"], "give each output a path of its own"),  # N1
    (["track", "in.zarr", "--out", "z.csv", "--plot", "in.zarr/zarr.json"], "lies inside the input folder"),  # N1
    (["track", "in.zarr", "--out", "z.csv", "--plot", "in.zarr/p.png"], "lies inside the input folder"),  # N1
    (["track", "lnk.npy", "--out", "o.csv", "--plot", "sig.npy"], "is the input 'lnk.npy'"),  # a link's target
    (["track", "sig.npy", "--out", "o.csv", "--plot", "lnk.npy"], "is the input 'sig.npy'"),  # a link to it
    (["track", "in.zarr", "--out", "in.zarr"], "is the input folder 'in.zarr'"),
    (["track", "old.zarr/x.npy", "--out", "old.zarr"], "holds the input 'old.zarr/x.npy'"),
    (["track", "sig.npy", "--out", "old.zarr", "--plot", "old.zarr/p.png"], "give each output a path of its own"),
    (["track", "sig.npy", "--out", "o.csv", "--plot", "o.csv.partial/p.png"], "staging folder 'o.csv.partial'"),
    (["track", "sig.npy", "--out", "o.csv", "--plot", "o.csv.partial"], "staging folder 'o.csv.partial'"),
    (["track", "sig.npy", "--out", "o.csv", "--plot", ".o.csv.abcdefgh.tmp"], "gives its temporary files"),
    (["track", "rec", "--out", "rec/o.csv"], "lies inside the input folder 'rec'"),  # N9
    (["track", "rec", "--out", "o.csv", "--plot", "rec/p.png"], "lies inside the input folder 'rec'"),  # N9
    (["track", "rec/*.wav", "--out", "o.csv", "--plot", "rec/new.wav"], "matches the input pattern"),  # N9
    (["track", "rec/*.wav", "--out", "o.csv", "--plot", "rec/a.wav"], "is the input 'rec/a.wav'"),
    (["peaks", "sig.npy", "--csv", "sig.npy"], "is the input 'sig.npy'"),
    (["peaks", "sig.npy", "--json", "r.json", "--csv", "r.json"], "give each output a path of its own"),
    (["peaks", "sig.npy", "--plot", "lnk.npy"], "is the input 'sig.npy'"),
    (["peaks", "sig.npy", "--out", "sig.npy"], "is the input 'sig.npy'"),
    (["bench", "--json", "b.json", "--md", "b.json"], "give each output a path of its own"),
]


@pytest.mark.parametrize("args, fragment", HARMFUL)
def test_written_paths_that_would_harm_an_input_or_another_output_are_one_line_before_any_work(
        inputs, monkeypatch, args, fragment):
    before = _snapshot(inputs)
    calls = _counting(monkeypatch)
    extra = TRACK if args[0] == "track" else PEAKS if args[0] == "peaks" else []
    res = runner.invoke(app, args + extra)
    _one_line(res, fragment)
    assert calls == [] and _snapshot(inputs) == before and not list(inputs.glob("*.partial"))


def test_a_name_a_killed_assembly_leaves_is_not_taken_for_an_input(inputs, monkeypatch):
    """An input whose name is one of an output's temporaries would be removed by the job's
    sweep of what killed assemblies left: refused, the store kept."""
    os.rename("in.zarr", ".o.zarr.abcdefgh")
    before = _snapshot(inputs)
    res = runner.invoke(app, ["track", ".o.zarr.abcdefgh", "--out", "o.zarr"] + TRACK)
    _one_line(res, "gives its temporary files")
    assert _snapshot(inputs) == before


@pytest.mark.slow
def test_paths_apart_from_the_inputs_are_written_right(inputs):
    """What is not an input is written, and right: an output beside a glob's sound files (the
    glob never reads a CSV or a PNG), in another folder, a Zarr output replaced whole."""
    before = _snapshot(inputs)
    for source, out, plot in [("rec/*.wav", "rec/o.csv", "rec/p.png"), ("sig.npy", "sub/o.csv", "sub/p.png"),
                              ("sig.npy", "old.zarr", None)]:
        if out == "old.zarr":
            os.remove("old.zarr/x.npy")  # (no input inside it now)
            del before[str(inputs / "old.zarr" / "x.npy")]
        ref = runner.invoke(app, ["track", source, "--out", "ref.csv"] + TRACK)
        assert ref.exit_code == 0, ref.output
        res = runner.invoke(app, ["track", source, "--out", out] + (["--plot", plot] if plot else []) + TRACK)
        assert res.exit_code == 0, res.output
        if out.endswith(".csv"):
            assert open(out, "rb").read() == open("ref.csv", "rb").read()
        else:
            assert zarr.open_group(out, mode="r").attrs["files"] == ["sig.npy"]
        if plot:
            assert open(plot, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert all(_snapshot(inputs)[p] == d for p, d in before.items() if "old.zarr" not in p)


def _name_max():
    return os.pathconf(".", "PC_NAME_MAX")


def test_names_too_long_for_the_filesystem_are_one_line_at_the_exact_limit(inputs, monkeypatch):
    """N7: a 300-byte name as an input, --out or --plot was a traceback (File name too long).
    Now the limit is NAME_MAX less what welchpeaks adds to the name (22 bytes for a job's
    --out: ``.NAME.partial.done.PID``; 14 for a file written atomically: ``.NAME.XXXXXXXX.tmp``):
    a name at the limit is written, whole job included, one byte more is one line; bytes
    count, not characters."""
    limit = _name_max()
    calls = _counting(monkeypatch)
    for option, suffix, extra in [("--out", ".csv", 22), ("--out", ".zarr", 22), ("--plot", ".png", 14)]:
        fits = "x" * (limit - extra - len(suffix)) + suffix
        args = ["track", "sig.npy"] + (["--out", fits] if option == "--out" else ["--out", "o.csv", "--plot", fits])
        res = runner.invoke(app, args + TRACK)
        assert res.exit_code == 0 and os.path.exists(fits), res.output
        for long in ["y" + fits, "é" * ((limit - extra - len(suffix)) // 2 + 1) + suffix, "z" * 300 + suffix]:
            calls.clear()
            args = ["track", "sig.npy"] + (["--out", long] if option == "--out" else ["--out", "p.csv", "--plot", long])
            _one_line(runner.invoke(app, args + TRACK), option, f"at most {limit - extra} bytes")
            assert calls == []
    for args in (["track", "q" * 300 + ".npy", "--out", "o.csv"] + TRACK, ["peaks", "q" * 300 + ".npy"] + PEAKS):
        _one_line(runner.invoke(app, args), "the input", f"at most {limit}")
    for option in ("--csv", "--json", "--plot"):
        _one_line(runner.invoke(app, ["peaks", "sig.npy", option, "w" * 300 + ".x"] + PEAKS), option, "302 bytes")
    _one_line(runner.invoke(app, ["demo", "--plot", "d" * 300 + ".png"]), "--plot")
    _one_line(runner.invoke(app, ["bench", "--json", "b" * 300 + ".json"]), "--json")


@pytest.fixture
def latin1_input(inputs):
    """``s\\xff.npy``: a name of bytes that are not UTF-8, as a Latin-1 system writes it."""
    try:
        os.link(b"sig.npy", b"s\xff.npy")
    except OSError:  # (a filesystem that takes UTF-8 names only)
        pytest.skip("this filesystem refuses names that are not UTF-8")
    return os.fsdecode(b"s\xff.npy")


def test_input_names_the_output_cannot_hold_are_one_line_before_any_work(latin1_input, monkeypatch):
    """N8: an input name of non-UTF-8 bytes failed a .csv or .parquet job after all the work
    (every rerun again), and a .jsonl, .zarr or peaks --json held it as a lone surrogate escape
    that pandas cannot read. Every output that holds the inputs' names refuses it first."""
    calls = _counting(monkeypatch)
    for out in ("n.csv", "n.parquet", "n.jsonl", "n.zarr"):
        _one_line(runner.invoke(app, ["track", latin1_input, "--out", out] + TRACK), "not valid UTF-8", "rename",
                  repr(latin1_input))
        assert calls == [] and not os.path.exists(out) and not os.path.exists(out + ".partial")
    for option, path in (("--csv", "p.csv"), ("--json", "p.json"), ("--plot", "p.png")):
        _one_line(runner.invoke(app, ["peaks", latin1_input, option, path] + PEAKS), "not valid UTF-8")
        assert not os.path.exists(path)
    # a UTF-8 name that is not ASCII is written as it is, and read back as it is
    os.rename(latin1_input, "é-ü.npy")
    for out in ("u.csv", "u.parquet"):
        assert runner.invoke(app, ["track", "é-ü.npy", "--out", out] + TRACK).exit_code == 0
        df = pd.read_parquet(out) if out.endswith(".parquet") else pd.read_csv(out)
        assert set(df["file"]) == {"é-ü.npy"} and len(df)
