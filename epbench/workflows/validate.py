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
  (`commit_heads`); each case's share is recorded.

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
"""

from __future__ import annotations

import math
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epbench.core.errors import EpbenchError, Interrupted, disk_full
from epbench.core.model import Results
from epbench.core.numbers import median
from epbench.core.results import atomic_write_text, load_results, write_results
from epbench.harness.arms import ArmSpec, copy_library, parse_arm, resolve_library
from epbench.harness.load import LOAD_KINDS, BackgroundLoad, background_load
from epbench.harness.runner import RunConfig
from epbench.harness.runner import defaults as run_defaults
from epbench.harness.runner import run as real_run
from epbench.reports import calibrate as cal
from epbench.reports import compare as cmp
from epbench.reports import defaults as verdict_defaults
from epbench.reports import stats
from epbench.reports.render import environment, to_json
from epbench.workflows.compare_commits import (
    COMMITS_GATE_MAX_WAIT_S,
    COMMITS_PROCESSES,
    COMMITS_ROUNDS,
    DEFAULT_TARGET_S_PER_CASE,
    REPORT_RESERVE_S,
    rerun_ambiguous,
)

if TYPE_CHECKING:
    from epbench.cases.spec import CaseSpec

# 2: results per (path, load, profile); compare-commits' replication settings.
# 3: the compare-commits path (the whole command, re-runs included), plan.paths.
# 4: plan.levels any set of whole percents (--levels), where it was always LEVELS.
# 5: plan.own_builds: every arm but the base loads its own copy of the library (OwnBuilds).
# 6: stopped: the error that ended the validation after some repeats, else null.
VALIDATION_SCHEMA = "epbench.validation/6"
# The note of a validation a Ctrl-C cut short, however it landed.
INTERRUPTED_NOTE = "interrupted: the report covers the repeats finished before it"
SAME_PROCESS = "same-process"
SEPARATE_RUNS = "separate-runs"
COMMITS = "compare-commits"
PATHS = (SAME_PROCESS, SEPARATE_RUNS, COMMITS)
PATHS_HELP = (f"--path takes a comma list of {', '.join(PATHS)}; "
              f"e.g. --path {SAME_PROCESS},{COMMITS}")
# Seeds: a repeat's runs take seeds from its base (per load and repeat), the per-case
# runs below COMMITS_SEED_OFFSET (10 a case), each command's first pass and re-runs
# (+1 each; a command's deadline allows far fewer than COMMAND_SEED_STRIDE)
# COMMAND_SEED_STRIDE apart above it, all below the next repeat's base; a load's
# repeats (at most MAX_REPEATS) all below the next load's. Every seed is a run's own.
COMMITS_SEED_OFFSET = 1_000_000
COMMAND_SEED_STRIDE = 1_000_000
REPEAT_SEED_STRIDE = 10_000_000
LOAD_SEED_STRIDE = 1_000_000_000
MAX_REPEATS = LOAD_SEED_STRIDE // REPEAT_SEED_STRIDE - 1
# Injected slowdowns, as fractions of the case's measured engine time per Run: the
# default --levels. Fewer levels make a repeat shorter (the compare-commits path runs one
# command per level), so a target such as a 2 % MDE can be checked over more repeats.
LEVELS = (0.01, 0.02, 0.03, 0.05, 0.10)
# --levels: whole percents, so each level's arm key (d2, d10) names one level only; at
# most as many as leave every command of a repeat its own seeds (the strides above).
MAX_LEVEL_PERCENT = 50
MAX_LEVELS = (REPEAT_SEED_STRIDE - COMMITS_SEED_OFFSET) // COMMAND_SEED_STRIDE - 1
LEVELS_HELP = (f"--levels takes a comma list of at most {MAX_LEVELS} whole percents from 1 to "
               f"{MAX_LEVEL_PERCENT}; e.g. --levels 2,3")
# The level also injected per node (inject_delay_ns_per_node), to check that path too.
PER_NODE_LEVEL = 0.05
# Extra harmless ORT API calls per Run on the counter arm.
API_CALLS = 5
# Verdicts that count as "flagged a slowdown": a false positive in A/A, a detection otherwise.
FLAGGED = frozenset({"regression", "alert"})
# A level is detectable when flagged in at least this share of repeats.
POWER_TARGET = 0.95
BASE_ARM = "a"
TWIN_ARM = "a2"
COUNTER_ARM = "c"
PER_NODE_ARM = "n5"
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
# validation.md lists this many notes (validate's own come first); validation.json has all:
# on a drifting machine the comparator warns in every comparison of every repeat.
NOTES_SHOWN = 12
_RUN = run_defaults()


def level_arm(level: float) -> str:
    """The arm key (and registration name) of an injected level: 0.05 -> d5."""
    return f"d{round(level * 100):d}"


@dataclass(frozen=True)
class Plan:
    """What validate runs, from its options; recorded in validation.json.

    The replication defaults are compare-commits' own (its module constants and the
    runner's defaults), so validation measures the settings a PR is judged with.
    """

    cases: tuple[CaseSpec, ...]
    # Room for a few repeats of the quick grid on every path: one takes 11-15 minutes on VM F
    # (per-case paths 250-350 s, six commands 7-9 min; docs/validation/README.md, 2026-12-05).
    budget_s: float = 3600.0
    rounds: int = COMMITS_ROUNDS
    processes: int = COMMITS_PROCESSES
    sessions: int = _RUN["sessions"]
    aa_twin: bool = True
    block_target_ms: float = _RUN["block_target_ms"]
    max_repeats: int = 50
    seed: int = 0
    position_test: bool = True
    gate_policy: str = _RUN["gate_policy"]
    gate_max_wait_s: float = COMMITS_GATE_MAX_WAIT_S
    loads: tuple[str, ...] = ("none",)
    grids: tuple[str, ...] = field(default_factory=tuple)
    paths: tuple[str, ...] = PATHS
    # The compare-commits path's instruction counting: compare-commits' default where the
    # caller found valgrind (`default_instructions`), which the first pass then includes.
    commit_instructions: str | None = None
    levels: tuple[float, ...] = LEVELS

    def __post_init__(self) -> None:
        if (self.budget_s <= 0 or self.rounds < 5
                or not 1 <= self.max_repeats <= MAX_REPEATS):
            raise EpbenchError("--budget must be > 0, --rounds >= 5 and --max-repeats "
                               f"1 to {MAX_REPEATS}; "
                               "e.g. --budget 600 --rounds 48")
        if self.processes < 1 or self.sessions < 1:
            raise EpbenchError("--processes and --sessions must be at least 1; "
                               f"e.g. compare-commits' --processes {COMMITS_PROCESSES}")
        if not self.loads or any(k not in LOAD_KINDS for k in self.loads):
            raise EpbenchError(f"--load takes a comma list of {', '.join(LOAD_KINDS)}; "
                               "e.g. --load none,sustained")
        if not self.cases:
            raise EpbenchError("no cases to validate with: pass --grid NAME or --case NAME")
        if not self.paths or any(p not in PATHS for p in self.paths):
            raise EpbenchError(PATHS_HELP)
        percents = {round(level * 100) if math.isfinite(level) else 0 for level in self.levels}
        if (not percents or len(percents) > MAX_LEVELS
                or not all(math.isfinite(level) and math.isclose(level * 100, round(level * 100))
                           for level in self.levels)
                or not all(1 <= p <= MAX_LEVEL_PERCENT for p in percents)):
            raise EpbenchError(LEVELS_HELP)
        # In PATHS' order, whichever order they were given in: the report's order.
        object.__setattr__(self, "paths", tuple(p for p in PATHS if p in self.paths))
        # Ascending and distinct (as whole percents: one arm each): the MDE is the first
        # level that reached the target.
        object.__setattr__(self, "levels", tuple(p / 100 for p in sorted(percents)))


def parse_paths(text: str) -> tuple[str, ...]:
    """``same-process,compare-commits`` -> the paths in PATHS' order; one clear error else."""
    named = {p.strip() for p in text.split(",") if p.strip()}
    if not named or named - set(PATHS):
        raise EpbenchError(f"{PATHS_HELP} (not {text!r})")
    return tuple(p for p in PATHS if p in named)


def parse_levels(text: str) -> tuple[float, ...]:
    """``3,2`` -> (0.02, 0.03): whole percents, ascending; one clear error else."""
    try:
        percents = {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        raise EpbenchError(f"{LEVELS_HELP} (not {text!r})") from None
    if (not percents or len(percents) > MAX_LEVELS
            or any(not 1 <= p <= MAX_LEVEL_PERCENT for p in percents)):
        raise EpbenchError(f"{LEVELS_HELP} (not {text!r})")
    return tuple(p / 100 for p in sorted(percents))


def arm_specs(engine_ns: float, n_nodes: int,
              levels: Sequence[float] = LEVELS) -> list[str]:
    """The arm specs of one case's same-process run: A/A, levels, per-node, counters."""
    specs = [f"engine:name={BASE_ARM}", f"engine:name={TWIN_ARM}"]
    specs.extend(delay_specs(engine_ns, levels))
    per_node = max(1, round(PER_NODE_LEVEL * engine_ns / max(1, n_nodes)))
    specs.append(f"engine:name={PER_NODE_ARM},inject_delay_ns_per_node={per_node}")
    specs.append(f"engine:name={COUNTER_ARM},inject_api_calls_per_run={API_CALLS}")
    return specs


def delay_specs(engine_ns: float, levels: Sequence[float] = LEVELS) -> list[str]:
    """One arm per injected level: the PR side of the separate-runs path."""
    return [f"engine:name={level_arm(level)},inject_delay_ns_per_run="
            f"{max(1, round(level * engine_ns))}" for level in levels]


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


def wilson_interval(hits: int, n: int, z: float = 1.959964) -> list[float | None]:
    """95 % Wilson score interval of a proportion (sane at 0 and at n, unlike the normal one)."""
    if n == 0:
        return [None, None]
    p = hits / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return [max(0.0, centre - half), min(1.0, centre + half)]


def proportion(hits: int, n: int) -> dict[str, Any]:
    return {"hits": hits, "n": n, "rate": hits / n if n else None, "ci": wilson_interval(hits, n)}


def _finite_median(values: Sequence[float | None]) -> float | None:
    return median(v for v in values if v is not None and math.isfinite(v))


def engine_times(doc: Mapping[str, Any], arm: str) -> dict[str, float]:
    """Median ns per Run of ``arm`` per case that ran (the pilot's measurement)."""

    out = {}
    for name, case in Results.from_dict(doc, source="the pilot run").cases.items():
        if not case.ok:
            continue
        ns = _finite_median(list(stats.round_medians(case, arm)))
        if ns is not None and ns > 0:
            out[name] = ns
    return out


def counter_check(rows: Sequence[Mapping[str, Any]], case: str) -> tuple[bool, str]:
    """Did the counter table show exactly API_CALLS more ORT calls per Run, and nothing else?"""
    mine = [r for r in rows if r["case"] == case]
    calls = [r for r in mine if r["counter"] == "ort_api_calls"]
    others = [r["counter"] for r in mine if r["counter"] != "ort_api_calls"]
    if not calls:
        return False, "no ort_api_calls change in the counter table"
    base, pr = calls[0]["base"], calls[0]["pr"]
    if base is None or pr is None or pr - base != API_CALLS:
        return False, f"ort_api_calls/Run {base} -> {pr}, expected +{API_CALLS}"
    if others:
        return False, f"other counters changed too: {', '.join(others)}"
    return True, f"ort_api_calls/Run {base:g} -> {pr:g}"


def run_label(index: int, case: str, kind: str) -> str:
    """The kept file's label of repeat ``index`` (from 0)'s run of ``case``, one of RUN_KINDS."""
    return f"r{index + 1}-{case}-{kind}"


def kept_repeats(runs_dir: Path, validation: Mapping[str, Any]) -> dict[tuple[str, int], Repeat]:
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
    found: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {}
    for _, m, path in sorted(matched, key=lambda item: item[0]):  # run order, past 9999 too
        if int(m["repeat"]) <= plan["repeats"].get(m["load"], 0):
            kinds = found.setdefault((m["load"], int(m["repeat"])), {})
            kinds.setdefault(m["kind"], []).append(load_results(path).to_dict())
    repeats: dict[tuple[str, int], Repeat] = {}
    for (load, number), kinds in found.items():
        merged = {kind: merge_docs(docs) for kind, docs in kinds.items()}
        if (sorted(merged) != sorted(kinds_ran)
                or any(sorted(doc["cases"]) != cases or doc["interrupted"]
                       for doc in merged.values())):
            raise ValueError(f"repeat {number} of the {load} load, which the validation "
                             f"counted, is not whole in {runs_dir}")
        repeats[(load, number)] = repeat_of(load, merged)
    if len(repeats) != sum(plan["repeats"].values()):
        raise ValueError(f"{runs_dir} holds {len(repeats)} whole repeats of the per-case "
                         f"paths; the validation counted {plan['repeats']} on {plan['paths']}")
    return repeats


def repeat_of(load: str, merged: Mapping[str, dict[str, Any]]) -> Repeat:
    """A repeat from its per-case runs merged by kind (RUN_KINDS; a kind its plan left out
    missing)."""
    return Repeat(load, same_process=merged.get("same"), base=merged.get("base"),
                  base_again=merged.get("again"), pr=merged.get("pr"))


def merge_docs(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One results document from per-case runs of the same arms (one repeat)."""
    merged = dict(docs[0])
    merged["cases"] = {}
    merged["interrupted"] = False
    for doc in docs:
        merged["cases"].update(doc.get("cases", {}))
        merged["interrupted"] = merged["interrupted"] or bool(doc.get("interrupted"))
    return merged


def median_case(engine_ns: Mapping[str, float]) -> str:
    """The case whose engine time is the median's (the lower middle of an even count), so
    one case gets the nominal levels exactly."""
    ranked = sorted(engine_ns, key=lambda name: (engine_ns[name], name))
    return ranked[(len(ranked) - 1) // 2]


def commit_head_arm(what: str) -> str:
    """The head arm's key of the compare-commits command that compares ``what``."""
    return TWIN_ARM if what == "aa" else what


def commit_heads(engine_ns: Mapping[str, float],
                 levels: Sequence[float] = LEVELS) -> dict[str, str]:
    """The head arm of each compare-commits command of a repeat, by what it compares: the
    plain engine (A/A) and one arm per level. One run holds every case, as compare-commits'
    does, so a level's delay is one number: the level of `median_case`'s engine time
    (`commit_shares` gives what each case got)."""
    delays = delay_specs(engine_ns[median_case(engine_ns)], levels)
    return {"aa": f"engine:name={commit_head_arm('aa')}",
            **{level_arm(level): spec for level, spec in zip(levels, delays, strict=True)}}


def commit_shares(engine_ns: Mapping[str, float]) -> dict[str, float]:
    """Per case, the share of its own time the compare-commits path's delays are of the
    nominal level: 1 for `median_case`, above 1 for faster cases, below for slower."""
    reference = engine_ns[median_case(engine_ns)]
    return {name: reference / ns for name, ns in engine_ns.items()}


@dataclass
class Repeat:
    """One repeat under one load: per path, the documents (cases merged) it compares; None
    (or empty) for a path the plan leaves out."""

    load: str
    same_process: dict[str, Any] | None = None
    # Separate runs: the two plain base runs (the A/A pair) and the PR run (delayed arms).
    base: dict[str, Any] | None = None
    base_again: dict[str, Any] | None = None
    pr: dict[str, Any] | None = None
    # compare-commits: per command ("aa", a level's arm), its document, re-runs merged, and
    # how long the command took.
    commits: dict[str, dict[str, Any]] = field(default_factory=dict)
    commits_s: dict[str, float] = field(default_factory=dict)

    def documents(self) -> list[dict[str, Any]]:
        """Every document of the repeat: the per-case paths' (same-process first), then the
        commands'."""
        docs = [self.same_process, self.base, self.base_again, self.pr, *self.commits.values()]
        return [d for d in docs if d is not None]


def validate(
    plan: Plan,
    *,
    settings: Any = None,
    profile_path: str | None = None,
    run: Callable[[Any], dict[str, Any]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_status: Callable[[str], None] = lambda _: None,
    load_factory: Callable[[str, int], AbstractContextManager[BackgroundLoad]] = background_load,
    runs_dir: str | Path | None = None,
) -> dict[str, Any]:
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
    settings = settings or cmp.Settings()
    start = clock()
    notes: list[str] = []
    base_config = RunConfig(
        cases=plan.cases, arms=(parse_arm(f"engine:name={BASE_ARM}"),), rounds=PILOT_ROUNDS,
        processes=1, sessions=1, block_target_ms=plan.block_target_ms, seed=plan.seed,
        gate_policy=plan.gate_policy, gate_max_wait_s=plan.gate_max_wait_s, out_dir=None,
        grids=plan.grids,
    )
    on_status(f"pilot: measuring the engine's time per Run on {len(plan.cases)} case(s)")
    pilot = run(base_config)
    engine_ns = engine_times(pilot, BASE_ARM)
    for name, case in pilot.get("cases", {}).items():
        if name not in engine_ns:
            notes.append(f"{name} left out: the engine did not run it ({case.get('error')})")
    specs = [c for c in plan.cases if c.name in engine_ns]
    if not specs:
        raise EpbenchError("the engine ran none of the cases in the pilot, so there is nothing "
                           "to validate with; check `epbench run --arm engine` on them first")
    nodes = {name: _nodes(pilot["cases"][name]) for name in engine_ns}
    same_arms = {c.name: tuple(parse_arm(s) for s in arm_specs(engine_ns[c.name], nodes[c.name],
                                                               plan.levels))
                 for c in specs}
    pr_arms = {c.name: tuple(parse_arm(s) for s in delay_specs(engine_ns[c.name], plan.levels))
               for c in specs}
    kept_ns = {c.name: engine_ns[c.name] for c in specs}
    heads = commit_heads(kept_ns, plan.levels)
    if plan.position_test and SAME_PROCESS not in plan.paths:
        notes.append("no position test: its counterbalanced side is the same-process runs, "
                     "and that path was not run")
    measured = replace(base_config, rounds=plan.rounds, processes=plan.processes,
                       sessions=plan.sessions)
    pilot_s = clock() - start
    runs = 1

    def keep(doc: dict[str, Any], number: int, load: str, label: str) -> str:
        """Write ``doc`` into runs_dir as NNNN-LOAD-LABEL.json; what to say of where it is."""
        if runs_dir is None:
            return ""
        path = Path(runs_dir) / f"{number:04d}-{load}-{label}.json"
        # An error, not a traceback: validate then reports the repeats finished before.
        _write_or_fail(write_results, path, doc, f"keep run {number} in",
                       "rerun validate with another --out (a rerun into this one empties "
                       "its runs folder)")
        return f"; the run is kept in {path}"

    def command(config: RunConfig, number: int, load: str, label: str) -> dict[str, Any]:
        """compare-commits' first pass and re-runs, judged as it judges them in CI (no
        profile), to its default deadline counted from the first pass's start. Each run is
        kept as it ends (a re-run as LABEL-rerunN); the caller keeps the merged document
        in the first pass's place."""
        began = clock()
        doc = run(config)
        keep(doc, number, load, label)
        if doc.get("interrupted"):
            return doc
        base_arm, head_arm = (a.key for a in config.arms)

        def judge() -> dict[str, Any]:
            results = Results.from_dict(doc, source="a compare-commits run")
            return cmp.compare(cmp.Side("base", results, base_arm),
                               cmp.Side("pr", results, head_arm), settings=settings)

        done = 0

        def rerun(rerun_config: RunConfig) -> dict[str, Any]:
            nonlocal runs, done
            runs += 1
            done += 1
            extra = run(rerun_config)
            keep(extra, runs, load, f"{label}-rerun{done}")
            return extra

        rerun_ambiguous(doc, config, judge, budget_s=None, started_at=began,
                        first_pass_s=clock() - began,
                        runner=rerun, clock=clock, on_status=on_status)
        return doc

    def measure(config: RunConfig, load: str, seed: int, label: str,
                whole_command: bool = False) -> dict[str, Any]:
        nonlocal runs
        runs += 1
        number = runs
        # The load runs only while this run measures (with ``whole_command``, while
        # compare-commits' first pass and re-runs do), and is stopped however it ends.
        try:
            with load_factory(load, seed) as background:
                doc = (command(config, number, load, label) if whole_command
                       else run(config))
        except KeyboardInterrupt:
            # The runner makes a Ctrl-C between rounds an interrupted document; one that
            # lands elsewhere (a load or a worker starting) loses this run, not the
            # finished repeats (seen: a Ctrl-C as repeat 4 began lost the report of 3).
            return {"interrupted": True}
        kept = keep(doc, number, load, label)
        died = background.died
        if died:
            raise EpbenchError(
                f"the {load} load died during run {number} (exit code {died[0]}), so that run "
                f"was not measured under the load it is labelled with{kept}; rerun validate")
        return doc

    def one_repeat(load: str, index: int) -> Repeat | None:
        """The repeat's runs, or None when a Ctrl-C stopped one of them."""
        with tempfile.TemporaryDirectory(prefix="epbench-validate-builds-") as folder:
            return repeat_runs(load, index, OwnBuilds(Path(folder)))

    def repeat_runs(load: str, index: int, builds: OwnBuilds) -> Repeat | None:
        """One repeat, each PR-side arm from ``builds``."""
        seed = (plan.seed + REPEAT_SEED_STRIDE * (index + 1)
                + LOAD_SEED_STRIDE * LOAD_KINDS.index(load))
        twin_a = BASE_ARM if plan.aa_twin else None
        plain = (parse_arm(f"engine:name={BASE_ARM}"),)
        runs_of = []
        if SAME_PROCESS in plan.paths:
            runs_of.append(("same", lambda name: builds.pr_side(same_arms[name]), twin_a, 0))
        if SEPARATE_RUNS in plan.paths:
            # The second plain run is the PR side of the A/A: another build of the same code.
            runs_of += [("base", lambda _: plain, twin_a, 1),
                        ("again", lambda _: (builds.of(plain[0]),), twin_a, 2),
                        # The PR side twins its own first arm, as `run --aa-twin` on a PR would.
                        ("pr", lambda name: builds.pr_side(pr_arms[name]),
                         level_arm(plan.levels[0]) if plan.aa_twin else None, 3)]
        docs: dict[str, list[dict[str, Any]]] = {key: [] for key, *_ in runs_of}
        for offset, spec in enumerate(specs if runs_of else ()):
            on_status(f"{load} load, repeat {index + 1}: {spec.name}")
            s = seed + 10 * offset
            for key, arms, twin, extra in runs_of:
                doc = measure(replace(
                    measured, cases=(spec,), arms=arms(spec.name), aa_twin=twin, seed=s + extra,
                ), load, s + extra, run_label(index, spec.name, key))
                if doc.get("interrupted"):
                    return None
                docs[key].append(doc)
        merged = {key: merge_docs(found) for key, found in docs.items()}
        rep = repeat_of(load, merged)
        if COMMITS in plan.paths:
            for offset, (what, head) in enumerate(heads.items()):
                on_status(f"{load} load, repeat {index + 1}: compare-commits, {what}")
                s = seed + COMMITS_SEED_OFFSET + COMMAND_SEED_STRIDE * offset
                began = clock()
                doc = measure(replace(
                    measured, cases=tuple(specs), arms=(*plain, builds.of(parse_arm(head))),
                    aa_twin=twin_a,
                    seed=s, instructions=plan.commit_instructions,
                ), load, s, f"r{index + 1}-commits-{what}", whole_command=True)
                if doc.get("interrupted"):
                    return None
                rep.commits[what] = doc
                rep.commits_s[what] = clock() - began
        return rep

    repeats: list[Repeat] = []
    fixed_doc = None
    interrupted = False
    # The error that ended a later repeat (a build that could not be copied, a load that
    # died): the finished repeats are still reported, and the command then fails with it.
    stopped: EpbenchError | None = None
    repeat_times: list[float] = []  # of the finished repeats, not a cut one
    try:
        for position, load in enumerate(plan.loads):
            # Each load gets an equal share of what is left, so an early one cannot starve the rest.
            left = plan.budget_s - RESERVE_S - (clock() - start)
            share = left / (len(plan.loads) - position)
            load_start = clock()
            done, spent = 0, 0.0
            while done < plan.max_repeats:
                if done and (clock() - load_start) + spent / done > share:
                    # Said, since a load's figures with fewer repeats are weaker than asked for.
                    why = (f"one more would not fit its share of the budget ({share:.0f} s)"
                           if share > 0 else "the budget was spent before it began")
                    notes.append(f"{load} load: {done} of {plan.max_repeats} repeats, as {why}; "
                                 "raise --budget for more")
                    break
                began = clock()
                rep = one_repeat(load, done)
                spent += clock() - began
                if rep is None:
                    interrupted = True
                    notes.append(INTERRUPTED_NOTE)
                    break
                repeats.append(rep)
                repeat_times.append(clock() - began)
                done += 1
                if (fixed_doc is None and plan.position_test and load == "none"
                        and SAME_PROCESS in plan.paths):
                    # Right after the first unloaded repeat, so the budget cannot squeeze it out.
                    on_status("position test: A/A in a fixed arm order")
                    # a2 its own build, as in the counterbalanced runs it is set against.
                    with tempfile.TemporaryDirectory(prefix="epbench-validate-builds-") as folder:
                        fixed_doc = measure(replace(
                            base_config, cases=tuple(specs),
                            arms=OwnBuilds(Path(folder)).pr_side(
                                (parse_arm(f"engine:name={BASE_ARM}"),
                                 parse_arm(f"engine:name={TWIN_ARM}"))),
                            rounds=plan.rounds, fixed_order=True, seed=plan.seed + 999,
                        ), "none", plan.seed + 999, "position")
                    if fixed_doc.get("interrupted"):
                        interrupted = True
                        fixed_doc = None
                        notes.append(INTERRUPTED_NOTE)
                        break
            if interrupted:
                break
    except (KeyboardInterrupt, Interrupted):
        # One outside a run (copying a build): as one inside it, once a repeat has finished.
        if not repeats:
            raise
        interrupted = True
        notes.append(INTERRUPTED_NOTE)
    except EpbenchError as exc:
        if not repeats:
            raise
        stopped = exc
        notes.append(f"stopped: {exc.message}; the report covers the {len(repeats)} "
                     "repeat(s) finished before it")
    if not repeats:
        raise Interrupted("interrupted before the first repeat finished: nothing to "
                           "summarize" + (f"; the runs measured are in {runs_dir}"
                                          if runs_dir is not None else ""))
    elapsed = clock() - start
    if elapsed > plan.budget_s:
        notes.append(f"over budget: {elapsed:.0f} s for a budget of {plan.budget_s:.0f} s "
                     "(every load gets at least one repeat, and one took longer than its "
                     "share); raise --budget, validate fewer cases or fewer loads")
    on_status(f"comparing {len(repeats)} repeat(s)")
    first = repeats[0].documents()[0]
    host = first.get("host") or {}
    profile = cmp.load_profile_for(host.get("key"), profile_path)
    result = summarize(repeats, fixed_doc, engine_ns, settings=settings, profile=profile,
                       loads=[k for k in plan.loads if any(r.load == k for r in repeats)],
                       levels=plan.levels)
    per_load = {k: sum(r.load == k for r in repeats) for k in plan.loads}
    result.update({
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": first.get("host"),
        # The harness's own cost per timed call, as the first run measured it.
        "overhead": first.get("overhead"),
        "plan": {
            "grids": list(plan.grids), "cases": [c.name for c in specs],
            "budget_s": plan.budget_s,
            "rounds": int(first["config"]["rounds"]),
            "rounds_requested": plan.rounds, "processes": plan.processes,
            "sessions": plan.sessions, "aa_twin": plan.aa_twin, "own_builds": True,
            "block_target_ms": plan.block_target_ms, "loads": list(plan.loads),
            "repeats": per_load, "max_repeats": plan.max_repeats,
            "position_test": fixed_doc is not None, "gate_policy": plan.gate_policy,
            "gate_max_wait_s": plan.gate_max_wait_s,
            "levels": list(plan.levels), "per_node_level": PER_NODE_LEVEL, "api_calls": API_CALLS,
            "arms": {name: [a.spec for a in arms] for name, arms in same_arms.items()},
            "pr_arms": {name: [a.spec for a in arms] for name, arms in pr_arms.items()},
            "paths": list(plan.paths),
            "commit_heads": heads,
            "commit_median_case": median_case(kept_ns),
            "commit_shares": commit_shares(kept_ns),
            "commit_instructions": plan.commit_instructions,
            "runs": runs, "pilot_s": round(pilot_s, 1),
            "repeat_s": round(statistics.fmean(repeat_times), 1),
            "elapsed_s": round(elapsed, 1),
        },
        "profile": {"path": (profile or {}).get("path"), "used": profile is not None,
                    # The compare-commits path is judged without one only (summarize).
                    "judged": ["without", "with"] if profile is not None and any(
                        p != COMMITS for p in plan.paths) else ["without"]},
        "notes": notes + result.pop("notes"),
        # A Ctrl-C ended it: the report covers whole repeats, and the command exits 130.
        "interrupted": interrupted,
        # An error ended it after some repeats: the report covers those, and the command
        # then fails with this message and its exit code.
        "stopped": None if stopped is None else {"message": stopped.message,
                                                 "exit_code": stopped.exit_code},
    })
    return result


def _nodes(case: Mapping[str, Any]) -> int:
    arm = (case.get("arms") or {}).get(BASE_ARM) or {}
    return int(arm.get("nodes_executed") or 1)


def comparisons(rep: Repeat, path: str,
                levels: Sequence[float] = LEVELS) -> list[tuple[str, cmp.Side, cmp.Side]]:
    """What one repeat compares on one path: (what, base side, PR side).

    ``what`` is "aa", a level's arm key, or the per-node arm. Same-process: arms of
    one run. Separate runs: the A/A pair is two runs of ``a``; a level is the plain
    base run against the PR run's delayed arm (the double ratio). compare-commits: each
    command's ``a`` against its head arm, re-runs merged.
    """
    if path == COMMITS:
        out = []
        for what, doc in rep.commits.items():
            results = Results.from_dict(doc, source="a compare-commits run")
            head = commit_head_arm(what)
            out.append((what, cmp.Side("base", results, BASE_ARM), cmp.Side("pr", results, head)))
        return out
    if path == SAME_PROCESS:
        doc = Results.from_dict(rep.same_process, source="a same-process run")
        base = cmp.Side("base", doc, BASE_ARM)
        out = [("aa", base, cmp.Side("pr", doc, TWIN_ARM))]
        out += [(level_arm(v), base, cmp.Side("pr", doc, level_arm(v))) for v in levels]
        return [*out, (PER_NODE_ARM, base, cmp.Side("pr", doc, PER_NODE_ARM))]
    base = cmp.Side("base", Results.from_dict(rep.base, source="a base run"), BASE_ARM)
    again = Results.from_dict(rep.base_again, source="a base run")
    pr = Results.from_dict(rep.pr, source="a PR run")
    out = [("aa", base, cmp.Side("pr", again, BASE_ARM))]
    return out + [(level_arm(v), base, cmp.Side("pr", pr, level_arm(v))) for v in levels]


def summarize(
    repeats: Sequence[Repeat],
    fixed_doc: Mapping[str, Any] | None,
    engine_ns: Mapping[str, float],
    *,
    settings: Any,
    profile: Mapping[str, Any] | None,
    loads: Sequence[str],
    levels: Sequence[float] = LEVELS,
) -> dict[str, Any]:
    """The validation statistics from the repeats' documents (no measuring here)."""

    names = [n for n in engine_ns
             if all(n in d.get("cases", {}) for r in repeats for d in r.documents())]
    warnings: set[str] = set()
    judged = [("without", None)] + ([("with", profile)] if profile is not None else [])
    results = []
    ran = [p for p in PATHS if any(_has_path(r, p) for r in repeats)]
    for path in ran:
        for load in loads:
            mine = [r for r in repeats if r.load == load]
            # The compare-commits path's re-runs were chosen without a profile: judged with
            # one, its rows would be of a command that never ran.
            for label, prof in judged[:1] if path == COMMITS else judged:
                results.append(_judge_path(mine, path, load, label, prof, names, engine_ns,
                                           settings, warnings, levels))
    counters: dict[str, list[tuple[bool, str]]] = {n: [] for n in names}
    for rep in repeats:
        if rep.same_process is None:
            continue
        doc = Results.from_dict(rep.same_process, source="a same-process run")
        rows = cmp.counter_changes(cmp.Side("base", doc, BASE_ARM),
                                   cmp.Side("pr", doc, COUNTER_ARM), names)
        for n in names:
            counters[n].append(counter_check(rows, n))
    position = None
    unloaded = [r.same_process for r in repeats
                if r.load == "none" and r.same_process is not None]
    if fixed_doc is not None and unloaded:
        ran = [n for n in names if (fixed_doc.get("cases", {}).get(n) or {}).get("status") == "ok"]
        if ran:
            trimmed = [{**d, "cases": {n: d["cases"][n] for n in ran}} for d in unloaded]
            fixed = {**fixed_doc, "cases": {n: fixed_doc["cases"][n] for n in ran}}
            position = cal.profile_from_runs(
                [Results.from_dict(d, source="a same-process run") for d in trimmed],
                Results.from_dict(fixed, source="the fixed-order run"), BASE_ARM, TWIN_ARM,
                arm_spec="engine", seed=settings.seed)
    cases: dict[str, Any] = {}
    for n in names:
        exact = [ok for ok, _ in counters[n]]
        calibrated = (position or {}).get("cases", {}).get(n, {})
        cases[n] = {
            "engine_ns": engine_ns[n],
            "counters": {"exact": sum(exact), "n": len(exact), "all_exact": all(exact),
                         "details": sorted({why for _, why in counters[n]})},
            "position_bias": calibrated.get("position_bias"),
            # The unloaded same-process A/A noise (as `calibrate` computes it): what a
            # profile from this run would set t from.
            "aa_noise": (calibrated.get("same-run") or {}).get("noise"),
        }
    counters_n = sum(c["counters"]["n"] for c in cases.values())
    counters_exact = sum(c["counters"]["exact"] for c in cases.values())
    if not counters_n:  # the same-process path did not run: nothing was checked
        for c in cases.values():
            c["counters"]["all_exact"] = None
    return {
        "schema": VALIDATION_SCHEMA,
        "results": results,
        "cases": cases,
        "counters": {"exact": counters_exact, "n": counters_n,
                     "all_exact": counters_exact == counters_n if counters_n else None},
        "position_bias": (position or {}).get("position_bias"),
        "settings": {"floor": settings.floor, "k": settings.k, "fdr": settings.fdr,
                     "confidence": settings.confidence},
        "notes": sorted(warnings),
    }


def _has_path(rep: Repeat, path: str) -> bool:
    if path == COMMITS:
        return bool(rep.commits)
    return (rep.same_process if path == SAME_PROCESS else rep.base) is not None


def _judge_path(repeats: Sequence[Repeat], path: str, load: str, label: str,
                profile: Mapping[str, Any] | None, names: Sequence[str],
                engine_ns: Mapping[str, float], settings: Any,
                warnings: set[str], levels: Sequence[float] = LEVELS) -> dict[str, Any]:
    """False positives, detection and MDE of one (path, load, profile) over its repeats."""
    whats = [what for what, _, _ in comparisons(repeats[0], path, levels)] if repeats else []
    verdicts = {n: {w: [] for w in whats} for n in names}
    changes = {n: {w: [] for w in whats} for n in names}
    thresholds: dict[str, list[float]] = {n: [] for n in names}
    sources: dict[str, set[str]] = {n: set() for n in names}
    prefix = f"{path}, {load} load, {label} profile: "
    # (repeat, case) pairs whose control drift was measured, and the drifts beyond the
    # threshold seen in each: a repeat's comparisons share its runs (on the
    # compare-commits path each has its own, whose drifts are pooled per case-repeat),
    # so counting comparisons would count one run's drift many times.
    pairs: set[tuple[int, str]] = set()
    drifted: dict[tuple[int, str], list[float]] = {}
    judged, moved = 0, 0  # case comparisons, and those whose runs ran at different speeds
    for index, rep in enumerate(repeats):
        for what, base, pr in comparisons(rep, path, levels):
            comparison = cmp.compare(base, pr, settings=settings, profile=profile)
            # The control's drift and the runs' change of speed are summed up below, once
            # for the path: one warning per comparison, each naming other cases, made most
            # of a drifting VM's report.
            said = {cmp.drift_warning(comparison["cases"]), cmp.speed_warning(comparison["cases"])}
            warnings.update(prefix + w for w in comparison.get("warnings", []) if w not in said)
            shown = [r for r in comparison["cases"] if r["case"] in verdicts]
            judged += len(shown)
            moved += sum(cmp.beyond_speed_limit(r["control_shift"])
                         and r["verdict"] not in ("failed", "not_comparable") for r in shown)
            for r in comparison["cases"]:
                if r["control_drift"] is None or r["case"] not in verdicts:
                    continue  # a failed case, too few rounds to tell a drift, or not shown
                pairs.add((index, r["case"]))
                if r["drift_exceeds_threshold"]:
                    drifted.setdefault((index, r["case"]), []).append(r["control_drift"])
            rows = {r["case"]: r for r in comparison["cases"]}
            for n in names:
                row = rows.get(n)
                verdicts[n][what].append(row["verdict"] if row else "failed")
                changes[n][what].append(row["change"] if row else None)
                if what == "aa" and row:
                    thresholds[n].append(row["threshold"])
                    sources[n].add(row["noise_source"])
    if drifted:
        seen = [d for ds in drifted.values() for d in ds]
        lo, hi = f"{min(seen):+.1%}", f"{max(seen):+.1%}"
        spread = f"a drift of {lo}" if lo == hi else f"drifts between {lo} and {hi}"
        warnings.add(
            f"{prefix}the ORT control drifted from the first round to the last by more than "
            f"the case's threshold in {len(drifted)} of {len(pairs)} case-repeats (a case's "
            f"runs in one repeat; {spread}): the machine changed speed during the runs. "
            f"{cmp.DRIFT_CANCELS}, but {cmp.DRIFT_MAY_NOT_CANCEL}; validate on a quieter "
            "machine to be sure")
    if moved:
        warnings.add(
            f"{prefix}the two runs' ORT controls took more than "
            f"{verdict_defaults.CONTROL_SHIFT_LIMIT:.0%} longer a Run in one than in the other in "
            f"{moved} of {judged} case comparisons: the machine changed speed between runs, "
            "so those were ❔ unless their interval cleared the threshold by more than "
            f"{verdict_defaults.SPEED_CHANGE_ALLOWANCE:.0%} (`compare`'s rule for two runs)")
    cases = {}
    for n in names:
        aa = verdicts[n]["aa"]
        detection = {}
        for level in levels:
            got = verdicts[n][level_arm(level)]
            detection[level_arm(level)] = {
                "level": level, **proportion(sum(v in FLAGGED for v in got), len(got)),
                "measured_change": _finite_median(changes[n][level_arm(level)]),
                # ❔ is not a detection: e.g. an interval that straddles the threshold.
                "inconclusive": sum(v == "inconclusive" for v in got),
                "verdicts": got,
            }
        mde = next((lvl for lvl in levels
                    if (detection[level_arm(lvl)]["rate"] or 0.0) >= POWER_TARGET), None)
        cases[n] = {
            "engine_ns": engine_ns[n],
            "threshold": _finite_median(thresholds[n]),
            "noise_sources": sorted(sources[n]),
            "false_positives": {**proportion(sum(v in FLAGGED for v in aa), len(aa)),
                                "verdicts": aa, "changes": changes[n]["aa"]},
            "detection": detection,
            "mde": mde,
            # What the comparator saw at that level: the effect the injected delay really had.
            "mde_measured": detection[level_arm(mde)]["measured_change"] if mde else None,
        }
        if PER_NODE_ARM in verdicts[n]:
            got = verdicts[n][PER_NODE_ARM]
            cases[n]["per_node"] = {"level": PER_NODE_LEVEL,
                                    **proportion(sum(v in FLAGGED for v in got), len(got)),
                                    "measured_change": _finite_median(changes[n][PER_NODE_ARM])}
    fp_hits = sum(c["false_positives"]["hits"] for c in cases.values())
    fp_n = sum(c["false_positives"]["n"] for c in cases.values())
    # Family-wise: a repeat counts once if any case of the grid was flagged.
    any_fp = sum(any(verdicts[n]["aa"][r] in FLAGGED for n in names)
                 for r in range(len(repeats)))
    detection = {}
    for level in levels:
        key = level_arm(level)
        hits = sum(c["detection"][key]["hits"] for c in cases.values())
        total = sum(c["detection"][key]["n"] for c in cases.values())
        detection[key] = {"level": level, **proportion(hits, total),
                          "inconclusive": sum(c["detection"][key]["inconclusive"]
                                              for c in cases.values())}
    mdes = [cases[n]["mde"] for n in names]
    known = sorted(m for m in mdes if m is not None)
    return {
        "path": path, "load": load, "profile": label,
        "repeats": len(repeats),
        "false_positive_rate": proportion(fp_hits, fp_n),
        "familywise_false_positive_rate": proportion(any_fp, len(repeats)),
        "detection": detection,
        "mde": {n: cases[n]["mde"] for n in names},
        # The median case's MDE, None (above the top level) when half the cases or more saw
        # no level.
        "median_mde": (known[(len(mdes) - 1) // 2] if len(known) > (len(mdes) - 1) // 2
                       else None) if mdes else None,
        "cases": cases,
        **({"commands": _commands(repeats, names)} if path == COMMITS else {}),
    }


def _commands(repeats: Sequence[Repeat], names: Sequence[str]) -> dict[str, Any]:
    """What the compare-commits commands took: seconds each, and the re-runs and rounds their
    cases ended with (a case's ``reruns`` counts the re-runs that added rounds)."""
    took = [s for r in repeats for s in r.commits_s.values()]
    ended = [r.commits[what]["cases"][n] for r in repeats for what in r.commits for n in names]
    return {"n": len(took), "median_s": median(took), "max_s": max(took, default=None),
            "case_reruns": sum(c.get("reruns", 0) for c in ended),
            "rerun_cases": sum(bool(c.get("reruns")) for c in ended), "case_runs": len(ended),
            "median_rounds": median(len(c.get("rounds", [])) for c in ended)}


def levels_of(result: Mapping[str, Any]) -> list[float]:
    """The levels a validation document was measured at (every schema records them)."""
    return list((result.get("plan") or {}).get("levels") or LEVELS)


def render_markdown(result: Mapping[str, Any]) -> str:
    """validation.md, through the reports' templates."""

    levels = levels_of(result)
    return environment().get_template("validation.md.j2").render(
        v=result, levels=[level_arm(v) for v in levels], power=POWER_TARGET,
        top_level=max(levels),
        flagged="⚠️/🔴", notes_shown=NOTES_SHOWN,
        deadline_s_per_case=DEFAULT_TARGET_S_PER_CASE, report_reserve_s=REPORT_RESERVE_S,
    )


def _make_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EpbenchError(f"cannot create {str(path)!r}: {exc.strerror}; pass --out DIR "
                           "somewhere writable") from None
    return path


def prepare_runs_dir(out_dir: str | Path) -> Path:
    """``OUT/runs``, made before anything runs (a bad --out fails at once), emptied of
    an earlier validation's runs so the folder holds this one's only."""
    runs = _make_dir(Path(out_dir) / RUNS_DIR)
    for old in runs.glob("*.json"):
        old.unlink()
    return runs


def write_outputs(result: Mapping[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """validation.json and validation.md into ``out_dir`` (atomic writes)."""

    out = _make_dir(Path(out_dir))
    json_path, md_path = out / "validation.json", out / "validation.md"
    remedy = (f"rerun validate with another --out; the runs kept so far are in "
              f"{str(out / RUNS_DIR)!r}, and a rerun into this --out empties that folder")
    if result.get("stopped"):
        # On a full disk, the error that stopped validate (a run it could not keep) is
        # said again, or this one would hide it.
        remedy += f"; validate had stopped: {result['stopped']['message']}"
    for path, text in ((json_path, to_json(result)), (md_path, render_markdown(result))):
        _write_or_fail(atomic_write_text, path, text, "write", remedy)
    return json_path, md_path


def _write_or_fail(write: Callable[[Path, Any], None], path: Path, content: Any, what: str,
                   remedy: str) -> None:
    """``write(path, content)``; an OSError (a full disk, say) as one epbench error, not a
    traceback: "cannot WHAT 'PATH': why; [free space on its disk or] REMEDY"."""
    try:
        write(path, content)
    except OSError as exc:
        room = "free space on its disk or " if disk_full(exc) else ""
        raise EpbenchError(f"cannot {what} {str(path)!r}: {exc.strerror or exc}; "
                           f"{room}{remedy}") from None
