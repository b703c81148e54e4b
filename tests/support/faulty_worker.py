"""The real worker with one fault injected, to test how the parent copes.

EPBENCH_TEST_FAULT selects it:
  crash:CASE:ROUNDS:SIGNAL -- the worker for CASE dies by SIGNAL right after
                              reporting ROUNDS rounds, as a segfaulting EP kills it;
  crashp:CASE:PROCESS:ROUNDS:SIGNAL -- ... only the worker of process PROCESS;
  exit:CASE:ROUNDS:CODE    -- ... exits with status CODE instead (no signal);
  hang:CASE:ROUNDS         -- ... hangs, as an EP stuck in a loop would;
  stall:CASE               -- the worker for CASE hangs before reporting anything;
  wrong:ARM:DELTA          -- ARM's session returns outputs off by DELTA, as an
                              EP that computes something else would;
  busy:FIXTURE             -- the idle gate reads /proc/stat snapshots from
                              tests/fixtures/proc_stat/FIXTURE.{before,after}
                              in turn, i.e. sees a machine exactly that busy.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from epbench.harness import gate, worker


def _after_rounds(case: str, rounds: int, action, process: int | None = None) -> None:
    """Make the worker for ``case`` (of ``process``, or every one) call ``action()`` right
    after reporting ``rounds`` rounds."""
    original = worker.Worker.rounds

    def rounds_then_act(self, arms, core):
        if self.request.get("case", {}).get("name") != case or (
                process is not None and self.config.get("process") != process):
            return original(self, arms, core)
        emit = self.emit
        seen = 0

        def counting_emit(event):
            nonlocal seen
            emit(event)
            if event.get("event") == "round":
                seen += 1
                if seen == rounds:
                    action()

        self.emit = counting_emit
        return original(self, arms, core)

    worker.Worker.rounds = rounds_then_act


def _wrong_outputs(arm_key: str, delta: float) -> None:
    original = worker.create_session

    class Skewed:
        def __init__(self, session):
            self._session = session

        def run(self, names, feeds):
            return [out + delta for out in self._session.run(names, feeds)]

        def __getattr__(self, name):
            return getattr(self._session, name)

    def create_session(arm, *args, **kwargs):
        session = original(arm, *args, **kwargs)
        return Skewed(session) if arm.key == arm_key else session

    worker.create_session = create_session  # the name the worker calls


def _busy(fixture: str) -> None:
    base = Path(__file__).parent.parent / "fixtures" / "proc_stat"
    snapshots = [(base / f"{fixture}.{part}").read_text() for part in ("before", "after")]
    original = gate.IdleGate.__init__

    def init(self, *args, **kwargs):
        turn = iter(range(1 << 30))
        kwargs["read"] = lambda: snapshots[next(turn) % 2]
        original(self, *args, **kwargs)

    gate.IdleGate.__init__ = init


def _stall(case: str) -> None:
    original = worker.Worker.run

    def run(self):
        if self.request.get("case", {}).get("name") == case:
            time.sleep(3600)  # before reporting anything: the pipe never breaks
        return original(self)

    worker.Worker.run = run


def main() -> int:
    kind, rest = os.environ["EPBENCH_TEST_FAULT"].split(":", 1)
    if kind == "crash":
        case, rounds, signame = rest.rsplit(":", 2)
        _after_rounds(case, int(rounds),
                      lambda: os.kill(os.getpid(), getattr(signal, signame)))
    elif kind == "crashp":
        case, process, rounds, signame = rest.rsplit(":", 3)
        _after_rounds(case, int(rounds),
                      lambda: os.kill(os.getpid(), getattr(signal, signame)), int(process))
    elif kind == "exit":
        case, rounds, code = rest.rsplit(":", 2)
        _after_rounds(case, int(rounds), lambda: os._exit(int(code)))
    elif kind == "hang":
        case, rounds = rest.rsplit(":", 1)
        _after_rounds(case, int(rounds), lambda: time.sleep(3600))
    elif kind == "stall":
        _stall(rest)
    elif kind == "wrong":
        arm_key, delta = rest.rsplit(":", 1)  # an arm key may contain ':'
        _wrong_outputs(arm_key, float(delta))
    elif kind == "busy":
        _busy(rest)
    return worker.main(sys.argv)


if __name__ == "__main__":
    sys.exit(main())
