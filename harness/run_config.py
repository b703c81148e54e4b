"""What a run is: its configuration (RunConfig) and the order its arms take each round.

The orders are Williams designs, arms relabelled at random per design, so every arm
takes every position, and follows every other, equally often. RunConfig's defaults are
the CLI's defaults too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

from epbench.cases.spec import CaseSpec
from epbench.core.errors import EpbenchError
from epbench.harness.arms import ArmSpec, compares_arms
from epbench.harness.gate import DEFAULT_MAX_WAIT_S, DEFAULT_THRESHOLD, POLICIES


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs; recorded whole in the results file.

    These defaults are the CLI's defaults too (epbench.cli.run_commands reads them).
    """

    cases: tuple[CaseSpec, ...]
    arms: tuple[ArmSpec, ...]
    rounds: int = 30  # in all, spread over the processes
    # Worker processes per case, and sessions per arm inside each (rotated over rounds).
    processes: int = 3
    sessions: int = 2
    # The key of an arm to run twice, the second time as an A/A twin from its own copy
    # of the library under its own registration name: the run's own noise measurement.
    aa_twin: str | None = None
    # The twin was `run`'s default, not asked for: a library that cannot be loaded twice
    # in one process then runs without it (said on the progress line) instead of failing.
    aa_twin_optional: bool = False
    # Raw per-iteration samples into results.samples.jsonl.gz (the results file keeps
    # per-block summaries only).
    keep_samples: bool = False
    block_target_ms: float = 20.0
    # Each arm's block is cut into this many slices, run alternately in the round's order,
    # so every arm samples the same millisecond-scale noise of the machine. On this
    # project's 2-core VM (quick grid, 3 alternated runs of 6 arms each, 72 rounds) the
    # A/A interval's median half-width went 1.34 % -> 0.58 % (16 slices) -> 0.59 % (64),
    # a ~2.7 % slowdown was flagged in 7 -> 17 -> 18 of 18 case comparisons
    # (docs/validation/summaries.tar.xz:slices.txt).
    block_slices: int = 64
    # Bounds the raw samples kept per block: fast cases get shorter blocks.
    max_block_iters: int = 2000
    warmup_ms: float = 100.0
    seed: int = 0
    threads: int = 1
    gate_policy: str = "wait"
    gate_threshold: float = DEFAULT_THRESHOLD
    gate_max_wait_s: float = DEFAULT_MAX_WAIT_S
    # Rounds in a row with no passing gate look before this run began (RunWaitBudget):
    # a re-run of some cases continues its first pass's count.
    futile_rounds_before: int = 0
    # A worker silent this long is taken for hung and killed (its case: crashed).
    silence_timeout_s: float = 300.0
    allow_fallback: bool = False
    fixed_order: bool = False
    # Instruction counts per Run in one extra untimed pass after the timed processes:
    # None, "perf" or "valgrind".
    instructions: str | None = None
    out_dir: Path | None = None
    overwrite: bool = False
    progress: Progress | None = None
    grids: tuple[str, ...] = field(default_factory=tuple)
    # "K/N" when the cases are the K-th of N slices of the grids (`run --shard`).
    shard: str | None = None

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise EpbenchError("--rounds must be at least 1; rounds are the unit of replication")
        if self.processes < 1:
            raise EpbenchError("--processes must be at least 1 (3 or more let the interval "
                               "cover what two processes differ by)")
        if self.sessions < 1:
            raise EpbenchError("--sessions must be at least 1 (2 or more let the interval "
                               "cover what two sessions differ by)")
        if not self.cases:
            raise EpbenchError("no cases to run: pass --grid NAME, --case NAME or --model PATH")
        if self.gate_policy not in POLICIES:
            raise EpbenchError(f"--gate must be one of {', '.join(POLICIES)}")
        if not 0.0 < self.gate_threshold <= 1.0:
            raise EpbenchError("--gate-threshold is a fraction of idle time, in (0, 1]")
        if (self.threads < 1 or self.block_target_ms <= 0 or self.max_block_iters < 1
                or self.silence_timeout_s <= 0 or self.block_slices < 1):
            raise EpbenchError("--threads, --block-ms, --max-block-iters, --slices and "
                               "--case-timeout must be positive")


@dataclass(frozen=True)
class WorkerConfig:
    """What the runner tells each worker process of a run; the request on the pipe
    carries it as `to_dict` (the worker reads that JSON)."""

    threads: int
    allow_fallback: bool
    warmup_ms: float
    block_target_ms: float
    block_slices: int
    max_block_iters: int
    silence_timeout_s: float
    instructions: str | None
    sessions: int
    keep_samples: bool
    gate: dict[str, Any]  # the results file's config.gate, budget_s this process's
    overhead_case: dict[str, Any]  # where the overhead's one-node case was saved
    measure_overhead: bool = False
    process: int = 0
    layout_seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# `run`'s rounds and processes once it compares arms with each other (harness.arms.
# compares_arms): their verdicts rest on what processes differ by, and Student's t over
# 3 processes has 2 degrees of freedom. An injected 60 ns (+1.3 to +2.0 %) between two
# arms of one run, twin of the base registered from the same file, quick grid, this
# project's 2-core AMD EPYC VM idle, 2026-12-08: 3 processes x 30 rounds flagged 3, 0 and
# 4 of 6 cases (26-29 s a run), 8 x 48 flagged 6, 4, 6 and 4 of 6 (60-66 s); with the twin
# a copy, 3 x 30 flagged 0 of 6 in two runs, 8 x 48 4 to 6 of 6 in four (RESULTS.md).
COMPARED_ROUNDS = 48
COMPARED_PROCESSES = 8


def sized_for(arms: Sequence[ArmSpec], rounds: int | None,
              processes: int | None) -> tuple[int, int]:
    """`run`'s rounds and processes: as given, else the defaults for what the run does
    (COMPARED_* when it compares arms with each other, RunConfig's otherwise)."""
    compared = compares_arms(list(arms))
    if rounds is None:
        rounds = COMPARED_ROUNDS if compared else RunConfig.rounds
    if processes is None:
        processes = COMPARED_PROCESSES if compared else RunConfig.processes
    return rounds, processes


def defaults() -> dict[str, Any]:
    """RunConfig's defaults by field name (the CLI shows and uses these)."""
    from dataclasses import MISSING

    return {f.name: f.default for f in fields(RunConfig) if f.default is not MISSING}


class Progress(Protocol):
    """What the runner tells whoever shows progress (the command layer decides how)."""

    def start(self, total_rounds: int) -> None: ...

    def event(self, case: str, process: int, event: dict[str, Any]) -> None: ...

    def process_done(self, case: str, process: int, record: dict[str, Any],
                     skipped_rounds: int) -> None: ...

    def status(self, text: str) -> None: ...

    def close(self) -> None: ...


def williams_rows(n: int) -> list[list[int]]:
    """A Williams design for n arms: every arm in every position equally often, and
    every arm preceding every other equally often (n rows if n is even, 2n if odd)."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    if n % 2:
        rows += [list(reversed(row)) for row in rows]
    return rows


def rounds_per_process(rounds: int, n_arms: int, processes: int) -> int:
    """Each process's share of ``rounds``, rounded up to whole counterbalanced designs."""
    return balanced_rounds(-(-rounds // processes), n_arms)


def balanced_rounds(rounds: int, n_arms: int) -> int:
    """Rounds rounded up to whole Williams designs: n rows for an even number of
    arms, 2n for an odd one (position and first-order carry-over balance)."""
    block = n_arms if n_arms % 2 == 0 else 2 * n_arms
    return -(-rounds // block) * block


def counterbalanced_order(keys: list[str], rounds: int, rng: random.Random) -> list[list[str]]:
    """One order of ``keys`` per round, shuffled and counterbalanced.

    Built from Williams designs with the arms relabelled at random per design and
    the rows shuffled within each n-row Latin square: every arm takes every
    position exactly ``rounds / n`` times when ``rounds`` is a multiple of n.
    """
    n = len(keys)
    orders: list[list[str]] = []
    while len(orders) < rounds:
        labels = list(keys)
        rng.shuffle(labels)
        rows = williams_rows(n)
        for start in range(0, len(rows), n):
            square = rows[start:start + n]
            rng.shuffle(square)
            orders.extend([labels[i] for i in row] for row in square)
    return orders[:rounds]


def fixed_order(keys: list[str], rounds: int) -> list[list[str]]:
    """The same order every round: only for measuring the position bias it leaks."""
    return [list(keys) for _ in range(rounds)]
