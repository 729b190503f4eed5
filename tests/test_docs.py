"""The README's and docs/performance.md's numbers are the measured ones: each table row is
checked against the benchmark's JSON file it names."""

from __future__ import annotations

import json
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
