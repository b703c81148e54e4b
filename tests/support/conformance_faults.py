"""The real worker with one conformance fault injected (EPBENCH_CONFORMANCE_FAULT):

  crash:CASE:SIGNAL -- the worker dies by SIGNAL while running CASE, as a segfaulting EP;
  hang:CASE         -- ... hangs on CASE, as an EP stuck in a loop;
  skew:CASE:DELTA   -- the EP's session of CASE returns outputs off by DELTA (ORT's CPU-only
                       session stays right), as an EP that computes something else.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from epbench.harness import conformance, worker


def _on_case(name: str, action) -> None:
    original = conformance.run_case

    def run_case(case, *args, **kwargs):
        if case.name == name:
            action()
        return original(case, *args, **kwargs)

    conformance.run_case = run_case


def _skew(name: str, delta: float) -> None:
    original = conformance._run_data_sets

    class Skewed:
        def __init__(self, session):
            self._session = session

        def run(self, names, feeds):
            return [out + delta for out in self._session.run(names, feeds)]

    def run_data_sets(session, model, case):
        on_ep = session.get_providers()[0] != "CPUExecutionProvider"
        if case.name == name and on_ep:
            session = Skewed(session)
        return original(session, model, case)

    conformance._run_data_sets = run_data_sets


def main() -> int:
    kind, rest = os.environ["EPBENCH_CONFORMANCE_FAULT"].split(":", 1)
    if kind == "crash":
        name, signame = rest.rsplit(":", 1)
        _on_case(name, lambda: os.kill(os.getpid(), getattr(signal, signame)))
    elif kind == "hang":
        _on_case(rest, lambda: time.sleep(3600))
    elif kind == "skew":
        name, delta = rest.rsplit(":", 1)
        _skew(name, float(delta))
    return worker.main(sys.argv)


if __name__ == "__main__":
    sys.exit(main())
