"""The history as an HTML page: each series with its change points, typed for reports.html.

reports.html draws what it is given (plots.HistorySeries, plots.ChangePoint); reading the
store and finding the changes is the history's, here.
"""

from __future__ import annotations

import re
from pathlib import Path

from epbench.reports import html, plots
from epbench.reports.history.changes import series_with_changes
from epbench.reports.history.db import SQLITE, HistoryError, parse_db_url, redact
from epbench.reports.history.store import HistoryStore


def _instructions(store: HistoryStore, case: str, arm: str, machine: str,
                  commits: list[str]) -> list[float | None]:
    """Instructions per Run at each commit: the median of its runs that counted them, in
    the way of counting of the latest such run (as instruction_series: counts of another
    method or rule are not comparable)."""
    import numpy as np

    rows = [r for r in store.points(case, arm, machine) if r.instructions is not None]
    method = rows[-1].instructions_method if rows else None
    by_commit: dict[str, list[float]] = {}
    for row in rows:
        value = row.instructions
        if (row.status == "ok" and row.instructions_method == method
                and isinstance(value, (int, float)) and value > 0):
            by_commit.setdefault(row.commit, []).append(float(value))
    return [float(np.median(by_commit[c])) if c in by_commit else None for c in commits]


def page_source(db: str) -> str:
    """What the page says it was drawn from. The page may be published (GitHub Pages): a
    SQLite file is named by its path, a server only by its kind, never by its user, host,
    port, database or options."""
    try:
        parsed = parse_db_url(db)
    except HistoryError:  # not reached after a successful read; says nothing, to be safe
        return "a history store"
    if parsed.kind != SQLITE:
        return "a PostgreSQL server"
    # A server's URL mistyped (libpq's key=value form, a leading space) reads as a SQLite
    # path: only a plain file name is shown, never the text that was given.
    name = Path(parsed.shown).name
    return name if re.fullmatch(r"[\w.-]+\.(sqlite3?|db)", name) else "a history store"


def load_history(db: str) -> list[tuple[plots.HistorySeries, list[plots.ChangePoint]]]:
    """Every series of a history store (one per case, arm and machine or class) with its
    change points and instructions per Run, for `report --history DB`."""
    out = []
    with HistoryStore.open(db) as store:
        for case, arm, machine in store.series_keys():
            found = series_with_changes(store, case, arm, machine)
            commits = [p.commit for p in found.points]
            series = plots.HistorySeries(
                case=case, arm=f"{arm} ({machine})" if machine else arm,
                commits=commits, ratio=[p.ratio for p in found.points],
                lo=[p.lo for p in found.points], hi=[p.hi for p in found.points],
                instructions=_instructions(store, case, arm, machine, commits))
            changes = [plots.ChangePoint(index=f.index, change=f.change.ratio - 1.0,
                                         lo=f.change.lo - 1.0, hi=f.change.hi - 1.0)
                       for f in found.findings]
            out.append((series, changes))
    if not out:
        raise html.ReportError(f"the history at {redact(db)} holds no series yet; add runs "
                               "with `epbench history add RESULTS.json`")
    return out


def write_history_report(db: str, out_dir: str | Path, commit_url: str | None = None) -> Path:
    """`epbench report --history DB --html OUT`: the history store's series as a page;
    with `commit_url` (a prefix such as https://github.com/OWNER/REPO/commit/) each
    commit links to its page."""
    if commit_url is not None:
        html.check_commit_url(commit_url)  # before the store is read
    entries = load_history(db)
    html.make_out_dir(out_dir)
    return html.write_page(html.render_html(history=entries, source=page_source(db),
                                            commit_url=commit_url), out_dir)
