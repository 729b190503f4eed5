"""What every command shares: the consoles, the one-line error, JSON output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

console = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` to stderr and exit with ``code`` (2: bad usage or input)."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def write_json(path: Optional[Path], doc: dict) -> None:
    if path is not None:
        path.write_text(json.dumps(doc, indent=1, default=str))
        console.print(f"wrote {path}")
