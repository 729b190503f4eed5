"""The README's and docs/performance.md's numbers are the measured ones: each table row is
checked against the benchmark's JSON file it names."""

from __future__ import annotations

import json

import numpy as np
import pytest
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench_rows(name: str) -> dict[tuple, dict]:
    doc = json.loads((ROOT / "docs" / "bench" / name).read_text())
    return {(r["batch"], r["segments"], r["execution"]): r for r in doc["rows"]}


def test_the_readme_performance_table_is_the_measured_run():
    rows = _bench_rows("cpu-2026-11-26.json")
    text = (ROOT / "README.md").read_text()
    assert "--json bench.json" in text and "docs/performance.md" in text
    table = [line for line in text.splitlines() if re.match(r"\| \d+ \| \d+ \| peaks \|", line)]
    assert len(table) == len(rows) == 36
    for line in table:
        batch, seg, _, ex, median, span, ratio, floor = [c.strip() for c in line.strip("|").split("|")]
        r = rows[(int(batch), int(seg), ex)]
        assert float(median) == round(r["median_ms"], 3), line
        assert span == f"{r['min_ms']:.3f}-{r['max_ms']:.3f}", line
        assert float(ratio) == round(r["speedup_vs_scipy"], 1) and float(floor) == round(r["floor_ratio"], 2), line


def test_the_performance_summary_ratios_are_the_measured_run():
    rows = _bench_rows("cpu-2026-11-26.json")
    text = (ROOT / "docs" / "performance.md").read_text()
    names = ["numpy", "fused-cpu", "auto", "auto-oneshot"]
    table = [line for line in text.splitlines() if re.match(r"\| \d+ \| [28] \| [\d.]+ \|", line)]
    assert len(table) == 6
    for line in table:
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        batch, seg = int(cells[0]), int(cells[1])
        assert float(cells[2]) == float(f"{rows[(batch, seg, 'scipy')]['median_ms']:.3g}"), line
        for name, cell in zip(names, cells[3:7]):
            assert float(cell.rstrip("x")) == round(rows[(batch, seg, name)]["speedup_vs_scipy"], 1), (name, line)
        assert float(cells[7]) == round(rows[(batch, seg, "auto")]["floor_ratio"], 2), line
    picker = json.loads((ROOT / "docs" / "bench" / "picker-quiet-issue36-item4.json").read_text())["summary"]
    assert f"{picker['regret_geomean']:.3f} / {picker['regret_worst']:.2f}" in text


def test_every_python_block_of_the_readme_runs_as_pasted(tmp_path, monkeypatch):
    """The README's Python blocks, run in order in one namespace (as a reader pasting them into
    one session would), in an empty folder: each one runs, and the first prints what its
    comment says."""
    import contextlib
    import io

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, block in enumerate(blocks):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"README.md, Python block {i + 1}", "exec"), namespace)
        if i == 0:
            assert out.getvalue().startswith("[1000. 2500.] [32 80]"), out.getvalue()[:200]


def test_every_python_block_of_the_readme_says_the_extras_it_needs():
    """Each README Python block opens with '# needs:' naming every extra whose package it uses
    (pandas through to_dataframe: io; plots: plot; dask; xarray), and each of those extras
    brings the package (pyproject.toml)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    uses = {"to_dataframe": ("io", "pandas"), ".plot(": ("plot", "matplotlib"), "dask": ("dask", "dask"),
            "xarray": ("xarray", "xarray")}
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)):
        first, body = block.split("\n", 1)
        assert first.startswith("# needs:"), f"Python block {i + 1} does not say what it needs: {first!r}"
        for marker, (extra, package) in uses.items():
            if marker in body:
                assert extra in first, f"Python block {i + 1} uses {marker} but does not name the {extra} extra"
                assert any(dep.startswith(package) for dep in extras[extra]), (extra, package)


# README command lines that are only parsed (their options and values checked as the command
# would): they measure the machine (benchmarks, calibrate), train, start a cluster or need a
# GPU, for minutes
_PARSED_ONLY = ("bench", "learn", "gpu-check", "--workers", "--device cuda", "bash ")


def _readme_command_lines() -> list[str]:
    block, = re.findall(r"## Command line\n\n```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [line for line in block.splitlines() if line.strip()]


def _scene(folder) -> None:
    """The files the README's command lines name, made as a user would have them: a 48 kHz
    WAV, rows of samples as .npy and .csv, a folder of WAVs, a FLAC, a Zarr array."""
    import soundfile
    import zarr
    from scipy.io import wavfile

    rng = np.random.default_rng(0)
    t = np.arange(96_000) / 48_000
    tone = (0.5 * np.sin(2 * np.pi * 1000 * t) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)
    wavfile.write(folder / "rec.wav", 48_000, tone)
    soundfile.write(folder / "rec.flac", tone, 48_000)
    (folder / "recordings").mkdir()
    for i in range(2):
        wavfile.write(folder / "recordings" / f"{i}.wav", 48_000, tone[::-1] if i else tone)
    rows = rng.standard_normal((4, 4096)).astype(np.float32)
    np.save(folder / "data.npy", rows)
    np.save(folder / "rec.npy", rows)
    np.savetxt(folder / "rows.csv", rows[:2], delimiter=",")
    zarr.create_array(str(folder / "big.zarr"), shape=rows.shape, dtype="float32", chunks=(2, 4096))[:] = rows


@pytest.mark.slow
def test_every_command_line_of_the_readme_runs_as_written(tmp_path, monkeypatch):
    """Each `welchpeaks ...` line of the README's command-line block, as written, on files made
    as its names say: it runs and exits 0 (those that measure, train, start a cluster or need a
    GPU are parsed with their options, as the command would before running)."""
    import shlex

    import typer
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    monkeypatch.chdir(tmp_path)
    _scene(tmp_path)
    group = typer.main.get_command(app)
    ran = parsed = 0
    for line in _readme_command_lines():
        words = shlex.split(line, comments=True)
        if words[0] == "bash":
            assert (ROOT / words[1]).is_file(), line
            continue
        assert words[0] == "welchpeaks", line
        if any(p in line.split("#")[0] for p in _PARSED_ONLY) or words[1:2] == ["calibrate"] and "--status" not in words:
            # (the group's context keeps the subcommand's words in _protected_args and args)
            pending = lambda c: list(getattr(c, "_protected_args", [])) + list(c.args)  # noqa: E731
            ctx = group.make_context("welchpeaks", list(words[1:]))
            args, command = pending(ctx), group
            while args and hasattr(command, "get_command"):
                sub = command.get_command(ctx, args[0])
                if sub is None:  # a group's own options or arguments: parsed already
                    break
                ctx = sub.make_context(args[0], args[1:], parent=ctx)
                args, command = pending(ctx), sub
            parsed += 1
            continue
        res = CliRunner().invoke(app, words[1:])
        assert res.exit_code == 0, (line, res.output)
        ran += 1
    assert ran >= 15 and parsed >= 10


def test_the_docstring_examples_run():
    """Every ``>>>`` example in the package's docstrings gives what it shows (doctest)."""
    import doctest
    import importlib

    src = ROOT / "src"
    files = sorted(p for p in (src / "welchpeaks").rglob("*.py") if ">>> " in p.read_text())
    assert len(files) >= 8
    ran = 0
    for path in files:
        name = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
        assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
        ran += result.attempted
    assert ran >= 20
