"""What every command shares: the consoles, the one-line error, JSON output."""

from __future__ import annotations

import contextlib
import json
import logging
import math
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from welchpeaks import spec
from welchpeaks.files import write_atomic

console = Console()
err = Console(stderr=True)


class _ConsoleNotices(logging.Handler):
    """The library's notices (:mod:`welchpeaks.notices`) as plain lines on the error console."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            err.print(record.getMessage(), style="yellow", markup=False, highlight=False, soft_wrap=True)
        except Exception:  # (a console gone: logging's own report, never a crash)
            self.handleError(record)


@contextlib.contextmanager
def notices_on_console():
    """While a command runs, the library's notices go to the error console (and not also to
    the application's handlers); its trace lines keep their own level and handlers."""
    from welchpeaks.notices import log

    handler = _ConsoleNotices(logging.WARNING)
    log.addHandler(handler)
    propagate, log.propagate = log.propagate, False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


def app_options(help_text: str) -> dict:
    """What every typer app of the CLI is built with: plain help (no rich markup, so bracketed
    defaults and install hints print as written), no shell completion, no pretty tracebacks."""
    return dict(help=help_text, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                rich_markup_mode=None)


def fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` to stderr and exit with ``code`` (2: bad usage or input)."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def pyplot_for(path: Optional[Path]) -> Any:
    """``matplotlib.pyplot`` (Agg) when ``path`` is given (its place checked by the command's
    ``paths.check_paths``), before any work: a missing extra must not cost the run; None
    without a path."""
    if path is None:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("--plot needs matplotlib: pip install 'welchpeaks[plot]'")
    return plt


def write_output(path: Optional[Path], data: str | bytes | Callable[[Path], None], option: str) -> None:
    """Write an output file atomically (a full disk or an interruption leaves the old file);
    an OS error is a one-line error naming ``option``."""
    if path is None:
        return
    try:
        write_atomic(path, data)
    except OSError as exc:
        fail(f"{option} {str(path)!r}: cannot write it ({exc.strerror or exc})")
    console.print(f"wrote {path}", markup=False, highlight=False)


def write_json(path: Optional[Path], doc: dict, option: str = "--json") -> None:
    write_output(path, json.dumps(doc, indent=1, default=str), option)


def finish_background_calibration() -> None:
    """A command that started the one-time background calibration in a thread waits for it
    before the process ends (a daemon thread would be cut off, and the next run would start
    again); one in a detached process goes on by itself."""
    from welchpeaks.plan import calibrate, current_state

    if isinstance(current_state().background.get("cpu"), calibrate.Detached):
        return  # a process of its own: it finishes and caches the model after this one
    if calibrate.measuring():
        err.print("finishing the one-time measurement of this machine (about a minute; cached for next time) ...")
        calibrate.wait_background()


def option(name: str, default: Any = ..., help: str | None = None) -> Any:
    """The command-line option of parameter ``name`` from the one table of parameters
    (:mod:`welchpeaks.spec`): its flag, default and help (a command may give its own default or
    help where it differs, and says why)."""
    p = spec.PARAMS[name]
    assert p.flag is not None, name
    return typer.Option(p.default if default is ... else default, p.flag, help=help or p.help())


def parse_segments(value: Optional[str]) -> int | str | None:
    """``--segments``: a number, a preset name, or all (None)."""
    if value is None or value.lower() in ("all", "none"):
        return None
    return int(value) if value.isdigit() else value


def parse_window(text: str) -> str | tuple:
    """``--window``: a name (``hann``), or a name and its parameters (``kaiser,8`` is
    ``('kaiser', 8.0)``), as ``scipy.signal.get_window`` takes them."""
    name, *args = [part.strip() for part in text.split(",")]
    try:
        values = [float(a) for a in args]
    except ValueError:
        values = None
    if not name or values is None or not all(math.isfinite(v) for v in values):
        fail(f"--window {text!r}: give a window name (hann) or a name and finite numbers (kaiser,8 or tukey,0.25)")
    return (name, *values) if values else name


def parse_choice(name: str, text: Optional[str]) -> Any:
    """A choice option (``--mode``, ``--scaling``, ...) as the API takes it: any case, ``none``
    for False; else a one-line error naming the flag and the choices."""
    if text is None:
        return None
    choices = spec.PARAMS[name].choices or {}
    value = text.strip().lower()
    for choice in choices:
        if value == str(choice).lower() or (choice is False and value in ("none", "false")):
            return choice
    if name == "dtype":  # numpy's spellings (f4, double, ...)
        try:
            import numpy as np

            if np.dtype(value).name in choices:
                return np.dtype(value).name
        except (TypeError, ValueError):
            pass
    listed = ", ".join(str(c).lower() if c is not False else "none" for c in choices)
    fail(f"{spec.PARAMS[name].flag} {text!r}: use one of {listed}")


def check_parameters(kw: dict[str, Any], fs: Optional[float]) -> None:
    """The Welch, selection and filter parameters of a command checked once, before any file is
    read: a bad value is a one-line error, not one per file."""
    from welchpeaks.api.detailed import make_filters, merge_distance
    from welchpeaks.params import make_params

    given = {n: v for n, v in kw.items() if n in spec.TAKES["make_params"]}
    if fs is None and given.get("resolution_hz") is not None:  # each file's own rate decides n_fft
        if given.get("n_fft") is not None:
            fail(f"--n-fft {given['n_fft']} and --resolution-hz {given['resolution_hz']:g}: give one of them")
        given["resolution_hz"] = None
    filters = {n: kw[n] for n in ("height", "prominence", "snr_db", "measures") if n in kw}
    try:
        given["min_distance"] = merge_distance(kw.get("distance"), given.get("min_distance", 1))
        make_params(**given, fs=fs, filters=make_filters(**filters))
    except (ValueError, TypeError) as exc:
        fail(str(exc))


def filter_options(height: Optional[float], prominence: Optional[float], snr_db: Optional[float],
                   measures: Optional[str], max_pvalue: Optional[float] = None) -> dict:
    """The filter and measure options given (``--measures`` a comma-separated list), as
    ``welch_peaks``' keywords; those not given are left out."""
    names = [m.strip() for m in measures.split(",") if m.strip()] if measures else None
    given = dict(height=height, prominence=prominence, snr_db=snr_db, measures=names, max_pvalue=max_pvalue)
    return {name: v for name, v in given.items() if v is not None}


def int_list(text: str, name: str) -> list[int]:
    """'32,1024' or a power-of-two range '32-8192'."""
    try:
        if "-" in text:
            lo, hi = (int(v) for v in text.split("-", 1))
            out, v = [], 1
            while v <= hi:
                if v >= lo:
                    out.append(v)
                v *= 2
        else:
            out = [int(v) for v in text.split(",") if v.strip()]
        if not out or min(out) < 1:
            raise ValueError
        return out
    except ValueError:
        fail(f"--{name} {text!r}: use comma-separated integers >= 1 (32,1024) or a range (32-8192)")
        raise  # unreachable


def check_mode(mode: str) -> list[str]:
    modes = [m.strip() for m in mode.split(",")]
    for m in modes:
        if m not in ("peaks", "bins"):
            fail(f"--mode {m!r}: use peaks, bins or peaks,bins")
    return modes
