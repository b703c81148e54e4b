"""What `epbench validate` runs: its options as a Plan, the paths and levels, the arms.

The constants here (paths, levels, seed strides, arm keys) are the plan's vocabulary;
validate_run executes a plan, validate_judge judges what it measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epbench.core.errors import EpbenchError
from epbench.harness.load import LOAD_KINDS
from epbench.harness.run_config import defaults as run_defaults
from epbench.workflows.compare_commits import (
    COMMITS_GATE_MAX_WAIT_S,
    COMMITS_PROCESSES,
    COMMITS_ROUNDS,
    DEFAULT_TARGET_S_PER_CASE,
)

if TYPE_CHECKING:
    from epbench.cases.spec import CaseSpec

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
# --target-mde: compare-commits judges with it and re-runs the cases short of it; the
# per-case paths re-run nothing (their runs are judged as measured), so it is theirs to refuse.
TARGET_HELP = (f"--target-mde applies to the {COMMITS} path only (each command is judged with it "
               f"and re-runs the cases short of it); {SAME_PROCESS} and {SEPARATE_RUNS} re-run "
               f"nothing: pass --path {COMMITS}")
# The level also injected per node (inject_delay_ns_per_node), to check that path too.
PER_NODE_LEVEL = 0.05
# Extra harmless ORT API calls per Run on the counter arm.
API_CALLS = 5


BASE_ARM = "a"
TWIN_ARM = "a2"
COUNTER_ARM = "c"
PER_NODE_ARM = "n5"


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
    # Every compare-commits command's --target-mde (a fraction), else None.
    target_mde: float | None = None

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
        if self.target_mde is not None and set(self.paths) != {COMMITS}:
            raise EpbenchError(TARGET_HELP)
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


def command_deadline_s(cases: int) -> float:
    """How long a compare-commits command of ``cases`` cases re-runs at most: until its
    default deadline, DEFAULT_TARGET_S_PER_CASE a case from its first pass's start (validate
    runs no builds). A command then ends with its last re-run and the judging."""
    return DEFAULT_TARGET_S_PER_CASE * cases


def planned_repeat_s(plan: Plan, cases: int) -> float:
    """What one repeat of ``cases`` cases is planned to take at least: with --target-mde,
    each compare-commits command (one per level and the A/A) to its deadline, since it
    re-runs the cases short of the target until then; 0 without a target, whose commands
    end when no case is left ambiguous, which only the runs tell."""
    if plan.target_mde is None:
        return 0.0
    return (len(plan.levels) + 1) * command_deadline_s(cases)
