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
import random
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from epbench.cases.built import load_built_case, save_built_case
from epbench.cases.grids import case_by_name
from epbench.cases.spec import CaseSpec
from epbench.core.errors import ArmError, CaseError, EpbenchError, scratch_remedy
from epbench.core.model import Results
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
    shares_one_library,
    twin_arm,
    with_control,
)
from epbench.harness.gate import (
    DEFAULT_BUDGET_S,
    DEFAULT_WINDOW_S,
    FUTILE_ROUNDS_BEFORE_NO_WAIT,
    RunWaitBudget,
)
from epbench.harness.host import fingerprint_key, host_fingerprint
from epbench.harness.overhead import OVERHEAD_CASE
from epbench.harness.run_config import (
    Progress,
    RunConfig,
    WorkerConfig,
    counterbalanced_order,
    fixed_order,
    rounds_per_process,
)
from epbench.harness.sessions import CPU_EP
from epbench.harness.worker import COUNTER_RUNS, REWARM_CALLS
from epbench.harness.worker_process import (
    ArmLoadTimeout,
    ProcessInterrupted,
    count_instructions,
    empty_case,
    probe_arms,
    run_process,
)


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


def _gate_record(config: RunConfig) -> dict[str, Any]:
    """The idle gate's settings as the results file's config records them."""
    return {"policy": config.gate_policy, "threshold": config.gate_threshold,
            "max_wait_s": config.gate_max_wait_s, "window_s": DEFAULT_WINDOW_S,
            # Per process: a case's processes share one case's budget.
            "budget_s": round(DEFAULT_BUDGET_S / config.processes, 3),
            # ...and 0 once this many rounds in a row had no passing look.
            "stops_waiting_after_rounds": FUTILE_ROUNDS_BEFORE_NO_WAIT}


def _config_record(config: RunConfig, per_process: int) -> dict[str, Any]:
    return {
        "rounds": per_process * config.processes, "rounds_requested": config.rounds,
        "processes": config.processes, "sessions": config.sessions,
        "rounds_per_process": per_process, "keep_samples": config.keep_samples,
        "block_target_ms": config.block_target_ms, "block_slices": config.block_slices,
        "max_block_iters": config.max_block_iters,
        "warmup_ms": config.warmup_ms, "seed": config.seed, "threads": config.threads,
        "gate": _gate_record(config),
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


def run(config: RunConfig) -> Results:
    """Run every case of ``config``; return the run as `Results`.

    With ``out_dir``, results.jsonl gets a line per process as it ends (and an
    ``end`` line when the run finishes), and results.json is rewritten
    atomically after each, marked ``interrupted`` until the run is whole.
    Ctrl-C stops at once, keeps what was measured, and returns results
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
        twin = twin_record = None
        if config.aa_twin is not None:
            base = find_arm(arms, config.aa_twin)
            if base is None:
                raise ArmError(f"--aa-twin {config.aa_twin!r} names no arm of this run; "
                               f"name one of {', '.join(a.key for a in arms)}")
            twin = twin_arm(base)
            shared = shares_one_library(arms, libraries)
            arms = with_control([*arms, twin])
            # Arms that load one file share its code pages; a copy is mapped apart, and its
            # layout moves speed per case by about 1 % (sd) between processes (2026-12-08,
            # quick grid, twin against base: a copy's A/A intervals +-0.6 to +-1.1 %, the
            # file itself +-0.1 to +-0.4 %, 8 processes each). A twin measures the noise of
            # the comparisons the run can make, so it copies only where they set copies
            # side by side.
            libraries[twin.key] = (libraries[base.key] if shared
                                   else copy_library(libraries[base.key], twin_dir))
            twin_record = {"of": base.key, "key": twin.key, "shared_library": shared}
        try:
            probed = probe_arms(arms, libraries, config.silence_timeout_s)
        except ArmLoadTimeout:
            raise  # a second probe without the twin would only wait as long again
        except ArmError as exc:
            if twin is None:
                raise
            # Which one failed: the library alone, or the library loaded a second time?
            without = [a for a in arms if a.key != twin.key]
            probed = probe_arms(without, libraries, config.silence_timeout_s)
            if config.aa_twin_optional:
                (config.progress or _NoProgress()).status(
                    f"no A/A twin: {config.aa_twin!r} cannot be loaded twice in one "
                    f"process ({exc}); thresholds fall back to the default")
                del libraries[twin.key]
                return _run_arms(config, without, libraries, probed, None,
                                 Path(scratch) / "cases")
            raise ArmError(f"the A/A twin of {config.aa_twin!r} could not be loaded beside "
                           f"it ({exc}); the library cannot be loaded twice in one process: "
                           f"{WITHOUT_TWIN}") from None
        return _run_arms(config, arms, libraries, probed, twin_record,
                         Path(scratch) / "cases")


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


def _new_document(config: RunConfig, arms: list[ArmSpec], libraries: dict[str, str | None],
                  probed: dict[str, dict], twin: dict[str, Any] | None,
                  per_process: int) -> dict[str, Any]:
    """The results document before any case is in: this host, the config, the arms."""
    host = host_fingerprint()
    host["key"] = fingerprint_key(host)
    return {
        "schema": SCHEMA, "epbench_version": epbench_version(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": host, "config": _config_record(config, per_process),
        "arms": _arm_records(arms, libraries, probed), "control": CONTROL_KEY,
        "twin": twin,
        "cases": {}, "interrupted": True,  # until the last case is in
        "overhead": None,  # the harness's own cost, from the first process that measured it
    }


def _worker_config(config: RunConfig, overhead_case: dict[str, Any]) -> WorkerConfig:
    """What every worker of the run is told, before its process's own fields."""
    return WorkerConfig(
        threads=config.threads, allow_fallback=config.allow_fallback,
        warmup_ms=config.warmup_ms, block_target_ms=config.block_target_ms,
        block_slices=config.block_slices, max_block_iters=config.max_block_iters,
        silence_timeout_s=config.silence_timeout_s, instructions=config.instructions,
        sessions=config.sessions, keep_samples=config.keep_samples,
        gate=_gate_record(config), overhead_case=overhead_case)


def _run_arms(config: RunConfig, arms: list[ArmSpec], libraries: dict[str, str | None],
              probed: dict[str, dict], twin: dict[str, Any] | None,
              cases_dir: Path) -> Results:
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
    keys = [a.key for a in arms]
    per_process = (config.rounds if config.fixed_order
                   else rounds_per_process(config.rounds, len(keys), config.processes))
    doc = _new_document(config, arms, libraries, probed, twin, per_process)
    worker_config = _worker_config(config, overhead_case)
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
        doc["cases"][spec.name] = empty_case(spec)
        if spec.name in hashes:
            doc["cases"][spec.name]["definition_sha256"] = hashes[spec.name]
        else:
            doc["cases"][spec.name].update(status="failed", error=saved[spec.name]["error"],
                                           error_kind=saved[spec.name]["error_kind"])
    progress = config.progress or _NoProgress()
    progress.start(len(specs) * per_process * config.processes)
    stopped = False
    share_s = worker_config.gate["budget_s"]
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
                process_config = replace(
                    worker_config, measure_overhead=process == 0, process=process,
                    layout_seed=rng.getrandbits(32),
                    gate={**worker_config.gate, "budget_s": gate_budget_s})
                try:
                    record = run_process(
                        spec, arms, libraries, orders, process_config, saved[spec.name],
                        lambda e, n=spec.name, p=process: progress.event(n, p, e))
                except ProcessInterrupted as stop:
                    record, stopped = stop.partial, True
                if samples_out is not None:
                    _write_samples(samples_out, spec.name, process, record.rounds)
                record.definition_sha256 = case["definition_sha256"]
                waits.record([r["gate"] for r in record.rounds])
                line = record.to_dict()  # the stream's line and the case's share its rounds
                merge_process(case, process, line, per_process, gate_budget_s)
                progress.process_done(spec.name, process, case,
                                      per_process - len(record.rounds))
                if doc["overhead"] is None:
                    doc["overhead"] = case["overhead"]
                if jsonl is not None:
                    jsonl.write({"type": "process", "name": spec.name, "process": process,
                                 "planned": per_process, "gate_budget_s": gate_budget_s,
                                 "result": line})
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
                _count_instructions(config.instructions, counted, arms, libraries,
                                    worker_config, doc["cases"], saved, progress, jsonl)
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
    # Typed once, from what results.json holds: a key a writer lost fails here, naming it.
    return Results.from_dict(doc, source=str(out / "results.json") if out is not None
                             else "the run")


def _waiting_change(budget_s: float, futile_in_a_row: int) -> str:
    if budget_s == 0:
        return (f"idle gate: {futile_in_a_row} rounds in a row had no passing look (a "
                "sustained load); rounds now start after one look, and waiting resumes "
                "from the process after a look passes")
    return "idle gate: a look passed; rounds wait for a quiet moment again"


def futile_rounds_at_end(results: Results, before: int = 0) -> int:
    """Rounds in a row with no passing gate look at the end of a run (in run order:
    process p of every case before process p + 1), counted on from ``before``: what
    ``RunConfig.futile_rounds_before`` of a run that continues this one gets."""
    waits = RunWaitBudget(0.0, "wait", before)  # only its count is used
    for process in range(results.config.processes):
        for case in results.cases.values():
            waits.record([r.gate for r in case.rounds if r.process == process])
    return waits.futile_in_a_row


def _write_samples(out: IO[str], case: str, process: int,
                   rounds: list[dict[str, Any]]) -> None:
    """Move the raw samples of a process's rounds to the side file (one line per round)."""
    for rnd in rounds:
        samples = rnd.pop("samples_ns", None)
        if samples is not None:
            out.write(dumps({"case": case, "process": process, "round": rnd["index"],
                             "samples_ns": samples}) + "\n")
    out.flush()


def _count_instructions(method: str, specs: list[CaseSpec], arms: list[ArmSpec],
                        libraries: dict[str, str | None], worker_config: WorkerConfig,
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
               "config": replace(worker_config, sessions=1, layout_seed=0).to_dict(),
               "arms": [{"arm": a.to_dict(), "library": libraries[a.key]} for a in arms]}
    count_instructions(request, {s.name: cases[s.name] for s in specs}, counted,
                       method=method,
                       silence_timeout_s=worker_config.silence_timeout_s)
