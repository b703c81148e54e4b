"""The worker: runs one case, all its arms, round by round, in its own process.

The parent (harness.runner) starts ``python -m harness.worker EVENTS_FD``,
writes one JSON request to stdin, and reads JSON-lines events from the pipe
EVENTS_FD (not stdout: an EP that prints cannot corrupt the protocol). If an EP
crashes, this process dies and the parent keeps every round already reported.

Events, in order: ``pinned``, ``arm`` (one per plugin arm), ``verified``, ``round``
(one per round, with its samples), then ``done``; or ``error`` at any point.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.arms import CONTROL_KEY, ArmSpec
from harness.errors import EpbenchError
from harness.results import dumps

# Runs used to count an arm's deterministic work per Run (outside any timing).
COUNTER_RUNS = 16


def time_block(run: Callable[[], object], iterations: int,
               clock: Callable[[], int] = time.perf_counter_ns) -> list[int]:
    """Time ``iterations`` calls of ``run``, one sample per call, GC off inside the block."""
    samples = [0] * iterations
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(iterations):
            t0 = clock()
            run()
            samples[i] = clock() - t0
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def block_iterations(ns_per_run: float, target_ms: float, max_iters: int) -> int:
    """Iterations so one block lasts about ``target_ms``, at least 1, at most ``max_iters``."""
    if ns_per_run <= 0:
        return max_iters
    return max(1, min(max_iters, int(target_ms * 1e6 / ns_per_run)))


@dataclass
class ArmRun:
    """One arm's live state inside the worker."""

    arm: ArmSpec
    library: str | None
    session: Any = None
    binding: Any = None
    run: Callable[[], object] | None = None
    ep_name: str | None = None
    iterations: int = 0


def _timed_call(session: Any, binding: Any) -> Callable[[], object]:
    """The timed call: ORT's ``run_with_iobinding`` with everything bound once.

    The C-level entry is used directly when present: the Python wrapper only adds
    WebGPU graph-capture checks, which are identical per arm and would raise the
    harness's floor, compressing every ratio toward 1.
    """
    native_session = getattr(session, "_sess", None)
    native_binding = getattr(binding, "_iobinding", None)
    if native_session is not None and native_binding is not None:
        native_run = native_session.run_with_iobinding
        return lambda: native_run(native_binding, None)
    return lambda: session.run_with_iobinding(binding)


class Worker:
    def __init__(self, request: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> None:
        self.request = request
        self.emit = emit
        self.config = request["config"]

    def pin(self) -> int | None:
        from harness.gate import quietest_core

        allowed = set(os.sched_getaffinity(0))
        # The gate judges every core we were allowed, not just the one we pin to.
        self.cores = sorted(allowed)
        core = quietest_core(allowed) if len(allowed) > 1 else next(iter(allowed))
        os.sched_setaffinity(0, {core})
        self.emit({"event": "pinned", "core": core})
        return core

    def setup_arms(self) -> list[ArmRun]:
        from harness.sessions import register_arm

        arms = []
        for item in self.request["arms"]:
            arm = ArmSpec.from_dict(item["arm"])
            state = ArmRun(arm=arm, library=item["library"])
            if arm.kind != "ort":
                reg = register_arm(arm, item["library"])
                state.ep_name = reg.ep_name
                state.registration = reg  # type: ignore[attr-defined]
                self.emit({"event": "arm", "key": arm.key, "ep_name": reg.ep_name,
                           "ep_version": reg.ep_version,
                           "registration_name": reg.registration_name})
            else:
                state.ep_name = "CPUExecutionProvider"
                state.registration = None  # type: ignore[attr-defined]
            arms.append(state)
        return arms

    def build_sessions(self, arms: list[ArmRun], built: Any, spec: Any) -> dict[str, Any]:
        """Create every session, check assignment, verify outputs against the control."""
        from harness.errors import CaseError
        from harness.sessions import bind, create_session, max_abs_error, nodes_by_ep

        info: dict[str, Any] = {}
        expected = None
        control_first = sorted(arms, key=lambda a: a.arm.key != CONTROL_KEY)
        for state in control_first:
            state.session = create_session(
                state.arm, built.model_bytes, spec.opt_level, self.config["threads"],
                state.registration, self.config["allow_fallback"],  # type: ignore[attr-defined]
            )
            outputs = state.session.run(None, built.inputs)
            if state.arm.key == CONTROL_KEY:
                expected = outputs
                error = 0.0
            else:
                error = max_abs_error(expected, outputs)
            by_ep = nodes_by_ep(state.session)
            verified = error <= spec.tolerance
            info[state.arm.key] = {
                "nodes_executed": sum(by_ep.values()),
                "nodes_by_ep": by_ep,
                "verified": verified,
                "max_abs_error": error if error != float("inf") else None,
                "block_iters": 0,
                "counters_per_run": None,
            }
            if not verified:
                shown = "a shape or NaN mismatch" if error == float("inf") else f"{error:.3g}"
                raise CaseError(
                    f"arm {state.arm.key!r}: outputs differ from ORT's CPU EP: largest "
                    f"error {shown} > tolerance {spec.tolerance:g}; the EP computes "
                    "something else, so it is not timed",
                    ) from None
            state.binding = bind(state.session, built.inputs, outputs)
            state.run = _timed_call(state.session, state.binding)
        self.emit({"event": "verified", "arms": info})
        return info

    def calibrate(self, arms: list[ArmRun], info: dict[str, Any]) -> None:
        """Warm up every arm, then size its block to last about the target time."""
        warmup_ns = self.config["warmup_ms"] * 1e6
        for state in arms:
            assert state.run is not None
            spent, runs = 0, 0
            while spent < warmup_ns or runs < 3:
                samples = time_block(state.run, 8)
                spent += sum(samples)
                runs += len(samples)
            ns_per_run = sorted(time_block(state.run, 16))[8]
            state.iterations = block_iterations(
                ns_per_run, self.config["block_target_ms"], self.config["max_block_iters"])
            info[state.arm.key]["block_iters"] = state.iterations

    def count(self, arms: list[ArmRun], info: dict[str, Any]) -> None:
        """Deterministic counters per Run, for libraries that export epbench's probe."""
        try:
            from engine.probe import read_counters
        except ImportError:  # TEMP until engine.probe lands
            return

        for state in arms:
            if state.library is None:
                continue
            before = read_counters(state.library, state.ep_name)
            if before is None:
                continue
            assert state.run is not None
            for _ in range(COUNTER_RUNS):
                state.run()
            after = read_counters(state.library, state.ep_name) or {}
            info[state.arm.key]["counters_per_run"] = {
                k: (after[k] - before.get(k, 0)) / COUNTER_RUNS for k in sorted(after)
            }

    def rounds(self, arms: list[ArmRun], core: int | None) -> None:
        from harness.gate import IdleGate, InterferenceMeter, format_gate_reading

        by_key = {s.arm.key: s for s in arms}
        gate_cfg = self.config["gate"]
        gate = IdleGate(threshold=gate_cfg["threshold"], policy=gate_cfg["policy"],
                        max_wait_s=gate_cfg["max_wait_s"], cores=self.cores)
        for index, order in enumerate(self.request["orders"]):
            reading = gate.check(exclude_core=None)
            self.emit({"event": "gate", "index": index, "gate": reading.to_dict(),
                       "text": format_gate_reading(reading)})
            meter = InterferenceMeter(exclude_core=core, cores=self.cores,
                                      threshold=gate_cfg["threshold"])
            meter.start()
            samples = {}
            for key in order:
                state = by_key[key]
                assert state.run is not None
                samples[key] = time_block(state.run, state.iterations)
            interference = meter.stop()
            self.emit({"event": "round", "round": {
                # Quiet means quiet before the round (gate) and during it (interference).
                "index": index, "order": list(order),
                "quiet": bool(reading.passed and interference.get("quiet", True)),
                "gate": reading.to_dict(), "interference": interference,
                "samples_ns": samples,
            }})

    def run(self) -> None:
        from cases.spec import CaseSpec

        if self.request.get("mode") == "probe":
            # Preflight: load and register every arm, report EP names, run nothing.
            self.setup_arms()
            self.emit({"event": "done"})
            return
        core = self.pin()
        spec = CaseSpec.from_dict(self.request["case"])
        built = spec.build()
        arms = self.setup_arms()
        info = self.build_sessions(arms, built, spec)
        self.calibrate(arms, info)
        self.count(arms, info)
        self.emit({"event": "calibrated", "arms": info})
        self.rounds(arms, core)
        self.emit({"event": "done"})


def main(argv: list[str]) -> int:
    # Ctrl-C goes to the whole process group; the parent decides what to keep.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    events = os.fdopen(int(argv[1]), "w", encoding="utf-8", buffering=1)

    def emit(event: dict[str, Any]) -> None:
        events.write(dumps(event) + "\n")
        events.flush()

    import json

    request = json.loads(sys.stdin.read())
    try:
        Worker(request, emit).run()
    except EpbenchError as exc:
        from harness.errors import GateError

        kind = "gate" if isinstance(exc, GateError) else "case"
        emit({"event": "error", "kind": kind, "message": exc.format_message()})
        return 0
    except Exception as exc:  # an unexpected failure inside one case, reported as such
        import traceback

        emit({"event": "error", "kind": "internal", "message": f"{type(exc).__name__}: {exc}",
              "traceback": traceback.format_exc()})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
