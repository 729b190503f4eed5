"""``welchpeaks learn fft|prune|eval``: the learned butterfly FFT from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from welchpeaks.cli.common import app_options, console, err
from welchpeaks.cli.common import fail as _fail
from welchpeaks.cli.common import write_json as _write_json
from welchpeaks.cli.paths import check_paths

learn_app = typer.Typer(**app_options("Learned butterfly FFTs: train, prune for a signal domain, evaluate (needs torch)."))


def _learned() -> Any:
    try:
        import welchpeaks.learned as learned
    except ImportError as exc:
        _fail(f"{exc}")
    return learned


def _bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                    console=err, transient=False)


def _summary(title: str, rows: dict[str, Any]) -> None:
    table = Table(title=title)
    table.add_column("")
    table.add_column("value", justify="right")
    for key, val in rows.items():
        table.add_row(key, f"{val:.4g}" if isinstance(val, float) else str(val))
    console.print(table)


def _npy_data(data: Optional[str]) -> Optional[str]:
    """The file a ``--data npy:PATH`` domain reads (None for the other domains)."""
    return data[4:] if data is not None and data.startswith("npy:") else None


@learn_app.command("fft")
def learn_fft(
    n_fft: int = typer.Option(256, "--n-fft", help="Transform size (a power of two >= 4)."),
    init: str = typer.Option("random", help="Initial twiddles: exact, random or perturbed."),
    seed: int = typer.Option(0, help="Seeds the initialisation and the training signals."),
    max_minutes: float = typer.Option(10.0, "--max-minutes", help="Stop after this long."),
    target: float = typer.Option(1e-4, help="Stop at this relative RMS error against numpy.fft."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Also stop after this many steps (exact repeats)."),
    tied: bool = typer.Option(False, "--tied", help="One twiddle per stage position, as a true FFT."),
    q8: bool = typer.Option(False, "--q8", help="Then fine-tune with int8 twiddles (straight-through)."),
    out: Path = typer.Option(Path("butterfly.safetensors"), "--out", "-o", help="Where to write the weights."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the training record as JSON."),
) -> None:
    """Train a butterfly network to reference precision and write its weights."""
    check_paths({"--out": out, "--json": json_path})
    learned = _learned()
    with _bar() as bar:
        task = bar.add_task(f"n_fft {n_fft}, {init}, seed {seed}", total=None, info="")

        def show(rec: dict) -> None:
            bar.update(task, info=f"{rec['phase']} step {rec['step']}: rel RMS {rec['rel_rms']:.2e}, "
                                  f"max abs {rec['max_abs']:.2e}")

        try:
            model = learned.train_fft(n_fft, init=init, seed=seed, max_minutes=max_minutes, target=target,
                                      tied=tied, progress=show, max_steps=max_steps)
            if q8:  # a short straight-through fine-tune: int8 rounding bounds the error, not the target
                record = model.record
                model = learned.train_fft(n_fft, seed=seed, max_minutes=min(1.0, max_minutes), target=target,
                                          q8=True, model=model, progress=show)
                model.record = {**record, "q8": True, **{f"q8_{k}": v for k, v in model.record.items()
                                                          if k.startswith("fft_")}}
        except ValueError as exc:
            _fail(str(exc))
    learned.save(model, out)
    _summary(f"wrote {out}", model.record)
    _write_json(json_path, model.record)
    if not model.record["reached"]:
        err.print(f"[yellow]target {target:g} not reached in {max_minutes:g} min[/]")
        raise typer.Exit(1)


@learn_app.command("prune")
def learn_prune(
    data: str = typer.Option("lowpass:0.0625", help="lowpass:F, band:LO-HI, tones or npy:PATH (F in cycles/sample)."),
    k: int = typer.Option(4, help="Peaks per signal the pruned network must keep."),
    budget: Optional[float] = typer.Option(None, help="Active fraction allowed (default: no budget beyond the L0 penalty)."),
    n_fft: int = typer.Option(256, "--n-fft"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Start from these weights (default exact)."),
    steps: int = typer.Option(400, help="Gate-training steps."),
    seed: int = typer.Option(0),
    out: Path = typer.Option(Path("pruned.safetensors"), "--out", "-o"),
    json_path: Optional[Path] = typer.Option(None, "--json"),
) -> None:
    """Learn which butterflies the top-k Welch peaks of a signal domain need; prune the rest."""
    check_paths({"--out": out, "--json": json_path}, reads=[weights, _npy_data(data)])
    learned = _learned()
    start = None
    if weights is not None:
        try:
            start = learned.load(weights)
        except ValueError as exc:
            _fail(str(exc))
        n_fft = start.n_fft
    with _bar() as bar:
        task = bar.add_task(f"pruning for {data}", total=steps, info="")

        def show(rec: dict) -> None:
            bar.update(task, completed=rec["step"] + 1,
                       info=f"peak loss {rec['task']:.3g}, expected active {rec['expected_active']:.3f}")

        try:
            model = learned.prune_for_domain(data, n_fft=n_fft, k=k, budget=budget, seed=seed, steps=steps,
                                             model=start, progress=show)
        except (ValueError, OSError) as exc:
            _fail(str(exc))
    learned.save(model, out)
    rec = model.record
    _summary(f"wrote {out}", rec)
    console.print(f"active butterflies: learned {rec['active_butterflies']} vs analytic output-pruned "
                  f"{rec['analytic_butterflies']} (of {model.stages * model.half}); held-out top-{k} recall "
                  f"{rec['recall']:.4f}")
    _write_json(json_path, rec)


@learn_app.command("eval")
def learn_eval(
    weights: Path = typer.Argument(..., help="A weights file from learn fft / learn prune."),
    data: Optional[str] = typer.Option(None, help="Also measure peak recall on this domain."),
    k: int = typer.Option(4, help="Peaks per signal for the recall."),
    batch: int = typer.Option(8192, help="Segments per timed call."),
    repeats: int = typer.Option(7, help="Timed calls per row (median reported)."),
    json_path: Optional[Path] = typer.Option(None, "--json"),
) -> None:
    """Reference errors, peak recall, active fraction, and compiled timing of saved weights."""
    check_paths({"--json": json_path}, reads=[weights, _npy_data(data)])
    learned = _learned()
    try:
        model = learned.load(weights)
        res = learned.evaluate(model, data=data or model.record.get("data"), k=k if data else model.record.get("k", k),
                               batch=batch, repeats=repeats)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    timing = res.pop("timing")
    _summary(f"{weights}", res)
    table = Table(title=f"compiled, batch {batch} segments of {model.n_fft}")
    for col in ("row", "median ms", "min-max ms"):
        table.add_column(col, justify="right")
    for name, t in timing.items():
        table.add_row(name, f"{t['median_ms']:.3f}", f"{t['min_ms']:.3f}-{t['max_ms']:.3f}")
    console.print(table)
    _write_json(json_path, {**res, "timing": timing, "record": model.record, "weights": str(weights)})
