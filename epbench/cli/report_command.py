"""`epbench report`: the HTML page of a run, a comparison or the history (reports.html),
and BENCHMARKS.md from a results file (reports.benchmarks)."""

from __future__ import annotations

import click

from epbench.cli.base import Command, emit
from epbench.cli.options import out_option
from epbench.core.errors import EpbenchError
from epbench.reports import benchmarks, html
from epbench.reports.history.page import write_history_report


@click.command(cls=Command)
@click.argument("input_path", metavar="[INPUT]", required=False, type=click.Path())
@click.option("--html", "html_dir", metavar="OUT", default=None, type=click.Path(),
              help="Directory for index.html (created if missing; an older page is replaced).")
@click.option("--history", "history_db", metavar="DB", default=None,
              help="Draw the series of a history store instead of INPUT.")
@click.option("--benchmarks", "benchmarks_results", metavar="RESULTS", default=None,
              type=click.Path(),
              help="Write BENCHMARKS.md (the engine's targets and the grid) from this results "
                   "file instead of a page; refused when a target case had fewer than half "
                   "its rounds quiet.")
@click.option("--commit-url", metavar="PREFIX", default=None,
              help="With --history: link each commit to PREFIX + its sha, e.g. "
                   "https://github.com/OWNER/REPO/commit/ (the page has no links otherwise).")
@out_option(help_text="Where --benchmarks writes its markdown [default: stdout].",
            directory=False)
def report(input_path: str | None, html_dir: str | None, history_db: str | None,
           benchmarks_results: str | None, commit_url: str | None, out: str | None) -> None:
    """Draw one self-contained HTML page with plots of a run, a comparison or the history.

    \b
    Examples:
      epbench report epbench-out --html epbench-out/html
      epbench report compare.json --html pages/
      epbench report --history epbench.db --html pages/
      epbench report --history epbench.db --html pages/ \\
          --commit-url https://github.com/OWNER/REPO/commit/
      epbench report --benchmarks bench-out/results.json --out BENCHMARKS.md

    INPUT is a results file, a comparison (`compare --format json --out FILE`)
    or the --out directory of `run` or `compare-commits`. The page needs no
    network: CSS and matplotlib's SVG plots are inline, and it has no script.
    With --benchmarks it writes the markdown of BENCHMARKS.md instead (what
    `make benchmarks` runs), from quiet rounds only.
    """

    if benchmarks_results is not None:
        if input_path is not None or history_db is not None or html_dir is not None:
            raise EpbenchError("--benchmarks RESULTS takes no INPUT, --history or --html; "
                               "give it alone with --out FILE, e.g. epbench report "
                               "--benchmarks bench-out/results.json --out BENCHMARKS.md")
        emit(benchmarks.render_results(benchmarks_results), out)
        return
    if out is not None:
        raise EpbenchError("--out is where --benchmarks writes BENCHMARKS.md; the HTML page "
                           "goes to --html OUT, e.g. epbench report epbench-out --html "
                           "epbench-out/html")
    if (input_path is None) == (history_db is None):
        raise EpbenchError("give INPUT or --history DB (one of them), e.g. "
                           "epbench report epbench-out --html epbench-out/html, or "
                           "--benchmarks RESULTS for BENCHMARKS.md")
    if html_dir is None:
        raise click.UsageError("Missing option '--html'.")
    if commit_url is not None and history_db is None:
        raise EpbenchError("--commit-url links the commits of a history page; give it with "
                           "--history DB, e.g. epbench report --history epbench.db --html "
                           "pages/ --commit-url https://github.com/OWNER/REPO/commit/")
    if history_db is not None:
        path = write_history_report(history_db, html_dir, commit_url)
    else:
        path = html.write_report(input_path, html_dir)
    click.echo(f"wrote {path}")
