"""``python -m welchpeaks``: the command line."""

from welchpeaks.cli import app

app(prog_name="welchpeaks")
