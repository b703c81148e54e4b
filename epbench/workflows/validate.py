"""`epbench validate`: the harness measures its own false-positive rate and power.

On this machine and within a time budget, the bundled engine runs against
itself, as arms that differ only in the engine's test knobs, on the paths users
take (``Plan.paths``), under background load that validate creates itself:

- **same-process** (`compare --base A --pr B` on one file; compare-commits' way of
  judging, without its re-runs): one run per case holds every arm: ``a`` and ``a2``
  identical (A/A: any ⚠️/🔴 between them is a false positive), one arm per level
  (``Plan.levels``, by default ``d1`` .. ``d10``) with ``inject_delay_ns_per_run`` set to
  1, 2, 3, 5, 10 % of the case's engine time per Run (measured first, by the pilot),
  ``n5`` the same 5 % spread over the nodes, ``c`` with ``inject_api_calls_per_run`` =
  API_CALLS (the counter table must show exactly that many more ORT calls per Run);
- **separate-runs** (`epbench run` on the base, again on the PR, then `compare
  a.json b.json`): per case and repeat, two separate runs of the plain arm ``a``
  (the A/A pair) and one run of the delayed arms only (the PR side); each pair is
  judged through the double ratio to each run's own ORT control;
- **compare-commits** (the whole command, less its builds): per repeat, one command
  per comparison (A/A, each level), each one run of every case with ``a`` and one
  head arm, then compare-commits' own re-runs (`rerun_ambiguous`) to its default
  deadline, with its default instruction counting. One run holds every case, so a
  level's delay is one number, that level of the median case's time
  (`commit_heads`); each case's share is recorded. With ``Plan.target_mde`` (this path
  only), every command is judged with it, as `compare-commits --target-mde`, and re-runs
  the cases short of it too, to its deadline; repeats are planned on that (`planned_repeat_s`).

Every arm that stands for a PR's build (all but the base ``a``, the second plain run
of the separate-runs A/A included) loads its own copy of the engine library, fresh
each repeat (`OwnBuilds`): a PR's head is another file, mapped apart from base's.

Every run uses compare-commits' default processes, sessions, rounds and A/A twin
(read from its code), so the figures are those of the settings a PR gets. Every
comparison is `reports.compare.compare` itself: without a calibration profile
(the CI situation: thresholds from the run's twin) and, when this host has one or
``--profile`` names one, with it too (not the compare-commits path: its re-runs were
chosen without one). A case's MDE is the smallest level flagged in >= 95 % of
repeats. Loads (harness.load) run only while a run (or a command) measures.

A last run with a fixed arm order (``ort``, ``a``, ``a2`` every round) shows the
position bias that counterbalancing removes (with the same-process path only: its
runs are the counterbalanced side).

Writes validation.json (VALIDATION_SCHEMA) and validation.md (through the
reports' jinja2 environment).

The steps are modules: validate_plan (what runs), validate_run (the pilot and the
repeats), validate_judge (the statistics), validate_report (the document and its files).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from epbench.core.model import Results
from epbench.harness.load import BackgroundLoad, background_load
from epbench.harness.run_config import RunConfig
from epbench.harness.runner import run as real_run
from epbench.reports import compare as cmp
from epbench.reports.comparison import JsonValue
from epbench.reports.verdicts import target_settings
from epbench.workflows.validate_judge import summarize
from epbench.workflows.validate_plan import SAME_PROCESS, Plan
from epbench.workflows.validate_report import document
from epbench.workflows.validate_run import Execution, run_pilot


def validate(
    plan: Plan,
    *,
    settings: cmp.Settings | None = None,
    profile_path: str | None = None,
    run: Callable[[RunConfig], Results] | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_status: Callable[[str], None] = lambda _: None,
    load_factory: Callable[[str, int], AbstractContextManager[BackgroundLoad]] = background_load,
    runs_dir: str | Path | None = None,
) -> dict[str, JsonValue]:
    """Run the validation within ``plan.budget_s`` and return the validation document.

    ``run`` is harness.runner.run unless a test injects a fake; ``clock`` paces
    the budget and ``load_factory`` makes the background load's context manager
    (a test injects fakes of both). ``runs_dir``: every run's results document is
    written there as soon as it ends (``NNNN-LOAD-rREPEAT-CASE-KIND.json``; a command's
    ``NNNN-LOAD-rREPEAT-commits-WHAT.json``, its first pass and then its re-runs merged,
    and ``...-rerunN.json`` for each re-run; each one `epbench compare` reads), so an
    interruption or a crash loses no finished run.
    A Ctrl-C stops the run it falls in and the validation with it; the report then
    covers the repeats finished before it. So does an EpbenchError after the first repeat (a
    build that cannot be copied, a run that cannot be kept, a load that died), which the
    document's ``stopped`` carries.
    """

    if run is None:
        run = real_run
    # With a target, as `compare-commits --target-mde`: every command's comparisons, its
    # re-runs' choice and validate's verdicts (the compare-commits path's alone: Plan).
    settings = target_settings(settings or cmp.Settings(), plan.target_mde)
    start = clock()
    notes: list[str] = []
    pilot = run_pilot(plan, run, on_status, notes)
    if plan.position_test and SAME_PROCESS not in plan.paths:
        notes.append("no position test: its counterbalanced side is the same-process runs, "
                     "and that path was not run")
    pilot_s = clock() - start
    execution = Execution(plan, pilot, settings=settings, run=run, clock=clock,
                          on_status=on_status, load_factory=load_factory, runs_dir=runs_dir,
                          notes=notes)
    outcome = execution.repeat_loads(start)
    repeats = outcome.repeats
    elapsed = clock() - start
    if elapsed > plan.budget_s:
        notes.append(f"over budget: {elapsed:.0f} s for a budget of {plan.budget_s:.0f} s "
                     "(every load gets at least one repeat, and one took longer than its "
                     "share); raise --budget, validate fewer cases or fewer loads")
    on_status(f"comparing {len(repeats)} repeat(s)")
    profile = cmp.load_profile_for(repeats[0].documents()[0].host.key, profile_path)
    result = summarize(repeats, outcome.fixed_doc, pilot.engine_ns, settings=settings,
                       profile=profile,
                       loads=[k for k in plan.loads if any(r.load == k for r in repeats)],
                       levels=plan.levels)
    return document(result, plan, pilot, outcome, runs=execution.runs, notes=notes,
                    profile=profile, pilot_s=pilot_s, elapsed=elapsed)
