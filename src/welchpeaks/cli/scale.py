"""The out-of-core side of the command line: ``welchpeaks track`` and ``welchpeaks peaks --out``
over sources (``.npy``, ``.zarr``, ``file.h5:/dataset``, sound files, directories, globs),
with a progress bar, a memory bound, resume, and an optional dask cluster."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from welchpeaks.cli.common import (check_parameters, console, err, filter_options, finish_background_calibration,
                                   option, parse_choice, parse_window, pyplot_for)
from welchpeaks.cli.common import fail as _fail
from welchpeaks.cli.job import Job, JobError, Unit, bytes_of, staging_dir
from welchpeaks.cli.paths import check_paths
from welchpeaks.memory import MIN_BUDGET_BYTES
from welchpeaks.spec import MEASURES

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "kib": 2**10, "mib": 2**20,
          "gib": 2**30}


def parse_memory(text: str, least: int = 16 * 2**20, flag: str = "--memory") -> int:
    """'1GB', '512MiB', '2e9' -> bytes (at least ``least``, 16 MiB for a job; at most 1 PiB:
    past any machine's memory, infinity included, a budget means "no limit" and is clamped there)."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", text)
    try:
        value = float(m.group(1)) * _UNITS[m.group(2).lower()] if m else None
    except (KeyError, ValueError):
        value = None
    if value is None or not value == value or value < least:
        _fail(f"{flag} {text!r}: give a size of at least {least >> 20}MiB, such as 1GB, 512MiB or 2e9 (bytes)")
    return int(min(value, 2**50))


def open_sources(files: list[str], fs: Optional[float]) -> tuple[list[Any], list[Optional[float]]]:
    """Each FILES argument opened as a source, and the sample rate each is analysed with."""
    from welchpeaks.loaders import SignalFileError
    from welchpeaks.sources import open_signals

    sources, rates = [], []
    for f in files:
        try:
            src = open_signals(f)
        except SignalFileError as exc:
            _fail(str(exc))
        if src.fs is not None and fs is not None and src.fs != fs:
            _fail(f"{f}: its own sample rate is {src.fs:g} Hz but --fs is {fs:g} Hz; drop --fs (it is for files "
                  "without a rate) or resample the file")
        sources.append(src)
        rates.append(src.fs if src.fs is not None else fs)
    return sources, rates


def _client(workers: Optional[int], scheduler: Optional[str]) -> Any:
    if workers is None and scheduler is None:
        return None
    if workers is not None and scheduler is not None:
        _fail("--workers starts a local cluster and --scheduler joins one; pass one of them")
    if workers is not None and workers < 1:
        _fail(f"--workers {workers}: pass 1 or more worker processes")
    try:
        import distributed
    except ImportError:
        _fail("--workers/--scheduler need dask's distributed: pip install 'welchpeaks[dask]'")
    try:
        if scheduler is not None:
            return distributed.Client(scheduler, timeout="20s")
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
        return distributed.Client(cluster)
    except (OSError, TimeoutError) as exc:
        _fail(f"--scheduler {scheduler}: cannot connect ({exc})")


def run_job(kind: str, files: list[str], kw: dict[str, Any], fs: Optional[float], out: Path, memory: str,
            workers: Optional[int], scheduler: Optional[str], quiet: bool = False,
            link: Optional[dict[str, Any]] = None, plot: Optional[Path] = None) -> None:
    """Run (or resume) the job and report it; every failure is a one-line error. ``plot``
    (track): a PNG of the first signal's peaks over time, drawn as the output is written."""
    check_paths({"--out": out, "--plot": plot}, files, job="--out")  # before any work
    plt = pyplot_for(plot)
    budget = parse_memory(memory)
    sources, rates = open_sources(files, fs)
    kws = [dict(kw, fs=rate, max_memory=max(MIN_BUDGET_BYTES, budget // 4)) for rate in rates]
    try:
        job = Job(kind, files, sources, kws, out, budget, link)
        if kw.get("strategy", "auto") == "auto" and not staging_dir(out).exists() and not has_cpu_model():
            err.print("measuring this machine's speeds once (about 40 s on 2 cores), so that the whole job runs the "
                      "one execution they choose", highlight=False)
        todo = job.prepare()
        if job.discarded:
            name, why = job.discarded[0]
            more = f"; and {len(job.discarded) - 1} more" if len(job.discarded) > 1 else ""
            console.print(f"discarded {len(job.discarded)} saved chunk(s) of {staging_dir(out)} that could not be "
                          f"trusted ({name}: {why}{more}); computing them again", markup=False, highlight=False,
                          soft_wrap=True)
    except (JobError, ValueError, TypeError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(_os_error(exc, out))
    points = None
    if plt is not None:
        from welchpeaks.cli.jobplot import PeaksOverTime

        points = job.watch = PeaksOverTime(job.spec["time"])
    try:
        run_prepared(job, todo, kind, sources, out, workers, scheduler, quiet)
    finally:
        job.close()
    if points is not None:
        points.draw(plt, plot, job.names[0], job.spec["time"] == "time", link is not None)
    finish_background_calibration()


def _os_error(exc: OSError, out: Path) -> str:
    where = exc.filename or out
    return (f"{where}: {exc.strerror or exc}; fix that (free space, a file-size limit, a link or folder planted "
            f"there) and run the same command again: finished chunks are kept in {staging_dir(out)}")


def has_cpu_model() -> bool:
    """Whether this machine's CPU cost model is measured (else a job measures it first)."""
    from welchpeaks.plan import cost_model_for

    return cost_model_for("cpu", calibrate=False, wait=False) is not None


def run_prepared(job: Job, todo: list[int], kind: str, sources: list[Any], out: Path, workers: Optional[int],
                 scheduler: Optional[str], quiet: bool) -> None:
    """Compute a prepared job's missing units with a progress bar, then write its output."""
    total_units = len(job.units)
    if len(todo) < total_units:
        console.print(f"resuming: {total_units - len(todo)} of {total_units} chunks already done in "
                      f"{staging_dir(out)}; computing the other {len(todo)}", markup=False, highlight=False)
    total_signals = sum(src.rows for src in sources)
    done = {"signals": 0, "bytes": 0, "t0": time.perf_counter()}
    client = _client(workers, scheduler)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} chunks"),
               TextColumn("{task.fields[rate]}"), TimeRemainingColumn())
    with Progress(*columns, console=err, disable=quiet, transient=False) as bar:
        task = bar.add_task(f"{kind} {total_signals} signal(s)", total=total_units,
                            completed=total_units - len(todo), rate="")

        def progress(unit: Unit, i: int) -> None:
            done["bytes"] += bytes_of(unit, job)
            done["signals"] += unit.r1 - unit.r0 if kind == "peaks" or unit.t0 == 0 else 0
            dt = max(time.perf_counter() - done["t0"], 1e-9)
            bar.update(task, advance=1, rate=f"{done['signals'] / dt:.3g} signals/s, {done['bytes'] / dt / 1e6:.4g} MB/s")

        try:
            job.run(progress, client, todo)
        except KeyboardInterrupt:
            bar.stop()
            err.print(f"interrupted: the finished chunks are kept in {staging_dir(out)}; run the same command again "
                      "to continue", highlight=False)
            raise typer.Exit(130)
        except (JobError, ValueError, TypeError) as exc:
            bar.stop()
            _fail(str(exc))
        except OSError as exc:  # a full disk, a file-size limit, a path made unusable meanwhile
            bar.stop()
            _fail(_os_error(exc, out))
        finally:
            if client is not None:
                cluster = getattr(client, "cluster", None)
                client.close()
                if cluster is not None:
                    cluster.close()
    dt = time.perf_counter() - done["t0"]
    console.print(f"wrote {out} ({total_signals} signal(s), {dt:.2f} s)", markup=False, highlight=False)


def track(
    files: list[str] = typer.Argument(..., help="Sources: .npy, .zarr, file.h5:/dataset, .wav/.flac/.ogg, a folder "
                                                "or a glob of sound files."),
    out: Path = typer.Option(..., "--out", help="Results, written as chunks finish: .parquet, .zarr, .csv or .jsonl "
                                               "(one row per peak: file, signal, time (s; time_samples when a "
                                               "source has no sample rate), rank, bin, freq, power, then "
                                               "the --measures)."),
    k: int = option("k", help="Peaks per frame, strongest first."),
    n_fft: Optional[int] = option("n_fft"),
    resolution_hz: Optional[float] = option("resolution_hz"),
    hop: Optional[int] = option("hop"),
    frame_segments: int = option("frame_segments"),
    frame_hop: Optional[int] = option("frame_hop"),
    fs: Optional[float] = option("fs", help="Sample rate in Hz of sources without one [default: the file's]."),
    window: str = option("window"),
    detrend: str = option("detrend"),
    scaling: str = option("scaling"),
    mode: str = option("mode"),
    min_distance: int = option("min_distance"),
    interp: str = option("interp"),
    edges: bool = option("edges"),
    height: Optional[float] = option("height"),
    prominence: Optional[float] = option("prominence"),
    snr_db: Optional[float] = option("snr_db", help="Least SNR in dB over the frame's median PSD."),
    max_pvalue: Optional[float] = option("max_pvalue"),
    measures: Optional[str] = option("measures", help=f"Per-peak measures, written as columns: some of "
                                                      f"{','.join(MEASURES)}."),
    strategy: str = option("strategy"),
    nan_policy: str = option("nan_policy", help="raise, or propagate (empty frames)."),
    dtype: Optional[str] = option("dtype"),
    link: Optional[str] = typer.Option(None, "--link", help="Link the peaks into tracks over time (a track column, "
                                                            "-1 for none): 'auto' (the motion model's own gate), or "
                                                            "the farthest, in Hz (cycles/sample without a rate), a "
                                                            "peak may be from its track's predicted frequency "
                                                            "(TrackResult.link's max_jump_hz)."),
    max_gap: Optional[int] = typer.Option(None, "--max-gap", help="With --link: frames a track may miss and go on "
                                                                  "[default: 15]."),
    min_length: Optional[int] = typer.Option(None, "--min-length", help="With --link: tracks of fewer peaks get "
                                                                        "track -1 [default: 5]."),
    min_snr_db: Optional[float] = typer.Option(None, "--min-snr-db", help="With --link: peaks with a lower SNR (dB "
                                                                          "over the frame's median; the snr_db "
                                                                          "column is written) join no track "
                                                                          "[default: 10]."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG of the first signal's peaks over time "
                                                             "(its tracks with --link; frames thinned to at most "
                                                             "20,000; the plot extra)."),
    memory: str = typer.Option("1GB", "--memory", help="Memory bound of the run (chunks of 4 MiB of samples in "
                                                       "flight, the rest for the computation)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Run on a local dask cluster of N processes."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Run on a dask cluster: tcp://HOST:PORT."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Peaks over time of every signal in FILES, in bounded memory, resumable: run the same
    command again after an interruption and it continues where it stopped. With --link, each
    peak's track (linked over each signal's frames in time order, as TrackResult.link does, with
    its defaults: --link auto)."""
    kw = dict(n_fft=n_fft, resolution_hz=resolution_hz, k=k, hop=hop, frame_segments=frame_segments,
              frame_hop=frame_hop,
              window=parse_window(window), detrend=parse_choice("detrend", detrend),
              scaling=parse_choice("scaling", scaling), mode=parse_choice("mode", mode), min_distance=min_distance,
              strategy=strategy, nan_policy=parse_choice("nan_policy", nan_policy), dtype=parse_choice("dtype", dtype),
              interp=parse_choice("interp", interp), edges=edges,
              **filter_options(height, prominence, snr_db, measures, max_pvalue))
    check_parameters(kw, fs)
    linking = None
    if link is not None:
        linking = _link_options(link, max_gap, min_length, min_snr_db)
        if linking["min_snr_db"] is not None and "snr" not in kw.get("measures", ()):
            kw["measures"] = list(kw.get("measures", ())) + ["snr"]  # (the floor's SNR, written too)
    elif any(v is not None for v in (max_gap, min_length, min_snr_db)):
        _fail("--max-gap, --min-length and --min-snr-db go with --link; pass --link auto (or a jump in Hz)")
    run_job("track", files, kw, fs, out, memory, workers, scheduler, quiet, linking, plot)


def _link_options(link: str, max_gap: Optional[int], min_length: Optional[int],
                  min_snr_db: Optional[float]) -> dict[str, Any]:
    """``--link`` (``auto`` or a jump in Hz) and its options as :func:`welchpeaks.tracks.link`'s
    keywords, checked (a one-line error naming the option)."""
    from welchpeaks.tracks import DEFAULT_MIN_SNR_DB, check_link

    if link.strip().lower() == "auto":
        jump = None
    else:
        try:
            jump = float(link)
        except ValueError:
            _fail(f"--link {link!r}: pass 'auto' or the largest jump in Hz (cycles/sample without a rate), e.g. 30")
    floor = DEFAULT_MIN_SNR_DB if min_snr_db is None else min_snr_db
    try:
        check_link(jump, max_gap, min_length, floor, resolution=1.0)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        for name, flag in (("max_jump_hz", "--link"), ("max_gap", "--max-gap"), ("min_length", "--min-length"),
                           ("min_snr_db", "--min-snr-db")):
            text = text.replace(name, flag)
        _fail(text)
    return {"max_jump_hz": jump, "max_gap": max_gap, "min_length": min_length, "min_snr_db": floor}
