"""The one table of parameters (welchpeaks.spec) against every place that spells them: the
public signatures, make_params, the command line, docs/parameters.md, and the errors."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import welchpeaks
from welchpeaks import spec
from welchpeaks.cli.common import parse_choice, parse_segments, parse_window
from welchpeaks.cli.main import app
from welchpeaks.cli.main import explain as explain_command
from welchpeaks.cli.main import peaks as peaks_command
from welchpeaks.cli.scale import track as track_command
from welchpeaks.params import make_params

ROOT = Path(__file__).resolve().parent.parent
ENTRY_POINTS = {"welch_peaks": welchpeaks.welch_peaks, "WelchPeaks": welchpeaks.WelchPeaks,
                "track": welchpeaks.track, "Tracker": welchpeaks.Tracker, "make_params": make_params}
#: what a signature holds besides the table's parameters: the data, and make_params' checked filters
NOT_PARAMETERS = {"self", "x", "filters"}


@pytest.mark.parametrize("where", sorted(ENTRY_POINTS))
def test_each_signature_takes_the_tables_parameters_with_its_defaults(where):
    sig = inspect.signature(ENTRY_POINTS[where])
    names = {n for n in sig.parameters if n not in NOT_PARAMETERS}
    assert names == spec.TAKES[where], (names ^ spec.TAKES[where])
    for name in names:
        assert sig.parameters[name].default == spec.default(name, where), (where, name)


def test_a_stream_takes_what_a_tracker_takes():
    stream = welchpeaks.WelchPeakStream(**{n: spec.default(n, "track") for n in spec.TAKES["track"]})
    assert stream.tracker.params.n_fft == make_params().n_fft == 256  # n_fft None: the default length


def test_resolution_hz_picks_n_fft_from_fs():
    """The smallest power of two whose bins are at most resolution_hz wide; an error naming both
    when n_fft is given too, and one naming fs when the rate is unknown."""
    assert make_params(resolution_hz=10.0, fs=8000.0).n_fft == 1024  # 800 samples at least: 7.8 Hz bins
    assert make_params(resolution_hz=31.25, fs=8000.0).n_fft == 256  # exactly 31.25 Hz
    assert make_params(resolution_hz=1e6, fs=8000.0).n_fft == 4  # the shortest segment
    assert welchpeaks.WelchPeaks(resolution_hz=5.0, fs=1000.0).params.n_fft == 256
    t = np.arange(20000) / 1000.0
    r = welchpeaks.track(np.sin(2 * np.pi * 100 * t), fs=1000.0, resolution_hz=2.0, k=1)
    assert r.params["n_fft"] == 512 and abs(r.freqs[0, 0] - 100.0) < 0.1
    with pytest.raises(ValueError, match=r"n_fft=256 and resolution_hz=10.0: give one"):
        make_params(n_fft=256, resolution_hz=10.0, fs=8000.0)
    with pytest.raises(ValueError, match="needs the sample rate: pass fs="):
        make_params(resolution_hz=10.0)
    with pytest.raises(ValueError, match="resolution_hz=-1 must be a positive"):
        make_params(resolution_hz=-1, fs=8000.0)
    with pytest.raises(ValueError, match="over the"):
        make_params(resolution_hz=1e-9, fs=8000.0)
    res = CliRunner().invoke(app, ["peaks", "x.npy", "--n-fft", "64", "--resolution-hz", "5"])
    assert res.exit_code != 0 and "give one of them" in res.output


def _cli_options(command) -> dict[str, typer.models.OptionInfo]:
    return {name: p.default for name, p in inspect.signature(command).parameters.items()
            if isinstance(p.default, typer.models.OptionInfo)}


_PARSE = {"segments": parse_segments, "window": parse_window}


@pytest.mark.parametrize("command, where", [(peaks_command, "welch_peaks"), (track_command, "track"),
                                            (explain_command, "explain")])
def test_cli_options_are_the_tables(command, where):
    """Every option named like a parameter has the table's flag and (parsed) default; the
    peaks and track commands offer every parameter with a flag that their function takes."""
    options = _cli_options(command)
    in_table = {n: o for n, o in options.items() if n in spec.PARAMS}
    for name, opt in in_table.items():
        param = spec.PARAMS[name]
        assert param.flag in opt.param_decls, (where, name, opt.param_decls)
        parse = _PARSE.get(name, (lambda v, n=name: parse_choice(n, v)) if spec.PARAMS[name].choices else None)
        value = parse(opt.default) if parse is not None and opt.default is not None else opt.default
        assert value == spec.default(name, where), (where, name, opt.default)
    if where != "explain":
        flagged = {n for n in spec.TAKES[where] if spec.PARAMS[n].flag is not None}
        assert flagged <= set(in_table), flagged - set(in_table)


def test_every_flag_is_offered_somewhere_and_no_flag_is_taken_twice():
    offered = set()
    for command in (peaks_command, track_command, explain_command):
        offered |= {n for n in _cli_options(command) if n in spec.PARAMS}
    assert offered == {n for n, p in spec.PARAMS.items() if p.flag is not None}
    flags = [p.flag for p in spec.PARAMS.values() if p.flag]
    assert len(flags) == len(set(flags))


def test_docs_parameters_is_generated_from_the_table():
    assert (ROOT / "docs" / "parameters.md").read_text() == spec.markdown(), \
        "regenerate: python -c \"from welchpeaks import spec; print(spec.markdown(), end='')\" > docs/parameters.md"


@pytest.mark.parametrize("name", sorted(n for n, p in spec.PARAMS.items() if p.choices))
def test_a_value_outside_the_choices_is_refused_naming_them(name):
    x = np.zeros((1, 512))
    x[0, ::7] = 1.0
    with pytest.raises(ValueError) as err:
        welchpeaks.welch_peaks(x, **{name: "no-such-choice"})
    text = str(err.value)
    assert f"{name}='no-such-choice' is unknown" in text
    for value in spec.PARAMS[name].choices:
        assert repr(value) in text
    # every choice is accepted
    for value in spec.PARAMS[name].choices:
        if name == "device" and value == "cuda":
            continue  # needs a GPU
        if name == "interp" and value == "window":
            continue  # needs a window with an exact estimator: the default Hann has one
        welchpeaks.welch_peaks(x, k=2, **{name: value})


def test_choices_are_compared_by_value_and_type():
    assert spec.check_choice("detrend", False) is False
    assert spec.check_choice("mode", np.str_("bins")) == "bins"
    for bad in (0, True, None):  # equal to False, but not False
        with pytest.raises(ValueError, match="detrend="):
            spec.check_choice("detrend", bad)
    with pytest.raises(ValueError, match="mode="):
        spec.check_choice("mode", ["peaks"])


def test_cli_window_detrend_scaling_and_dtype_reach_the_computation(tmp_path):
    rng = np.random.default_rng(3)
    t = np.arange(4096)
    x = np.sin(2 * np.pi * 0.1234 * t) + 0.5 * np.sin(2 * np.pi * 0.31 * t) + 0.1 * rng.standard_normal((2, 4096))
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["peaks", str(tmp_path / "x.npy"), "--k", "3", "--window", "kaiser,8",
                                   "--detrend", "none", "--scaling", "spectrum", "--dtype", "float64",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())[str(tmp_path / "x.npy")]
    want = welchpeaks.welch_peaks(x, k=3, window=("kaiser", 8.0), detrend=False, scaling="spectrum",
                                  dtype="float64")
    np.testing.assert_array_equal(np.asarray(got["bins"]), want.bins)
    np.testing.assert_allclose(np.asarray(got["power"]), want.power, rtol=1e-12)
    hann = welchpeaks.welch_peaks(x, k=3, dtype="float64")
    assert not np.allclose(hann.power, want.power)  # the options changed the numbers
    assert got["params"]["window"] == ["kaiser", 8.0] and got["params"]["detrend"] is False


@pytest.mark.parametrize("argv, message", [
    (["--window", "kaiser,x"], "--window 'kaiser,x'"),
    (["--window", "kaiser,1e400"], "--window 'kaiser,1e400'"),
    (["--window", "gaussian,0"], "window=('gaussian', 0.0) has values"),
    (["--window", "nosuch"], "window='nosuch' is not a window"),
    (["--detrend", "quadratic"], "--detrend 'quadratic': use one of constant, linear, none"),
    (["--scaling", "psd"], "--scaling 'psd': use one of density, spectrum"),
    (["--dtype", "float16"], "--dtype 'float16': use one of float32, float64"),
    (["--mode", "max"], "--mode 'max'"),
])
@pytest.mark.parametrize("command", ["peaks", "track"])
def test_cli_refuses_bad_values_naming_the_option(tmp_path, argv, message, command):
    np.save(tmp_path / "x.npy", np.ones((1, 4096)))
    out = ["--out", str(tmp_path / "t.csv")] if command == "track" else []
    res = CliRunner().invoke(app, [command, str(tmp_path / "x.npy"), *out, *argv])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    assert "x.npy:" not in res.output  # a parameter's error, not the file's
    assert not (tmp_path / "t.csv.partial").exists()


def test_cli_choices_take_any_case_and_numpys_dtype_spellings(tmp_path):
    """``--scaling SPECTRUM --dtype f4`` is ``scaling='spectrum', dtype='float32'``, also in a
    resumable job (whose manifest holds the normalised values)."""
    x = np.random.default_rng(4).standard_normal((2, 4096))
    np.save(tmp_path / "x.npy", x)
    res = CliRunner().invoke(app, ["track", str(tmp_path / "x.npy"), "--out", str(tmp_path / "t.jsonl"), "--k", "2",
                                   "--strategy", "numpy", "--dtype", "f4", "--scaling", "SPECTRUM", "--quiet"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    want = welchpeaks.track(x, k=2, strategy="numpy", dtype="float32", scaling="spectrum")
    got = np.array([r["power"] for r in rows if r["signal"] == 0 and r["rank"] == 0])
    np.testing.assert_array_equal(got, want.power[0, :, 0])
