"""The history as an HTML page: each series with its change points, typed for reports.html.

reports.html draws what it is given (plots.HistorySeries, plots.ChangePoint); reading the
store and finding the changes is the history's, here.
"""

from __future__ import annotations

from pathlib import Path

from epbench.reports import html, plots
from epbench.reports.history.changes import series_with_changes
from epbench.reports.history.db import redact
from epbench.reports.history.store import HistoryStore


def load_history(db: str) -> list[tuple[plots.HistorySeries, list[plots.ChangePoint]]]:
    """Every series of a history store with its change points, for `report --history DB`."""
    out = []
    with HistoryStore.open(db) as store:
        for case, arm, machine in store.series_keys():
            found = series_with_changes(store, case, arm, machine)
            series = plots.HistorySeries(
                case=case, arm=f"{arm} ({machine})" if machine else arm,
                commits=[p.commit for p in found.points], ratio=[p.ratio for p in found.points],
                lo=[p.lo for p in found.points], hi=[p.hi for p in found.points])
            changes = [plots.ChangePoint(index=f.index, change=f.change.ratio - 1.0,
                                         lo=f.change.lo - 1.0, hi=f.change.hi - 1.0)
                       for f in found.findings]
            out.append((series, changes))
    if not out:
        raise html.ReportError(f"the history at {redact(db)} holds no series yet; add runs "
                               "with `epbench history add RESULTS.json`")
    return out


def write_history_report(db: str, out_dir: str | Path) -> Path:
    """`epbench report --history DB --html OUT`: the history store's series as a page."""
    entries = load_history(db)
    html.make_out_dir(out_dir)
    return html.write_page(html.render_html(history=entries, source=redact(db)), out_dir)
