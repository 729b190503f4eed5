"""The ``welchpeaks`` command line: a thin typer shell over the API, one module per command
group (:mod:`~welchpeaks.cli.main`, :mod:`~welchpeaks.cli.bench`, :mod:`~welchpeaks.cli.learn`) and the helpers they share
(:mod:`~welchpeaks.cli.common`)."""

from welchpeaks.cli.bench import bench_app
from welchpeaks.cli.learn import learn_app
from welchpeaks.cli.main import app

app.add_typer(bench_app, name="bench")
app.add_typer(learn_app, name="learn")

__all__ = ["app"]
