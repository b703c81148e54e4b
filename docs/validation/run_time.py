"""Where a compare-commits-shaped run's time goes, worker by worker.

    python docs/validation/run_time.py [GRID]

Runs GRID (default quick) with compare-commits' arms and defaults (the bundled engine as
`base`, a copy of its file as `head`, base's A/A twin, the ORT control; 6 processes, 48
rounds, 2 sessions) through harness.runner, no instruction pass, and sums over its
workers the time between their events: from one worker's last event to the next one's
first (starting a process: the interpreter, its imports, pinning), to `verified`
(loading the arms, sessions, output checks), to `sized` (warm-up, block sizing,
counters), the rounds, and the end.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from epbench.cases.grids import load_grid
from epbench.engine.library import library_path
from epbench.harness.arms import parse_arm
from epbench.harness.run_config import RunConfig
from epbench.harness.runner import run


class EventClock:
    """A runner Progress that notes when each worker's events arrived."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int], list[tuple[str, float]]] = {}

    def start(self, total_rounds: int) -> None:
        pass

    def event(self, case: str, process: int, event: dict[str, Any]) -> None:
        self.seen.setdefault((case, process), []).append((event["event"], time.monotonic()))

    def process_done(self, case: str, process: int, record: dict[str, Any],
                     skipped_rounds: int) -> None:
        self.seen.setdefault((case, process), []).append(("ended", time.monotonic()))

    def status(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def phases(seen: dict[tuple[str, int], list[tuple[str, float]]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    previous_end = None
    for events in sorted(seen.values(), key=lambda ev: ev[0][1]):
        at = dict(reversed(events))  # the first time each event was seen
        rounds = [t for name, t in events if name == "round"]
        if previous_end is not None:
            out.setdefault("start (last event to next first)", []).append(
                events[0][1] - previous_end)
        if rounds and {"pinned", "verified", "sized"} <= set(at):
            out.setdefault("pinned to verified", []).append(at["verified"] - at["pinned"])
            out.setdefault("verified to sized", []).append(at["sized"] - at["verified"])
            out.setdefault("sized to last round", []).append(rounds[-1] - at["sized"])
            out.setdefault("last round to end", []).append(events[-1][1] - rounds[-1])
        previous_end = events[-1][1]
    return out


def main(grid: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        head = Path(tmp) / "head.so"
        shutil.copy(library_path(), head)
        arms = (parse_arm(f"engine@{library_path()}:name=base"),
                parse_arm(f"engine@{head}:name=head"))
        clock = EventClock()
        started = time.monotonic()
        run(RunConfig(cases=tuple(load_grid(grid)), arms=arms, rounds=48, processes=6,
                      sessions=2, aa_twin="base", progress=clock))
        total = time.monotonic() - started
    print(f"{grid}: {total:.1f} s, {len(clock.seen)} workers")
    for name, spans in phases(clock.seen).items():
        print(f"  {name:36s} {sum(spans):6.1f} s in all, median {statistics.median(spans):.3f} s")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "quick")
