"""The idle-core gate: is the machine quiet enough to time a round?

Reads per-core CPU time from `/proc/stat` twice, a short window apart, and judges each
core by its idle fraction over the window. A round measured while another process was
busy is not trusted silently: the gate waits for the load to pass (`wait`), refuses
(`strict`), or is switched `off`; `InterferenceMeter` judges the other cores during a
round. All I/O and time are injected (`read`, `sleep`, `clock`) for tests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, fields

from epbench.core.errors import GateError

PROC_STAT = "/proc/stat"
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
# Fewest ticks per core (10 ms each on most kernels) for a round's interference
# reading to count: below it a single tick decides between 0 % and 100 % idle.
MIN_JUDGED_TICKS = 5
# Snapshots a process's meter keeps for its windows to start at: one of
# MIN_JUDGED_TICKS needs a few (rounds of one or two ticks, each with a start, an end
# and maybe a gate look).
MAX_METER_MARKS = 16
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


def read_proc_stat() -> str:
    with open(PROC_STAT, encoding="ascii") as f:
        return f.read()


def core_name(core: int) -> str:
    """The `/proc/stat` row name of a logical core: 3 -> "cpu3"."""
    return f"cpu{core}"


def _allowed_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: every core counts
        return list(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class CpuTimes:
    """One row of `/proc/stat`, in USER_HZ ticks since boot.

    Columns arrived over kernel versions (iowait 2.5.41, irq/softirq 2.6.0,
    steal 2.6.11, guest 2.6.24, guest_nice 2.6.33); absent ones are 0.
    """

    user: int
    nice: int
    system: int
    idle: int
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0
    guest: int = 0
    guest_nice: int = 0

    @property
    def elapsed(self) -> int:
        # guest time is already inside user/nice: not added twice. Steal is counted:
        # time the hypervisor took is capacity we would not get, so it is not idle.
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )

    @property
    def idle_all(self) -> int:
        # A core waiting on I/O is free for us to run on, so iowait counts as idle.
        return self.idle + self.iowait


_COLUMNS = tuple(f.name for f in fields(CpuTimes))
_MIN_COLUMNS = 4  # user nice system idle: every kernel has these


def parse_proc_stat(text: str) -> dict[str, CpuTimes]:
    """The `cpu` and `cpuN` rows of a `/proc/stat` text, by row name.

    Raises ValueError on a text with no cpu rows or a malformed cpu row.
    Columns beyond the ten known ones (a future kernel) are ignored.
    """
    rows: dict[str, CpuTimes] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *values = line.split()
        if name != "cpu" and not name[3:].isdigit():
            continue
        if len(values) < _MIN_COLUMNS:
            raise ValueError(f"/proc/stat row {name!r} has {len(values)} columns, expected >= 4")
        try:
            ticks = [int(v) for v in values[: len(_COLUMNS)]]
        except ValueError:
            raise ValueError(f"/proc/stat row {name!r} is not numeric: {line!r}") from None
        rows[name] = CpuTimes(*ticks)
    if not rows:
        raise ValueError("no cpu rows in /proc/stat text")
    return rows


@dataclass(frozen=True)
class CoreUsage:
    """How one core spent a window: fractions of the elapsed ticks (`steal` is reported
    beside `idle`, not judged)."""

    idle: float
    steal: float
    ticks: int


def _usage(before: CpuTimes, after: CpuTimes) -> CoreUsage:
    # A counter that went backwards (iowait on tickless kernels) counts as 0.
    delta = CpuTimes(*(max(0, getattr(after, c) - getattr(before, c)) for c in _COLUMNS))
    ticks = delta.elapsed
    if ticks == 0:  # counters that did not advance: no evidence of load
        return CoreUsage(idle=1.0, steal=0.0, ticks=0)
    return CoreUsage(idle=delta.idle_all / ticks, steal=delta.steal / ticks, ticks=ticks)


def usage_between(before: dict[str, CpuTimes], after: dict[str, CpuTimes]) -> dict[str, CoreUsage]:
    """Per-row usage between two snapshots; rows missing from either (a core
    taken offline) are left out."""
    return {name: _usage(before[name], after[name]) for name in before if name in after}


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


def _judged_names(
    usage: dict[str, CoreUsage], cores: list[int] | None, exclude_core: int | None
) -> list[str]:
    """The rows of `usage` to judge: `cores` (None: every core listed),
    without `exclude_core`, in core order."""
    # Not the process's affinity by default: a worker that pinned itself would judge its
    # own core only. A runner that honours a cpuset (other cores belong to other tenants)
    # passes the affinity it had before pinning; `epbench gate` runs unpinned and uses its own.
    listed = sorted(int(name[3:]) for name in usage if name != "cpu")
    wanted = listed if cores is None else sorted(set(cores) & set(listed))
    return [core_name(c) for c in wanted if c != exclude_core]


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
        judged = _judged_names(usage, self.cores, exclude_core)
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

    def record(self, rounds: list[dict]) -> None:
        """Count a finished process's rounds (each with its `gate` reading), in order."""
        for rnd in rounds:
            self.futile_in_a_row = 0 if rnd["gate"]["passed"] else self.futile_in_a_row + 1


def carried_from_meter(interference: dict, threshold: float) -> GateReading | None:
    """The gate reading of a round that starts as the previous one ends, taken from
    that round's meter when it judged every other core quiet; None otherwise.

    The meter covered the tens of milliseconds right before this round, longer than the
    gate's own look, so looking again would only cost time. It cannot judge the worker's
    own core's load, but a competitor runnable there while another core sat idle would
    have been moved to the idle core by the scheduler, and shown up there (not so a task
    bound to that core: the first round of every process, and every round after one
    that did not pass, still look). The own core's steal it does read: above 1 -
    threshold, or unread, nothing is carried. A meter that did not judge (too few
    ticks) or saw load gives None: the gate looks as usual.
    """
    if interference.get("quiet") is not True:
        return None
    if interference.get("own_core") is not None:
        own_steal = interference.get("own_steal")
        # The meter rounds to 4 places; so does the bound (1 - 0.93 is 0.06999... in floats).
        if own_steal is None or own_steal > round(1.0 - threshold, 4):
            return None
    return GateReading(passed=True, idle=dict(interference["idle"]),
                       steal=dict(interference["steal"]), waited_s=0.0, attempts=0,
                       threshold=threshold, excluded_core=interference.get("own_core"),
                       carried=True)


def longest_window_one_busy_tick_fails(threshold: float) -> int | None:
    """The most ticks a core's window may hold for one busy tick in it to fail
    `threshold` (14 at 0.93: 13 of 14 idle is below it, 14 of 15 is not); None
    when no window is too long (a threshold of 1)."""
    if threshold >= 1.0:
        return None
    ticks = 1
    # Rounded as the meter rounds the idle fractions it compares.
    while round(ticks / (ticks + 1), 4) < threshold:
        ticks += 1
    return ticks


def _own_steal(usage: CoreUsage) -> float:
    """The worker's core's steal as a share of the time it ran or wanted to (steal
    over its non-idle ticks): a window reaching back over a gate look, which the
    worker slept through, does not dilute it."""
    return usage.steal / (1.0 - usage.idle) if usage.idle < 1.0 else 0.0


class InterferenceMeter:
    """Idle and steal of the other cores across one round, reaching back before it
    when the round alone is too short to judge.

    `start()` before the first arm runs, `stop()` after the last. The worker's
    own core (`exclude_core`) is busy with the benchmark, so only its steal is
    recorded (`own_steal`: the share of its running time the hypervisor took).
    `quiet` is True when every other core stayed at or above the threshold; a round is
    quiet when the gate passed before it and its meter found it quiet.

    One meter serves all the rounds of a process. It keeps the snapshots it took at
    each round's start and end, and those handed to it by `mark` (the gate's look
    before a round). A round holding MIN_JUDGED_TICKS is judged alone, as ever. A
    shorter one is judged over the shortest window that ends with it, starts at one
    of those snapshots and holds them (`lookback_s`: how far before the round it
    starts), but only while no judged core's window holds more ticks than
    `longest_window_one_busy_tick_fails` (14 at the default 0.93): beyond that a
    busy tick could pass, and the round stays unjudged. So a quiet window had no busy
    tick anywhere in it, the round's own part included: never less strict than
    judging the round alone, which could not judge it at all. Rounds of a few ticks
    (fast cases, whose blocks stop at `max_block_iters`) are then judged, and a quiet
    one lends its reading to the next round (`carried_from_meter`) instead of the
    next round paying a look. Under `--gate off` nothing cuts the windows short, so
    one busy tick can mark the two or three short rounds after it unquiet too.
    """

    def __init__(
        self,
        exclude_core: int | None = None,
        cores: list[int] | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        *,
        clock: Callable[[], float] = time.monotonic,
        read: Callable[[], str] = read_proc_stat,
    ) -> None:
        self.exclude_core = exclude_core
        self.cores = list(cores) if cores is not None else None
        self.threshold = threshold
        self._longest_reach = longest_window_one_busy_tick_fails(threshold)
        self._clock = clock
        self._read = read
        # (time, snapshot), oldest first, that a window may start at.
        self._marks: list[tuple[float, dict[str, CpuTimes]]] = []
        self._round_start: tuple[float, dict[str, CpuTimes]] | None = None

    def _keep(self, at: float, snapshot: dict[str, CpuTimes]) -> None:
        self._marks.append((at, snapshot))
        # Bounded where no window ever fills (no other core to judge): the oldest go.
        del self._marks[:-MAX_METER_MARKS]

    def mark(self, at: float, snapshot: dict[str, CpuTimes]) -> None:
        """A snapshot taken elsewhere (the gate's look) that a later window may start at.
        One older than the latest kept is ignored: windows only reach back in order."""
        if self._marks and at < self._marks[-1][0]:
            return
        self._keep(at, snapshot)

    def start(self) -> None:
        snapshot = parse_proc_stat(self._read())
        at = self._clock()
        # A handed mark stamped after this (not in the worker: one clock, in order)
        # would look like a window's start that the round's own start already is.
        while self._marks and self._marks[-1][0] > at:
            self._marks.pop()
        self._round_start = (at, snapshot)
        self._keep(at, snapshot)

    def _judged_window(self, at_start: dict[str, CpuTimes], after: dict[str, CpuTimes]
                       ) -> tuple[float, dict[str, CoreUsage], int] | None:
        """The shortest window from a mark to `after` that holds the whole round and
        MIN_JUDGED_TICKS on every judged core, within the reach-back limit: its start,
        usage and fewest ticks; None if there is none (or no core to judge)."""
        # The round's own start (by identity: a coarse clock may stamp marks alike),
        # then the marks before it, latest first: ticks only grow as a window reaches back.
        own = max(i for i, (_, snapshot) in enumerate(self._marks) if snapshot is at_start)
        for i in range(own, -1, -1):
            at, before = self._marks[i]
            usage = usage_between(before, after)
            counts = [usage[n].ticks for n in _judged_names(usage, self.cores,
                                                              self.exclude_core)]
            if not counts:
                return None
            if (i < own and self._longest_reach is not None
                    and max(counts) > self._longest_reach):
                return None
            if min(counts) >= MIN_JUDGED_TICKS:
                return at, usage, min(counts)
        return None

    def stop(self) -> dict:
        if self._round_start is None:
            raise RuntimeError("InterferenceMeter.stop() called before start()")
        started_at, at_start = self._round_start
        self._round_start = None
        after = parse_proc_stat(self._read())
        now = self._clock()
        judged = self._judged_window(at_start, after)
        self._keep(now, after)  # the next round's window may start at this one's end
        if judged is None:
            # /proc/stat counts whole ticks: a window this short reads 0 % or 100 %
            # idle by chance, so it is not judged (quiet is None, not False).
            usage = usage_between(at_start, after)
            others: list[str] = []
            window_start = None
            ticks = min((usage[n].ticks for n in _judged_names(usage, self.cores,
                                                                self.exclude_core)),
                        default=0)
        else:
            window_start, usage, ticks = judged
            others = _judged_names(usage, self.cores, self.exclude_core)
        own = core_name(self.exclude_core) if self.exclude_core is not None else None
        idle = {n: round(usage[n].idle, 4) for n in others}
        steal = {n: round(usage[n].steal, 4) for n in others}
        return {
            "elapsed_s": round(now - started_at, 4),
            "idle": idle,
            "lookback_s": (round(started_at - window_start, 4)
                           if window_start is not None else None),
            "max_steal": max(steal.values()) if steal else None,
            "min_idle": min(idle.values()) if idle else None,
            "own_core": self.exclude_core,
            "own_steal": (round(_own_steal(usage[own]), 4)
                          if own in usage and usage[own].ticks >= MIN_JUDGED_TICKS else None),
            "quiet": all(v >= self.threshold for v in idle.values()) if others else None,
            "steal": steal,
            "threshold": self.threshold,
            "ticks": ticks,
        }


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
        cores=cores if cores is not None else _allowed_cores(),
        clock=clock,
        sleep=sleep,
        read=read,
    )
    return gate.measure()
