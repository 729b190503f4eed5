"""``welchpeaks gpu-check``: the Triton kernels compiled ahead of time for a GPU that need not be
here (:mod:`welchpeaks.bench.gpu_check`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from welchpeaks.cli.common import check_mode, console, err, fail, int_list, write_json
from welchpeaks.cli.paths import check_paths


def gpu_check(
    arch: str = typer.Option("sm_90,sm_80", "--arch", help="Target architectures: sm_90 (H100/H200), sm_80 (A100)."),
    kernel: str = typer.Option("block,fused,find_peaks", "--kernel",
                               help="Triton kernels: block (triton-block), fused, find_peaks (welchpeaks.find_peaks)."),
    find_peaks_n: str = typer.Option("1025,8192", "--find-peaks-n", help="Row lengths of the find_peaks kernel."),
    n_fft: str = typer.Option("64,128,256,512,1024,2048,4096", "--n-fft",
                              help="Segment lengths (comma-separated or a range)."),
    k: str = typer.Option("1,16,64", "--k", help="Peaks per signal."),
    segments: str = typer.Option("1,2,8,64", "--segments",
                                 help="Segments per signal (a runtime loop; the JIT specialises only 1)."),
    mode: str = typer.Option("peaks,bins", "--mode", help="peaks, bins or peaks,bins."),
    precision: str = typer.Option("fp32,tf32,bf16", "--precision",
                                  help="Tensor-core precisions of the fused kernel: fp32, tf32, bf16."),
    batch: int = typer.Option(65536, "--batch", help="Rows of the launch compiled (and of the predicted times)."),
    triton: Optional[Path] = typer.Option(None, "--triton", help="Compile with the Triton installed in this folder "
                                                                 "(pip install --target DIR triton==3.6.0) instead "
                                                                 "of the one installed here."),
    triton_version: Optional[str] = typer.Option(None, "--triton-version", help="Compile with this Triton version "
                                                 "(for example 3.6.0, a lent GPU machine's), installed once under the "
                                                 "cache directory with pip (about 650 MB)."),
    jobs: int = typer.Option(0, "--jobs", help="Compiles at a time [default: the CPU cores]."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds one compile may take."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when a configuration spills, needs more than 255 "
                                                       "registers, does not fit an SM, or fails to compile."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every configuration's figures as JSON."),
) -> None:
    """Compile the Triton kernels as the JIT would for a GPU that need not be here: registers,
    spills, shared memory, residency, SASS instructions, barriers and shuffles per row, compile
    time, and the time they imply at --batch rows beside the memory-bound time."""
    from welchpeaks.bench import gpu_check as gc
    from welchpeaks.machine import machine_info
    from welchpeaks.params import PRECISIONS

    check_paths({"--json": json_path}, reads=[triton])
    if triton_version is not None:
        if triton is not None:
            fail("give --triton DIR or --triton-version VERSION, not both")
        try:
            triton = Path(gc.triton_folder(triton_version))
        except RuntimeError as exc:
            fail(f"--triton-version {triton_version}: {exc}")
    if triton is not None and not (triton / "triton" / "__init__.py").is_file():
        fail(f"--triton {str(triton)!r} holds no triton package; make it with: pip install --no-deps --target "
             f"{triton} triton==VERSION")
    try:
        import triton as _  # noqa: F401
    except ImportError:
        if triton is None:
            fail("gpu-check needs triton: pip install 'welchpeaks[gpu]' (or --triton DIR)")
    archs = [a.strip() for a in arch.split(",") if a.strip()]
    kernels = [kn.strip() for kn in kernel.split(",") if kn.strip()]
    if not archs or set(archs) - set(gc.PUBLISHED):
        fail(f"--arch {arch!r}: use some of {sorted(gc.PUBLISHED)}")
    if not kernels or set(kernels) - set(gc.KERNELS) - {"find_peaks"}:
        fail(f"--kernel {kernel!r}: use some of {list(gc.KERNELS) + ['find_peaks']}")
    fp_rows = int_list(find_peaks_n, "find-peaks-n") if "find_peaks" in kernels else []
    kernels = [kn for kn in kernels if kn != "find_peaks"]
    if timeout <= 0:
        fail("--timeout must be > 0 seconds")
    if batch < 1:
        fail("--batch must be >= 1 rows")
    precisions = tuple(pr.strip() for pr in precision.split(",") if pr.strip())
    if not precisions or set(precisions) - set(PRECISIONS):
        fail(f"--precision {precision!r}: use some of {list(PRECISIONS)}")
    configs = gc.grid(kernels, int_list(n_fft, "n-fft"), int_list(k, "k"), int_list(segments, "segments"),
                      check_mode(mode), archs, precisions, batch)
    if jobs < 0:
        fail(f"--jobs {jobs}: use 1 or more (0: one per CPU core)")
    jobs = jobs or (os.cpu_count() or 1)
    where = str(triton) if triton is not None else None
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("compiling", total=len(configs))
        rows = gc.check_all(configs, timeout, where, jobs, done=lambda row: bar.advance(task))
    for row in rows:
        row["verdict"] = gc.verdict(row)
    if configs:
        # one line per configuration, however narrow the terminal (a pipe, a log)
        Console(width=max(console.width, 200)).print(_table(rows, batch))
    found = gc.find_peaks_all(fp_rows, archs, timeout, where, jobs) if fp_rows else []
    for row in found:
        row["verdict"] = gc.verdict(row)
    if found:
        console.print(_find_peaks_table(found))
    summary = gc.summary(rows + found)
    console.print(f"Triton {', '.join(summary['triton']) or '?'}: {summary['compiled']} of {summary['configurations']} "
                  f"compiled; {summary['spilling']} spill; {summary['timeouts']} timed out; "
                  f"{summary['errors']} failed. "
                  "Times from published figures: " + "; ".join(f"{a}: {gc.PUBLISHED[a]['name']}" for a in archs),
                  highlight=False)
    if summary["unsupported"]:
        reasons = sorted({r["status"].split(": ", 1)[-1] for r in rows + found if r["status"].startswith("unsupported")})
        err.print(f"{summary['unsupported']} configuration(s) not compiled, unsupported: " + "; ".join(reasons),
                  markup=False, highlight=False)
    write_json(json_path, {"machine": machine_info(), "summary": summary, "configurations": rows, "find_peaks": found})
    if summary["unsupported"] == summary["configurations"]:
        fail("no configuration asked for is supported (see above); nothing was compiled")
    if strict and any(r["verdict"] for r in rows + found):
        raise typer.Exit(1)


def _table(rows: list[dict], batch: int) -> Table:
    table = Table(title=f"{len(rows)} configurations, compiled as the JIT would (no GPU needed); times at {batch} rows")
    for col in ("configuration", "status", "warps", "REG", "STACK", "CTAs/SM", "SASS/row", "BAR/row", "SHFL/row",
                "us issue", "us memory", "of bw", "compile s"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for r in rows:
        roof = r["roofline"] or {}
        ok = r["status"] == "ok"
        num = lambda key, fmt: format(roof[key], fmt) if ok and key in roof else "-"  # noqa: E731
        prec = f" {r['precision']}" if r["kernel"] == "fused" else ""
        table.add_row(f"{r['kernel']} {r['n_fft']} k{r['k']} s{r['segments']} {r['mode']}{prec} {r['arch']}",
                      r["status"][:40],
                      *(str(r.get(f, "-")) for f in ("num_warps", "reg", "stack", "ctas_per_sm")),
                      num("warp_instructions_per_row", ".0f"), num("barriers_per_row", ".1f"),
                      num("shuffles_per_row", ".0f"), num("us_issue_bound", ".0f"), num("us_memory_bound", ".0f"),
                      num("of_bandwidth_predicted", ".0%"),
                      "(same code)" if r.get("shared_compile") else f"{r.get('compile_s', float('nan')):.1f}")
    return table


def _find_peaks_table(found: list[dict]) -> Table:
    table = Table(title="find_peaks kernel (float64 rows, prominence and width), compiled as the JIT would")
    for col in ("arch", "n", "lanes", "status", "warps", "REG", "STACK", "CTAs/SM", "compile s"):
        table.add_column(col, justify="right")
    for r in found:
        table.add_row(r["arch"], str(r["n"]), str(r.get("np", "-")), r["status"][:40],
                      *(str(r.get(f, "-")) for f in ("num_warps", "reg", "stack", "ctas_per_sm")),
                      f"{r.get('compile_s', float('nan')):.1f}")
    return table
