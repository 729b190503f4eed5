"""``welchpeaks bench first-use`` (issue 52, item 5): its summary of a child's compiles and its
refusals. The child itself (minutes of compiles on empty caches) is run by hand; its figures
are in docs/performance.md."""

import pytest
from typer.testing import CliRunner

from welchpeaks.bench.first_use import summarise
from welchpeaks.cli import app


def _compile(kernel, start, wall, own, nested):
    return {"kernel": kernel, "start_s": start, "wall_s": wall, "self_s": own, "thread": "t", "nested": nested,
            "signature": ""}


def test_the_summary_sums_each_kernels_own_time_and_keeps_the_top_level_compiles():
    """Nested compiles (a kernel's helpers, compiled inside it) count once, as their own time;
    a kernel compiled twice (two signatures) sums both; the top level is what calls launch."""
    out = {"compiles": [_compile("helper", 1.0, 2.0, 2.0, True), _compile("fused_pow2", 0.5, 5.0, 3.0, False),
                        _compile("helper", 7.0, 1.0, 1.0, True), _compile("fused_pow2", 6.0, 4.0, 3.0, False),
                        _compile("spectrum", 12.0, 0.5, 0.5, False)]}
    got = summarise(out)
    assert got["kernels_s"] == {"fused_pow2": 6.0, "helper": 3.0, "spectrum": 0.5}
    assert list(got["kernels_s"]) == ["fused_pow2", "helper", "spectrum"]  # largest first
    assert got["compile_self_s"] == pytest.approx(9.5)
    # the summed own times equal the top-level compiles' wall times: nothing counted twice
    assert got["compile_self_s"] == pytest.approx(sum(e["wall_s"] for e in got["top_level"]))
    assert [e["kernel"] for e in got["top_level"]] == ["fused_pow2", "fused_pow2", "spectrum"]


@pytest.mark.parametrize("args", [["--batch", "0"], ["--length", "100"], ["--limit", "0"], ["--limit", "x"]])
def test_bad_options_are_one_line_errors_before_any_child_runs(args):
    res = CliRunner().invoke(app, ["bench", "first-use", *args])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert len([line for line in res.output.splitlines() if line.strip()]) <= 6
