"""Per-core CPU time from `/proc/stat`: read it, parse it, and the usage between two reads.

The gate (harness.gate) and the interference meter (harness.interference) judge cores
by these numbers; all I/O is a `read` callable, so tests feed fixture texts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

PROC_STAT = "/proc/stat"


def read_proc_stat() -> str:
    with open(PROC_STAT, encoding="ascii") as f:
        return f.read()


def core_name(core: int) -> str:
    """The `/proc/stat` row name of a logical core: 3 -> "cpu3"."""
    return f"cpu{core}"


def allowed_cores() -> list[int]:
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


def judged_names(
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
