"""The interference meter: were the other cores quiet while a round ran?

It judges the cores the round did not run on over the round (reaching back before it
when the round alone holds too few ticks), and a quiet round lends its reading to the
gate of the next (`carried_from_meter`). Time and `/proc/stat` are injected for tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from epbench.harness.gate import DEFAULT_THRESHOLD, GateReading
from epbench.harness.proc_stat import (
    CoreUsage,
    CpuTimes,
    core_name,
    judged_names,
    parse_proc_stat,
    read_proc_stat,
    usage_between,
)

# Fewest ticks per core (10 ms each on most kernels) for a round's interference
# reading to count: below it a single tick decides between 0 % and 100 % idle.
MIN_JUDGED_TICKS = 5
# Snapshots a process's meter keeps for its windows to start at: one of
# MIN_JUDGED_TICKS needs a few (rounds of one or two ticks, each with a start, an end
# and maybe a gate look).
MAX_METER_MARKS = 16


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
            counts = [usage[n].ticks for n in judged_names(usage, self.cores,
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
            ticks = min((usage[n].ticks for n in judged_names(usage, self.cores,
                                                                self.exclude_core)),
                        default=0)
        else:
            window_start, usage, ticks = judged
            others = judged_names(usage, self.cores, self.exclude_core)
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
