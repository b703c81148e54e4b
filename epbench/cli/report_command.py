"""`epbench report`: the HTML page of a run, a comparison or the history (reports.html)."""

from __future__ import annotations

import click

from epbench.cli.base import Command
from epbench.core.errors import EpbenchError
from epbench.reports import html


@click.command(cls=Command)
@click.argument("input_path", metavar="[INPUT]", required=False, type=click.Path())
@click.option("--html", "html_dir", metavar="OUT", required=True, type=click.Path(),
              help="Directory for index.html (created if missing; an older page is replaced).")
@click.option("--history", "history_db", metavar="DB", default=None,
              help="Draw the series of a history store instead of INPUT.")
def report(input_path: str | None, html_dir: str, history_db: str | None) -> None:
    """Draw one self-contained HTML page with plots of a run, a comparison or the history.

    \b
    Examples:
      epbench report epbench-out --html epbench-out/html
      epbench report compare.json --html pages/
      epbench report --history epbench.db --html pages/

    INPUT is a results file, a comparison (`compare --format json --out FILE`)
    or the --out directory of `run` or `compare-commits`. The page needs no
    network: CSS and matplotlib's SVG plots are inline, and it has no script.
    """

    if (input_path is None) == (history_db is None):
        raise EpbenchError("give INPUT or --history DB (one of them), e.g. "
                           "epbench report epbench-out --html epbench-out/html")
    if history_db is not None:
        path = html.write_history_report(history_db, html_dir)
    else:
        path = html.write_report(input_path, html_dir)
    click.echo(f"wrote {path}")
