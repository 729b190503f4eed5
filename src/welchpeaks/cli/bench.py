"""``welchpeaks bench``: the benchmarks, each against what users would otherwise write, timed
in one run (JSON with ``--json``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from welchpeaks.cli.common import app_options, console, err, write_output
from welchpeaks.cli.common import check_mode as _check_mode
from welchpeaks.cli.common import fail as _fail
from welchpeaks.cli.common import int_list as _int_list
from welchpeaks.cli.common import write_json as _write_json
from welchpeaks.cli.paths import check_paths
from welchpeaks.files import write_atomic

bench_app = typer.Typer(**{**app_options(
    "Benchmarks (JSON with --json). Without a subcommand: the executions against scipy + top-k."),
    "no_args_is_help": False})


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    batch: str = typer.Option("32,1024,8192", "--batch", help="Batches: 32,1024 or a range 32-8192."),
    n_fft: str = typer.Option("256", "--n-fft", help="Segment lengths, comma-separated."),
    k: str = typer.Option("16", "--k", help="Peaks per signal, comma-separated."),
    segments: str = typer.Option("2", "--segments", help="Segments, comma-separated."),
    mode: str = typer.Option("peaks", "--mode", help="peaks, bins, or peaks,bins."),
    repeats: int = typer.Option(15, "--repeats", help="Timed calls per row (median reported)."),
    device: str = typer.Option("cpu", "--device", help="cpu (against scipy) or cuda (the GPU executions, CUDA "
                                                       "events; with TRITON_INTERPRET=1 and no GPU, CPU tensors)."),
    resident: str = typer.Option("device", "--resident", help="With --device cuda: where the signals are, device "
                                                              "or host (each call uploads them)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write rows and machine info as JSON."),
    md_path: Optional[Path] = typer.Option(None, "--md", help="Write the rows as a markdown table."),
) -> None:
    """Time the executions against scipy.signal.welch + top-k on the same data (--device cpu),
    or the GPU executions against each other and a device copy (--device cuda)."""
    if ctx.invoked_subcommand is not None:
        return
    from welchpeaks.bench.peaks import Cell, markdown_table, time_cell
    from welchpeaks.machine import machine_info

    if repeats < 3:
        _fail("--repeats must be >= 3 for a median and a range")
    if device not in ("cpu", "cuda") or resident not in ("device", "host"):
        _fail(f"--device {device!r} --resident {resident!r}: use --device cpu or cuda, --resident device or host")
    check_paths({"--json": json_path, "--md": md_path})
    modes = _check_mode(mode)
    cells = [
        Cell(b, n, kk, s, m)
        for n in _int_list(n_fft, "n-fft")
        for kk in _int_list(k, "k")
        for s in _int_list(segments, "segments")
        for m in modes
        for b in _int_list(batch, "batch")
    ]
    info = machine_info()
    console.print(f"{info['cpu']}, {info['cores']} cores, numba threads {info['numba_threads']}; {info['versions']}")
    if device == "cuda":
        _bench_cuda(cells, repeats, resident, info, json_path)
        return
    all_rows = []
    for cell in cells:
        rows = time_cell(cell, repeats)
        all_rows.extend(rows)
        table = Table(
            title=f"batch {cell.batch}, n_fft {cell.n_fft}, k {cell.k}, segments {cell.segments}, mode {cell.mode}"
        )
        for col in ("execution", "median ms", "min-max ms", "x scipy", "/ fft floor"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(
                r["execution"], f"{r['median_ms']:.3f}", f"{r['min_ms']:.3f}-{r['max_ms']:.3f}",
                f"{r['speedup_vs_scipy']:.1f}", f"{r['floor_ratio']:.2f}",
            )
        console.print(table)
    _write_json(json_path, {"machine": info, "rows": all_rows})
    write_output(md_path, markdown_table(all_rows), "--md")


@bench_app.command("phases")
def bench_phases(
    batch: str = typer.Option("32", "--batch", help="Batches: 32,1024 or a power-of-two range 32-8192."),
    n_fft: int = typer.Option(256, "--n-fft", help="Segment length."),
    k: int = typer.Option(16, "--k", help="Peaks per signal."),
    segments: int = typer.Option(2, "--segments", help="Segments per signal."),
    mode: str = typer.Option("peaks", "--mode", help="peaks or bins."),
    repeats: int = typer.Option(15, "--repeats", help="Timed runs per phase (at least 10)."),
    device: str = typer.Option("cpu", "--device", help="Device (cpu)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the reports as JSON."),
) -> None:
    """The fusion phases (baseline, block, fused): IO profiles, the gate, predicted vs measured."""
    from welchpeaks.bench.phases import run_phases
    from welchpeaks.machine import machine_info

    check_paths({"--json": json_path})
    _check_mode(mode)
    reports = []
    for b in _int_list(batch, "batch"):
        try:
            rep = run_phases(b, n_fft=n_fft, k=k, segments=segments, mode=mode, repeats=repeats, device=device)
        except ValueError as exc:
            _fail(str(exc))
        reports.append(rep)
        table = Table(title=f"phases: batch {b}, n_fft {n_fft}, k {k}, {segments} segment(s), {mode} on {device} "
                            f"({rep['cost_model']} cost model)")
        for col in ("phase", "launch", "host B", "traffic B", "ms", "min-max", "x base", "pred ms", "p/m"):
            table.add_column(col, justify="right")
        for r in rep["rows"]:
            io = r["io"]
            table.add_row(r["phase"], str(io["kernel_launches"]), f"{io['host_output_bytes']:,}",
                          f"{io['device_traffic_bytes']:,}", f"{r['median_ms']:.3f}", f"{r['min_ms']:.3f}-{r['max_ms']:.3f}",
                          f"{r['speedup_vs_baseline']:.2f}", f"{r['predicted_ms']:.3f}", f"{r['predicted_over_measured']:.2f}")
        console.print(table)
        bf, gate = rep["fusion_benefit"], rep["gate"]
        console.print(
            f"baseline -> fused saves {bf['launches_saved']} launches, {bf['sync_points_saved']} syncs, "
            f"{bf['host_readback_bytes_saved']:,} readback bytes, {bf['device_traffic_bytes_saved']:,} traffic bytes; "
            f"gate ({gate['status']}) score {gate['score_ns'] / 1e3:,.1f} us vs min gain {gate['min_gain_ns'] / 1e3:,.1f} us: "
            f"{'fuse' if gate['fuse'] else 'do not fuse'}; auto picks {rep['auto']}"
        )
    if len(reports) > 1:
        table = Table(title="crossover")
        for col in ("batch", "block x", "fused x", "gate score us", "fuse", "auto"):
            table.add_column(col, justify="right")
        for rep in reports:
            by = {r["phase"]: r for r in rep["rows"]}
            table.add_row(str(rep["batch"]), f"{by['block']['speedup_vs_baseline']:.2f}",
                          f"{by['fused']['speedup_vs_baseline']:.2f}", f"{rep['gate']['score_ns'] / 1e3:,.1f}",
                          "yes" if rep["gate"]["fuse"] else "no", rep["auto"])
        console.print(table)
    _write_json(json_path, {"machine": machine_info(), "reports": reports})


@bench_app.command("scale")
def bench_scale(
    which: str = typer.Option(",".join(("long-rows", "zarr-cli", "dask", "track")), "--which",
                              help="Experiments, comma-separated: long-rows, zarr-cli, dask, track."),
    workdir: Path = typer.Option(Path("."), "--dir", help="Where the bench writes its data files (kept for reruns)."),
    size_gb: float = typer.Option(4.0, "--size-gb", help="Size of the Zarr array on disk (GB)."),
    repeats: int = typer.Option(3, "--repeats", help="Runs per figure (median and min-max)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the figures and machine info as JSON."),
) -> None:
    """Real data at scale: long rows, the CLI over a Zarr array on disk (time, peak memory), Dask
    with 1 and 2 workers, and track over a long recording; each figure in its own process."""
    from welchpeaks.bench.scale import EXPERIMENTS, run
    from welchpeaks.machine import machine_info

    chosen = [w.strip() for w in which.split(",") if w.strip()]
    bad = [w for w in chosen if w not in EXPERIMENTS]
    if bad or not chosen:
        _fail(f"--which {which!r}: use some of {', '.join(EXPERIMENTS)}")
    if not workdir.is_dir():
        _fail(f"--dir {str(workdir)!r} is not a folder")
    if repeats < 1 or size_gb <= 0:
        _fail("--repeats must be >= 1 and --size-gb > 0")
    check_paths({"--json": json_path})
    info = machine_info()
    try:
        res = run(chosen, workdir, size_gb, repeats, lambda s: err.print(s, highlight=False))
    except RuntimeError as exc:
        _fail(str(exc))
    console.print_json(json.dumps(res, default=str))
    _write_json(json_path, {"machine": info, **res})


@bench_app.command("accuracy")
def bench_accuracy(
    trials: int = typer.Option(1000, "--trials", help="Tones per cell (random frequency and phase)."),
    n_fft: int = typer.Option(256, "--n-fft", help="Segment length."),
    seed: int = typer.Option(0, "--seed", help="Seed of the tones and the noise."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every cell, the targets and machine info."),
    md_path: Optional[Path] = typer.Option(None, "--md", help="Write the tables as Markdown."),
) -> None:
    """Bias and RMSE (bins) of each sub-bin estimator per window, segments (1, 2, 8) and SNR
    (noiseless, 40, 20, 0 dB), against the Cramér-Rao bound and the maximum of the zero-padded
    Welch PSD (psd-max: what refining the peak can reach), in one run; float64, and float32
    noiseless."""
    from welchpeaks.bench.accuracy import markdown, run, targets
    from welchpeaks.machine import machine_info

    if trials < 10 or n_fft < 64:
        _fail("--trials must be >= 10 and --n-fft >= 64 (tones sit 10 bins from DC and Nyquist)")
    check_paths({"--json": json_path, "--md": md_path})
    res = run(n_fft=n_fft, trials=trials, seed=seed)
    res32 = run(n_fft=n_fft, trials=trials, seed=seed, dtype="float32", snrs_db=(None,))
    checks = targets(res, res32)
    table = Table(title=f"sub-bin accuracy: n_fft {n_fft}, {trials} tones per cell, RMSE in bins (CRB)")
    names = ("auto", "window", "power-parabola", "log-parabola", "psd-max")
    for col in ("window", "segments", "SNR", *names):
        table.add_column(col, justify="right")
    for (w, seg, snr), row in _accuracy_rows(res).items():
        table.add_row(w, str(seg), "inf" if snr is None else f"{snr:g} dB",
                      *[f"{row[n]:.2e}" if n in row else "-" for n in names])
    console.print(table)
    for c in checks:
        ref = "" if c.get("reference") is None else f" (psd-max: {c['reference']:.3g})"
        console.print(f"{'met' if c['met'] else 'NOT met'}: {c['target']}: {c['measured']:.3g}{ref}")
    _write_json(json_path, {"machine": machine_info(), "float64": res, "float32": res32, "targets": checks})
    write_output(md_path, markdown(res, res32, checks), "--md")


@bench_app.command("near-dc")
def bench_near_dc(
    n_fft: int = typer.Option(256, "--n-fft", help="Segment length (the tones are 1.25 to 10.3 bins from DC and "
                                                   "from Nyquist)."),
    phases: int = typer.Option(8, "--phases", help="Starting phases per tone (the worst error is reported)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every cell and machine info."),
    md_path: Optional[Path] = typer.Option(None, "--md", help="Write the table as Markdown."),
) -> None:
    """The worst error (bins) of welch_peaks with default options on noiseless real tones 1.25 to
    10.3 bins from DC and from Nyquist, per detrend, record length (2 segments; one second at
    48 kHz) and CPU execution; * marks peaks the result flags approximate
    (PeakResult.approximate)."""
    from welchpeaks.bench.accuracy import near_dc, near_dc_markdown
    from welchpeaks.machine import machine_info

    if n_fft < 32 or phases < 1:
        _fail("--n-fft must be >= 32 and --phases >= 1")
    check_paths({"--json": json_path, "--md": md_path})
    res = near_dc(n_fft=n_fft, phases=phases)
    table_md = near_dc_markdown(res)
    console.print(table_md)
    _write_json(json_path, {"machine": machine_info(), **res})
    write_output(md_path, table_md, "--md")


@bench_app.command("link")
def bench_link(
    scenes: int = typer.Option(20, "--scenes", help="Scenes per family."),
    snr: str = typer.Option("15,30", "--snr", help="SNR range in dB per sample (lo,hi)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the scenes (each scene drawn on its own)."),
    families: Optional[str] = typer.Option(None, "--families", help="Some of crossing, tone-among-chirps, dropout, "
                                                                     "vibrato, hopping, plain [default: all]."),
    cost_frames: int = typer.Option(10_000, "--cost-frames", help="Frames of 16 random peaks for the cost (0: "
                                                                  "skip it)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every family's scores and machine info."),
    md_path: Optional[Path] = typer.Option(None, "--md", help="Write the table as Markdown."),
) -> None:
    """How well TrackResult.link keeps each source's identity with its defaults, on generated
    scenes (crossing chirps, a steady tone among chirps, dropouts, vibrato, hopping, two tones
    in noise): per family, the scenes' least per-source score (the share of a source's
    frame-peaks that carry its majority track id); and the cost of linking frames of 16 peaks."""
    from welchpeaks.bench import linking
    from welchpeaks.machine import machine_info

    try:
        lo, hi = (float(v) for v in snr.split(","))
    except ValueError:
        _fail(f"--snr {snr!r}: pass two numbers of dB, e.g. 15,30")
    names = tuple(f.strip() for f in families.split(",")) if families else linking.FAMILIES
    unknown = [f for f in names if f not in linking.FAMILIES]
    if unknown or scenes < 1 or not lo <= hi or cost_frames < 0:
        _fail(f"--families {unknown or ''} --scenes {scenes} --snr {snr} --cost-frames {cost_frames}: families of "
              f"{', '.join(linking.FAMILIES)}, at least one scene, lo <= hi, frames >= 0")
    check_paths({"--json": json_path, "--md": md_path})
    res = linking.run(names, scenes, seed, (lo, hi),
                      progress=lambda fam, i: err.print(f"{fam} {i + 1}/{scenes}", end="\r", highlight=False))
    if cost_frames:
        res["cost"] = linking.cost(cost_frames)
    table_md = linking.markdown(res)
    console.print(table_md)
    if cost_frames:
        c = res["cost"]
        console.print(f"linking {c['frames']:,} frames of {c['k']} random peaks, every one linked: "
                      f"{c['wall_s']['median']:.3f} s ({c['wall_s']['min']:.3f}-{c['wall_s']['max']:.3f}), "
                      f"CPU {c['cpu_s_median']:.3f} s, {c['tracks']:,} tracks")
    _write_json(json_path, {"machine": machine_info(), **res})
    write_output(md_path, table_md, "--md")


def _accuracy_rows(res: dict) -> dict:
    rows: dict = {}
    for c in res["cells"]:
        rows.setdefault((c["window"], c["segments"], c["snr_db"]), {})[c["interp"]] = c["rmse_bins"]
    return rows


@bench_app.command("floor")
def bench_floor(
    batch: str = typer.Option("32,1024,8192", "--batch", help="Batches: 32,1024 or a range 32-65536."),
    n_fft: str = typer.Option("256", "--n-fft", help="Segment lengths: 256,1024 or a range 64-4096."),
    segments: str = typer.Option("2", "--segments", help="Segments: 2,8,all (all: every segment of 16 n_fft samples)."),
    dtype: str = typer.Option("float32", "--dtype", help="float32, float64 or both (float32,float64)."),
    threads: str = typer.Option("1", "--threads", help="Threads each contender may use: 1, all, or 1,all."),
    repeats: int = typer.Option(15, "--repeats", help="Timed rounds per cell (median and min-max)."),
    max_bytes: str = typer.Option("1GiB", "--max-bytes", help="Leave out cells that would hold more than this."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every cell and row as JSON."),
    md_path: Optional[Path] = typer.Option(None, "--md", help="Write a markdown table of the cells."),
) -> None:
    """The executions against the floor, in one run, round robin: the scipy and torch peers,
    numpy, fused-cpu and auto beside the FFT alone on the same windowed segments (scipy.fft,
    pyFFTW with FFTW_MEASURE, ducc0: the bench extra) and a copy of the input; wall and CPU time
    per call, ratios to the best FFT alone and input GB/s."""
    from welchpeaks.bench import floor
    from welchpeaks.cli.scale import parse_memory
    from welchpeaks.machine import machine_info

    if repeats < 3:
        _fail("--repeats must be >= 3 for a median and a range")
    check_paths({"--json": json_path, "--md": md_path})
    segs = [None if v.strip() == "all" else _int_list(v, "segments")[0] for v in segments.split(",") if v.strip()]
    dtypes = [d.strip() for d in dtype.split(",") if d.strip()]
    if not segs or not dtypes or any(d not in ("float32", "float64") for d in dtypes):
        _fail(f"--segments {segments!r} --dtype {dtype!r}: segments are integers or 'all'; dtypes float32, float64")
    spec = [t.strip() for t in threads.split(",") if t.strip()]
    if not spec or any(t != "all" and not t.isdigit() or t == "0" for t in spec):
        _fail(f"--threads {threads!r}: use 1, all, or a list such as 1,all")
    grid, skipped = floor.cells(_int_list(batch, "batch"), _int_list(n_fft, "n-fft"), segs, dtypes,
                                [0 if t == "all" else int(t) for t in spec], parse_memory(max_bytes, 1, "--max-bytes"))
    info = machine_info()
    console.print(f"{info['cpu']}, {info['cores']} cores; {info['versions']}")
    for s in skipped:
        err.print(f"left out: batch {s['batch']}, n_fft {s['n_fft']}: {s['why']}", highlight=False)
    results = []
    for res in floor.run(grid, repeats, progress=lambda s: err.print(s, highlight=False)):
        results.append(res)
        table = Table(title=f"{res['threads_used']} thread(s), {res['dtype']}, batch {res['batch']}, n_fft "
                            f"{res['n_fft']}, {res['n_seg']} segments")
        for col in ("row", "median ms", "min-max ms", "CPU ms", "/ best FFT", "x scipy", "input GB/s"):
            table.add_column(col, justify="right")
        for r in res["rows"]:
            table.add_row(r["row"], f"{r['median_ms']:.3f}", f"{r['min_ms']:.3f}-{r['max_ms']:.3f}",
                          f"{r['cpu_median_ms']:.3f}", f"{r['over_fft']:.2f}", f"{r['x_scipy']:.1f}",
                          f"{r['input_gbps']:.2f}")
        console.print(table)
    _write_json(json_path, {"machine": info, "repeats": repeats, "cells": results, "skipped": skipped})
    write_output(md_path, floor.markdown_table(results), "--md")


@bench_app.command("first-use")
def bench_first_use(
    batch: int = typer.Option(1024, "--batch", help="Signals per call."),
    length: int = typer.Option(384, "--length", help="Samples per signal (n_fft 256, 2 segments)."),
    kernels: bool = typer.Option(True, "--kernels/--no-kernels", help="Then compile each other kernel family once."),
    limit: float = typer.Option(600.0, "--limit", help="Seconds to wait for auto to run fused-cpu."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every figure and compile as JSON."),
) -> None:
    """A fresh machine's first use, in a child process with empty numba and welchpeaks caches:
    import, the first call, auto's calls until fused-cpu runs, then each other kernel family;
    every numba compile timed (wall, with and without the kernels compiled inside it) beside the
    process's CPU time. Wall-clock figures: run it on a quiet machine."""
    from welchpeaks.bench.first_use import run
    from welchpeaks.machine import machine_info

    if batch < 1 or length < 384 or not 0 < limit <= 86400:
        _fail("--batch must be >= 1, --length >= 384 (2 segments of 256) and --limit in (0, 86400] seconds")
    check_paths({"--json": json_path})
    info = machine_info()
    console.print(f"{info['cpu']}, {info['cores']} cores; load {os.getloadavg()[0]:.2f}", highlight=False)
    try:
        res = run(batch, length, limit=limit, kernels=kernels, progress=lambda s: err.print(s, highlight=False))
    except (RuntimeError, OSError) as exc:
        _fail(str(exc), 1)
    first = res["first_call"]
    console.print(f"import {res['import_s']:.2f} s; first call {first['s']:.2f} s ({first['strategy']}); "
                  f"CPU {res['process_cpu_s']:.1f} s in the program and {res['measurer_cpu_s']:.1f} s in the "
                  f"detached first measurement; the program's numba compiles {res['compile_self_s']:.1f} s",
                  highlight=False)
    table = Table(title="phases (from the first call)")
    for col in ("phase", "wall s", "CPU s"):
        table.add_column(col, justify="right")
    for ph in res["phases"]:
        table.add_row(ph["phase"], "-" if ph["wall_s"] is None else f"{ph['wall_s']:.1f}",
                      "-" if ph["cpu_s"] is None else f"{ph['cpu_s']:.1f}")
    console.print(table)
    table = Table(title="kernels compiled (top level: what a call launches)")
    for col in ("kernel", "thread", "start s", "compile s"):
        table.add_column(col, justify="right")
    for e in res["top_level"]:
        if e["wall_s"] >= 0.5:
            table.add_row(e["kernel"], e["thread"], f"{e['start_s']:.1f}", f"{e['wall_s']:.1f}")
    console.print(table)
    for line in res["notices"]:
        console.print(f"said: {line}", markup=False, highlight=False, soft_wrap=True)
    _write_json(json_path, {"machine": info, **res})


@bench_app.command("find-peaks")
def bench_find_peaks(
    rows: int = typer.Option(8192, "--rows", help="Rows per call."),
    n: int = typer.Option(1025, "--n", help="Samples per row (1025: the bins of n_fft 2048)."),
    k: int = typer.Option(16, "--k", help="Peaks kept per row; 0: every peak (k=None)."),
    repeats: int = typer.Option(5, "--repeats", help="Timed runs of each (median and min-max)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the figures and machine info as JSON."),
) -> None:
    """welchpeaks.find_peaks on a batch against a Python loop of scipy.signal.find_peaks with the
    same arguments, in one run; also checks that both find the same peaks."""
    from welchpeaks.bench.find_peaks import run
    from welchpeaks.machine import machine_info

    if rows < 1 or n < 3 or k < 0 or repeats < 1:
        _fail("--rows and --repeats must be >= 1, --k >= 0 (0: every peak) and --n >= 3")
    check_paths({"--json": json_path})
    res = run(rows, n, k or None, repeats, progress=lambda s: err.print(s, highlight=False))
    table = Table(title=f"find_peaks: {rows} rows of {n}, k {k or 'None (every peak)'}, medians of {repeats} "
                        "(min-max)")
    for col in ("filters", "welchpeaks ms", "scipy loop ms", "speed-up", "same peaks"):
        table.add_column(col, justify="right")
    for r in res["results"]:
        w, s_ = r["welchpeaks"], r["scipy_loop"]
        table.add_row(r["config"], f"{w['median_s'] * 1e3:.1f} ({w['min_s'] * 1e3:.1f}-{w['max_s'] * 1e3:.1f})",
                      f"{s_['median_s'] * 1e3:.0f} ({s_['min_s'] * 1e3:.0f}-{s_['max_s'] * 1e3:.0f})",
                      f"{r['speedup']:.1f}x", "yes" if r["same_peaks"] else "NO")
    console.print(table)
    _write_json(json_path, {"machine": machine_info(), **res})


@bench_app.command("measures")
def bench_measures(
    batch: int = typer.Option(8192, "--batch", help="Signals per call."),
    n_fft: int = typer.Option(256, "--n-fft", help="Segment length."),
    segments: int = typer.Option(2, "--segments", help="Welch segments per signal."),
    k: int = typer.Option(16, "--k", help="Peaks per signal."),
    repeats: int = typer.Option(7, "--repeats", help="Timed rounds (median and min-max)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the figures and machine info as JSON."),
) -> None:
    """What interp=, edges=, scipy's filters and the per-peak measures cost welch_peaks, against
    the fused-cpu pass as it was before them, in one run, round robin."""
    from welchpeaks.bench.measures import run
    from welchpeaks.machine import machine_info

    if min(batch, k, repeats, segments) < 1 or n_fft < 4:
        _fail("--batch, --k, --segments and --repeats must be >= 1 and --n-fft >= 4")
    check_paths({"--json": json_path})
    res = run(batch, n_fft, segments, k, repeats, progress=lambda s: err.print(s, highlight=False))
    table = Table(title=f"welch_peaks: {batch} x {n_fft}, {segments} segments, k {k}, medians of {repeats} (min-max)")
    for col in ("call", "ran", "ms", "ratio"):
        table.add_column(col, justify="right")
    for r in res["results"]:
        table.add_row(r["call"], r["strategy"], f"{r['median_ms']:.1f} ({r['min_ms']:.1f}-{r['max_ms']:.1f})",
                      f"{r['ratio_to_before']:.2f}x")
    console.print(table)
    _write_json(json_path, {"machine": machine_info(), **res})


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM as an exit: the command's clean-up runs."""
    raise SystemExit(128 + signum)


@bench_app.command("picker")
def bench_picker(
    ctx: typer.Context,
    batch: Optional[str] = typer.Option(None, "--batch", help="Batches [default: 1,32,256,1024,8192,32768]."),
    n_fft: Optional[str] = typer.Option(None, "--n-fft", help="Segment lengths [default: 64,256,1024,4096]."),
    k: Optional[str] = typer.Option(None, "--k", help="Peaks per signal [default: 4,16,64]."),
    segments: Optional[str] = typer.Option(None, "--segments", help="Segments; 'all' for all that fit (rows of 8) "
                                                                    "[default: 2]."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, float64 or both [default: float32]."),
    filters: bool = typer.Option(False, "--filters", help="Also each cell with filters and measures (prominence 0, "
                                                          "the SNR measure)."),
    long: Optional[str] = typer.Option(None, "--long", help="Cells of long rows, all segments, n_fft 1024: "
                                                            "ROWSxSAMPLES,... (e.g. 16x4000000,64x10000000)."),
    wide: bool = typer.Option(False, "--wide", help="Issue 36's grid: batch 32-65536, n_fft 64-4096 and 200, "
                                                    "segments 1,2,8,all, float32 and float64, with and without filters."),
    mode: str = typer.Option("peaks", "--mode", help="peaks or bins."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (batch 1,256,8192; n_fft 64,1024; k 4,64)."),
    repeats: int = typer.Option(9, "--repeats", help="Most timed calls per execution and cell."),
    budget: float = typer.Option(2.0, "--budget", help="Seconds of timing per cell (at least 3 calls each)."),
    device: str = typer.Option("cpu", "--device", help="cpu, or cuda: the GPU executions on device data (CUDA "
                                                       "events; with TRITON_INTERPRET=1 and no GPU, CPU tensors)."),
    calibration: str = typer.Option("cached", "--calibration", help="cached: the machine's model; quiet: measure one "
                                                                    "first; loaded: measure one while --burners "
                                                                    "CPU-bound processes run (both in a private cache)."),
    loaded: bool = typer.Option(False, "--loaded", help="Short for --calibration loaded."),
    burners: Optional[int] = typer.Option(None, "--burners", help="CPU-bound processes during a loaded calibration "
                                                                  "[default: the cores]."),
    full: bool = typer.Option(False, "--full-calibration", help="With quiet/loaded: a full model, not a quick one."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write cells and summary as JSON."),
) -> None:
    """Regret and prediction quality of strategy='auto' over a grid of cells."""
    import os
    import signal
    import tempfile

    from welchpeaks.bench import picker as bp
    from welchpeaks.machine import machine_info
    from welchpeaks.plan import calibrate as cal
    from welchpeaks.plan import current_state, using
    from welchpeaks.plan.cost import set_cost_model

    check_paths({"--json": json_path})
    _check_mode(mode)
    calibration = "loaded" if loaded else calibration
    if calibration not in ("cached", "quiet", "loaded"):
        _fail(f"--calibration {calibration!r}: use cached, quiet or loaded")
    if device != "cpu" and calibration != "cached":
        _fail("--calibration quiet/loaded measures the CPU model; use it with --device cpu")
    grid: dict[str, Any] = dict(bp.WIDE_GRID if wide else bp.QUICK_GRID if quick else bp.DEFAULT_GRID)
    for name, value in (("batch", batch), ("n-fft", n_fft), ("k", k)):
        if value is not None:
            grid[name.replace("-", "_")] = _int_list(value, name)
    if segments is not None:
        grid["segments"] = [None if v.strip().lower() in ("all", "none") else _int_list(v, "segments")[0]
                            for v in segments.split(",")]
    if dtype is not None:
        grid["dtype"] = [v.strip() for v in dtype.split(",")]
        if not set(grid["dtype"]) <= {"float32", "float64"}:
            _fail(f"--dtype {dtype!r}: use float32, float64 or float32,float64")
    if filters:
        grid["filters"] = [False, True]
    if long:
        try:
            grid["long"] = [tuple(int(float(v)) for v in item.lower().split("x")) for item in long.split(",")]
            if any(len(c) != 2 or min(c) < 1 for c in grid["long"]):
                raise ValueError
        except ValueError:
            _fail(f"--long {long!r}: use ROWSxSAMPLES,... such as 16x4000000")
    cores = os.cpu_count() or 1
    if burners is not None and calibration != "loaded":
        _fail("--burners: only with --calibration loaded (or --loaded)")
    if burners is not None and not 0 <= burners <= 4 * cores:
        _fail(f"--burners {burners}: use 0 to {4 * cores} (this machine has {cores} cores)")
    doc: dict[str, Any] = {"machine": machine_info(), "calibration": calibration}
    private = None
    # the picks of the model as measured, corrected only by auto's own calls, and the corrections
    # stay in this process: a benchmark never changes the machine's model
    ctx.with_resource(using(current_state().derive(remeasure=False, persist=False)))
    results = []
    table = Table(title=f"picker on {device}, {mode}: predicted / measured ms per execution")
    for col in ("cell", "executions (pred / meas ms)", "picked", "fastest", "regret", "auto"):
        table.add_column(col, justify="right")
    previous = signal.signal(signal.SIGTERM, _terminate)  # a kill runs the clean-up below (burners, private cache)
    try:
        if calibration != "cached":  # the experiment's model never replaces the machine's
            private = tempfile.mkdtemp(prefix="welchpeaks-picker-")
            users = os.environ.get("WELCHPEAKS_CACHE_DIR")
            os.environ["WELCHPEAKS_CACHE_DIR"] = private
            set_cost_model(None)
            n = (burners if burners is not None else cores) if calibration == "loaded" else 0
            err.print(f"measuring the cost model{f' while {n} CPU-bound processes run' if n else ''} ...")
            try:
                doc["calibrate"] = bp.loaded_calibration(n, quick=not full)
            except ValueError as exc:
                _fail(str(exc))
            doc["calibrate"]["model"] = cal.describe(cal.load("cpu"))
            err.print(f"  {doc['calibrate']['seconds']} s: {doc['calibrate']['model']}", highlight=False)
        for cell in bp.cells(grid):
            try:
                r = bp.measure_cell(cell, device=device, mode=mode, repeats=repeats, budget_s=budget)
            except (ValueError, MemoryError) as exc:
                _fail(f"cell {cell}: {exc}")
            results.append(r)
            ex = "; ".join(f"{n} {r['predicted_ns'][n] / 1e6:.3g}/{r['measured'][n]['median_ms']:.3g}"
                           for n in r["predicted_ns"])
            name = (f"{r['batch']}x{r['length']} n_fft {r['n_fft']} k {r['k']} seg {r['segments'] or 'all'} "
                    f"{r['dtype']}{' filters' if r['filters'] else ''}")
            auto = f"{r['auto_ran']} {r['auto_regret']:.2f}" if "auto_ran" in r else ""
            table.add_row(name, ex, r["picked"], r["fastest"], f"{r['regret']:.2f}", auto)
            err.print(f"  {name}: regret {r['regret']:.2f}" + (f", auto {auto}" if auto else ""), highlight=False)
            if json_path is not None:  # after every cell, so an interrupted run keeps what it measured
                write_atomic(json_path, json.dumps({**doc, "grid": grid, "summary": bp.summarise(results),
                                                    "cells": results}, indent=1, default=str))
    finally:
        signal.signal(signal.SIGTERM, previous)
        if private is not None:
            import shutil

            shutil.rmtree(private, ignore_errors=True)
            if users is None:
                os.environ.pop("WELCHPEAKS_CACHE_DIR", None)
            else:
                os.environ["WELCHPEAKS_CACHE_DIR"] = users
            set_cost_model(None)  # the experiment's model is gone with its cache
    console.print(table)
    s = bp.summarise(results)
    console.print(
        f"{s['cells']} cells: regret geomean {s['regret_geomean']:.3f}, worst {s['regret_worst']:.2f} "
        f"({s['regret_worst_cell']}); predictions within [{s['band'][0]}, {s['band'][1]}]: "
        f"{s['predictions_within_band']:.0%} of {s['predictions']}"
        + (f"; auto's own calls: regret geomean {s['auto_regret_geomean']:.3f}, worst {s['auto_regret_worst']:.2f}"
           if "auto_regret_geomean" in s else ""), highlight=False)
    _write_json(json_path, {**doc, "grid": grid, "summary": s, "cells": results})


def _bench_cuda(cells: list, repeats: int, resident: str, info: dict, json_path: Optional[Path]) -> None:
    from welchpeaks.bench.gpu import time_cuda_cell, torch_device

    try:
        dev = torch_device()
    except (ValueError, ImportError) as exc:
        _fail(str(exc))
    if dev == "cuda":
        import torch

        info = {**info, "gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
    else:
        console.print("no GPU: CPU tensors through the Triton interpreter (the numbers are not a GPU's)")
    all_rows: list[dict] = []
    for i, cell in enumerate(cells):
        title = (f"{dev}, signals on the {resident}: batch {cell.batch}, n_fft {cell.n_fft}, k {cell.k}, "
                 f"segments {cell.segments}, mode {cell.mode}")
        try:
            rows = time_cuda_cell(cell, repeats, resident)
        except Exception as exc:  # noqa: BLE001 - a cell that fails as a whole is recorded; the next is timed
            rows = [{"execution": "(cell)", "batch": cell.batch, "n_fft": cell.n_fft, "k": cell.k,
                     "segments": cell.segments, "mode": cell.mode, "error": f"{type(exc).__name__}: {exc}"[:400]}]
        all_rows.extend(rows)
        table = Table(title=title)
        for col in ("execution", "median ms", "min-max ms", "GB/s", "of copy", "x torch", "first call ms"):
            table.add_column(col, justify="right")
        for r in rows:
            if "error" in r:
                table.add_row(r["execution"], f"failed: {r['error'][:60]}", *("-",) * 5)
                continue
            name = f"auto ({r['picked']})" if "picked" in r else r["execution"]
            table.add_row(name, f"{r['median_ms']:.3f}", f"{r['min_ms']:.3f}-{r['max_ms']:.3f}",
                          f"{r['algorithm_gbps']:.1f}", f"{r['of_copy_bandwidth']:.2f}", f"{r['speedup_vs_torch']:.1f}",
                          f"{r['first_call_ms']:.0f}" if r.get("first_call_ms") is not None else "-")
        console.print(table)
        # after every cell: what was measured survives a failure or a time limit later on
        _write_json(json_path, {"machine": info, "device": dev, "resident": resident, "rows": all_rows,
                                "cells_done": i + 1, "cells": len(cells)})
