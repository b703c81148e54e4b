"""The comparison's types: verdict names, the two sides, one row per case.

What reports.compare builds and every reader of a comparison (render, html, the bot,
the exit codes) shares: the verdicts in severity order and their headlines, a side
(a results document and its arm), a case's row, the error for two runs that cannot
be compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from epbench.core.errors import EpbenchError
from epbench.core.model import Case, Results
from epbench.reports import stats

SCHEMA = "epbench.comparison/1"

# verdict -> (emoji, words). The order is the severity order, worst first.
VERDICTS: dict[str, tuple[str, str]] = {
    "failed": ("❌", "failed"),
    "alert": ("🔴", "regressed (alert)"),
    "regression": ("⚠️", "regressed"),
    "inconclusive": ("❔", "inconclusive"),
    "not_comparable": ("➖", "not comparable"),
    "improvement": ("🟢", "improved"),
    "no_change": ("✅", "within noise"),
}
SEVERITY = {name: rank for rank, name in enumerate(VERDICTS)}
# `--fail-on` level -> the verdicts that make `compare` exit with EXIT_REGRESSION.
FAIL_ON: dict[str, frozenset[str]] = {
    "alert": frozenset({"failed", "alert"}),
    "regression": frozenset({"failed", "alert", "regression"}),
    "never": frozenset(),
}
HEADLINES = {
    "failed": "❌ Failed",
    "alert": "🔴 Regression",
    "regression": "⚠️ Change",
    "inconclusive": "❔ Inconclusive",
    "no_change": "✅ No regression",
}


class CompareError(EpbenchError):
    """Two results that cannot be compared honestly; the message says what to do."""


class RoundMedians:
    """Per-round medians for one comparison, each (case, arm) computed once."""

    def __init__(self) -> None:
        self._memo: dict[tuple[int, str], Any] = {}

    def __call__(self, case: Case, arm: str) -> Any:
        key = (id(case), arm)  # the documents outlive the comparison that holds this
        if key not in self._memo:
            self._memo[key] = stats.round_medians(case, arm)
        return self._memo[key]


@dataclass
class Side:
    """One side of a comparison: a results document and the arm measured in it."""

    label: str  # "base" or "pr"
    doc: Results
    arm: str
    path: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.doc, Results):
            raise TypeError("Side takes a Results (load_results, or Results.from_dict for a "
                            f"document in memory), not {type(self.doc).__name__}")

    @property
    def control(self) -> str:
        return self.doc.control

    @property
    def host_key(self) -> str | None:
        return self.doc.host.key


@dataclass
class CaseRow:
    case: str
    verdict: str
    emoji: str
    reason: str
    base_ns: float | None
    pr_ns: float | None
    change: float | None
    ci: list[float | None]
    p: float | None
    q: float | None
    significant: bool
    threshold: float
    alert: float
    noise: float
    noise_source: str
    rounds: int
    unquiet: int
    control_drift: float | None
    drift_exceeds_threshold: bool = False
    # The confidence of `ci`: the run's, or for a selected case (⚠️ 🔴 🟢) the
    # Benjamini-Yekutieli FCR-adjusted level 1 - R x fdr / m. `p` and `q` are for the
    # interval null "within +-threshold", not for "no change".
    ci_level: float | None = None
    # A ⚠️ that all rounds would make 🔴, held back by the idle gate.
    held_back: bool = False
    # Two runs: how much longer the PR run's ORT control took a Run than the base run's
    # (negative: less); beyond CONTROL_SHIFT_LIMIT either way, see across_speed_change.
    control_shift: float | None = None
    family: str | None = None
    rerun_errors: list[str] = field(default_factory=list)  # re-runs that failed (compare-commits)
    # Exact change in instructions per Run (when both sides counted them), and whether it
    # reaches --instructions-threshold.
    instructions_change: float | None = None
    instructions_flag: bool = False
    # The smallest slowdown this run would have flagged (⚠️ or 🔴) with 95 % probability
    # (verdicts.detectable_change); None for a case not judged.
    detectable: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
