"""Executes a validation Plan: the pilot, then each load's repeats, each run kept on disk.

A repeat (`Repeat`) holds, per path, the runs' results it compares; `kept_repeats` reads
the per-case ones back from the runs folder, so a validation can be judged again.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from epbench.core.errors import EpbenchError, Interrupted, disk_full
from epbench.core.model import Case, Results
from epbench.core.numbers import median
from epbench.core.results import load_results, write_results
from epbench.harness.arms import ArmSpec, copy_library, parse_arm, resolve_library
from epbench.harness.load import LOAD_KINDS, BackgroundLoad
from epbench.harness.run_config import RunConfig
from epbench.reports import compare as cmp
from epbench.reports import stats
from epbench.reports.comparison import Comparison, JsonValue
from epbench.workflows.compare_commits import rerun_ambiguous
from epbench.workflows.validate_plan import (
    BASE_ARM,
    COMMAND_SEED_STRIDE,
    COMMITS,
    COMMITS_SEED_OFFSET,
    LOAD_SEED_STRIDE,
    REPEAT_SEED_STRIDE,
    SAME_PROCESS,
    SEPARATE_RUNS,
    TWIN_ARM,
    Plan,
    arm_specs,
    commit_heads,
    delay_specs,
    level_arm,
    planned_repeat_s,
)

if TYPE_CHECKING:
    from epbench.cases.spec import CaseSpec

T = TypeVar("T")  # what write_or_fail writes: whatever its `write` takes

# The note of a validation a Ctrl-C cut short, however it landed.
INTERRUPTED_NOTE = "interrupted: the report covers the repeats finished before it"


# Seconds kept back at the end for comparing and writing the report.
RESERVE_S = 5.0
# Where every run's results document is kept, under --out, as soon as the run ends.
RUNS_DIR = "runs"
# The per-case runs of a repeat, as their kept files end (NNNN-LOAD-rR-CASE-KIND.json): the
# same-process run, and the separate-runs path's two plain runs and its PR run.
PATH_RUN_KINDS = {SAME_PROCESS: ("same",), SEPARATE_RUNS: ("base", "again", "pr")}
RUN_KINDS = tuple(kind for kinds in PATH_RUN_KINDS.values() for kind in kinds)
_KEPT_RUN = re.compile(r"^(?P<number>\d{4,})-(?P<load>[a-z]+)-r(?P<repeat>\d+)-(?P<case>.+)"
                       rf"-(?P<kind>{'|'.join(RUN_KINDS)})\.json$")
# Rounds of the pilot that measures each case's engine time (one process: it only sizes delays).
PILOT_ROUNDS = 4


class OwnBuilds:
    """Stand-ins for a PR's builds: each arm given loads its own copy of its library.

    A PR's head is another build, so another file, which the loader maps apart from base's;
    an arm naming base's own file shares base's mapping, so its A/A is easier than any PR's
    (2026-12-05, VM G: half-widths 0.1-0.7 % against the twin's 0.5-1.4 % in the same runs,
    docs/validation/README.md, "Own builds"). One copy per arm key, made on first use; the
    caller makes a fresh set for each repeat, as each PR brings a fresh build.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.paths: dict[str, str] = {}  # arm key -> its copy (its options vary by case)

    def of(self, arm: ArmSpec) -> ArmSpec:
        """``arm`` (an `engine[:OPTS]` arm) from its own copy of the engine library."""
        if arm.kind != "engine" or arm.target is not None:
            raise ValueError(f"only a bundled-engine arm gets a build of its own, not {arm.spec!r}")
        if arm.key not in self.paths:
            path = copy_library(resolve_library(arm), self.folder / arm.key, prefix="",
                                purpose=f"validate's arm {arm.key}, a stand-in for a PR's build",
                                otherwise=None)
            assert path is not None  # an engine arm always has a library
            self.paths[arm.key] = path
        path = self.paths[arm.key]
        opts = arm.spec.partition(":")[2]
        return replace(arm, spec=f"engine@{path}" + (f":{opts}" if opts else ""), target=path)

    def pr_side(self, arms: Sequence[ArmSpec]) -> tuple[ArmSpec, ...]:
        """Every arm but the base arm from its own build."""
        return tuple(a if a.key == BASE_ARM else self.of(a) for a in arms)


def finite_median(values: Sequence[float | None]) -> float | None:
    return median(v for v in values if v is not None and math.isfinite(v))


def engine_times(doc: Results, arm: str) -> dict[str, float]:
    """Median ns per Run of ``arm`` per case that ran (the pilot's measurement)."""

    out = {}
    for name, case in doc.cases.items():
        if not case.ok:
            continue
        ns = finite_median(list(stats.round_medians(case, arm)))
        if ns is not None and ns > 0:
            out[name] = ns
    return out


def _nodes(case: Case) -> int:
    arm = case.arms.get(BASE_ARM)
    return int((arm.nodes_executed if arm is not None else None) or 1)


def run_label(index: int, case: str, kind: str) -> str:
    """The kept file's label of repeat ``index`` (from 0)'s run of ``case``, one of RUN_KINDS."""
    return f"r{index + 1}-{case}-{kind}"


def kept_repeats(runs_dir: Path,
                 validation: Mapping[str, JsonValue]) -> dict[tuple[str, int], Repeat]:
    """The same-process and separate-runs repeats that ``validation`` (a validation
    document) summarized, by (load, repeat number from 1) in the order they ran, out of
    the runs validate kept in ``runs_dir``, cases merged as validate merges them. So a
    validation can be judged again (docs/validation).

    The first ``plan.repeats[load]`` of each load: a cut (a Ctrl-C, an error) ends the
    validation in its last repeat, whose per-case runs can all be on disk (the cut in a
    compare-commits command, or in a run's last process). A counted repeat that is not
    whole on disk is an error, not a repeat judged on less than validate judged.
    """
    plan, cases = validation["plan"], sorted(validation["cases"])
    kinds_ran = [kind for path in plan["paths"] for kind in PATH_RUN_KINDS.get(path, ())]
    if not kinds_ran:
        raise ValueError(f"the validation ran neither {' nor '.join(PATH_RUN_KINDS)}: no "
                         "per-case runs to read back")
    matched = [(int(m["number"]), m, path) for path in runs_dir.iterdir()
               if (m := _KEPT_RUN.match(path.name))]
    found: dict[tuple[str, int], dict[str, list[Results]]] = {}
    for _, m, path in sorted(matched, key=lambda item: item[0]):  # run order, past 9999 too
        if int(m["repeat"]) <= plan["repeats"].get(m["load"], 0):
            kinds = found.setdefault((m["load"], int(m["repeat"])), {})
            kinds.setdefault(m["kind"], []).append(load_results(path))
    repeats: dict[tuple[str, int], Repeat] = {}
    for (load, number), kinds in found.items():
        merged = {kind: merge_docs(docs) for kind, docs in kinds.items()}
        if (sorted(merged) != sorted(kinds_ran)
                or any(sorted(doc.cases) != cases or doc.interrupted
                       for doc in merged.values())):
            raise ValueError(f"repeat {number} of the {load} load, which the validation "
                             f"counted, is not whole in {runs_dir}")
        repeats[(load, number)] = repeat_of(load, merged)
    if len(repeats) != sum(plan["repeats"].values()):
        raise ValueError(f"{runs_dir} holds {len(repeats)} whole repeats of the per-case "
                         f"paths; the validation counted {plan['repeats']} on {plan['paths']}")
    return repeats


def repeat_of(load: str, merged: Mapping[str, Results]) -> Repeat:
    """A repeat from its per-case runs merged by kind (RUN_KINDS; a kind its plan left out
    missing)."""
    return Repeat(load, same_process=merged.get("same"), base=merged.get("base"),
                  base_again=merged.get("again"), pr=merged.get("pr"))


def merge_docs(docs: Sequence[Results]) -> Results:
    """One run's results from per-case runs of the same arms (one repeat): the first
    run's, with every run's cases, interrupted if any of them was."""
    cases: dict[str, Case] = {}
    for doc in docs:
        cases.update(doc.cases)
    return docs[0].replaced(cases=cases, interrupted=any(doc.interrupted for doc in docs))


@dataclass
class Repeat:
    """One repeat under one load: per path, the runs' results (cases merged) it compares;
    None (or empty) for a path the plan leaves out."""

    load: str
    same_process: Results | None = None
    # Separate runs: the two plain base runs (the A/A pair) and the PR run (delayed arms).
    base: Results | None = None
    base_again: Results | None = None
    pr: Results | None = None
    # compare-commits: per command ("aa", a level's arm), its results, re-runs merged, and
    # how long the command took.
    commits: dict[str, Results] = field(default_factory=dict)
    commits_s: dict[str, float] = field(default_factory=dict)
    # Per command, the detectable change kept per case re-run on ❔ (compare-commits'
    # Reran.kept), which its comparison states at least.
    commits_kept: dict[str, dict[str, float]] = field(default_factory=dict)

    def documents(self) -> list[Results]:
        """Every run's results of the repeat: the per-case paths' (same-process first), then
        the commands'."""
        docs = [self.same_process, self.base, self.base_again, self.pr, *self.commits.values()]
        return [d for d in docs if d is not None]


def make_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EpbenchError(f"cannot create {str(path)!r}: {exc.strerror}; pass --out DIR "
                           "somewhere writable") from None
    return path


def prepare_runs_dir(out_dir: str | Path) -> Path:
    """``OUT/runs``, made before anything runs (a bad --out fails at once), emptied of
    an earlier validation's runs so the folder holds this one's only."""
    runs = make_dir(Path(out_dir) / RUNS_DIR)
    for old in runs.glob("*.json"):
        old.unlink()
    return runs


def write_or_fail(write: Callable[[Path, T], None], path: Path, content: T, what: str,
                   remedy: str) -> None:
    """``write(path, content)``; an OSError (a full disk, say) as one epbench error, not a
    traceback: "cannot WHAT 'PATH': why; [free space on its disk or] REMEDY"."""
    try:
        write(path, content)
    except OSError as exc:
        room = "free space on its disk or " if disk_full(exc) else ""
        raise EpbenchError(f"cannot {what} {str(path)!r}: {exc.strerror or exc}; "
                           f"{room}{remedy}") from None


@dataclass(frozen=True)
class Pilot:
    """What the pilot measured, and the arms it sized from it."""

    config: RunConfig  # the pilot's own run; the position test and every run start from it
    engine_ns: dict[str, float]  # per case the engine ran, its median ns per Run
    specs: tuple[CaseSpec, ...]  # the cases the engine ran, in the plan's order
    same_arms: dict[str, tuple[ArmSpec, ...]]  # per case, its same-process run's arms
    pr_arms: dict[str, tuple[ArmSpec, ...]]  # per case, the separate-runs path's PR arms
    heads: dict[str, str]  # the compare-commits commands' head arms (`commit_heads`)

    @property
    def kept_ns(self) -> dict[str, float]:
        """The engine times of the cases validated (`specs`)."""
        return {c.name: self.engine_ns[c.name] for c in self.specs}


def run_pilot(plan: Plan, run: Callable[[RunConfig], Results],
              on_status: Callable[[str], None], notes: list[str]) -> Pilot:
    """Measure each case's engine time per Run and size the arms from it; a case the engine
    did not run is left out with a note, and none run is an error."""
    base_config = RunConfig(
        cases=plan.cases, arms=(parse_arm(f"engine:name={BASE_ARM}"),), rounds=PILOT_ROUNDS,
        processes=1, sessions=1, block_target_ms=plan.block_target_ms, seed=plan.seed,
        gate_policy=plan.gate_policy, gate_max_wait_s=plan.gate_max_wait_s, out_dir=None,
        grids=plan.grids,
    )
    on_status(f"pilot: measuring the engine's time per Run on {len(plan.cases)} case(s)")
    pilot = run(base_config)
    engine_ns = engine_times(pilot, BASE_ARM)
    for name, case in pilot.cases.items():
        if name not in engine_ns:
            notes.append(f"{name} left out: the engine did not run it ({case.error})")
    specs = [c for c in plan.cases if c.name in engine_ns]
    if not specs:
        raise EpbenchError("the engine ran none of the cases in the pilot, so there is nothing "
                           "to validate with; check `epbench run --arm engine` on them first")
    nodes = {name: _nodes(pilot.cases[name]) for name in engine_ns}
    same_arms = {c.name: tuple(parse_arm(s) for s in arm_specs(engine_ns[c.name], nodes[c.name],
                                                               plan.levels))
                 for c in specs}
    pr_arms = {c.name: tuple(parse_arm(s) for s in delay_specs(engine_ns[c.name], plan.levels))
               for c in specs}
    kept_ns = {c.name: engine_ns[c.name] for c in specs}
    return Pilot(config=base_config, engine_ns=engine_ns, specs=tuple(specs),
                 same_arms=same_arms, pr_arms=pr_arms, heads=commit_heads(kept_ns, plan.levels))


@dataclass
class Outcome:
    """What the repeats left: the finished repeats, the position test's run, how it ended."""

    repeats: list[Repeat] = field(default_factory=list)
    fixed_doc: Results | None = None
    interrupted: bool = False
    # The error that ended a later repeat (a build that could not be copied, a load that
    # died): the finished repeats are still reported, and the command then fails with it.
    stopped: EpbenchError | None = None
    repeat_times: list[float] = field(default_factory=list)  # of the finished repeats only


class Execution:
    """The runs of one validation after its pilot: each load's repeats, each run kept in
    ``runs_dir`` as it ends, counted in ``runs`` (the pilot is run 1)."""

    def __init__(self, plan: Plan, pilot: Pilot, *, settings: cmp.Settings,
                 run: Callable[[RunConfig], Results], clock: Callable[[], float],
                 on_status: Callable[[str], None],
                 load_factory: Callable[[str, int], AbstractContextManager[BackgroundLoad]],
                 runs_dir: str | Path | None, notes: list[str]) -> None:
        self.plan, self.pilot, self.settings = plan, pilot, settings
        self.run, self.clock, self.on_status = run, clock, on_status
        self.load_factory, self.runs_dir, self.notes = load_factory, runs_dir, notes
        self.measured = replace(pilot.config, rounds=plan.rounds, processes=plan.processes,
                                sessions=plan.sessions)
        self.runs = 1
        # The last command's detectable changes kept per case re-run on ❔ (`command`).
        self.last_kept: dict[str, float] = {}

    def keep(self, doc: Results, number: int, load: str, label: str) -> str:
        """Write ``doc`` into runs_dir as NNNN-LOAD-LABEL.json; what to say of where it is."""
        if self.runs_dir is None:
            return ""
        path = Path(self.runs_dir) / f"{number:04d}-{load}-{label}.json"
        # An error, not a traceback: validate then reports the repeats finished before.
        write_or_fail(write_results, path, doc.to_dict(), f"keep run {number} in",
                      "rerun validate with another --out (a rerun into this one empties "
                      "its runs folder)")
        return f"; the run is kept in {path}"

    def command(self, config: RunConfig, number: int, load: str, label: str) -> Results:
        """compare-commits' first pass and re-runs, judged as it judges them in CI (no
        profile), to its default deadline counted from the first pass's start. Each run is
        kept as it ends (a re-run as LABEL-rerunN); the caller keeps the merged results
        in the first pass's place."""
        began = self.clock()
        self.last_kept = {}
        doc = self.run(config)
        self.keep(doc, number, load, label)
        if doc.interrupted:
            return doc
        base_arm, head_arm = (a.key for a in config.arms)

        def judge(results: Results, kept: Mapping[str, float]) -> Comparison:
            return cmp.compare(cmp.Side("base", results, base_arm),
                               cmp.Side("pr", results, head_arm), settings=self.settings,
                               kept=kept)

        done = 0

        def rerun(rerun_config: RunConfig) -> Results:
            nonlocal done
            self.runs += 1
            done += 1
            extra = self.run(rerun_config)
            self.keep(extra, self.runs, load, f"{label}-rerun{done}")
            return extra

        reran = rerun_ambiguous(
            doc, config, judge, budget_s=None, started_at=began,
            first_pass_s=self.clock() - began, runner=rerun, clock=self.clock,
            on_status=self.on_status)
        self.last_kept = reran.kept
        return reran.results

    def measure(self, config: RunConfig, load: str, seed: int, label: str,
                whole_command: bool = False) -> Results | None:
        """One run (with ``whole_command``, one compare-commits command) under ``load``,
        kept; None when a Ctrl-C outside the runner's rounds lost it."""
        self.runs += 1
        number = self.runs
        # The load runs only while this run measures (with ``whole_command``, while
        # compare-commits' first pass and re-runs do), and is stopped however it ends.
        try:
            with self.load_factory(load, seed) as background:
                doc = (self.command(config, number, load, label) if whole_command
                       else self.run(config))
        except KeyboardInterrupt:
            # The runner makes a Ctrl-C between rounds an interrupted document; one that
            # lands elsewhere (a load or a worker starting) loses this run, not the
            # finished repeats (seen: a Ctrl-C as repeat 4 began lost the report of 3).
            return None
        kept = self.keep(doc, number, load, label)
        died = background.died
        if died:
            raise EpbenchError(
                f"the {load} load died during run {number} (exit code {died[0]}), so that run "
                f"was not measured under the load it is labelled with{kept}; rerun validate")
        return doc

    def one_repeat(self, load: str, index: int) -> Repeat | None:
        """The repeat's runs, or None when a Ctrl-C stopped one of them."""
        with tempfile.TemporaryDirectory(prefix="epbench-validate-builds-") as folder:
            return self.repeat_runs(load, index, OwnBuilds(Path(folder)))

    def repeat_runs(self, load: str, index: int, builds: OwnBuilds) -> Repeat | None:
        """One repeat, each PR-side arm from ``builds``."""
        plan, pilot = self.plan, self.pilot
        seed = (plan.seed + REPEAT_SEED_STRIDE * (index + 1)
                + LOAD_SEED_STRIDE * LOAD_KINDS.index(load))
        twin_a = BASE_ARM if plan.aa_twin else None
        plain = (parse_arm(f"engine:name={BASE_ARM}"),)
        runs_of = []
        if SAME_PROCESS in plan.paths:
            runs_of.append(("same", lambda name: builds.pr_side(pilot.same_arms[name]),
                            twin_a, 0))
        if SEPARATE_RUNS in plan.paths:
            # The second plain run is the PR side of the A/A: another build of the same code.
            runs_of += [("base", lambda _: plain, twin_a, 1),
                        ("again", lambda _: (builds.of(plain[0]),), twin_a, 2),
                        # The PR side twins its own first arm, as `run --aa-twin` on a PR would.
                        ("pr", lambda name: builds.pr_side(pilot.pr_arms[name]),
                         level_arm(plan.levels[0]) if plan.aa_twin else None, 3)]
        docs: dict[str, list[Results]] = {key: [] for key, *_ in runs_of}
        for offset, spec in enumerate(pilot.specs if runs_of else ()):
            self.on_status(f"{load} load, repeat {index + 1}: {spec.name}")
            s = seed + 10 * offset
            for key, arms, twin, extra in runs_of:
                doc = self.measure(replace(
                    self.measured, cases=(spec,), arms=arms(spec.name), aa_twin=twin,
                    seed=s + extra,
                ), load, s + extra, run_label(index, spec.name, key))
                if doc is None or doc.interrupted:
                    return None
                docs[key].append(doc)
        merged = {key: merge_docs(found) for key, found in docs.items()}
        rep = repeat_of(load, merged)
        if COMMITS in plan.paths:
            for offset, (what, head) in enumerate(pilot.heads.items()):
                self.on_status(f"{load} load, repeat {index + 1}: compare-commits, {what}")
                s = seed + COMMITS_SEED_OFFSET + COMMAND_SEED_STRIDE * offset
                began = self.clock()
                doc = self.measure(replace(
                    self.measured, cases=tuple(pilot.specs),
                    arms=(*plain, builds.of(parse_arm(head))),
                    aa_twin=twin_a,
                    seed=s, instructions=plan.commit_instructions,
                ), load, s, f"r{index + 1}-commits-{what}", whole_command=True)
                if doc is None or doc.interrupted:
                    return None
                rep.commits[what] = doc
                rep.commits_s[what] = self.clock() - began
                rep.commits_kept[what] = self.last_kept
        return rep

    def position_run(self) -> Results | None:
        """The A/A run in a fixed arm order (``ort``, ``a``, ``a2`` every round); None when
        a Ctrl-C lost it."""
        plan = self.plan
        # a2 its own build, as in the counterbalanced runs it is set against.
        with tempfile.TemporaryDirectory(prefix="epbench-validate-builds-") as folder:
            return self.measure(replace(
                self.pilot.config, cases=tuple(self.pilot.specs),
                arms=OwnBuilds(Path(folder)).pr_side(
                    (parse_arm(f"engine:name={BASE_ARM}"),
                     parse_arm(f"engine:name={TWIN_ARM}"))),
                rounds=plan.rounds, fixed_order=True, seed=plan.seed + 999,
            ), "none", plan.seed + 999, "position")

    def repeat_loads(self, start: float) -> Outcome:
        """Each load's repeats within its share of the budget left after ``start``; a
        Ctrl-C or an error after the first repeat ends them, and the Outcome says so."""
        plan, clock, out = self.plan, self.clock, Outcome()
        try:
            for position, load in enumerate(plan.loads):
                # Each load gets an equal share of what is left, so an early one cannot
                # starve the rest.
                left = plan.budget_s - RESERVE_S - (clock() - start)
                share = left / (len(plan.loads) - position)
                if self._repeat_load(load, share, out):
                    break
        except (KeyboardInterrupt, Interrupted):
            # One outside a run (copying a build): as one inside it, once a repeat has finished.
            if not out.repeats:
                raise
            out.interrupted = True
            self.notes.append(INTERRUPTED_NOTE)
        except EpbenchError as exc:
            if not out.repeats:
                raise
            out.stopped = exc
            self.notes.append(f"stopped: {exc.message}; the report covers the "
                              f"{len(out.repeats)} repeat(s) finished before it")
        if not out.repeats:
            raise Interrupted("interrupted before the first repeat finished: nothing to "
                              "summarize" + (f"; the runs measured are in {self.runs_dir}"
                                             if self.runs_dir is not None else ""))
        return out

    def _repeat_load(self, load: str, share: float, out: Outcome) -> bool:
        """One load's repeats into ``out`` within ``share`` seconds; True when interrupted."""
        plan, clock = self.plan, self.clock
        load_start = clock()
        done, spent = 0, 0.0
        # With --target-mde a command re-runs until its deadline unless every case reached
        # the target, which a repeat that ended sooner does not promise of the next: the next
        # is planned at its commands' deadlines at least, so the budget holds.
        planned = planned_repeat_s(plan, len(self.pilot.specs))
        while done < plan.max_repeats:
            if done and (clock() - load_start) + max(spent / done, planned) > share:
                # Said, since a load's figures with fewer repeats are weaker than asked for.
                why = (f"one more would not fit its share of the budget ({share:.0f} s)"
                       if share > 0 else "the budget was spent before it began")
                self.notes.append(f"{load} load: {done} of {plan.max_repeats} repeats, as "
                                  f"{why}; raise --budget for more")
                break
            began = clock()
            rep = self.one_repeat(load, done)
            spent += clock() - began
            if rep is None:
                out.interrupted = True
                self.notes.append(INTERRUPTED_NOTE)
                break
            out.repeats.append(rep)
            out.repeat_times.append(clock() - began)
            done += 1
            if (out.fixed_doc is None and plan.position_test and load == "none"
                    and SAME_PROCESS in plan.paths):
                # Right after the first unloaded repeat, so the budget cannot squeeze it out.
                self.on_status("position test: A/A in a fixed arm order")
                fixed = self.position_run()
                if fixed is None or fixed.interrupted:
                    out.interrupted = True
                    self.notes.append(INTERRUPTED_NOTE)
                    break
                out.fixed_doc = fixed
        return out.interrupted
