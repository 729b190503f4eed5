"""The ``welchpeaks`` commands: peaks, demo, explain, calibrate, strategies (``track`` from
:mod:`~welchpeaks.cli.scale`, ``gpu-check`` from :mod:`~welchpeaks.cli.gpu`)."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from welchpeaks.cli import gpu, scale
from welchpeaks.cli.common import (app_options, check_parameters, console, err, filter_options, notices_on_console,
                                   finish_background_calibration, option, parse_choice, parse_segments, parse_window,
                                   pyplot_for, write_output)
from welchpeaks.cli.common import fail as _fail
from welchpeaks.cli.paths import check_paths
from welchpeaks.memory import MIN_BUDGET_BYTES
from welchpeaks.result import freq_column

app = typer.Typer(**app_options("The strongest spectral peaks of batches of signals (Welch PSD + top-K)."))


def _print_version(value: bool) -> None:
    if value:
        from welchpeaks import __version__

        typer.echo(f"welchpeaks {__version__}")
        raise typer.Exit()


@app.callback()
def _command_line(ctx: typer.Context,
                  version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                               help="Print welchpeaks' version and exit.")) -> None:
    """The strongest spectral peaks of batches of signals (Welch PSD + top-K)."""
    from welchpeaks import plan

    # the command plans with its own state over the one it runs in (its caches and models), that
    # never spends the run measuring the machine again; handed back when the command ends
    ctx.with_resource(plan.using(plan.current_state().derive(remeasure=False)))
    ctx.with_resource(notices_on_console())
@app.command()
def peaks(
    files: list[Path] = typer.Argument(..., help=".npy (1-D or rows), .wav (channels) or .csv (one signal per row)"),
    k: int = option("k"),
    n_fft: Optional[int] = option("n_fft"),
    resolution_hz: Optional[float] = option("resolution_hz"),
    hop: Optional[int] = option("hop"),
    segments: Optional[str] = option("segments", help="Segments per signal: a number, ultra/fast/reference, or all "
                                                      "[default: all that fit]."),
    fs: Optional[float] = option("fs", help="Sample rate in Hz of files without one (.npy, .csv); a .wav's own rate "
                                            "wins, and a different --fs for it is an error [default: from .wav, else "
                                            "none]."),
    window: str = option("window"),
    detrend: str = option("detrend"),
    scaling: str = option("scaling"),
    mode: str = option("mode"),
    min_distance: int = option("min_distance"),
    interp: str = option("interp"),
    edges: bool = option("edges"),
    height: Optional[float] = option("height"),
    prominence: Optional[float] = option("prominence"),
    snr_db: Optional[float] = option("snr_db", help="Least SNR in dB over the row's median PSD."),
    max_pvalue: Optional[float] = option("max_pvalue"),
    measures: Optional[str] = option("measures"),
    strategy: str = option("strategy"),
    device: str = option("device"),
    precision: str = option("precision"),
    layout: Optional[str] = option("layout"),
    model: Optional[Path] = option("model", help="Learned butterfly weights (welchpeaks learn): run with --strategy "
                                                 "learned, or let auto race it."),
    min_recall: float = option("min_recall"),
    nan_policy: str = option("nan_policy"),
    dtype: Optional[str] = option("dtype"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write all results as JSON here."),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Write one line per peak as CSV here."),
    show: int = typer.Option(8, "--show", help="Signals per file to print in the table."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw the first signals of each file (up to 4) as a "
                                                           "PNG here: their PSD and peaks (the plot extra)."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Out of core: read FILES chunk by chunk and write results as they finish (.parquet, "
                            ".zarr, .csv, .jsonl; one row per peak), resumable; nothing is printed or held."),
    memory: str = typer.Option("1GB", "--memory", help="With --out: memory bound of the run."),
    workers: Optional[int] = typer.Option(None, "--workers", help="With --out: a local dask cluster of N processes."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="With --out: a dask cluster, tcp://HOST:PORT."),
    quiet: bool = typer.Option(False, "--quiet", help="With --out: no progress bar."),
) -> None:
    """Find the k strongest spectral peaks of every signal in FILES (.npy, .wav, .csv; with --out
    also .zarr, file.h5:/dataset, .flac/.ogg, folders and globs of sound files)."""
    from welchpeaks import welch_peaks
    from welchpeaks.loaders import SignalFileError, load_signals

    kw = dict(n_fft=n_fft, resolution_hz=resolution_hz, k=k, hop=hop, segments=parse_segments(segments),
              window=parse_window(window),
              detrend=parse_choice("detrend", detrend), scaling=parse_choice("scaling", scaling),
              mode=parse_choice("mode", mode), min_distance=min_distance, strategy=strategy,
              nan_policy=parse_choice("nan_policy", nan_policy), precision=parse_choice("precision", precision),
              dtype=parse_choice("dtype", dtype), interp=parse_choice("interp", interp), edges=edges,
              **filter_options(height, prominence, snr_db, measures, max_pvalue))
    check_parameters(kw, fs)
    if out is not None:
        if json_path is not None or csv_path is not None or model is not None or device != "cpu" or layout is not None \
                or plot is not None:
            _fail("--out writes the results itself; drop --json/--csv/--plot/--model/--device/--layout")
        scale.run_job("peaks", [str(f) for f in files], kw, fs, out, memory, workers, scheduler, quiet)
        return
    check_paths({"--json": json_path, "--csv": csv_path, "--plot": plot}, files, reads=[model])
    plt = pyplot_for(plot)
    net = None
    if model is not None:
        from welchpeaks.backends.learned_exec import load_model

        try:
            net = load_model(model)
        except (ValueError, TypeError) as exc:
            _fail(f"--model {model}: {exc}")
    results, signals = {}, {}
    for path in files:
        try:
            data, file_fs = load_signals(path)
        except SignalFileError as exc:
            _fail(str(exc))
        if file_fs is not None and fs is not None and file_fs != fs:
            _fail(f"{path}: the file's own sample rate is {file_fs:g} Hz but --fs is {fs:g} Hz; drop --fs (it is for "
                  "files without a rate) or resample the file")
        rate = file_fs if file_fs is not None else fs
        try:
            res = welch_peaks(data, fs=rate, device=parse_choice("device", device), layout=layout, model=net,
                              min_recall=min_recall, **kw)
        except (ValueError, TypeError) as exc:
            _fail(f"{path}: {exc}")
        results[str(path)] = res
        if plot is not None:
            signals[str(path)] = data
    for name, res in results.items():
        slots = res.bins.shape[-1]
        bins = res.bins.reshape(-1, slots)
        unit = "Hz" if res.params["fs"] is not None else "cycles/sample"
        table = Table(title=f"{name}: {bins.shape[0]} signal(s), strategy {res.strategy}")
        extra = {n: v.reshape(-1, slots) for n, v in res.measures.items()}
        for col in ("signal", "rank", "bin", f"freq ({unit})", "power", *extra):
            table.add_column(col, justify="right")
        freqs = res.freqs.reshape(-1, slots)
        power = res.power.reshape(-1, slots)
        for sig in range(min(show, bins.shape[0])):
            for r in range(slots):
                if bins[sig, r] < 0:
                    continue
                table.add_row(str(sig), str(r), str(bins[sig, r]), f"{freqs[sig, r]:.4f}", f"{power[sig, r]:.4g}",
                              *(f"{v[sig, r]:.4g}" for v in extra.values()))
        console.print(table)
        if bins.shape[0] > show:
            console.print(f"({bins.shape[0] - show} more signal(s) not shown; use --json or --csv)")
    write_output(json_path, json.dumps({n: r.to_dict() for n, r in results.items()}), "--json")
    if csv_path is not None:
        out = io.StringIO()
        w = csv.writer(out)
        names = sorted({n for res in results.values() for n in res.measures})  # one header for every file
        # the columns of the long form and of --out files: rank 0 the strongest; freq in Hz where
        # every file has a rate, else freq_cycles (cycles per sample) for all
        every_fs = all(res.params["fs"] is not None for res in results.values())
        w.writerow(["file", "signal", "rank", "bin", freq_column(every_fs), "power", *names])
        for name, res in results.items():
            slots = res.bins.shape[-1]
            bins, freqs, power = (a.reshape(-1, slots) for a in (res.bins, res.freqs, res.power))
            extra = [res.measures[n].reshape(-1, slots) if n in res.measures else None for n in names]
            if not every_fs and res.params["fs"] is not None:
                freqs = freqs / res.params["fs"]
            for sig in range(bins.shape[0]):
                for r in range(slots):
                    if bins[sig, r] >= 0:
                        w.writerow([name, sig, r, int(bins[sig, r]), repr(float(freqs[sig, r])),
                                    repr(float(power[sig, r])),
                                    *("" if v is None else repr(float(v[sig, r])) for v in extra)])
        write_output(csv_path, out.getvalue(), "--csv")
    if plt is not None:
        _plot_peaks(plt, plot, results, signals)
    finish_background_calibration()


def _plot_peaks(plt: Any, path: Path, results: dict, signals: dict) -> None:
    """One panel per signal, the first 4 of each file: its PSD and peaks (PeakResult.plot)."""
    panels = [(name, i) for name, res in results.items() for i in range(min(4, int(np.prod(res.shape[:-1]))))]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3 * len(panels)), squeeze=False)
    for ax, (name, i) in zip(axes[:, 0], panels):
        results[name].plot(signals[name], ax=ax, index=i)
        ax.set_title(f"{Path(name).name}, {ax.get_title()}", fontsize=9)
    fig.tight_layout()
    write_output(path, lambda tmp: fig.savefig(tmp, dpi=90, format="png"), "--plot")


app.command()(scale.track)
app.command("gpu-check")(gpu.gpu_check)


def _estimator_errors(x: np.ndarray, res: Any, true: np.ndarray, fs: float, n_fft: int) -> None:
    """The demo's frequency error per sub-bin estimator (docs/accuracy.md), on the peaks found
    within a bin of a true tone, each refined from the same Welch PSD."""
    import welchpeaks
    from welchpeaks.estimators import interp_offset, resolve_interp

    _, p = welchpeaks.welch(x.astype(np.float64), fs=fs, nperseg=n_fft)
    j = res.bins.astype(np.int64)
    inner = (j > 0) & (j < p.shape[1] - 1)
    jj = np.clip(j, 1, p.shape[1] - 2)
    a, b, c = (np.take_along_axis(p, jj + d, 1) for d in (-1, 0, 1))
    bin_hz = fs / n_fft
    dist = np.abs(j[:, :, None] - true[:, None, :] / bin_hz)  # [signal, peak, tone], bins
    target = np.take_along_axis(true, dist.argmin(axis=2), 1) / bin_hz
    use = inner & (dist.min(axis=2) < 1.0)
    parts = []
    window = welchpeaks.WelchPeaks(n_fft=n_fft).params.window_array
    for name in ("auto", "power-parabola", "log-parabola", "none"):
        method, alpha = resolve_interp(name, window)
        err = np.abs(j + interp_offset(a, b, c, method, alpha, n_fft, j=jj) - target)[use]
        label = f"{name} ({method})" if name == "auto" else name
        parts.append(f"{label} {np.median(err):.4f}")
    console.print("frequency error by sub-bin estimator, median over "
                  f"{int(use.sum())} peaks (bins): " + ", ".join(parts) + "; see docs/accuracy.md")


@app.command()
def demo(
    batch: int = typer.Option(1024, "--batch", help="Signals to generate."),
    tones: int = typer.Option(3, "--tones", help="Tones per signal."),
    seed: int = typer.Option(0, "--seed"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG of a few PSDs with their peaks."),
) -> None:
    """Find known tones in noisy demo signals and report how well they were recovered."""
    import welchpeaks
    from welchpeaks.demo import tones_in_noise

    fs, n_fft = 8000.0, 256
    if batch < 1 or tones < 1:
        _fail("--batch and --tones must be >= 1")
    check_paths({"--plot": plot})  # before the work: a bad path or a missing extra must not cost the run
    plt = pyplot_for(plot)
    x, true = tones_in_noise(batch=batch, n_tones=tones, fs=fs, n_fft=n_fft, seed=seed)
    wp = welchpeaks.WelchPeaks(n_fft=n_fft, k=tones, segments=None, fs=fs)
    wp(x[:1])  # first call compiles or loads the cached kernel
    t0 = time.perf_counter()
    res = wp(x)
    ms = (time.perf_counter() - t0) * 1e3
    found = np.sort(res.freqs, axis=1)
    err_bins = np.abs(found - true) / (fs / n_fft)
    hit = err_bins < 0.5
    table = Table(title=f"{batch} signals of {x.shape[1]} samples at {fs:g} Hz, {tones} tones each in noise")
    table.add_column("signal", justify="right")
    table.add_column("true (Hz)")
    table.add_column("detected (Hz)")
    for s in range(min(5, batch)):
        table.add_row(str(s), ", ".join(f"{f:.1f}" for f in true[s]), ", ".join(f"{f:.1f}" for f in found[s]))
    console.print(table)
    console.print(
        f"recall {hit.mean():.1%} of {hit.size} tones; median error {np.median(err_bins):.3f} bin "
        f"({np.median(err_bins) * fs / n_fft:.2f} Hz); {ms:.2f} ms for the batch with strategy {res.strategy}"
    )
    _estimator_errors(x, res, true, fs, n_fft)
    finish_background_calibration()
    if plot is not None:
        f, p = welchpeaks.welch(x[:4], fs=fs, nperseg=n_fft)
        fig, axes = plt.subplots(len(p), 1, figsize=(8, 2.2 * len(p)), sharex=True)
        for i, ax in enumerate(np.atleast_1d(axes)):
            ax.semilogy(f, p[i], lw=0.8)
            ax.plot(res.freqs[i], res.power[i], "rv", label="peaks")
            for t in true[i]:
                ax.axvline(t, color="g", lw=0.6, ls="--")
            ax.set_ylabel(f"signal {i}\nPSD (V²/Hz)")
        np.atleast_1d(axes)[-1].set_xlabel("frequency (Hz)")
        fig.suptitle("Welch PSD, detected peaks (red) and true tones (green)")
        fig.tight_layout()
        write_output(plot, lambda tmp: fig.savefig(tmp, dpi=100, format="png"), "--plot")


@app.command()
def explain(
    ctx: typer.Context,
    source: Optional[str] = typer.Argument(None, help="A file, folder or glob (what open_signals reads): explain the "
                                                      "plan of welch_peaks over it, part by part."),
    batch: int = typer.Option(8192, help="Signals per call (without a FILE)."),
    length: Optional[int] = typer.Option(None, "--length", help="Samples per signal (without a FILE) [default: one "
                                                               "frame of the segments]."),
    n_fft: Optional[int] = option("n_fft"),
    k: int = option("k"),
    # explain plans a WelchPeaks executor, whose default layout is 2 segments, in float32
    segments: str = option("segments", default="2", help="Segments per signal: a number, ultra/fast/reference, or "
                                                         "all (with a FILE, all reads each whole signal)."),
    frame_segments: int = option("frame_segments", help="With it or --frame-hop: explain peaks over time (as track "
                                                        "runs), frames of this many segments."),
    frame_hop: Optional[int] = option("frame_hop"),
    mode: str = option("mode"),
    dtype: str = option("dtype", default="float32", help="Precision of the signals planned for (without a FILE)."),
    device: str = option("device"),
    window: str = option("window"),
    detrend: str = option("detrend"),
    scaling: str = option("scaling"),
    height: Optional[float] = option("height", help="Plan scipy's filters: least PSD height."),
    prominence: Optional[float] = option("prominence", help="Plan scipy's filters: least prominence."),
    snr_db: Optional[float] = option("snr_db", help="Plan the SNR minimum (dB over the median)."),
    measures: Optional[str] = option("measures"),
    bound: Optional[str] = typer.Option(None, "--max-memory", help="The call's working-memory bound "
                                             "(max_memory=), e.g. 64MiB [default: half the available memory; a "
                                             "file's blocks 64 MiB]. (peaks/track --out --memory M compute in units "
                                             "of 4 MiB with a quarter of M.)"),
    as_json: bool = typer.Option(False, "--json", help="Print the full breakdown as JSON."),
) -> None:
    """Show how strategy='auto' would run a call, and the cost terms behind the choice (with
    filters or measures: the graphs that end in scipy's find_peaks selection); with a FILE, how
    each of its parts is read and computed; with --frame-segments or --frame-hop, how frames over
    time are."""
    import welchpeaks

    # the options given on the command line (not by their defaults)
    given = {name for name in ("batch", "length", "dtype", "frame_segments", "frame_hop")
             if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"}
    frames = bool(given & {"frame_segments", "frame_hop"})
    if source is not None and given & {"batch", "length", "dtype"}:
        _fail("--batch, --length and --dtype describe signals in memory; a FILE is explained with its own shape and "
              "dtype: drop them")
    for flag, value in (("--batch", batch), ("--length", length)):
        if value is not None and value < 1:
            _fail(f"{flag} {value}: pass a whole number >= 1")
    budget = None if bound is None else scale.parse_memory(bound, MIN_BUDGET_BYTES, "--max-memory")
    kw = dict(n_fft=n_fft, k=k, mode=parse_choice("mode", mode), device=parse_choice("device", device),
              window=parse_window(window), detrend=parse_choice("detrend", detrend),
              scaling=parse_choice("scaling", scaling), max_memory=budget,
              **filter_options(height, prominence, snr_db, measures))
    try:
        if frames:
            if source is not None:
                _fail("explain --frame-segments plans frames of signals in memory; drop the FILE (pass --length)")
            if kw.pop("device") != "cpu":
                _fail("explain --frame-segments plans frames of arrays on the CPU; drop --device")
            tr = welchpeaks.Tracker(frame_segments=frame_segments, frame_hop=frame_hop, **kw)
            info = tr.explain(batch=batch, length=length, dtype=parse_choice("dtype", dtype))
        elif source is not None:
            src, = scale.open_sources([source], None)[0]
            wp = welchpeaks.WelchPeaks(segments=parse_segments(segments), **kw)
            info = wp.explain(source=src)
        else:
            wp = welchpeaks.WelchPeaks(segments=parse_segments(segments), dtype=parse_choice("dtype", dtype), **kw)
            seg = wp.params.segments or 1
            info = wp.explain(batch=batch, length=wp.params.frame_length(seg) if length is None else length)
    except (ValueError, TypeError) as exc:
        _fail(str(exc))
    if as_json:
        console.print_json(json.dumps(info, default=str))
        return
    if frames:
        console.print(f"frames of {info['frame']} samples every {info['frame_step']}, {info['frames']} per signal; "
                      f"mode [bold]{info['mode']}[/] ({info['execution']}): {info['why']}", highlight=False)
        if "plan" in info:
            _print_call_plan(info["plan"], "each block of frames as rows", tr.params.to_dict())
    elif source is not None:
        for part in info["parts"]:
            console.print(f"{part['name']}: {part['rows']} signal(s) of {part['samples']} samples, {part['blocks']} "
                          f"block(s); mode [bold]{part['mode']}[/] ({part['execution']}): {part['why']}",
                          highlight=False)
            if "plan" in part:
                _print_call_plan(part["plan"], "its first block", info["params"])
    else:
        _print_call_plan(info, "a call", info["params"])


def _print_call_plan(info: dict[str, Any], what: str, params: dict[str, Any]) -> None:
    """A call's explanation (the planner's dict) as a table of the executions' costs, the pick,
    its fusion and its mode (``params``: the call's parameters, as ``PeakParams.to_dict``)."""
    cm = info["cost_model"]
    table = Table(title=f"{what}: {info['batch']} signal(s) of {info['length']} samples, n_fft {params['n_fft']}, k "
                        f"{params['k']}, {info['segments']} segment(s), {params['mode']}, {info['compute_dtype']} on "
                        f"{info['device']} ({cm['status']} cost model)")
    for col in ("execution", "graph it runs", "launches", "traffic MB", "nodes ms", "total ms", "fused"):
        table.add_column(col, justify="left" if col in ("graph it runs", "fused") else "right")
    unavailable = []
    for name, c in info["costs"].items():
        if not np.isfinite(c["total_ns"]):
            unavailable.append(f"{name} ({c.get('why', '')})")
            continue
        ops = [op for op in c["graph"] if op not in ("input", "constant")]
        table.add_row(
            ("* " if name == info["strategy"] else "") + name, " > ".join(ops), str(c["io"]["kernel_launches"]),
            f"{c['io']['device_traffic_bytes'] / 1e6:,.2f}", f"{sum(c['nodes_ns'].values()) / 1e6:.3f}",
            f"{c['total_ns'] / 1e6:.3f}", c["fusion"]["fused"] or "no",
        )
    console.print(table)
    if unavailable:
        console.print("unavailable: " + "; ".join(unavailable), highlight=False)
    console.print(f"fusion of {info['strategy']}: {info['fusion']['reason']}", highlight=False)
    console.print(f"picked [bold]{info['strategy']}[/]: {info['why']}")
    console.print(f"mode [bold]{info['mode']}[/]: {info['mode_why']}", highlight=False)


@app.command("compile")
def compile_kernels(
    processes: int = typer.Option(0, "--processes", help="Compiles at a time [default: one per core]."),
) -> None:
    """Compile the numba kernels ahead of their first call, side by side in processes of their
    own (once per machine and install: numba caches them on disk; minutes on 2 cores)."""
    from welchpeaks.warm import warm

    if processes < 0:
        _fail(f"--processes {processes}: use a positive count, or 0 for one per core")
    res = warm(processes or None, progress=lambda s: err.print(s, highlight=False))
    failed = {n: r for n, r in res["jobs"].items() if r["exit"] != 0}
    for name, r in res["jobs"].items():
        console.print(f"{name}: {r['s']:.1f} s" + (f" (failed: {r['error']})" if r["exit"] else ""), markup=False,
                      highlight=False)
    console.print(f"compiled in {res['wall_s']:.1f} s with {res['processes']} process(es) at a time", highlight=False)
    if failed:
        _fail(f"{len(failed)} warm-up job(s) failed; those kernels compile at their first call instead", 1)


@app.command()
def calibrate(
    device: str = typer.Option("cpu", help="Device to measure (cpu; cuda needs the gpu extra and a GPU)."),
    quick: bool = typer.Option(False, "--quick", help="A small grid: a few seconds once the kernels are compiled."),
    status: bool = typer.Option(False, "--status", help="Say which model is in use, when and under what load it "
                                                        "was measured, and measure nothing."),
    unless_cached: bool = typer.Option(False, "--unless-cached", hidden=True,
                                       help="Measure nothing when a usable model is cached once the lock is held "
                                            "(the detached first measurement: another may have finished meanwhile); "
                                            "with --quick, compile the fused pass's two precisions side by side first."),
) -> None:
    """Measure this machine's cost model and cache it for the picker."""
    from rich.progress import Progress

    from welchpeaks.plan import calibrate as cal
    from welchpeaks.plan.cost import set_cost_model

    if device not in ("cpu", "cuda"):
        _fail(f"--device {device!r}: use cpu or cuda")
    if status:
        model = cal.load(device, quiet=True)
        console.print(cal.describe(model, device), markup=False, highlight=False, soft_wrap=True)
        console.print(f"cache: {cal.cache_path(device)}", markup=False, highlight=False, soft_wrap=True)
        return
    lock = cal.MachineLock(device)
    if not lock.acquire():
        err.print(f"another process is measuring the {device} model; waiting for it to finish ...")
        lock.acquire(block=True)
    if unless_cached and cal.load(device, quiet=True) is not None:
        lock.release()
        console.print(f"the {device} cost model is cached already: {cal.cache_path(device)}", markup=False,
                      highlight=False)
        return
    if device == "cuda":
        try:
            import torch
        except ImportError:
            _fail("--device cuda needs torch: pip install 'welchpeaks[gpu]'")
        if not torch.cuda.is_available():
            _fail("--device cuda: torch sees no CUDA device here (until a GPU is measured, the CUDA executions are "
                  "ranked by a default model from published figures)")
    path = cal.cache_path(device)
    try:  # check the cache's place before measuring, so a bad place never costs the measurement
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"cannot create the cache directory {str(path.parent)!r} ({exc.strerror or exc}); set "
              "WELCHPEAKS_CACHE_DIR to a writable directory")
    check_paths({"the cost-model cache (WELCHPEAKS_CACHE_DIR)": path})
    t0 = time.perf_counter()
    try:
        if unless_cached and quick and device == "cpu":  # the detached first measurement: the fused pass's
            from welchpeaks.warm import warm          # two compiles side by side, then the timings load them

            warm(jobs=["fused pass, float32", "fused pass, float64"], progress=lambda s: err.print(s, highlight=False))
        model = _measure(device, quick, Progress)
        try:  # cached before the lock goes: a process waiting on it finds the model, and measures nothing
            path = cal.save(model)
        except OSError as exc:
            _fail(f"cannot write the cost-model cache {str(path)!r} ({exc.strerror or exc})")
    finally:
        lock.release()
    set_cost_model(model, device)
    console.print(
        f"measured the {device} cost model in {time.perf_counter() - t0:.1f} s: launch {model.dispatch_ns:,.0f} ns, "
        f"round trip {model.roundtrip_ns:,.0f} ns, memory {model.memory_bw:.1f} GB/s, {model.threads} threads; "
        f"cached in {path}"
    )
    failures = model.meta.get("failures") or []
    if failures:
        err.print(f"[yellow]{model.label}: what failed was taken from the default model (published figures):[/]")
        for f in failures[:8]:
            err.print(f"  {f['step']}: {f['error']}", markup=False, highlight=False)
        if len(failures) > 8:
            err.print(f"  ... and {len(failures) - 8} more (the model's meta.failures lists them all)")
    if model.under_load() is not None or model.meta.get("provisional"):
        busy = model.under_load() or model.meta.get("foreign_load_max") or 0
        err.print(f"[yellow]other processes kept {busy:g} cores busy while measuring: each point was taken from its "
                  f"least disturbed samples, {len(model.meta.get('provisional') or [])} of them stayed provisional "
                  "(parallel kernels estimated from one thread); the next program that uses the model measures it "
                  "again once the machine is quiet, or run `welchpeaks calibrate` again when it is idle[/]",
                  soft_wrap=True)


def _measure(device: str, quick: bool, progress: Any) -> Any:
    """The measurement of ``welchpeaks calibrate``, with a progress bar."""
    from welchpeaks.plan import calibrate as cal
    from welchpeaks.plan import measure

    with progress(console=err, transient=True) as bar:
        if device == "cuda":
            from welchpeaks.plan import calibrate_cuda

            task = bar.add_task("calibrating cuda", total=calibrate_cuda.steps(quick))
            return calibrate_cuda.measure_cuda(
                quick=quick, progress=lambda what: bar.update(task, advance=1, description=what))
        task = bar.add_task("calibrating cpu", total=measure.steps(quick))
        return cal.measure_model(quick=quick, progress=lambda what: bar.update(task, advance=1, description=what))


@app.command()
def strategies() -> None:
    """List the executions and whether each is usable here."""
    from welchpeaks import backends

    table = Table(title="executions")
    for col in ("name", "device", "status", "what it does"):
        table.add_column(col)
    for name in backends.names():
        ex = backends.get(name)
        why = ex.unavailable_reason()
        # (escaped: an install hint's "[gpu]" is text, not rich markup)
        table.add_row(name, ex.device, escape("available" if why is None else f"unavailable: {why}"),
                      escape(ex.description))
    console.print(table)



if __name__ == "__main__":
    app()

