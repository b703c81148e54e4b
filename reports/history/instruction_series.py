"""Instructions per Run as a series: one count per commit, and the commits that moved it.

Counts of an exact way of counting (EXACT_METHODS: callgrind without the interpreter,
harness.instructions) are deterministic, so such a series needs no statistics: a change
point is the first commit whose count is more than HISTORY_INSTRUCTIONS_CHANGE away from
the level the series held (the count at its previous change point, or its first commit);
that commit's count is the new level. Other ways (perf) are shown, never tested.
A series holds the counts of one way of counting (`instructions_method` in the store),
the one of its latest run: counts of another method or rule are not comparable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from epbench.reports.defaults import HISTORY_INSTRUCTIONS_CHANGE
from epbench.reports.history.store import HistoryStore, StoredPoint

# The ways of counting (`method/rule`, harness.instructions.RULES) whose counts are
# exact: callgrind with the interpreter's own instructions left out. perf's hardware
# counter takes in the interpreter's work (about 1 % from run to run) and valgrind's
# rule 1 its bookkeeping (up to 0.35 %): a 0.1 % rule would report their noise.
EXACT_METHODS = frozenset({"valgrind/2"})


@dataclass(frozen=True)
class InstructionPoint:
    """One commit of an instruction series: the median count of its runs."""

    commit: str
    created: str
    instructions: float
    runs: int
    method: str | None


@dataclass(frozen=True)
class InstructionFinding:
    """A commit whose instructions per Run left the level the series held."""

    case: str
    arm: str
    machine: str
    before: str  # the last commit of the old level
    after: str  # the first commit of the new level
    index: int  # position of `after` in the series
    old: float  # the old level's count
    new: float  # `after`'s count
    method: str | None

    @property
    def change(self) -> float:
        return self.new / self.old - 1.0

    @property
    def regression(self) -> bool:
        return self.new > self.old

    def to_dict(self) -> dict[str, str | int | float | None]:
        return {"case": self.case, "arm": self.arm, "machine": self.machine,
                "before": self.before, "after": self.after, "index": self.index,
                "old": self.old, "new": self.new, "change": self.change,
                "direction": "regression" if self.regression else "improvement",
                "method": self.method}


def instruction_series(store: HistoryStore, case: str, arm: str,
                       machine: str) -> list[InstructionPoint]:
    """The instruction series of one case, arm and machine (key or class), in commit order.

    Only runs that counted, of the way of counting of the latest such run; a commit
    counted several times is the median of its runs.
    """
    rows = [r for r in store.points(case, arm, machine) if r.instructions is not None]
    if not rows:
        return []
    method = rows[-1].instructions_method
    by_commit: dict[str, list[StoredPoint]] = {}
    for row in rows:
        if row.instructions_method == method:
            by_commit.setdefault(row.commit, []).append(row)
    return [InstructionPoint(commit=commit, created=runs[0].created,
                             instructions=float(statistics.median(
                                 r.instructions for r in runs)),
                             runs=len(runs), method=method)
            for commit, runs in by_commit.items()]  # dicts keep first-run order


def is_exact(points: Sequence[InstructionPoint]) -> bool:
    """Whether a series' counts are of an exact way of counting (EXACT_METHODS), so that
    `instruction_changes` tests it; an empty series is not."""
    return bool(points) and points[-1].method in EXACT_METHODS


def instruction_changes(points: Sequence[InstructionPoint], *, case: str = "", arm: str = "",
                        machine: str = "",
                        threshold: float = HISTORY_INSTRUCTIONS_CHANGE,
                        ) -> list[InstructionFinding]:
    """Every commit whose count is more than `threshold` (a fraction) from the level held;
    none unless the series' counts are exact (`is_exact`)."""
    found: list[InstructionFinding] = []
    if not is_exact(points):
        return found
    level = points[0].instructions
    for index in range(1, len(points)):
        count = points[index].instructions
        if level > 0 and abs(count / level - 1.0) > threshold:
            found.append(InstructionFinding(
                case=case, arm=arm, machine=machine, before=points[index - 1].commit,
                after=points[index].commit, index=index, old=level, new=count,
                method=points[index].method))
            level = count
    return found
