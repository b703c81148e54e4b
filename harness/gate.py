"""The idle-core gate: is the machine quiet enough to time a round?

Reads per-core CPU time from `/proc/stat` twice, a short window apart, and judges each
core by its idle fraction over the window. A round measured while another process was
busy is not trusted silently: the gate waits for the load to pass (`wait`), refuses
(`strict`), or is switched `off`; `InterferenceMeter` judges the other cores during a
round. All I/O and time are injected (`read`, `sleep`, `clock`) for tests.

`/proc/stat` is read and parsed by harness.proc_stat; the meter is harness.interference.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from epbench.core.errors import GateError
from epbench.harness.proc_stat import (
    CpuTimes,
    allowed_cores,
    core_name,
    judged_names,
    parse_proc_stat,
    read_proc_stat,
    usage_between,
)

# A core passes when its idle fraction is at least this; the gate passes when every
# judged core passes.
DEFAULT_THRESHOLD = 0.93
# /proc/stat counts in USER_HZ ticks (10 ms on Linux), so 50 ms sees about 5 ticks a core
# and one busy tick fails it at 0.93. Deliberate: a short look keeps rounds cheap, `wait`
# simply looks again, and `epbench gate` looks longer (PROBE_WINDOW_S) for a finer reading.
DEFAULT_WINDOW_S = 0.05
# `wait` gives a round at most this long to find the machine quiet: load that
# outlasts a second is sustained, and waiting longer rarely finds a gap.
DEFAULT_MAX_WAIT_S = 1.0
# ...and the gates of one case (one per worker process) pause at most this long in
# all, so a machine that stays busy costs a bounded time per case; its rounds are
# marked unquiet. The runner gives each of a case's processes its share.
DEFAULT_BUDGET_S = 10.0
# A run stops waiting once this many of its rounds in a row (in run order, across
# processes and cases) had no gate look that passed: the load is then sustained, and
# every further wait would run out too (under a sustained load here those waits were
# half the quick grid's first pass). 16 is two whole processes at compare-commits'
# default 8 rounds each. See `RunWaitBudget`.
FUTILE_ROUNDS_BEFORE_NO_WAIT = 16


# Back-off between failed looks under `wait`: first pause, doubled up to the cap.
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 0.8
# `epbench gate` and `quietest_core` look once, so they can afford a finer window.
PROBE_WINDOW_S = 0.25
QUIETEST_WINDOW_S = 0.1
POLICIES = ("wait", "strict", "off")
# Float slack when comparing clock sums, so 0.1 + 0.2 "equal to" 0.3 does not
# buy one more look.
_EPSILON_S = 1e-9
# How many per-core entries `format_gate_reading` spells out before summarising.
_MAX_CORES_SPELLED_OUT = 8


@dataclass(frozen=True)
class GateReading:
    """What the gate saw and decided before one round.

    `idle` and `steal` hold the judged cores of the last look (empty when the
    gate is off); `waited_s` is the whole time spent in the gate (windows and
    back-off pauses); `attempts` counts the looks.
    """

    passed: bool
    idle: dict[str, float]
    steal: dict[str, float]
    waited_s: float
    attempts: int
    threshold: float = DEFAULT_THRESHOLD
    excluded_core: int | None = None
    # True when no look was taken: the previous round's meter found the other cores
    # quiet up to this round's start (`carried_from_meter`).
    carried: bool = False

    def busiest(self) -> tuple[str, float] | None:
        """The judged core with the lowest idle fraction, or None."""
        if not self.idle:
            return None
        name = min(self.idle, key=lambda n: (self.idle[n], n))
        return name, self.idle[name]

    def to_dict(self) -> dict:
        return {
            "attempts": self.attempts,
            "carried": self.carried,
            "excluded_core": self.excluded_core,
            "idle": {k: round(v, 4) for k, v in sorted(self.idle.items())},
            "passed": self.passed,
            "steal": {k: round(v, 4) for k, v in sorted(self.steal.items())},
            "threshold": self.threshold,
            "waited_s": round(self.waited_s, 4),
        }


def _busy_message(reading: GateReading) -> str:
    busiest = reading.busiest()
    where = ""
    if busiest is not None:
        name, idle = busiest
        where = f": {name} was {idle:.1%} idle (steal {reading.steal.get(name, 0.0):.1%})"
    return (
        f"the machine is busy{where}, below the idle gate's {reading.threshold:.0%} threshold; "
        "stop the other load and retry, or pass `--gate wait` (wait, then run and mark "
        "rounds unquiet) or `--gate off` (no gate)"
    )


class IdleGate:
    """Decides, before each round, whether the judged cores are idle enough.

    Policies: `wait` looks, and on failure pauses with doubling back-off
    (FIRST_BACKOFF_S, capped at MAX_BACKOFF_S) and looks again until
    `max_wait_s` has passed; then it returns `passed=False` and the caller runs
    the round anyway, marked unquiet. `budget_s` caps the pauses summed over
    all checks of this gate (None: no cap), so a machine that stays busy costs
    a bounded time per case; once spent, `wait` looks once per check.
    `strict` looks once and raises GateError if the look fails. `off` returns
    `passed=True` without looking.
    """

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        policy: str = "wait",
        window_s: float = DEFAULT_WINDOW_S,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        cores: list[int] | None = None,
        *,
        budget_s: float | None = DEFAULT_BUDGET_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        read: Callable[[], str] = read_proc_stat,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"gate policy {policy!r} is not one of {', '.join(POLICIES)}")
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"gate threshold {threshold!r} must be in (0, 1]")
        if window_s <= 0 or max_wait_s < 0 or (budget_s is not None and budget_s < 0):
            raise ValueError("gate window must be > 0, max wait and budget >= 0")
        self.threshold = threshold
        self.policy = policy
        self.window_s = window_s
        self.max_wait_s = max_wait_s
        self.cores = list(cores) if cores is not None else None
        self.budget_s = budget_s
        self._clock = clock
        self._sleep = sleep
        self._read = read
        self._waited_total_s = 0.0  # back-off pauses so far, against budget_s
        # When and what the latest look first read: a round's meter may reach back to it.
        self.last_look_start: tuple[float, dict[str, CpuTimes]] | None = None

    def _look(self, exclude_core: int | None) -> tuple[dict[str, float], dict[str, float]]:
        before = parse_proc_stat(self._read())
        self.last_look_start = (self._clock(), before)
        self._sleep(self.window_s)
        usage = usage_between(before, parse_proc_stat(self._read()))
        judged = judged_names(usage, self.cores, exclude_core)
        return {n: usage[n].idle for n in judged}, {n: usage[n].steal for n in judged}

    def _passes(self, idle: dict[str, float]) -> bool:
        # With no judged core (one-core machine, its core excluded) nothing can fail.
        return all(v >= self.threshold for v in idle.values())

    def measure(self, exclude_core: int | None = None) -> GateReading:
        """One look, whatever the policy; never raises for a busy machine."""
        start = self._clock()
        idle, steal = self._look(exclude_core)
        return GateReading(
            passed=self._passes(idle),
            idle=idle,
            steal=steal,
            waited_s=self._clock() - start,
            attempts=1,
            threshold=self.threshold,
            excluded_core=exclude_core,
        )

    def check(self, exclude_core: int | None = None) -> GateReading:
        """Apply the policy before a round (see the class docstring)."""
        # Before a round the worker sleeps in the gate, so its pinned core should be idle
        # too, and load there would preempt the benchmark: the runner judges it (no
        # `exclude_core`). Exclude a core only when the caller itself is busy on it (a
        # parent checking while the worker warms up): it would show only our own work.
        if self.policy == "off":
            return GateReading(
                passed=True,
                idle={},
                steal={},
                waited_s=0.0,
                attempts=0,
                threshold=self.threshold,
                excluded_core=exclude_core,
            )
        start = self._clock()
        attempts = 0
        pause = FIRST_BACKOFF_S
        while True:
            idle, steal = self._look(exclude_core)
            attempts += 1
            passed = self._passes(idle)
            reading = GateReading(
                passed=passed,
                idle=idle,
                steal=steal,
                waited_s=self._clock() - start,
                attempts=attempts,
                threshold=self.threshold,
                excluded_core=exclude_core,
            )
            if passed:
                return reading
            if self.policy == "strict":
                raise GateError(_busy_message(reading))
            allowance = self.max_wait_s - reading.waited_s
            if self.budget_s is not None:
                allowance = min(allowance, self.budget_s - self._waited_total_s)
            if allowance <= _EPSILON_S:
                return reading
            nap = min(pause, allowance)
            self._sleep(nap)
            self._waited_total_s += nap
            pause = min(pause * 2, MAX_BACKOFF_S)


class RunWaitBudget:
    """The gate budget each process of a run gets, from the rounds before it.

    A process gets `per_process_s` (its share of a case's budget) while fewer than
    FUTILE_ROUNDS_BEFORE_NO_WAIT rounds in a row, counted over the processes before
    it in run order, had no gate look that passed (its own or carried). Then it gets
    0: its gate still looks once before every round, so its rounds are judged as
    before, but it no longer sleeps waiting for a quiet moment the load has not left.
    A round whose look passed ends the streak, and the next process gets its share
    again. Only the `wait` policy waits; the others always get the share (unused).
    `futile_in_a_row` may start above 0: a re-run continues its first pass's count.
    """

    def __init__(self, per_process_s: float, policy: str, futile_in_a_row: int = 0) -> None:
        self.per_process_s = per_process_s
        self.policy = policy
        self.futile_in_a_row = futile_in_a_row

    @property
    def waiting(self) -> bool:
        return self.policy != "wait" or self.futile_in_a_row < FUTILE_ROUNDS_BEFORE_NO_WAIT

    def next_budget_s(self) -> float:
        return self.per_process_s if self.waiting else 0.0

    def record(self, gates: Iterable[Mapping[str, Any]]) -> None:
        """Count a finished process's rounds by their `gate` readings, in order."""
        for gate in gates:
            self.futile_in_a_row = 0 if gate["passed"] else self.futile_in_a_row + 1


def quietest_core(
    allowed: set[int],
    *,
    window_s: float = QUIETEST_WINDOW_S,
    read: Callable[[], str] = read_proc_stat,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """The allowed core with the highest idle fraction over a short window.

    Ties (common: ticks are coarse) go to the lower steal, then to the higher
    core number, because core 0 usually carries more interrupts and
    housekeeping. A single allowed core is returned without looking.
    """
    if not allowed:
        raise ValueError("quietest_core needs at least one allowed core")
    if len(allowed) == 1:
        return next(iter(allowed))
    before = parse_proc_stat(read())
    sleep(window_s)
    usage = usage_between(before, parse_proc_stat(read()))
    seen = [c for c in allowed if core_name(c) in usage]
    if not seen:  # allowed cores absent from /proc/stat: nothing to prefer
        return max(allowed)
    return max(seen, key=lambda c: (usage[core_name(c)].idle, -usage[core_name(c)].steal, c))


def _format_cores(reading: GateReading) -> str:
    names = sorted(reading.idle, key=lambda n: int(n[3:]))
    if len(names) <= _MAX_CORES_SPELLED_OUT:
        return ", ".join(
            f"{n} idle {reading.idle[n]:.1%} steal {reading.steal.get(n, 0.0):.1%}" for n in names
        )
    busiest = reading.busiest()
    assert busiest is not None  # names is not empty here
    most_stolen = max(names, key=lambda n: (reading.steal.get(n, 0.0), n))
    return (
        f"{len(names)} cores, lowest idle {busiest[1]:.1%} ({busiest[0]}), "
        f"highest steal {reading.steal.get(most_stolen, 0.0):.1%} ({most_stolen})"
    )


def format_gate_reading(reading: GateReading) -> str:
    """One line for the terminal's live gate state."""
    if reading.carried:
        return f"gate ok: {_format_cores(reading)} during the previous round (no new look)"
    if reading.attempts == 0:
        return "gate off: not checked"
    verdict = "ok" if reading.passed else "BUSY"
    cores = _format_cores(reading) if reading.idle else "no core to judge"
    excluded = (
        f", {core_name(reading.excluded_core)} excluded"
        if reading.excluded_core is not None
        else ""
    )
    tries = "1 look" if reading.attempts == 1 else f"{reading.attempts} looks"
    return (
        f"gate {verdict}: {cores}{excluded} "
        f"(threshold {reading.threshold:.0%}, {tries} in {reading.waited_s:.2f} s)"
    )


def current_gate_state(
    threshold: float = DEFAULT_THRESHOLD,
    *,
    window_s: float = PROBE_WINDOW_S,
    cores: list[int] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    read: Callable[[], str] = read_proc_stat,
) -> GateReading:
    """One look, for `epbench gate` (exit 0 if passed, 3 if not), at `cores`
    or by default every core this (unpinned) process may run on."""
    gate = IdleGate(
        threshold=threshold,
        policy="strict",
        window_s=window_s,
        cores=cores if cores is not None else allowed_cores(),
        clock=clock,
        sleep=sleep,
        read=read,
    )
    return gate.measure()
