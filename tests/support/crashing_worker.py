"""The real worker, except that it kills itself with a real signal mid-case.

EPBENCH_TEST_CRASH="CASE:ROUNDS:SIGNAL" makes the worker for CASE die by SIGNAL
right after reporting ROUNDS rounds, the way a segfaulting EP kills it.
"""

from __future__ import annotations

import os
import signal
import sys

from harness import worker


def main() -> int:
    case, rounds, signame = os.environ["EPBENCH_TEST_CRASH"].split(":")
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
                if seen == int(rounds):
                    os.kill(os.getpid(), getattr(signal, signame))

        self.emit = counting_emit
        return original(self, arms, core)

    worker.Worker.rounds = rounds_then_crash
    return worker.main(sys.argv)


if __name__ == "__main__":
    sys.exit(main())
