"""The real worker with one fault injected, to test how the parent copes.

EPBENCH_TEST_FAULT selects it:
  crash:CASE:ROUNDS:SIGNAL -- the worker for CASE dies by SIGNAL right after
                              reporting ROUNDS rounds, as a segfaulting EP kills it;
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
from pathlib import Path

from harness import gate, sessions, worker


def _crash_after(case: str, rounds: int, signame: str) -> None:
    original = worker.Worker.rounds

    def rounds_then_crash(self, arms, core):
        if self.request.get("case", {}).get("name") != case:
            return original(self, arms, core)
        emit = self.emit
        seen = 0

        def counting_emit(event):
            nonlocal seen
            emit(event)
            if event.get("event") == "round":
                seen += 1
                if seen == rounds:
                    os.kill(os.getpid(), getattr(signal, signame))

        self.emit = counting_emit
        return original(self, arms, core)

    worker.Worker.rounds = rounds_then_crash


def _wrong_outputs(arm_key: str, delta: float) -> None:
    original = sessions.create_session

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

    sessions.create_session = create_session


def _busy(fixture: str) -> None:
    base = Path(__file__).parent.parent / "fixtures" / "proc_stat"
    snapshots = [(base / f"{fixture}.{part}").read_text() for part in ("before", "after")]
    original = gate.IdleGate.__init__

    def init(self, *args, **kwargs):
        turn = iter(range(1 << 30))
        kwargs["read"] = lambda: snapshots[next(turn) % 2]
        original(self, *args, **kwargs)

    gate.IdleGate.__init__ = init


def main() -> int:
    kind, rest = os.environ["EPBENCH_TEST_FAULT"].split(":", 1)
    if kind == "crash":
        case, rounds, signame = rest.rsplit(":", 2)
        _crash_after(case, int(rounds), signame)
    elif kind == "wrong":
        arm_key, delta = rest.rsplit(":", 1)  # an arm key may contain ':'
        _wrong_outputs(arm_key, float(delta))
    elif kind == "busy":
        _busy(rest)
    return worker.main(sys.argv)


if __name__ == "__main__":
    sys.exit(main())
