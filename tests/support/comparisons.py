"""Hand-made comparisons for tests of what reads one: a row with only the fields a test
names (the rest as an older compare.json leaves them), and a comparison around rows."""

from __future__ import annotations

from collections.abc import Sequence

from epbench.reports.comparison import (
    CaseRow,
    Comparison,
    Overall,
    Settings,
    SideInfo,
)


def case_row(case: str = "x", verdict: str = "no_change", **fields: object) -> CaseRow:
    """A CaseRow with `fields`; the required ones a test does not name get neutral values."""
    required: dict[str, object] = {
        "emoji": "", "reason": "", "base_ns": None, "pr_ns": None, "change": None,
        "ci": (None, None), "threshold": 0.02, "rounds": 30, "unquiet": 0,
        "control_drift": None,
    }
    return CaseRow(case=case, verdict=verdict, **{**required, **fields})  # type: ignore[arg-type]


def comparison_of(rows: Sequence[CaseRow], **fields: object) -> Comparison:
    """A one-run comparison of `rows` and nothing else."""
    side = SideInfo(arm="base", control="ort", rounds=30)
    values: dict[str, object] = {
        "mode": "same-run", "base": side, "pr": side, "settings": Settings(), "profile": None,
        "warnings": (), "overall": Overall("no_change", "✅ No regression"), "counts": {},
        "only_base": (), "only_pr": (), "counters": (), "families": (), "gate": {},
        "host": {}, "cannot_catch": (),
    }
    return Comparison(cases=tuple(rows), **{**values, **fields})  # type: ignore[arg-type]
