"""Compare two commits of a plugin EP in one interleaved run.

Both commits' libraries are built (harness.commits) and run as two arms of one
process, `base` and `head`, beside ORT's CPU EP as the in-run control, so the
machine's drift hits both sides alike. Cases that come out inconclusive, or ⚠️ held
back from 🔴 by the idle gate with some round quiet (`rerun_order`), are run again,
their new rounds added to the old, while the re-run budget lasts. A case re-run
because it was ❔ states at least the detectable change of the pass that re-ran it
(`kept_on_rerun`): the re-runs go on while its estimate stays low.

Writes into the output directory: results.json (the merged run: all `compare`
needs), results.jsonl (the first pass, streamed), compare.json (the verdicts, the
form `compare --format json` prints, reports/comparison.schema.json), report.md
(the same verdicts as markdown, for people and the job summary) and report.html
(the same with plots, reports.html), the last four through reports.outputs.write_outputs.
With a history store (`history_db`), all
three also say whether the base commit sits in a known change point of the cases'
series (reports.history.changes.base_report), or why the history could not say. There is no
separate comment file: the PR comment is rendered from compare.json by the job
that posts it, with its own templates, so nothing the measured code could have
written is posted as markdown.

Both sides run the same cases with the same EP options (``ep_options``; the A/A
twin copies its side's). A user model (a case of kind ``model``) is a file of the
caller's working tree, not of either commit: it is hashed before anything is
built, and every pass must run that same definition (`pin_models`), so a build or
anything else that rewrites the file meanwhile stops the comparison rather than
measuring two models. results.json records its path and definition hash.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from epbench.core.errors import ArmError, CaseError
from epbench.core.model import Results
from epbench.core.results import write_results
from epbench.engine import EP_OPTIONS
from epbench.harness.arms import ArmSpec, parse_arm
from epbench.harness.commits import (
    BuiltSide,
    build_commit,
    is_ancestor,
    repo_root,
    resolve_revision,
    stage_for_measuring,
)
from epbench.harness.commits import uncommitted_changes as has_uncommitted_changes
from epbench.harness.instructions import valgrind_available
from epbench.harness.isolation import BuildIsolationError, HarnessGuard, code_snapshot
from epbench.harness.run_config import RunConfig
from epbench.harness.runner import futile_rounds_at_end, run
from epbench.reports import compare as cmp
from epbench.reports.comparison import CaseRow, Comparison, Side
from epbench.reports.findings import (
    TARGET_MISSED,
    ambiguous_cases,
    held_back_by_gate,
    named,
    target_misses,
    target_warnings,
)
from epbench.reports.history.changes import base_report, base_report_error
from epbench.reports.history.db import HistoryError
from epbench.reports.history.store import HistoryStore
from epbench.reports.outputs import RESULTS_FILE, write_outputs

BASE_ARM = "base"
HEAD_ARM = "head"
# With no --budget, re-runs go on while ambiguous cases are left, planned to end by this
# many seconds per case since the command began (builds and first pass included), less
# REPORT_RESERVE_S for what follows them: what a PR job is promised on 2 cores (the quick
# grid's 6 cases in 3 minutes; the default grid's 20 in 10, inside its promised 12). A
# loaded runner, whose first pass is slow, then re-runs less rather than running over
# (under a sustained load the quick grid took 138-139 s without a re-run and up to 209 s
# with them:
# docs/validation/summaries.tar.xz:commits_repeats.txt). The first pass itself is not bounded: on
# a slower VM under that load it took ~185 s alone until the idle gate stopped waiting out
# a load that does not leave (harness.gate). Before 13898b2 the default budget was also at
# most as long as the first pass (and 120 s): on VM F with no load 13 of 22 runs then ended
# 51-62 s before this deadline with cases left ❔ (docs/validation/README.md, VM F); what
# the extra re-runs buy in verdicts is not measured.
DEFAULT_TARGET_S_PER_CASE = 30.0
# Kept back for the reports written after the re-runs (a run's HTML page took 1.5 s here).
REPORT_RESERVE_S = 5.0
# A commit's build still running after this long is stopped, with everything it started:
# a build that hangs (a prompt, a lock, a network wait) must not hang the command. An hour
# is far past a cold release build of an EP (the bundled engine builds in seconds), and a
# CI job's own timeout usually ends sooner.
BUILD_TIMEOUT_S = 3600.0
# compare-commits' defaults: more processes than `run`'s, since a PR's verdict rests on
# what two processes differ by (see docs/validation for what they buy).
COMMITS_PROCESSES = 6
COMMITS_ROUNDS = 48
# The idle gate looks before every round it has no reading for, but does not wait for
# quiet: a round it fails runs at once, marked unquiet (`--gate-max-wait`; `run` waits up
# to harness.gate.DEFAULT_MAX_WAIT_S), and a 🔴 still needs its quiet rounds. Under a bursty
# load on VM F (2026-12-04, 5 interleaved repeats,
# docs/validation/summaries.tar.xz:gate_waits.txt) waiting
# flagged 28 of 30 slowdowns of about 2 % and not waiting 30 of 30, A/A 0 of 30 each, in
# 112-175 s against 77-140 s a run: the waits bought hardly steadier rounds and left less
# time for the re-runs. Not waiting leaves fewer quiet rounds (53 % against 89 % there),
# on which a 🔴 rests: none was held back there, under a heavier load more would be.
COMMITS_GATE_MAX_WAIT_S = 0.0
# Rounds a re-run adds to each ambiguous case, as a multiple of the first pass.
RERUN_ROUNDS_FACTOR = 1
# n ambiguous cases fit in a re-run pass when what is left of the budget is at least
# (n - RERUN_FIT_SLACK) times a case's estimated time (the first pass's mean): the clock
# moves between the budget's start and a look, so without it a budget of exactly k cases'
# time (a --budget as the budget warning suggests; the default before 13898b2) fitted
# k - 1. A given --budget may so be overrun by up to this share of one case's time, a
# default one by less than REPORT_RESERVE_S.
RERUN_FIT_SLACK = 0.05
# The most of a history error kept in compare.json (the schema bounds its texts).
HISTORY_ERROR_CHARS = 1000


@dataclass(frozen=True)
class CommitsResult:
    """What a two-commit comparison produced, for the command to print and exit on."""

    base: BuiltSide
    head: BuiltSide
    results: Results  # the first pass with the re-runs' rounds added
    comparison: Comparison
    reruns: dict[str, int]
    notes: list[str] = field(default_factory=list)


def side_arm(side: BuiltSide, default_build: bool,
             ep_options: tuple[tuple[str, str], ...] = ()) -> ArmSpec:
    """The arm of one side: the engine built from that commit, or any plugin EP, with
    ``ep_options`` handed to its EP.

    Built whole rather than parsed: an option's value may hold `,` or `:`, which the
    `--arm` grammar would split on. The spec string, for the record, lists them all.
    """
    kind = "engine@" if default_build else "plugin:"
    arm = parse_arm(f"{kind}{side.library}:name={side.label}")
    written = ",".join(f"{k}={v}" for k, v in ep_options)
    return replace(arm, options=tuple(ep_options),
                   spec=f"{kind}{side.library}:{written + ',' if written else ''}"
                        f"name={side.label}")


def check_ep_options(ep_options: tuple[tuple[str, str], ...], default_build: bool) -> None:
    """Refuse, before anything is built, an option the bundled engine does not take (a
    plugin EP built with --build may take any: its own library says at load)."""
    if not default_build:
        return
    unknown = [key for key, _ in ep_options if key not in EP_OPTIONS]
    if unknown:
        raise ArmError(f"--ep-option {unknown[0]}: the bundled engine has no option "
                       f"{unknown[0]!r}; use one of {', '.join(EP_OPTIONS)} (a plugin EP "
                       "given with --build takes its own)")


def model_definitions(config: RunConfig) -> dict[str, str]:
    """The definition hash of each user-model case, read now from the caller's files."""
    return {spec.name: spec.definition_sha256 for spec in config.cases if spec.kind == "model"}


def pin_models(runner: Callable[[RunConfig], Results],
               pinned: Mapping[str, str]) -> Callable[[RunConfig], Results]:
    """``runner``, refusing a pass whose user-model cases ran another definition than the
    one hashed before the builds (``pinned``): both sides, and every pass, must measure
    the file as it was when the command began."""
    def pinned_run(config: RunConfig) -> Results:
        results = runner(config)
        for name, digest in pinned.items():
            case = results.cases.get(name)
            ran = case.definition_sha256 if case is not None else None
            if ran is not None and ran != digest:
                path = next(c.path for c in config.cases if c.name == name)
                raise CaseError(f"{name}: the model {path} changed while compare-commits ran "
                                f"(sha256 {digest[:12]} when it began, {ran[:12]} measured); "
                                "keep the file unchanged during the run and rerun")
        return results

    return pinned_run


def merge_rounds(results: Results, extra: Results) -> tuple[Results, dict[str, int]]:
    """``results`` with the rounds of re-run cases (``extra``) appended, and the rounds
    added per case.

    Rounds are the unit of replication, each with its own in-run control, so
    rounds from a later worker are as valid as the first pass's. A re-run that
    did not finish adds nothing and leaves its error on record.
    """
    added = {}
    cases = dict(results.cases)
    for name, case in extra.cases.items():
        target = cases[name]
        if not case.ok:
            cases[name] = target.replaced(rerun_errors=[*target.rerun_errors, case.error])
            continue
        # The re-run's processes are new processes of the case: numbered after the others.
        first = 1 + max((p.index for p in target.processes), default=-1)
        start = len(target.rounds)
        rounds = [rnd.replaced(index=start + offset, process=first + rnd.process)
                  for offset, rnd in enumerate(case.rounds)]
        processes = [p.replaced(index=first + p.index) for p in case.processes]
        cases[name] = target.replaced(rounds=[*target.rounds, *rounds],
                                      processes=[*target.processes, *processes],
                                      reruns=target.reruns + 1)
        added[name] = len(case.rounds)
    return results.replaced(cases=cases), added


def held_back_with_no_quiet_round(row: CaseRow) -> bool:
    """A ⚠️ held back from 🔴 by the idle gate none of whose rounds passed the gate: rounds
    under the load that failed every one cannot make it 🔴 (only its quiet rounds, standing
    alone, can), a quiet machine can. For one run's rows, as compare-commits has: a row's
    rounds and unquiet rounds are its case's, both arms in each (two runs' would add the
    base file's).

    The trade: a load that lifts after the first pass would have let a re-run gather
    quiet rounds, and perhaps a 🔴; such a case now stays ⚠️ (the job's exit is the same at
    the default --fail-on) with a warning to rerun on a quiet machine. Not measured: a load
    of tens of seconds. In three VM E series under a sustained load, 41 first-pass such
    cases were re-run 76 times: no quiet round gained, none became 🔴, one ❔, 20 fell
    below the alert level (picked at it, most fell back; still ⚠️); in the series with no
    load or a bursty one no first pass had one (docs/validation/README.md).
    """
    return held_back_by_gate(row) and row.unquiet == row.rounds


def rerun_order(comparison: Comparison, attempts: Mapping[str, int]) -> list[str]:
    """The ambiguous cases that re-runs can settle, in the order re-runs take them: ❔ before
    ⚠️ held back from 🔴 (a ❔ has no answer; a held-back ⚠️ is flagged already), then the
    cases tried fewest times (``attempts``, failed re-runs included, where compare.json's
    ``reruns`` counts those that added rounds), then compare's order. A held-back ⚠️ with no
    quiet round is passed by (`held_back_with_no_quiet_round`). The order matters when a
    pass fits fewer cases than are ambiguous: a later pass, the default grid, a deadline or
    a given --budget.

    compare's order alone (held-back ⚠️ first, then the most positive change, then the name)
    starved the ❔: under a sustained load on VM E (half the first pass's budget, a first
    look fitting two cases) 25 of 29 re-runs went to held-back ⚠️, none of which became 🔴
    (with no round quiet it cannot), and add_d10_w8, the smallest change, was ❔ in 9 of 10
    runs and never re-run. Over the re-run cases of every VM E series then, 0 of 21
    held-back ⚠️ became 🔴 and 5 of 100 ❔ did (docs/validation/README.md).
    """
    rows = {row.case: row for row in comparison.cases}
    settle = [name for name in ambiguous_cases(comparison)
              if not held_back_with_no_quiet_round(rows[name])]
    short = [name for name in short_of_target(comparison) if name not in settle]
    return sorted(settle + short,  # a stable sort: compare's order in ties
                  key=lambda name: (name in short, held_back_by_gate(rows[name]),
                                    attempts.get(name, 0)))


def kept_on_rerun(comparison: Comparison, pending: Sequence[str]) -> dict[str, float]:
    """The cases of ``pending`` (a re-run pass's) it takes because they are ❔, not short of
    --target-mde, each with the detectable change it states now: the statement the rest
    of the procedure keeps (verdicts.kept_detectable). Taken for the ❔ alone, a re-run is
    chosen on the estimate; taken for the target, on the standard error only, and a
    short case's statement is the final pass's (the target is met by that one)."""
    short = set(short_of_target(comparison))
    return {row.case: row.detectable for row in comparison.cases
            if row.case in pending and row.case not in short
            and row.verdict == "inconclusive" and row.detectable is not None}


def short_of_target(comparison: Comparison) -> list[str]:
    """The cases short of --target-mde that more worker processes can bring to it (each
    re-run adds a pass's processes): all but those judged against the default noise,
    which no process measures (no twin, no profile)."""
    target = comparison.settings.target_mde
    if target is None:
        return []
    return [name for name, why in target_misses(comparison.cases, target).items()
            if why != "no measured noise"]


def rerun_seconds_per_case(seconds_per_case: float) -> int:
    """What re-running one case is taken to cost, in whole seconds as the budget warning
    states it: rounded up, so a --budget of that much a case fits them all (`cases_that_fit`)."""
    return math.ceil(seconds_per_case * RERUN_ROUNDS_FACTOR)


def cases_that_fit(left_s: float, seconds_per_case: float) -> int:
    """How many ambiguous cases a re-run pass may take with ``left_s`` seconds of budget
    left, a case's re-run estimated from the first pass's ``seconds_per_case``. 0 when
    nothing is left, or when the first pass read no time at all (a coarse clock), rather
    than dividing by zero."""
    if left_s <= 0 or seconds_per_case <= 0:
        return 0
    fit = left_s / (seconds_per_case * RERUN_ROUNDS_FACTOR) + RERUN_FIT_SLACK
    return int(fit) if math.isfinite(fit) else sys.maxsize  # --budget 1e308 overflows it


def rerun_deadline(started_at: float, cases: int) -> float:
    """When default re-runs must have ended, on ``time.monotonic``'s clock: the command's
    time target for ``cases`` cases, counted from ``started_at``, less the reports' reserve."""
    return started_at + DEFAULT_TARGET_S_PER_CASE * cases - REPORT_RESERVE_S


def left_over_warnings(comparison: Comparison, seconds_per_case: float,
                       budget_ran_out: bool) -> list[str]:
    """The warnings for the cases left ambiguous after the re-runs: those the default budget
    ran out on (``budget_ran_out``), with what re-running one costs; and, always, the
    held-back ⚠️ with no quiet round, which re-runs pass by, with what can settle them. Two
    warnings, not one: each names its cases within ``named``'s bound, which fits the
    schema's bound on one warning once."""
    rows = {row.case: row for row in comparison.cases}
    left_over = ambiguous_cases(comparison)
    unquiet_held = [name for name in left_over if held_back_with_no_quiet_round(rows[name])]
    unsettled = [name for name in left_over if name not in unquiet_held]
    warnings = []
    if budget_ran_out and unsettled:
        held = any(held_back_by_gate(rows[name]) for name in unsettled)
        warnings.append(
            f"{named(unsettled)} left ❔"
            f"{' or held back from 🔴 by the idle gate' if held else ''}: the default re-run "
            f"budget (until {DEFAULT_TARGET_S_PER_CASE:g} s per case after the command began) "
            f"ran out; a case's re-run takes about {rerun_seconds_per_case(seconds_per_case)} s "
            "here (rounded up, so that much a case fits them all): pass --budget with that much "
            "for each such case to re-run them (in CI, to the bench workflow's compare-commits)")
    if unquiet_held:
        it, its = ("them", "their") if len(unquiet_held) > 1 else ("it", "its")
        warnings.append(
            f"{named(unquiet_held)}: ⚠️ held back from 🔴 by the idle gate, none of {its} "
            f"rounds quiet: rounds under this load cannot make {it} 🔴, so re-runs pass {it} "
            "by; rerun on a quiet machine")
    return warnings


def default_instructions() -> tuple[str | None, str]:
    """compare-commits' default instruction counting: callgrind where valgrind exists (an
    extra untimed pass in the first pass, which the re-runs' budget then lacks), else none;
    with what valgrind_available said."""
    available, why = valgrind_available()
    return ("valgrind" if available else None), why


@dataclass(frozen=True)
class Reran:
    """What `rerun_ambiguous` ends with: the merged results, their last comparison (with
    the left-over warnings), the rounds added per case, and the detectable change kept
    per case re-run on ❔ (`kept_on_rerun`), which that comparison's rows state at least."""

    results: Results
    comparison: Comparison
    reruns: dict[str, int]
    kept: dict[str, float]


# Judges a run as it stands, every case's statement at least its `kept` one (compare's).
Judge = Callable[[Results, Mapping[str, float]], Comparison]


def rerun_ambiguous(
    results: Results, config: RunConfig, judge: Judge, *,
    budget_s: float | None, started_at: float, first_pass_s: float,
    runner: Callable[[RunConfig], Results] | None = None,
    clock: Callable[[], float] | None = None,
    on_status: Callable[[str], None] = lambda _: None,
) -> Reran:
    """Re-run the ambiguous cases of ``results`` (`rerun_order`) within budget; return
    ``results`` with their rounds merged in, the last comparison, with the left-over
    warnings, the rounds added per case and the detectable changes kept (`Reran`).

    ``config`` is the first pass's (arms included); ``judge`` compares the results as
    they stand, each case re-run on ❔ stating at least what the pass that re-ran it did;
    ``first_pass_s`` is what the first pass took, from which a case's re-run is estimated.
    With no ``budget_s``, re-runs end by `rerun_deadline` counted from ``started_at``
    (``clock``'s time when the command began). ``runner`` and ``clock`` are
    harness.runner.run and ``time.monotonic`` (looked up at the call) unless a caller
    measuring the command (`epbench validate`) passes its own.
    """
    runner = runner or run
    clock = clock or time.monotonic
    seconds_per_case = first_pass_s / max(1, len(results.cases))
    kept: dict[str, float] = {}
    comparison = judge(results, kept)
    reruns: dict[str, int] = {}
    budget_start = clock()
    defaulted = budget_s is None
    if budget_s is None:
        # Spending at most this from now on ends the re-runs by the deadline.
        budget_s = rerun_deadline(started_at, len(results.cases)) - budget_start
    attempt = 0
    attempts: Counter[str] = Counter()  # per case, failed re-runs too (merge_rounds skips them)
    # A re-run goes on from the gate's count of the run before it: a load that the first
    # pass found sustained is not waited out again by every re-run's first processes.
    futile_rounds = futile_rounds_at_end(results)
    while not results.interrupted:
        left = budget_s - (clock() - budget_start)
        pending = rerun_order(comparison, attempts)[:cases_that_fit(left, seconds_per_case)]
        if not pending:
            break
        attempts.update(pending)
        for name, size in kept_on_rerun(comparison, pending).items():
            kept.setdefault(name, size)  # the first: later passes' are chosen on estimates
        attempt += 1
        on_status(f"re-running {len(pending)} ambiguous case(s) (❔, or ⚠️ held back by the "
                  f"idle gate{', or short of --target-mde' if short_of_target(comparison) else ''}"
                  f"): {', '.join(pending)}")
        # More rounds only: the first pass's instruction counts are exact already, and
        # counting again cost more than the rounds themselves (a valgrind start per pass).
        extra = runner(replace(
            config, out_dir=None, instructions=None, cases=tuple(
                c for c in config.cases if c.name in pending),
            rounds=config.rounds * RERUN_ROUNDS_FACTOR, seed=config.seed + attempt,
            futile_rounds_before=futile_rounds,
        ))
        futile_rounds = futile_rounds_at_end(extra, futile_rounds)
        results, added = merge_rounds(results, extra)
        for name, count in added.items():
            reruns[name] = reruns.get(name, 0) + count
        results = results.replaced(interrupted=extra.interrupted)
        comparison = judge(results, kept)
    warnings = [*comparison.warnings]
    target = comparison.settings.target_mde
    if target is not None:
        # compare() named the cases short of the target as for one pass; re-runs added
        # processes to them until the budget ran out.
        warnings = [w for w in warnings if TARGET_MISSED not in w]
        warnings.extend(target_warnings(comparison.cases, target, budget=True))
    # In the reports, not a note: a PR's reader sees the ❔ in the comment, not the log.
    warnings.extend(left_over_warnings(
        comparison, seconds_per_case, budget_ran_out=defaulted and not results.interrupted))
    return Reran(results, replace(comparison, warnings=tuple(warnings)), reruns, kept)


def compare_commits(
    *, repo: str | Path, base_rev: str, head_rev: str, build: str | None,
    config: RunConfig, settings: cmp.Settings, profile_path: str | None, budget_s: float | None,
    on_status: Callable[[str], None] = lambda _: None,
    history_db: str | None = None, history_machine: str | None = None,
    history_arms: tuple[str, ...] = (),
    started_at: float | None = None,
    ep_options: tuple[tuple[str, str], ...] = (),
    build_timeout_s: float = BUILD_TIMEOUT_S,
) -> CommitsResult:
    """Build both commits, run them interleaved, compare, re-run ambiguous cases
    (`rerun_order`) within budget.

    ``config`` holds the cases, rounds, gate, fallback and output directory; its arms
    are replaced by the two sides (the ORT control is added by the runner), each with
    ``ep_options`` (KEY, VALUE pairs) for its EP. A user-model case is read from its
    path now, hashed, and held to that hash in every pass (`pin_models`).

    ``history_db``: a history store (an existing SQLite file or a PostgreSQL URL), as
    reports.history.changes.history_to_check returns it (the caller checks it before calling,
    so a bad one fails before anything is built); after the run the comparison gets
    ``base_history``: whether the base commit sits in a change point of the run's
    cases in the series of ``history_machine`` (a machine key or class; default the
    run's own host key) and ``history_arms`` (default: every arm but the control).
    The store is only read, never migrated. When it cannot be read then, the run's
    files are written all the same: ``base_history`` carries the ``error`` and a note
    says so.

    ``started_at``: when the command began (``time.monotonic``; default: this call). With
    no ``budget_s``, the re-runs' budget ends by ``rerun_deadline`` counted from it.
    """

    if started_at is None:
        started_at = time.monotonic()
    check_ep_options(ep_options, build is None)
    root = repo_root(repo)
    notes = []
    if has_uncommitted_changes(root):
        notes.append(f"{root} has uncommitted changes: they are not measured "
                     "(compare-commits builds the commits themselves)")
    shas = {label: resolve_revision(root, rev)
            for label, rev in ((BASE_ARM, base_rev), (HEAD_ARM, head_rev))}
    # Before any build runs: what a user model is, is what the caller's file holds now.
    measure = pin_models(run, model_definitions(config))
    sides = {}
    for label, rev in ((BASE_ARM, base_rev), (HEAD_ARM, head_rev)):
        on_status(f"building {label} ({rev}, {shas[label][:10]})")
        # Guarded: a build that touched the output folder (or epbench) is refused here.
        sides[label] = build_commit(root, label, rev, shas[label], build,
                                    out_dir=config.out_dir, timeout_s=build_timeout_s)
    # What is measured is a copy in a folder of the harness's own, made after every build
    # has ended and checked against the sha256 recorded at build time.
    with tempfile.TemporaryDirectory(prefix="epbench-measured-") as measured:
        staged = {label: stage_for_measuring(side, Path(measured))
                  for label, side in sides.items()}
        arms = tuple(side_arm(staged[label], build is None, ep_options) for label in staged)
        started = time.monotonic()
        code_before = code_snapshot()
        first = measure(replace(config, arms=arms))
        # What the first pass cost: re-runs are planned from it so they fit the budget.
        first_pass_s = time.monotonic() - started
        # The host is the first pass's (re-runs only add rounds).
        host_key = first.host.key
        profile = cmp.load_profile_for(host_key, profile_path)

        def judge(results: Results, kept: Mapping[str, float]) -> Comparison:
            # One Results for both sides, so they are one run.
            comparison = cmp.compare(
                Side("base", results, BASE_ARM, f"{base_rev} ({shas[BASE_ARM][:10]})"),
                Side("pr", results, HEAD_ARM, f"{head_rev} ({shas[HEAD_ARM][:10]})"),
                settings=settings, profile=profile, kept=kept,
            )
            return cmp.with_reruns(comparison, results, kept)

        reran = rerun_ambiguous(
            first, replace(config, arms=arms), judge, budget_s=budget_s,
            started_at=started_at, first_pass_s=first_pass_s, runner=measure,
            on_status=on_status)
        results, comparison, reruns = reran.results, reran.comparison, reran.reruns
        changed = HarnessGuard.changes(code_before, code_snapshot())
        if changed:
            # The measurements stay on disk for a look; no verdict is written from code
            # that the libraries measured (or what they left running) may have rewritten.
            if config.out_dir is not None:
                write_results(Path(config.out_dir) / RESULTS_FILE, results.to_dict())
            raise BuildIsolationError(
                f"epbench's own code changed while the libraries ran ({len(changed)} file(s), "
                f"e.g. {changed[0]}): refusing to judge; results.json is kept, reinstall "
                "epbench and rerun")
        if history_db is not None:
            on_status("checking the base commit against the history's change points")
            machine = history_machine or str(host_key)
            try:
                with HistoryStore.open_for_reading(history_db) as store:
                    history = base_report(
                        store, shas[BASE_ARM], cases=list(results.cases), machine=machine,
                        arms=history_arms, is_ancestor=lambda a, b: is_ancestor(root, a, b))
            except HistoryError as exc:
                # The run is what took long and cannot be had again: the history's failure
                # (a connection lost, a store upgraded or locked meanwhile) costs only the check.
                history = base_report_error(
                    shas[BASE_ARM], machine, str(exc)[:HISTORY_ERROR_CHARS])
                notes.append(f"the base commit was not checked against the history: {exc}")
            comparison = replace(comparison, base_history=history)
        if config.out_dir is not None:
            write_outputs(config.out_dir, results, comparison)
        return CommitsResult(sides[BASE_ARM], sides[HEAD_ARM], results, comparison, reruns,
                             notes)

