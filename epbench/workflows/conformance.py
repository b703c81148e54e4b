"""Run ONNX's node test cases on an arm's EP, each run of cases in a worker process.

The worker side (choosing, running and judging a case) is epbench.harness.conformance;
here the parent resolves the arm, hands the cases to a worker (mode ``conformance``) and
starts a fresh one after a crash or a hang, so that only the case it happened on is lost.
The parent never loads the EP library.
"""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
from collections.abc import Callable

import onnx
import onnxruntime as ort

from epbench.core.errors import ArmError, EpbenchError
from epbench.harness.arms import parse_arm, resolve_library, with_control
from epbench.harness.conformance import (
    DEFAULT_CASE_TIMEOUT_S,
    CaseResult,
    ConformanceResult,
    case_from_dict,
    load_cases,
)
from epbench.harness.worker_process import WorkerEvent, run_worker


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_conformance(arm_spec: str, ops: tuple[str, ...] = (),
                    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
                    on_case: Callable[[CaseResult], None] | None = None) -> ConformanceResult:
    """Run every ONNX node test case of ``ops`` (all ops when empty) on the arm's EP.

    Raises EpbenchError for a bad arm or an unknown op; an EP that fails to load is an
    ArmError. A crash or a hang costs the case it happened on only.
    """
    arm = parse_arm(arm_spec)
    with_control([arm])  # validates engine options and names
    library = resolve_library(arm)
    cases = load_cases(tuple(ops))
    results: dict[str, CaseResult] = {}
    ep: WorkerEvent = {}  # the worker's `arm` event: the EP's name and version
    by_name = {c.name: c for c in cases}
    remaining = [c.name for c in cases]
    with tempfile.TemporaryDirectory(prefix="epbench-conformance-") as tmp:
        cases_file = os.path.join(tmp, "cases.pickle")
        with open(cases_file, "wb") as fh:
            pickle.dump(cases, fh, protocol=pickle.HIGHEST_PROTOCOL)
        while remaining:
            started: list[str] = []

            def collect(event: WorkerEvent, started: list[str] = started) -> None:
                kind = event.get("event")
                if kind == "arm":
                    ep.update(event)
                elif kind == "case_start":
                    started.append(event["name"])
                elif kind == "case_result":
                    result = case_from_dict(event["result"])
                    results[result.name] = result
                    if on_case is not None:
                        on_case(result)

            request = {"mode": "conformance", "config": {}, "cases_file": cases_file,
                       "names": remaining,
                       "arms": [{"arm": arm.to_dict(), "library": library}]}
            outcome = run_worker(request, collect, case_timeout_s)
            errors = [e for e in outcome.events if e.get("event") == "error"]
            unfinished = [n for n in started if n not in results]
            if not unfinished:
                if errors and not started:  # the arm did not load
                    raise ArmError(errors[0]["message"])
                if not started:  # no progress: do not loop
                    if outcome.timed_out:
                        raise EpbenchError(
                            f"the conformance worker started no case within "
                            f"{outcome.waited_s:g} s (a busy machine, or an EP that hangs "
                            "while loading); raise --case-timeout")
                    raise EpbenchError("the conformance worker stopped before any case: "
                                       + outcome.stderr_tail.strip()[-500:])
                remaining = [n for n in remaining if n not in results]
                continue
            victim = unfinished[0]
            if outcome.timed_out:
                why = f"no result within {case_timeout_s:g} s (a hung EP?); worker killed"
            elif outcome.returncode < 0:
                why = f"worker killed by {_signal_name(-outcome.returncode)}"
            elif errors:
                why = f"worker failed: {errors[0]['message']}"
            else:
                why = f"worker exited with status {outcome.returncode}"
            tail = outcome.stderr_tail.strip()[-300:]
            results[victim] = CaseResult(victim, by_name[victim].op, "crashed",
                                         message=why + (f"; {tail}" if tail else ""))
            if on_case is not None:
                on_case(results[victim])
            remaining = [n for n in remaining if n not in results]
    return ConformanceResult(
        arm=arm.spec, ep_name=ep.get("ep_name", "CPUExecutionProvider"),
        ep_version=ep.get("ep_version"), ops=tuple(ops),
        versions={"onnx": onnx.__version__, "onnxruntime": ort.__version__},
        cases=tuple(results[c.name] for c in cases))
