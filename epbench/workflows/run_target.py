"""`run --target-mde`: more worker processes for the cases short of a detectable change.

After the first pass, the run's base arm (the one its A/A twin copies, else the first
arm besides the control) is compared with each other arm, as `compare RUN.json --base
A --pr B --target-mde PCT` would; every case whose detectable change is above the
target in any of those comparisons is run again, a pass's worker processes more merged
into the run (compare_commits.merge_rounds: processes are the replication unit, rounds
alone do not shrink a process offset), until none is or the budget is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from epbench.core.model import Results
from epbench.harness.run_config import RunConfig
from epbench.harness.runner import futile_rounds_at_end, run
from epbench.reports import compare as cmp
from epbench.reports.comparison import Comparison, Settings, Side
from epbench.reports.findings import target_warnings
from epbench.reports.verdicts import target_settings
from epbench.workflows.compare_commits import (
    cases_that_fit,
    merge_rounds,
    rerun_deadline,
    short_of_target,
)


@dataclass(frozen=True)
class TargetRun:
    """The merged run, the processes' re-runs per case, and the cases left short."""

    results: Results
    reruns: dict[str, int]
    notes: list[str]


def arm_pairs(results: Results) -> list[tuple[str, str]]:
    """(base, other) for every arm besides the base, the control and the twin."""
    twin = results.twin
    others = [key for key in results.arms
              if key != results.control and (twin is None or key != twin.key)]
    if not others:
        return []
    base = twin.of if twin is not None and twin.of in others else others[0]
    return [(base, key) for key in others if key != base]


def _judge(results: Results, settings: Settings) -> list[tuple[str, Comparison]]:
    return [(f"{pr} against {base}",
             cmp.compare(Side("base", results, base), Side("pr", results, pr),
                         settings=settings))
            for base, pr in arm_pairs(results)]


def run_to_target(
    config: RunConfig, target: float, *, budget_s: float | None,
    started_at: float | None = None,
    runner: Callable[[RunConfig], Results] | None = None,
    clock: Callable[[], float] | None = None,
    on_status: Callable[[str], None] = lambda _: None,
) -> TargetRun:
    """Run ``config``, then re-run the cases short of ``target`` within ``budget_s``
    seconds (None: until compare-commits' deadline per case, counted from ``started_at``).
    ``runner`` and ``clock`` are harness.runner.run and time.monotonic unless given."""
    runner = runner or run
    clock = clock or time.monotonic
    started_at = clock() if started_at is None else started_at
    settings = target_settings(Settings(), target)
    first_start = clock()
    results = runner(config)
    seconds_per_case = (clock() - first_start) / max(1, len(results.cases))
    budget_start = clock()
    if budget_s is None:
        budget_s = rerun_deadline(started_at, len(results.cases)) - budget_start
    judged = _judge(results, settings)
    reruns: dict[str, int] = {}
    futile_rounds = futile_rounds_at_end(results)
    attempt = 0
    while not results.interrupted:
        short = list(dict.fromkeys(n for _, c in judged for n in short_of_target(c)))
        pending = short[:cases_that_fit(budget_s - (clock() - budget_start), seconds_per_case)]
        if not pending:
            break
        attempt += 1
        on_status(f"adding {config.processes} worker process(es) to {len(pending)} case(s) "
                  f"short of the target {target:.1%}: {', '.join(pending)}")
        extra = runner(replace(config, out_dir=None, instructions=None, seed=config.seed + attempt,
                               cases=tuple(c for c in config.cases if c.name in pending),
                               futile_rounds_before=futile_rounds))
        futile_rounds = futile_rounds_at_end(extra, futile_rounds)
        results, added = merge_rounds(results, extra)
        for name, count in added.items():
            reruns[name] = reruns.get(name, 0) + count
        results = results.replaced(interrupted=extra.interrupted)
        judged = _judge(results, settings)
    notes = []
    for label, comparison in judged:
        notes += [f"{label}: {w}" for w in target_warnings(comparison.cases, target,
                                                           budget=True)]
    return TargetRun(results, reruns, notes)
