"""The parent's side of a worker process: start it, feed it a request, read its events.

The parent never loads an EP library: a throw-away worker probes the arms, one worker
runs each process of a case, and one more counts instructions. A worker that crashes
or hangs costs only its own rounds; what it reported before is kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import epbench
from epbench.cases.spec import CaseSpec
from epbench.core.errors import ArmError
from epbench.core.results import dumps
from epbench.harness import instructions
from epbench.harness.arms import ArmSpec
from epbench.harness.isolation import credential
from epbench.harness.run_config import WorkerConfig

# The module each worker process runs; tests point it at a worker that crashes.
WORKER_MODULE = "epbench.harness.worker"
# How much of a dead worker's stderr is kept for the error message.
STDERR_TAIL_BYTES = 4000
# Seconds a worker may take to report its first event (before it loads any EP: Python,
# numpy and ORT's import, and for conformance the arm's registration), when its silence
# timeout (about a hung case) is shorter: a start took over 5 s with both cores busy.
STARTUP_TIMEOUT_S = 60.0


def _worker_env() -> dict[str, str]:
    # The folder that holds the `epbench` package (the checkout, or site-packages); in a
    # checkout the parts come from the install's finder (`package-dir` in pyproject.toml).
    root = str(Path(epbench.__file__).parent.parent)
    # The worker loads the libraries under test: it gets no credential (a token, the
    # history's URL) that the harness's environment may hold.
    env = {k: v for k, v in os.environ.items() if not credential(k)}
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass
class WorkerOutcome:
    events: list[dict[str, Any]]
    returncode: int
    stderr_tail: str
    timed_out: bool = False
    waited_s: float | None = None  # the silence that got it killed, when timed_out


# One decoded JSON line of the worker's protocol: JSON at the edge, typed by whoever reads
# the event's kind (case_from_dict, the arm's names).
WorkerEvent = dict[str, Any]
OnEvent = Callable[[WorkerEvent], None]


def run_worker(request: dict[str, Any], on_event: OnEvent | None = None,
               silence_timeout_s: float | None = None,
               prefix: tuple[str, ...] | list[str] = ()) -> WorkerOutcome:
    """Run one worker process to the end.

    A worker that reports nothing for ``silence_timeout_s`` (a hung EP) is killed
    and reported as such; before its first event it gets at least STARTUP_TIMEOUT_S.
    A KeyboardInterrupt kills it and propagates. ``prefix`` runs the worker under
    another program (valgrind, for instruction counts).
    """
    import json
    import selectors

    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile(mode="w+b") as err:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", WORKER_MODULE, str(write_fd)],
            stdin=subprocess.PIPE, stdout=err, stderr=err, pass_fds=(write_fd,),
            env=_worker_env(), start_new_session=True,
        )
        os.close(write_fd)
        events: list[dict[str, Any]] = []
        timed_out = False
        wait = silence_timeout_s
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(dumps(request).encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the worker died at start; its exit status says why
            # Raw reads, split here: a buffered readline could keep a second line that
            # arrived in the same read out of select()'s sight, so an event written just
            # before a hang was lost with the killed worker (and noticed only at the next
            # write, or never).
            with os.fdopen(read_fd, "rb", buffering=0) as pipe, \
                    selectors.DefaultSelector() as selector:
                selector.register(pipe, selectors.EVENT_READ)
                pending = b""
                while True:
                    wait = silence_timeout_s
                    if wait is not None and not events:
                        wait = max(wait, STARTUP_TIMEOUT_S)
                    if not selector.select(wait):
                        timed_out = True
                        proc.kill()
                        break
                    chunk = pipe.read(1 << 16)
                    if not chunk:
                        break
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        try:
                            event = json.loads(line)
                        except ValueError:
                            continue  # a line cut by a crash mid-write
                        events.append(event)
                        if on_event is not None:
                            on_event(event)
            returncode = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        size = err.seek(0, os.SEEK_END)
        err.seek(max(0, size - STDERR_TAIL_BYTES))
        tail = err.read().decode("utf-8", "replace")
    return WorkerOutcome(events, returncode, tail, timed_out, wait if timed_out else None)


class ArmLoadTimeout(ArmError):
    """An arm's library reported nothing while loading: loading it again would wait again."""


def probe_arms(arms: list[ArmSpec], libraries: dict[str, str | None],
               silence_timeout_s: float | None = None) -> dict[str, dict]:
    """Load and register every arm in a throw-away worker; report each EP's name.

    A library that cannot be loaded, is not a plugin EP, or crashes or hangs while
    loading (nothing reported for ``silence_timeout_s``, or the start-up allowance) is
    reported here, before any case runs. The worker loads the arms in their order here,
    so the first plugin arm it did not report is the one that failed.
    """
    request = {"mode": "probe", "config": {},
               "arms": [{"arm": a.to_dict(), "library": libraries[a.key]} for a in arms]}
    outcome = run_worker(request, None, silence_timeout_s)
    found = {e["key"]: e for e in outcome.events if e.get("event") == "arm"}
    for event in outcome.events:
        if event.get("event") == "error":
            raise ArmError(event["message"])
    done = any(e.get("event") == "done" for e in outcome.events)
    loading = [a.spec for a in arms if a.kind != "ort" and a.key not in found]
    if outcome.timed_out and done:
        raise ArmError(f"every arm loaded, but the probe's worker did not exit within "
                       f"{outcome.waited_s:g} s (an EP that hangs while unloading?)")
    if outcome.timed_out:
        raise ArmLoadTimeout(
            f"arm {loading[0] if loading else '?'!r} reported nothing within "
            f"{outcome.waited_s:g} s while loading (a hung EP?); `epbench run "
            f"--case-timeout` above {outcome.waited_s:g} s gives a slow one longer")
    if outcome.returncode < 0:
        raise ArmError(
            f"arm {loading[0] if loading else '?'!r} crashed the process while loading "
            f"({_signal_name(-outcome.returncode)}); the library is broken or built for "
            "another ONNX Runtime"
        )
    if not done:
        raise ArmError(f"loading the arms failed: {outcome.stderr_tail.strip()[-500:]}")
    return found


def empty_case(spec: CaseSpec) -> dict[str, Any]:
    """A case record with nothing measured yet."""
    return {"spec": spec.to_dict(), "definition_sha256": None, "status": "ok", "error": None,
            "error_kind": None, "signal": None, "core": None, "overhead": None, "arms": {},
            "rounds": [], "processes": []}


@dataclass
class ProcessRecord:
    """What one worker process of a case measured, crash or not, filled in as its events
    arrive (so not frozen). Its fields are the case record's; `to_dict` is the record a
    results.jsonl `process` line carries and `merge_process` adds to the case."""

    spec: dict[str, Any]
    status: str = "ok"
    error: str | None = None
    error_kind: str | None = None
    signal: int | None = None
    core: int | None = None
    overhead: dict[str, Any] | None = None
    arms: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)  # the worker's, as sent
    definition_sha256: str | None = None

    def ended(self, status: str, kind: str, error: str) -> None:
        """Mark the process ended otherwise than by finishing (failed, crashed, ...)."""
        self.status, self.error_kind, self.error = status, kind, error

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: that deep-copies every round; the rounds stay shared.
        return {f.name: getattr(self, f.name) for f in fields(self)}


class ProcessInterrupted(Exception):
    """A Ctrl-C stopped a case's process; ``partial`` is what it measured before."""

    def __init__(self, partial: ProcessRecord) -> None:
        super().__init__("interrupted")
        self.partial = partial


def run_process(spec: CaseSpec, arms: list[ArmSpec], libraries: dict[str, str | None],
                orders: list[list[str]], worker_config: WorkerConfig,
                built: dict[str, Any], on_event: OnEvent | None = None) -> ProcessRecord:
    """Run one process of a case in a worker; return what it measured, crash or not.

    ``built`` is where the case was saved (cases.built): the worker reads it, and also
    ``overhead_case`` from ``worker_config`` when it measures the harness's overhead.
    """
    result = ProcessRecord(spec=spec.to_dict())

    def collect(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "pinned":
            result.core = event["core"]
        elif kind == "overhead":
            result.overhead = event["overhead"]
        elif kind in ("verified", "sized"):
            result.arms = event["arms"]
        elif kind == "round":
            result.rounds.append(event["round"])
        elif kind == "error":
            result.ended("failed", event.get("kind", "internal"), event["message"])
        if on_event is not None:
            on_event(event)

    request = {"mode": "case", "case": spec.to_dict(), "built": built, "orders": orders,
               "config": worker_config.to_dict(),
               "arms": [{"arm": a.to_dict(), "library": libraries[a.key]} for a in arms]}
    silence_timeout_s = worker_config.silence_timeout_s
    try:
        outcome = run_worker(request, collect, silence_timeout_s)
    except KeyboardInterrupt:
        result.ended("interrupted", "interrupted",
                     "interrupted by Ctrl-C; rounds measured before it are kept")
        raise ProcessInterrupted(result) from None
    done = any(e.get("event") == "done" for e in outcome.events)
    tail = outcome.stderr_tail.strip()[-300:]
    measured = f"after {len(result.rounds)} round(s)"
    if outcome.timed_out and not outcome.events:
        result.ended("crashed", "crash",
                     f"worker stopped: it reported nothing within {outcome.waited_s:g} s of "
                     "starting (Python and ORT's import: a machine too busy?); raise "
                     f"--case-timeout above {outcome.waited_s:g} s if it is that slow")
    elif outcome.timed_out:
        result.ended("crashed", "crash",
                     f"worker stopped: nothing reported for {outcome.waited_s:g} s "
                     f"{measured} (a hung EP?); raise --case-timeout if a step is "
                     "legitimately that slow")
    elif outcome.returncode < 0:
        result.signal = -outcome.returncode
        result.ended("crashed", "crash",
                     f"worker killed by {_signal_name(-outcome.returncode)} {measured}; {tail}")
    elif not done and result.status == "ok":
        result.ended("crashed", "crash", f"worker exited with status {outcome.returncode} "
                                         f"{measured} before finishing: {tail}")
    return result


def count_instructions(request: dict[str, Any], cases: dict[str, dict[str, Any]],
                       on_case: Callable[[str], None] = lambda _: None, *, method: str,
                       silence_timeout_s: float) -> None:
    """Run the instruction-count pass of ``cases`` (one worker) and add their counts.

    A failed pass does not fail a case (its times stand); the reason is kept in
    the case's ``instructions["error"]``: its own error; the crash, for the case the
    worker was counting when it died; "ended before this case" for those after it;
    "interrupted" when Ctrl-C stopped the pass (which then propagates). ``on_case``
    hears of each case as soon as its record is final, counted or not.
    """
    for case in cases.values():
        case["instructions"] = {"method": method, "rule": instructions.RULES.get(method),
                                "runs": instructions.COUNT_RUNS, "error": None}
    finished: set[str] = set()
    current: list[str] = []  # the case the worker said it is counting

    def finish(name: str, error: str | None) -> None:
        if error is not None:
            cases[name]["instructions"]["error"] = error
        finished.add(name)
        on_case(name)

    def finish_rest(reason: str) -> None:
        for name in cases:
            if name not in finished:
                finish(name, reason)

    with tempfile.TemporaryDirectory(prefix="epbench-cg-") as dump_dir:
        try:
            pass_request, prefix = instructions.worker_request(request, method, Path(dump_dir))
        except instructions.InstructionsError as exc:
            finish_rest(str(exc))
            return
        errors: list[str] = []

        def collect(event: dict[str, Any]) -> None:
            kind, name = event.get("event"), event.get("case")
            if kind == "counting" and name in cases:
                current[:] = [name]
            elif kind == "instructions" and name in cases:
                error = event.get("error")
                if not error:
                    try:
                        per_run = instructions.per_run_of(event, method, Path(dump_dir))
                    except instructions.InstructionsError as exc:
                        error = f"{type(exc).__name__}: {exc}"  # as the worker words its own
                    else:
                        instructions.add_counts(cases[name]["arms"], per_run)
                finish(name, error)
            elif kind == "error":
                errors.append(event["message"])

        try:
            outcome = run_worker(pass_request, collect, silence_timeout_s, prefix)
        except KeyboardInterrupt:
            finish_rest("interrupted before this case was counted")
            raise
    ended = (errors[0] if errors else
             f"the {method} pass reported nothing for {outcome.waited_s:g} s and was stopped "
             "(raise --case-timeout)" if outcome.timed_out else
             f"the {method} pass ended with status {outcome.returncode}: "
             f"{outcome.stderr_tail.strip()[-300:]}")
    if current and current[0] not in finished:
        finish(current[0], f"{ended} (while counting this case)")
    finish_rest(f"{ended} (before this case)")
