"""The device suite (tools/gpu-suite.sh): its dry run does every step here, without a GPU, as
the lent machine would, and a step that hangs is cut off without stopping the others."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent


def _suite_module():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gpu_suite
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return gpu_suite


@pytest.mark.slow
def test_the_device_suite_dry_run_runs_every_step(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the suite sets what it needs
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "tools" / "gpu-suite.sh"), "--dry-run", "--jobs", "2"], cwd=ROOT,
                          env=dict(env, OUT=str(out)), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(["env.txt", "suite.log", "correctness.json", "gpu-check.json", "calibrate.json",
                            "bench-device.json", "bench-host.json", "profile.json"]) and len(files) <= 8
    table = proc.stdout[proc.stdout.rindex("step "):].splitlines()[2:]
    assert [line.split()[0] for line in table] == list(_suite_module().STEPS)
    assert all(line.split()[1] in ("ok", "skipped") for line in table), table
    checks = json.loads((out / "correctness.json").read_text())["checks"]
    fused = {c.get("precision") for c in checks if c["strategy"] == "triton-fused"}
    assert fused == {"fp32", "tf32", "bf16"} and {c["strategy"] for c in checks} >= {"triton-block", "find_peaks"}
    assert all(c["pass"] and c.get("unwritten_slots", 0) == 0 for c in checks), checks
    bench = json.loads((out / "bench-device.json").read_text())
    assert bench["cells_done"] == bench["cells"] == 1 and not [r for r in bench["rows"] if "error" in r]
    from welchpeaks import backends

    picked = [r["picked"] for r in bench["rows"] if r["execution"] == "auto"]  # what auto chose, timed with the rest
    assert len(picked) == 1 and picked[0] in backends.names(), bench["rows"]
    assert json.loads((out / "gpu-check.json").read_text())["summary"]["compiled"] == 1
    profile = json.loads((out / "profile.json").read_text())["cells"]
    assert {c["strategy"] for c in profile} == {"triton-fused", "triton-block", "torch"}


def test_a_step_past_its_limit_is_killed_with_its_children(tmp_path):
    gpu_suite = _suite_module()
    suite = gpu_suite.Suite(tmp_path, budget_s=600, dry=True, jobs=1)
    pid_file = tmp_path / "child.pid"
    # a shell that starts a long-lived child (its pid noted), then sleeps far past the limit
    code, out = suite.run(["bash", "-c", f"sleep 600 & echo $! > {pid_file}; sleep 600"], limit_s=1)
    assert code == 124 and "killed after 1 s" in out
    assert _gone(int(pid_file.read_text()))  # the whole process group went, the child too
    suite.step("broken", 10, lambda limit: 1 / 0)
    assert suite.rows[-1][:2] == ("broken", "error") and "ZeroDivisionError" in suite.rows[-1][3]


def _gone(pid: int) -> bool:
    """True once ``pid`` is no process or a zombie (killed, not yet reaped); SIGKILL is
    delivered asynchronously, so this looks up to 200 times."""
    for _ in range(200):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        subprocess.run(["sleep", "0.05"])
    return False
