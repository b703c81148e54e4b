"""The history as JSON documents for scripts: `history list` and `history show`.

Each document names its schema (`schema`), and the schema files beside this module
(history_list.schema.json, history_series.schema.json) describe them; the tests
validate real output against them.
"""

from __future__ import annotations

from collections.abc import Sequence

from epbench.reports.comparison import JsonValue
from epbench.reports.history.changes import SeriesChanges, series
from epbench.reports.history.instruction_series import InstructionFinding, InstructionPoint
from epbench.reports.history.store import HistoryStore

LIST_SCHEMA = "epbench.history-list/1"
SERIES_SCHEMA = "epbench.history-series/1"


def runs_document(store: HistoryStore) -> dict[str, JsonValue]:
    """Every stored run, oldest first, with its point count."""
    return {"schema": LIST_SCHEMA, "db": store.url, "db_schema_version": store.schema_version(),
            "runs": [run.to_dict() for run in store.runs()], "series": None}


def series_list_document(store: HistoryStore) -> dict[str, JsonValue]:
    """Every series (case, arm, machine) with its number of commits."""
    rows = [{"case": case, "arm": arm, "machine": machine,
             "commits": len(series(store, case, arm, machine))}
            for case, arm, machine in store.series_keys()]
    return {"schema": LIST_SCHEMA, "db": store.url, "db_schema_version": store.schema_version(),
            "runs": None, "series": rows}


def point_rows(result: SeriesChanges) -> list[dict[str, JsonValue]]:
    """A series' points, a commit per row, with the change that starts at it (or None)."""
    starts = {f.index: f for f in result.findings}
    return [{"commit": p.commit, "created": p.created, "ratio": p.ratio, "lo": p.lo,
             "hi": p.hi, "runs": p.runs,
             "change_point": (starts[i].change.ratio - 1.0) if i in starts else None}
            for i, p in enumerate(result.points)]


def series_document(case: str, arm: str, result: SeriesChanges,
                    counted: Sequence[InstructionPoint] = (),
                    counted_changes: Sequence[InstructionFinding] = ()) -> dict[str, JsonValue]:
    """One series and its change points; with ``counted`` (the instruction series of the
    same case, arm and machine), each point's instructions per Run beside its time."""
    rows = point_rows(result)
    if counted:
        by_commit = {p.commit: p.instructions for p in counted}
        moved = {counted[f.index].commit: f.change for f in counted_changes}
        for row in rows:
            row["instructions"] = by_commit.get(row["commit"])
            row["instructions_change"] = moved.get(row["commit"])
    return {"schema": SERIES_SCHEMA, "case": case, "arm": arm, "machine": result.machine,
            "points": rows, "findings": [f.to_dict() for f in result.findings],
            "instruction_findings": [f.to_dict() for f in counted_changes]}
