"""How a long run shows its progress: a bar on a terminal, one line per process in CI.

A progress bar on a pipe prints nothing until the end, so a CI log of a 10-minute
run would stay empty; there, each finished process of a case prints one line
instead (case, process, rounds, arms, the median ratio to the control, elapsed).
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

import click

from epbench.core.numbers import median


def _ratio_text(record: dict[str, Any], control: str) -> str:
    """Each arm's median ratio to the control over the case's rounds so far (all processes)."""
    parts = []
    rounds = record.get("rounds", [])
    arms = sorted({a for r in rounds for a in (r.get("summary_ns") or {})} - {control})
    for arm in arms:
        ratios = []
        for rnd in rounds:
            summary = rnd.get("summary_ns") or {}
            num = (summary.get(arm) or {}).get("median")
            den = (summary.get(control) or {}).get("median")
            if num and den:
                ratios.append(num / den)
        value = median(ratios)
        parts.append(f"{arm} {value:.3f}x" if value is not None else f"{arm} -")
    return ", ".join(parts)


class LineProgress:
    """One line per finished process on ``stream`` (stderr when it is not a terminal)."""

    def __init__(self, stream: TextIO | None = None, control: str = "ort",
                 clock: Any = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.control = control
        self.clock = clock
        self.started = clock()
        self.total = 0
        self.done = 0

    def start(self, total_rounds: int) -> None:
        # One object may follow several runs (compare-commits' re-runs): each counts anew.
        self.total = total_rounds
        self.done = 0
        self.started = self.clock()

    def event(self, case: str, process: int, event: dict[str, Any]) -> None:
        if event.get("event") == "round":
            self.done += 1

    def process_done(self, case: str, process: int, record: dict[str, Any],
                     skipped_rounds: int) -> None:
        self.done += skipped_rounds
        elapsed = self.clock() - self.started
        status = record.get("status", "ok")
        detail = (_ratio_text(record, self.control) if status == "ok"
                  else f"{status}: {record.get('error') or ''}"[:200])
        processes = record.get("processes") or [{}]
        own = processes[-1].get("rounds", len(record.get("rounds", [])))
        print(f"[{self.done}/{self.total} rounds, {elapsed:.0f} s] {case} process "
              f"{process + 1}: {own} rounds; {detail}", file=self.stream, flush=True)

    def status(self, text: str) -> None:
        print(f"[{self.clock() - self.started:.0f} s] {text}", file=self.stream, flush=True)

    def close(self) -> None:
        pass


class BarProgress:
    """A click progress bar over all rounds, with the gate's state live."""

    def __init__(self) -> None:
        self.text = ""
        self.bar: Any = None

    def start(self, total_rounds: int) -> None:
        self.bar = click.progressbar(length=total_rounds, file=sys.stderr, show_pos=True,
                                     width=24, item_show_func=lambda _: self.text)
        self.bar.__enter__()

    def event(self, case: str, process: int, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "gate":
            self.text = f"{case} p{process + 1} r{event['index'] + 1} {event.get('text', '')}"
            self.bar.update(0, self.text)
        elif kind == "round":
            self.bar.update(1, self.text)
        elif kind == "pinned":
            self.text = f"{case} p{process + 1}: setting up on core {event['core']}"
            self.bar.update(0, self.text)

    def process_done(self, case: str, process: int, record: dict[str, Any],
                     skipped_rounds: int) -> None:
        if skipped_rounds > 0:
            self.bar.update(skipped_rounds, self.text)

    def status(self, text: str) -> None:
        self.text = text
        if self.bar is not None:
            self.bar.update(0, self.text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def progress_for(quiet: bool, stream: TextIO | None = None) -> BarProgress | LineProgress | None:
    """No progress with --quiet; a bar on a terminal; one line per process otherwise."""
    if quiet:
        return None
    stream = stream or sys.stderr
    return BarProgress() if stream.isatty() else LineProgress(stream)
