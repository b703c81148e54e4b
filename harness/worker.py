"""The worker: runs one case, all its arms, round by round, in its own process.

The parent (harness.worker_process) starts ``python -m epbench.harness.worker EVENTS_FD``,
writes one JSON request to stdin and reads JSON-lines events from EVENTS_FD. One worker is one
*process* of a case: the runner starts several per case, each with its own memory layout.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epbench.cases.built import BuiltCase, load_built_case
from epbench.cases.spec import CaseSpec
from epbench.core.errors import CaseError, EpbenchError, GateError
from epbench.core.numbers import block_summary, median
from epbench.core.results import dumps
from epbench.engine.probe import read_counters
from epbench.harness.arms import CONTROL_KEY, ArmSpec
from epbench.harness.conformance import run_in_worker
from epbench.harness.gate import IdleGate, format_gate_reading, quietest_core
from epbench.harness.instructions import count_in_worker
from epbench.harness.interference import InterferenceMeter, carried_from_meter
from epbench.harness.overhead import measure_overhead
from epbench.harness.sessions import (
    CPU_EP,
    BoundRun,
    Registration,
    bind,
    create_session,
    max_abs_error,
    nodes_by_ep,
    register_arm,
)
from epbench.harness.timing import block_iterations, round_slices, time_block, time_sliced

# Runs used to count an arm's deterministic work per Run (outside any timing).
COUNTER_RUNS = 16
# Untimed calls per arm right before a round: the gate's sleep leaves caches and
# branch predictors cold, and whichever arm ran first would pay for it.
REWARM_CALLS = 2

Emit = Callable[[dict[str, Any]], None]


@dataclass
class ArmRun:
    """One arm's live state inside the worker."""

    arm: ArmSpec
    library: str | None
    registration: Registration | None = None
    sessions: list[Any] = field(default_factory=list)
    bounds: list[BoundRun] = field(default_factory=list)
    ep_name: str | None = None
    iterations: int = 0

    @property
    def bound(self) -> BoundRun:
        """The first session's bound call (sizing, counters, instruction counts)."""
        return self.bounds[0]


def pin_to_quietest(threads: int, emit: Emit) -> tuple[list[int], int | None]:
    """Pin this process to the quietest allowed core (single-threaded runs).

    Returns every allowed core (the gate judges all of them) and the pinned core,
    or None when ``threads`` > 1: ORT's pool threads inherit this affinity, so a
    multi-threaded run keeps every allowed core.
    """

    allowed = sorted(os.sched_getaffinity(0))
    core = None
    if threads == 1:
        core = quietest_core(set(allowed)) if len(allowed) > 1 else allowed[0]
        os.sched_setaffinity(0, {core})
    emit({"event": "pinned", "core": core, "cores": allowed})
    return allowed, core


class Worker:
    def __init__(self, request: dict[str, Any], emit: Emit) -> None:
        self.request = request
        self.emit = emit
        self.config = request["config"]
        self.cores: list[int] = []

    def setup_arms(self, *, shuffle: bool = True) -> list[ArmRun]:

        arms = []
        items = list(self.request["arms"])
        # Load order shifts layout (which library maps first, whose allocations come
        # first); a fixed order would be a bias between arms, so each process draws one.
        if shuffle:
            random.Random(self.config.get("layout_seed")).shuffle(items)
        for item in items:
            state = ArmRun(arm=ArmSpec.from_dict(item["arm"]), library=item["library"])
            if state.arm.kind == "ort":
                state.ep_name = CPU_EP
            else:
                state.registration = register_arm(state.arm, item["library"])
                state.ep_name = state.registration.ep_name
                self.emit({"event": "arm", "key": state.arm.key, "ep_name": state.ep_name,
                           "ep_version": state.registration.ep_version,
                           "registration_name": state.registration.registration_name})
            arms.append(state)
        return arms

    def build_sessions(self, arms: list[ArmRun], built: BuiltCase,
                       spec: CaseSpec) -> dict[str, Any]:
        """Create every session, check assignment, and verify the very call that is timed.

        Each arm's outputs from ``run`` and from the bound, timed call are both
        compared with the control's; the per-arm facts are reported even when a
        check fails, so a failed case still says what it found.
        """

        info: dict[str, Any] = {}
        expected: list[Any] = []
        # The control first (its outputs are the reference), the rest in the load order.
        control_first = sorted(arms, key=lambda a: a.arm.key != CONTROL_KEY)
        # Each arm has several sessions, rotated over the rounds, so that what two
        # sessions differ by is measured, not frozen into the result (as processes are).
        n_sessions = int(self.config.get("sessions", 1))
        try:
            for state in control_first:
                record = info[state.arm.key] = {
                    "nodes_executed": 0, "nodes_by_ep": {}, "verified": False,
                    "max_abs_error": None, "block_iters": 0, "block_ms": None,
                    "counters_per_run": None,
                }
                error = 0.0
                for _ in range(n_sessions):
                    session = create_session(
                        state.arm, built.model_bytes, spec.opt_level, self.config["threads"],
                        state.registration, self.config["allow_fallback"],
                    )
                    by_ep = nodes_by_ep(session)
                    record["nodes_executed"], record["nodes_by_ep"] = sum(by_ep.values()), by_ep
                    outputs = session.run(None, built.inputs)
                    bound = bind(session, built.inputs, outputs)
                    bound.run()
                    state.sessions.append(session)
                    state.bounds.append(bound)
                    if state.arm.key == CONTROL_KEY and not expected:
                        expected = outputs
                    # Every session's own outputs and those of its timed call are checked.
                    error = max(error, max_abs_error(expected, outputs),
                                max_abs_error(expected, bound.outputs()))
                record["max_abs_error"] = error if error != float("inf") else None
                record["verified"] = error <= spec.tolerance
                if not record["verified"]:
                    shown = "a shape or NaN mismatch" if error == float("inf") else f"{error:.3g}"
                    raise CaseError(
                        f"arm {state.arm.key!r}: outputs differ from ORT's CPU EP: largest "
                        f"error {shown} > tolerance {spec.tolerance:g}; the EP computes "
                        "something else, so it is not timed"
                    )
        finally:
            self.emit({"event": "verified", "arms": info})
        return info

    def size_blocks(self, arms: list[ArmRun], info: dict[str, Any]) -> None:
        """Warm up every arm, then size its block to last about the target time."""
        warmup_ns = self.config["warmup_ms"] * 1e6
        for state in arms:
            spent, runs = 0, 0
            while spent < warmup_ns or runs < 3 * len(state.bounds):
                for bound in state.bounds:  # every session gets its share of the warm-up
                    samples = time_block(bound.run, 8)
                    spent += sum(samples)
                    runs += len(samples)
            ns_per_run = median(time_block(state.bound.run, 31))
            state.iterations = block_iterations(
                ns_per_run, self.config["block_target_ms"], self.config["max_block_iters"])
            info[state.arm.key]["block_iters"] = state.iterations
            info[state.arm.key]["block_ms"] = round(state.iterations * ns_per_run / 1e6, 3)

    def count(self, arms: list[ArmRun], info: dict[str, Any]) -> None:
        """Deterministic counters per Run, for libraries that export epbench's probe."""

        for state in arms:
            if state.library is None:
                continue
            before = read_counters(state.library, state.ep_name)
            if before is None:
                continue
            for _ in range(COUNTER_RUNS):
                state.bound.run()
            after = read_counters(state.library, state.ep_name) or {}
            info[state.arm.key]["counters_per_run"] = {
                k: (after[k] - before.get(k, 0)) / COUNTER_RUNS for k in sorted(after)
            }

    def rounds(self, arms: list[ArmRun], core: int | None) -> None:

        by_key = {s.arm.key: s for s in arms}
        slices = round_slices(int(self.config.get("block_slices", 1)),
                              min((s.iterations for s in arms), default=1))
        gate_cfg = self.config["gate"]
        # Only `wait` may skip a look: `strict` promises one before every round.
        may_carry = gate_cfg["policy"] == "wait"
        gate = IdleGate(threshold=gate_cfg["threshold"], policy=gate_cfg["policy"],
                        max_wait_s=gate_cfg["max_wait_s"], cores=self.cores,
                        budget_s=gate_cfg["budget_s"])
        # One meter for the process's rounds: a round too short to judge alone is judged
        # over a window reaching back over the rounds and gate looks just before it.
        meter = InterferenceMeter(exclude_core=core, cores=self.cores,
                                  threshold=gate_cfg["threshold"])
        carried = None
        for index, order in enumerate(self.request["orders"]):
            reading = carried if carried is not None else gate.check(exclude_core=None)
            if reading.attempts and gate.last_look_start is not None:
                meter.mark(*gate.last_look_start)
            self.emit({"event": "gate", "index": index, "gate": reading.to_dict(),
                       "text": format_gate_reading(reading)})
            # Sessions rotate over the rounds: round i runs session i mod K of every arm.
            session = index % len(arms[0].bounds)
            for key in order:
                for _ in range(REWARM_CALLS):
                    by_key[key].bounds[session].run()
            meter.start()
            timed = time_sliced([(by_key[key].bounds[session].run, by_key[key].iterations)
                                 for key in order], slices)
            interference = meter.stop()
            samples = dict(zip(order, timed, strict=True))
            # Quiet: the gate passed (or was turned off by the user) before the round, or
            # the previous round's meter stood in for it, and no load was seen during it.
            quiet = reading.passed and interference["quiet"] is not False
            # A round whose gate did not pass lends nothing: the next one looks again.
            carried = (carried_from_meter(interference, gate_cfg["threshold"])
                       if may_carry and reading.passed else None)
            record = {
                "index": index, "order": list(order), "session": session, "slices": slices,
                "quiet": bool(quiet), "gate": reading.to_dict(), "interference": interference,
                "summary_ns": {key: block_summary(s) for key, s in samples.items()},
            }
            if self.config.get("keep_samples"):
                record["samples_ns"] = samples
            self.emit({"event": "round", "round": record})

    def run(self) -> None:
        # Events, in order: pinned, arm (one per plugin arm), verified, sized, then per
        # round gate and round, then done; or error at any point, after the facts so far.
        if self.request.get("mode") == "probe":
            # Preflight: load and register every arm, report EP names, run nothing. In
            # the request's order, so the first arm not reported is the one that failed.
            self.setup_arms(shuffle=False)
            self.emit({"event": "done"})
            return
        if self.request.get("mode") == "conformance":
            # ONNX's node test cases on one arm, one event per case (harness.conformance).
            run_in_worker(self)
            self.emit({"event": "done"})
            return
        if self.request.get("mode") == "instructions":
            # An extra, untimed pass that counts instructions per Run (harness.instructions).

            count_in_worker(self)
            self.emit({"event": "done"})
            return
        self.cores, core = pin_to_quietest(self.config["threads"], self.emit)

        if self.config.get("measure_overhead", True):
            # The harness's own cost per timed call, on this core, recorded with the case.
            self.emit({"event": "overhead", "overhead": measure_overhead(
                threads=self.config["threads"],
                built=load_built_case(self.config["overhead_case"]))})
        spec = CaseSpec.from_dict(self.request["case"])
        # Built once by the runner (cases.built): building here would import onnx.
        built = load_built_case(self.request["built"])
        arms = self.setup_arms()
        info = self.build_sessions(arms, built, spec)
        self.size_blocks(arms, info)
        self.count(arms, info)
        self.emit({"event": "sized", "arms": info})
        self.rounds(arms, core)
        self.emit({"event": "done"})


def die_with_parent() -> None:
    """Ask Linux to kill this worker if the harness dies (no orphaned benchmark)."""
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's timeout still applies
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    # Ctrl-C goes to the harness; it decides what to keep and stops this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    # Events go to their own pipe, not stdout: an EP that prints cannot corrupt them. If an
    # EP crashes, this process dies and the parent keeps every round already reported.
    events = os.fdopen(int(argv[1]), "w", encoding="utf-8", buffering=1)

    def emit(event: dict[str, Any]) -> None:
        events.write(dumps(event) + "\n")
        events.flush()

    import json

    request = json.loads(sys.stdin.read())
    try:
        Worker(request, emit).run()
    except EpbenchError as exc:

        kind = "gate" if isinstance(exc, GateError) else "case"
        emit({"event": "error", "kind": kind, "message": str(exc)})
        return 0
    except Exception as exc:  # an unexpected failure inside one case, reported as such
        import traceback

        emit({"event": "error", "kind": "internal", "message": f"{type(exc).__name__}: {exc}",
              "traceback": traceback.format_exc()})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
