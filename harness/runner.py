"""The interleaved runner: cases x arms x processes x sessions x rounds.

The parent never loads an EP library. It resolves arms, preflights them in a
throw-away worker, then runs each case in ``processes`` worker processes (each with
its own memory layout, which can shift an arm's speed by a fixed offset for the
process's whole life), interleaved in time across cases: case A process 1, case B
process 1, ..., case A process 2, ... so that a slow drift of the machine spreads
over every case and process. Rounds stream back over a pipe; results go to disk as
each process ends; a crash costs only that process's rounds, and Ctrl-C keeps
everything measured so far.
"""

from __future__ import annotations

import gzip
import os
import random
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import epbench
from epbench.cases.built import load_built_case, save_built_case
from epbench.cases.grids import case_by_name
from epbench.cases.spec import CaseSpec
from epbench.core.errors import (
    ArmError,
    CaseError,
    EpbenchError,
    scratch_remedy,
)
from epbench.core.results import (
    SCHEMA,
    JsonlWriter,
    check_out_dir,
    dumps,
    merge_process,
    open_output,
    prepare_out_dir,
    write_results,
)
from epbench.core.version import epbench_version
from epbench.harness import instructions
from epbench.harness.arms import (
    CONTROL_KEY,
    WITHOUT_TWIN,
    ArmSpec,
    copy_library,
    file_sha256,
    find_arm,
    resolve_library,
    twin_arm,
    with_control,
)
from epbench.harness.gate import (
    DEFAULT_BUDGET_S,
    DEFAULT_MAX_WAIT_S,
    DEFAULT_THRESHOLD,
    DEFAULT_WINDOW_S,
    FUTILE_ROUNDS_BEFORE_NO_WAIT,
    POLICIES,
    RunWaitBudget,
)
from epbench.harness.host import fingerprint_key, host_fingerprint
from epbench.harness.isolation import credential
from epbench.harness.overhead import OVERHEAD_CASE
from epbench.harness.sessions import CPU_EP
from epbench.harness.worker import COUNTER_RUNS, REWARM_CALLS

# The module each worker process runs; tests point it at a worker that crashes.
WORKER_MODULE = "epbench.harness.worker"
# How much of a dead worker's stderr is kept for the error message.
STDERR_TAIL_BYTES = 4000


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs; recorded whole in the results file.

    These defaults are the CLI's defaults too (epbench.cli.run_commands reads them).
    """

    cases: tuple[CaseSpec, ...]
    arms: tuple[ArmSpec, ...]
    rounds: int = 30  # in all, spread over the processes
    # Worker processes per case, and sessions per arm inside each (rotated over rounds).
    processes: int = 3
    sessions: int = 2
    # The key of an arm to run twice, the second time as an A/A twin from its own copy
    # of the library under its own registration name: the run's own noise measurement.
    aa_twin: str | None = None
    # Raw per-iteration samples into results.samples.jsonl.gz (the results file keeps
    # per-block summaries only).
    keep_samples: bool = False
    block_target_ms: float = 20.0
    # Each arm's block is cut into this many slices, run alternately in the round's order,
    # so every arm samples the same millisecond-scale noise of the machine. On this
    # project's 2-core VM (quick grid, 3 alternated runs of 6 arms each, 72 rounds) the
    # A/A interval's median half-width went 1.34 % -> 0.58 % (16 slices) -> 0.59 % (64),
    # a ~2.7 % slowdown was flagged in 7 -> 17 -> 18 of 18 case comparisons
    # (docs/validation/summaries.tar.xz:slices.txt).
    block_slices: int = 64
    # Bounds the raw samples kept per block: fast cases get shorter blocks.
    max_block_iters: int = 2000
    warmup_ms: float = 100.0
    seed: int = 0
    threads: int = 1
    gate_policy: str = "wait"
    gate_threshold: float = DEFAULT_THRESHOLD
    gate_max_wait_s: float = DEFAULT_MAX_WAIT_S
    # Rounds in a row with no passing gate look before this run began (RunWaitBudget):
    # a re-run of some cases continues its first pass's count.
    futile_rounds_before: int = 0
    # A worker silent this long is taken for hung and killed (its case: crashed).
    silence_timeout_s: float = 300.0
    allow_fallback: bool = False
    fixed_order: bool = False
    # Instruction counts per Run in one extra untimed pass after the timed processes:
    # None, "perf" or "valgrind".
    instructions: str | None = None
    out_dir: Path | None = None
    overwrite: bool = False
    progress: Progress | None = None
    grids: tuple[str, ...] = field(default_factory=tuple)
    # "K/N" when the cases are the K-th of N slices of the grids (`run --shard`).
    shard: str | None = None

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise EpbenchError("--rounds must be at least 1; rounds are the unit of replication")
        if self.processes < 1:
            raise EpbenchError("--processes must be at least 1 (3 or more let the interval "
                               "cover what two processes differ by)")
        if self.sessions < 1:
            raise EpbenchError("--sessions must be at least 1 (2 or more let the interval "
                               "cover what two sessions differ by)")
        if not self.cases:
            raise EpbenchError("no cases to run: pass --grid NAME, --case NAME or --model PATH")
        if self.gate_policy not in POLICIES:
            raise EpbenchError(f"--gate must be one of {', '.join(POLICIES)}")
        if not 0.0 < self.gate_threshold <= 1.0:
            raise EpbenchError("--gate-threshold is a fraction of idle time, in (0, 1]")
        if (self.threads < 1 or self.block_target_ms <= 0 or self.max_block_iters < 1
                or self.silence_timeout_s <= 0 or self.block_slices < 1):
            raise EpbenchError("--threads, --block-ms, --max-block-iters, --slices and "
                               "--case-timeout must be positive")


def defaults() -> dict[str, Any]:
    """RunConfig's defaults by field name (the CLI shows and uses these)."""
    from dataclasses import MISSING, fields

    return {f.name: f.default for f in fields(RunConfig) if f.default is not MISSING}


def williams_rows(n: int) -> list[list[int]]:
    """A Williams design for n arms: every arm in every position equally often, and
    every arm preceding every other equally often (n rows if n is even, 2n if odd)."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    if n % 2:
        rows += [list(reversed(row)) for row in rows]
    return rows


def rounds_per_process(rounds: int, n_arms: int, processes: int) -> int:
    """Each process's share of ``rounds``, rounded up to whole counterbalanced designs."""
    return balanced_rounds(-(-rounds // processes), n_arms)


def balanced_rounds(rounds: int, n_arms: int) -> int:
    """Rounds rounded up to whole Williams designs: n rows for an even number of
    arms, 2n for an odd one (position and first-order carry-over balance)."""
    block = n_arms if n_arms % 2 == 0 else 2 * n_arms
    return -(-rounds // block) * block


def counterbalanced_order(keys: list[str], rounds: int, rng: random.Random) -> list[list[str]]:
    """One order of ``keys`` per round, shuffled and counterbalanced.

    Built from Williams designs with the arms relabelled at random per design and
    the rows shuffled within each n-row Latin square: every arm takes every
    position exactly ``rounds / n`` times when ``rounds`` is a multiple of n.
    """
    n = len(keys)
    orders: list[list[str]] = []
    while len(orders) < rounds:
        labels = list(keys)
        rng.shuffle(labels)
        rows = williams_rows(n)
        for start in range(0, len(rows), n):
            square = rows[start:start + n]
            rng.shuffle(square)
            orders.extend([labels[i] for i in row] for row in square)
    return orders[:rounds]


def fixed_order(keys: list[str], rounds: int) -> list[list[str]]:
    """The same order every round: only for measuring the position bias it leaks."""
    return [list(keys) for _ in range(rounds)]


def _worker_env() -> dict[str, str]:
    # The folder that holds the `epbench` package (the checkout, or site-packages);
    # not resolved, since the package's parts are links in a checkout.
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


class Progress(Protocol):
    """What the runner tells whoever shows progress (the command layer decides how)."""

    def start(self, total_rounds: int) -> None: ...

    def event(self, case: str, process: int, event: dict[str, Any]) -> None: ...

    def process_done(self, case: str, process: int, record: dict[str, Any],
                     skipped_rounds: int) -> None: ...

    def status(self, text: str) -> None: ...

    def close(self) -> None: ...


@dataclass
class WorkerOutcome:
    events: list[dict[str, Any]]
    returncode: int
    stderr_tail: str
    timed_out: bool = False


OnEvent = Callable[[dict[str, Any]], None]


def run_worker(request: dict[str, Any], on_event: OnEvent | None = None,
               silence_timeout_s: float | None = None,
               prefix: tuple[str, ...] | list[str] = ()) -> WorkerOutcome:
    """Run one worker process to the end.

    A worker that reports nothing for ``silence_timeout_s`` (a hung EP) is killed
    and reported as such; a KeyboardInterrupt kills it and propagates. ``prefix``
    runs the worker under another program (valgrind, for instruction counts).
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
                    if not selector.select(silence_timeout_s):
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
    return WorkerOutcome(events, returncode, tail, timed_out)


def probe_arms(arms: list[ArmSpec], libraries: dict[str, str | None]) -> dict[str, dict]:
    """Load and register every arm in a throw-away worker; report each EP's name.

    A library that cannot be loaded, is not a plugin EP, or crashes while loading
    is reported here, before any case runs.
    """
    request = {"mode": "probe", "config": {},
               "arms": [{"arm": a.to_dict(), "library": libraries[a.key]} for a in arms]}
    outcome = run_worker(request)
    found = {e["key"]: e for e in outcome.events if e.get("event") == "arm"}
    for event in outcome.events:
        if event.get("event") == "error":
            raise ArmError(event["message"])
    if outcome.returncode < 0:
        loading = [a.spec for a in arms if a.kind != "ort" and a.key not in found]
        raise ArmError(
            f"arm {loading[0] if loading else '?'!r} crashed the process while loading "
            f"({_signal_name(-outcome.returncode)}); the library is broken or built for "
            "another ONNX Runtime"
        )
    if not any(e.get("event") == "done" for e in outcome.events):
        raise ArmError(f"loading the arms failed: {outcome.stderr_tail.strip()[-500:]}")
    return found


def _arm_records(arms: list[ArmSpec], libraries: dict[str, str | None],
                 probed: dict[str, dict]) -> dict[str, dict[str, Any]]:
    records = {}
    for arm in arms:
        lib = libraries[arm.key]
        info = probed.get(arm.key, {})
        records[arm.key] = {
            "key": arm.key, "kind": arm.kind, "spec": arm.spec, "library": lib,
            "sha256": file_sha256(lib) if lib else None,
            "ep_name": info.get("ep_name", CPU_EP if arm.kind == "ort" else None),
            "ep_version": info.get("ep_version"),
            "registration_name": info.get("registration_name"),
            "options": dict(arm.options),
        }
    return records


def _empty_case(spec: CaseSpec) -> dict[str, Any]:
    return {"spec": spec.to_dict(), "definition_sha256": None, "status": "ok", "error": None,
            "error_kind": None, "signal": None, "core": None, "overhead": None, "arms": {},
            "rounds": [], "processes": []}


def run_process(spec: CaseSpec, arms: list[ArmSpec], libraries: dict[str, str | None],
                orders: list[list[str]], worker_config: dict[str, Any],
                built: dict[str, Any], on_event: OnEvent | None = None) -> dict[str, Any]:
    """Run one process of a case in a worker; return what it measured, crash or not.

    ``built`` is where the case was saved (cases.built): the worker reads it, and also
    ``overhead_case`` from ``worker_config`` when it measures the harness's overhead.

    The record has the case record's fields (status, error, core, arms, rounds, ...);
    ``merge_process`` adds it to the case.
    """
    result = _empty_case(spec)
    del result["processes"]

    def collect(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "pinned":
            result["core"] = event["core"]
        elif kind == "overhead":
            result["overhead"] = event["overhead"]
        elif kind in ("verified", "sized"):
            result["arms"] = event["arms"]
        elif kind == "round":
            result["rounds"].append(event["round"])
        elif kind == "error":
            result["status"] = "failed"
            result["error"] = event["message"]
            result["error_kind"] = event.get("kind", "internal")
        if on_event is not None:
            on_event(event)

    request = {"mode": "case", "case": spec.to_dict(), "built": built, "orders": orders,
               "config": worker_config,
               "arms": [{"arm": a.to_dict(), "library": libraries[a.key]} for a in arms]}
    try:
        outcome = run_worker(request, collect, worker_config["silence_timeout_s"])
    except KeyboardInterrupt:
        result["status"] = "interrupted"
        result["error_kind"] = "interrupted"
        result["error"] = "interrupted by Ctrl-C; rounds measured before it are kept"
        raise _Interrupted(result) from None
    done = any(e.get("event") == "done" for e in outcome.events)
    tail = outcome.stderr_tail.strip()[-300:]
    measured = f"after {len(result['rounds'])} round(s)"
    if outcome.timed_out:
        result["status"] = "crashed"
        result["error_kind"] = "crash"
        result["error"] = (f"worker stopped: nothing reported for "
                           f"{worker_config['silence_timeout_s']:g} s {measured} (a hung EP?); "
                           "raise --case-timeout if a step is legitimately that slow")
    elif outcome.returncode < 0:
        result["status"] = "crashed"
        result["error_kind"] = "crash"
        result["signal"] = -outcome.returncode
        result["error"] = f"worker killed by {_signal_name(-outcome.returncode)} {measured}; {tail}"
    elif not done and result["status"] == "ok":
        result["status"] = "crashed"
        result["error_kind"] = "crash"
        result["error"] = (f"worker exited with status {outcome.returncode} {measured} "
                           f"before finishing: {tail}")
    return result


def count_instructions(request: dict[str, Any], worker_config: dict[str, Any],
                       cases: dict[str, dict[str, Any]],
                       on_case: Callable[[str], None] = lambda _: None) -> None:
    """Run the instruction-count pass of ``cases`` (one worker) and add their counts.

    A failed pass does not fail a case (its times stand); the reason is kept in
    the case's ``instructions["error"]``: its own error; the crash, for the case the
    worker was counting when it died; "ended before this case" for those after it;
    "interrupted" when Ctrl-C stopped the pass (which then propagates). ``on_case``
    hears of each case as soon as its record is final, counted or not.
    """
    method = worker_config["instructions"]
    for case in cases.values():
        case["instructions"] = {"method": method, "runs": instructions.COUNT_RUNS,
                                "error": None}
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
                if not event.get("error"):
                    instructions.add_counts(cases[name]["arms"], event["per_run"])
                finish(name, event.get("error"))
            elif kind == "error":
                errors.append(event["message"])

        try:
            outcome = run_worker(pass_request, collect, worker_config["silence_timeout_s"],
                                 prefix)
        except KeyboardInterrupt:
            finish_rest("interrupted before this case was counted")
            raise
    ended = (errors[0] if errors else
             f"the {method} pass ended with status {outcome.returncode}: "
             f"{outcome.stderr_tail.strip()[-300:]}")
    if current and current[0] not in finished:
        finish(current[0], f"{ended} (while counting this case)")
    finish_rest(f"{ended} (before this case)")


class _Interrupted(Exception):
    def __init__(self, partial: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.partial = partial


def _config_record(config: RunConfig, per_process: int) -> dict[str, Any]:
    return {
        "rounds": per_process * config.processes, "rounds_requested": config.rounds,
        "processes": config.processes, "sessions": config.sessions,
        "rounds_per_process": per_process, "keep_samples": config.keep_samples,
        "block_target_ms": config.block_target_ms, "block_slices": config.block_slices,
        "max_block_iters": config.max_block_iters,
        "warmup_ms": config.warmup_ms, "seed": config.seed, "threads": config.threads,
        "gate": {"policy": config.gate_policy, "threshold": config.gate_threshold,
                 "max_wait_s": config.gate_max_wait_s, "window_s": DEFAULT_WINDOW_S,
                 # Per process: a case's processes share one case's budget.
                 "budget_s": round(DEFAULT_BUDGET_S / config.processes, 3),
                 # ...and 0 once this many rounds in a row had no passing look.
                 "stops_waiting_after_rounds": FUTILE_ROUNDS_BEFORE_NO_WAIT},
        "silence_timeout_s": config.silence_timeout_s, "counter_runs": COUNTER_RUNS,
        "rewarm_calls": REWARM_CALLS,
        "allow_fallback": config.allow_fallback, "fixed_order": config.fixed_order,
        "instructions": config.instructions,
        "grids": list(config.grids), "case_names": [c.name for c in config.cases],
        "shard": config.shard,
    }


def _iter_cases(config: RunConfig) -> Iterator[CaseSpec]:
    seen = set()
    for spec in config.cases:
        if spec.name in seen:
            continue
        seen.add(spec.name)
        yield spec


SAMPLES_FILE = "results.samples.jsonl.gz"


class _NoProgress:
    def start(self, total_rounds: int) -> None:
        pass

    def event(self, case: str, process: int, event: dict[str, Any]) -> None:
        pass

    def process_done(self, case: str, process: int, record: dict[str, Any],
                     skipped_rounds: int) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def run(config: RunConfig) -> dict[str, Any]:
    """Run every case of ``config``; return the results document.

    With ``out_dir``, results.jsonl gets a line per process as it ends (and an
    ``end`` line when the run finishes), and results.json is rewritten
    atomically after each, marked ``interrupted`` until the run is whole.
    Ctrl-C stops at once, keeps what was measured, and returns a document
    marked ``interrupted``. Arms are checked before anything is written.
    """
    if config.instructions is not None:
        instructions.check_method(config.instructions)  # before anything runs or is written
    arms = with_control(list(config.arms))
    # The twin's copy of its library, and the cases built for the workers to read.
    with tempfile.TemporaryDirectory(prefix="epbench-run-") as scratch:
        twin_dir = Path(scratch) / "twin"
        twin_dir.mkdir()
        libraries = {a.key: resolve_library(a) for a in arms}
        twin = None
        if config.aa_twin is not None:
            base = find_arm(arms, config.aa_twin)
            if base is None:
                raise ArmError(f"--aa-twin {config.aa_twin!r} names no arm of this run; "
                               f"name one of {', '.join(a.key for a in arms)}")
            twin = twin_arm(base)
            arms = with_control([*arms, twin])
            libraries[twin.key] = copy_library(libraries[base.key], twin_dir)
        try:
            probed = probe_arms(arms, libraries)
        except ArmError as exc:
            if twin is None:
                raise
            # Which one failed: the library alone, or the library loaded a second time?
            probe_arms([a for a in arms if a.key != twin.key], libraries)
            raise ArmError(f"the A/A twin of {config.aa_twin!r} could not be loaded beside "
                           f"it ({exc}); the library cannot be loaded twice in one process: "
                           f"{WITHOUT_TWIN}") from None
        return _run_arms(config, arms, libraries, probed, twin, Path(scratch) / "cases")


def save_cases(specs: list[CaseSpec], folder: Path) -> tuple[dict[str, dict[str, Any]],
                                                             dict[str, Any]]:
    """Build every case once, and the overhead's one-node case, into ``folder``.

    Returns each case's saved record (what its workers read) and the overhead case's. A
    case that cannot be built is a failed case, as when its workers built it, not a
    failed run: its record is ``{"error", "error_kind"}`` and the other cases run.
    """
    def save(spec: CaseSpec, stem: str, what: str) -> dict[str, Any]:
        built = spec.build()  # one at a time: a user's model may be large
        try:
            folder.mkdir(exist_ok=True)
            return save_built_case(built, folder, stem)
        except OSError as exc:
            remedy = scratch_remedy(exc, "point TMPDIR at a folder you can write to")
            raise EpbenchError(f"cannot save {what} for the workers in {folder} "
                               f"({exc.strerror or exc}); {remedy}") from None

    def save_case(i: int, spec: CaseSpec) -> dict[str, Any]:
        try:
            return save(spec, f"case{i}", f"case {spec.name}")
        except CaseError as exc:  # this case's own definition: the others can still run
            return {"error": f"cannot build case {spec.name}: {exc}", "error_kind": "case"}

    saved = {spec.name: save_case(i, spec) for i, spec in enumerate(specs)}
    return saved, save(case_by_name(OVERHEAD_CASE), "overhead",
                       f"the harness's overhead case ({OVERHEAD_CASE})")


def _run_arms(config: RunConfig, arms: list[ArmSpec], libraries: dict[str, str | None],
              probed: dict[str, dict], twin: ArmSpec | None,
              cases_dir: Path) -> dict[str, Any]:
    # A refused --out is said before the cases are built; the cases are built, saved and
    # hashed before the folder is touched, so a case that cannot be leaves an earlier
    # run's results as they were.
    if config.out_dir is not None:
        check_out_dir(Path(config.out_dir), overwrite=config.overwrite)
    specs = list(_iter_cases(config))
    saved, overhead_case = save_cases(specs, cases_dir)
    # Hashed as read back: the hash describes what the workers will measure.
    hashes = {name: load_built_case(record).definition_sha256
              for name, record in saved.items() if "error" not in record}
    if config.out_dir is not None:
        prepare_out_dir(Path(config.out_dir), overwrite=config.overwrite)
    host = host_fingerprint()
    host["key"] = fingerprint_key(host)
    keys = [a.key for a in arms]
    per_process = (config.rounds if config.fixed_order
                   else rounds_per_process(config.rounds, len(keys), config.processes))
    doc: dict[str, Any] = {
        "schema": SCHEMA, "epbench_version": epbench_version(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": host, "config": _config_record(config, per_process),
        "arms": _arm_records(arms, libraries, probed), "control": CONTROL_KEY,
        "twin": ({"of": config.aa_twin, "key": twin.key} if twin is not None else None),
        "cases": {}, "interrupted": True,  # until the last case is in
        "overhead": None,  # the harness's own cost, from the first process that measured it
    }
    worker_config = {"threads": config.threads, "allow_fallback": config.allow_fallback,
                     "warmup_ms": config.warmup_ms, "block_target_ms": config.block_target_ms,
                     "block_slices": config.block_slices, "max_block_iters": config.max_block_iters,
                     "silence_timeout_s": config.silence_timeout_s,
                     "instructions": config.instructions, "sessions": config.sessions,
                     "keep_samples": config.keep_samples,
                     "gate": doc["config"]["gate"], "overhead_case": overhead_case}
    jsonl = samples_out = samples_file = None
    out = Path(config.out_dir) if config.out_dir is not None else None
    if out is not None:
        jsonl = JsonlWriter(out / "results.jsonl")
        jsonl.write({"type": "header",
                     **{k: v for k, v in doc.items() if k not in ("cases", "interrupted")}})
        if config.keep_samples:
            samples_file = open_output(out / SAMPLES_FILE, "wb")
            samples_out = gzip.open(samples_file, "wt", encoding="utf-8")  # noqa: SIM115 -- closed in finally
    rng = random.Random(config.seed)
    for spec in specs:
        doc["cases"][spec.name] = _empty_case(spec)
        if spec.name in hashes:
            doc["cases"][spec.name]["definition_sha256"] = hashes[spec.name]
        else:
            doc["cases"][spec.name].update(status="failed", error=saved[spec.name]["error"],
                                           error_kind=saved[spec.name]["error_kind"])
    progress = config.progress or _NoProgress()
    progress.start(len(specs) * per_process * config.processes)
    stopped = False
    share_s = doc["config"]["gate"]["budget_s"]
    waits = RunWaitBudget(share_s, config.gate_policy, config.futile_rounds_before)
    says_waiting_changes = config.gate_max_wait_s > 0  # with no wait, nothing changes
    last_budget_s = share_s
    try:
        # Process p of every case before process p + 1 of any: drifts spread evenly.
        for process in range(config.processes):
            for spec in specs:
                case = doc["cases"][spec.name]
                if case["status"] in ("failed", "interrupted"):
                    progress.process_done(spec.name, process, case, per_process)
                    continue
                orders = (fixed_order(keys, per_process) if config.fixed_order
                          else counterbalanced_order(keys, per_process, rng))
                gate_budget_s = waits.next_budget_s()
                if says_waiting_changes and gate_budget_s != last_budget_s:
                    progress.status(_waiting_change(gate_budget_s, waits.futile_in_a_row))
                last_budget_s = gate_budget_s
                process_config = {**worker_config, "measure_overhead": process == 0,
                                  "process": process,
                                  "layout_seed": rng.getrandbits(32),
                                  "gate": {**worker_config["gate"],
                                           "budget_s": gate_budget_s}}
                try:
                    record = run_process(
                        spec, arms, libraries, orders, process_config, saved[spec.name],
                        lambda e, n=spec.name, p=process: progress.event(n, p, e))
                except _Interrupted as stop:
                    record, stopped = stop.partial, True
                if samples_out is not None:
                    _write_samples(samples_out, spec.name, process, record["rounds"])
                record["definition_sha256"] = case["definition_sha256"]
                waits.record(record["rounds"])
                merge_process(case, process, record, per_process, gate_budget_s)
                progress.process_done(spec.name, process, case,
                                      per_process - len(record["rounds"]))
                if doc["overhead"] is None:
                    doc["overhead"] = case["overhead"]
                if jsonl is not None:
                    jsonl.write({"type": "process", "name": spec.name, "process": process,
                                 "planned": per_process, "gate_budget_s": gate_budget_s,
                                 "result": record})
                if stopped:
                    break
                if out is not None:
                    write_results(out / "results.json", doc)
            if stopped:
                break
        if config.instructions and not stopped:
            counted = [s for s in specs if doc["cases"][s.name]["status"] == "ok"]
            if counted:
                progress.status(f"counting instructions ({config.instructions}) of "
                                f"{len(counted)} case(s) in one untimed pass")
                _count_instructions(counted, arms, libraries, worker_config, doc["cases"],
                                    saved, progress, jsonl)
    except KeyboardInterrupt:
        # Ctrl-C between processes (or while writing): what is in `doc` was measured.
        stopped = True
    finally:
        progress.close()
        if samples_out is not None:
            samples_out.close()
        if samples_file is not None:
            samples_file.close()  # gzip leaves a file it was handed open
    doc["interrupted"] = stopped
    if jsonl is not None:
        # The run's overhead is decided after the header was written: the end line carries
        # it, so the stream rebuilds the document results.json holds (one run, one run_key).
        jsonl.write({"type": "end", "interrupted": stopped, "overhead": doc["overhead"]})
        jsonl.close()
    if out is not None:
        write_results(out / "results.json", doc)
    return doc


def _waiting_change(budget_s: float, futile_in_a_row: int) -> str:
    if budget_s == 0:
        return (f"idle gate: {futile_in_a_row} rounds in a row had no passing look (a "
                "sustained load); rounds now start after one look, and waiting resumes "
                "from the process after a look passes")
    return "idle gate: a look passed; rounds wait for a quiet moment again"


def futile_rounds_at_end(doc: dict[str, Any], before: int = 0) -> int:
    """Rounds in a row with no passing gate look at the end of a run (in run order:
    process p of every case before process p + 1), counted on from ``before``: what
    ``RunConfig.futile_rounds_before`` of a run that continues this one gets."""
    waits = RunWaitBudget(0.0, "wait", before)  # only its count is used
    for process in range(doc["config"]["processes"]):
        for case in doc["cases"].values():
            waits.record([r for r in case["rounds"] if r.get("process") == process])
    return waits.futile_in_a_row


def _write_samples(out: Any, case: str, process: int, rounds: list[dict[str, Any]]) -> None:
    """Move the raw samples of a process's rounds to the side file (one line per round)."""
    for rnd in rounds:
        samples = rnd.pop("samples_ns", None)
        if samples is not None:
            out.write(dumps({"case": case, "process": process, "round": rnd["index"],
                             "samples_ns": samples}) + "\n")
    out.flush()


def _count_instructions(specs: list[CaseSpec], arms: list[ArmSpec],
                        libraries: dict[str, str | None], worker_config: dict[str, Any],
                        cases: dict[str, dict[str, Any]], saved: dict[str, dict[str, Any]],
                        progress: Progress, jsonl: JsonlWriter | None) -> None:
    done: list[str] = []

    def counted(name: str) -> None:
        # Streamed as each case is final, so a harness killed mid-pass keeps what it counted.
        done.append(name)
        case = cases[name]
        error = case["instructions"]["error"]
        progress.status(f"instructions: {name} " + ("counted" if error is None else
                                                    f"not counted: {error}"[:200])
                        + f" ({len(done)}/{len(specs)})")
        if jsonl is not None:
            jsonl.write({"type": "instructions", "name": name,
                         "instructions": case["instructions"], "arms": case["arms"]})

    request = {"mode": "instructions", "cases": [s.to_dict() for s in specs], "orders": [],
               "built": {s.name: saved[s.name] for s in specs},
               # One fixed load order: instruction counts are compared exactly.
               "config": {**worker_config, "sessions": 1, "layout_seed": 0},
               "arms": [{"arm": a.to_dict(), "library": libraries[a.key]} for a in arms]}
    count_instructions(request, worker_config, {s.name: cases[s.name] for s in specs}, counted)
