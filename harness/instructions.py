"""Instruction counts per Run: a deterministic cost beside wall time.

Two ways, both used only in a dedicated pass of the case (a worker in mode
``instructions``), never inside the timed rounds:

- ``perf``: the hardware counter of retired user-space instructions through
  perf_event_open(2), enabled only around the counted calls. Often absent in a
  VM (no virtual PMU): `availability()` says so, with the reason.
- ``valgrind``: the worker runs under ``valgrind --tool=callgrind`` with
  instrumentation and collection off; a tiny helper library (compiled once from
  Debian's ``valgrind/callgrind.h`` client requests, cached) switches them on
  only around each arm's counted calls and dumps the count per arm. Slow
  (tens of times), exact, and identical from run to run on the same binary.

Under callgrind, what is counted is the Run below the interpreter: ORT, the EP, the C
and C++ libraries. The instructions of the interpreter's own library (libpython, or
the python executable where it is built in) are left out: they are the harness's
binding layer, identical for every arm but for bookkeeping that moves with the
process's heap (pymalloc pools emptied, a method-cache entry replaced: +15 to +170 of
~18,000 in some calls and not others). With them in, the median call made two copies
of one library differ by up to 0.35 %; without them, nearly every call of an arm
counts the same, to the instruction. Each EP arm is also counted alone, beside the
control, under one registration name (`counting_groups`): side by side, copies of one
library still differed by 9 to 18 instructions in some cases.

Counts land in each arm's ``counters_per_run`` as ``instructions``, so the
comparator reports any change exactly, like the engine's probe counters.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from epbench.cases.built import load_built_case
from epbench.cases.spec import CaseSpec
from epbench.core.errors import EpbenchError
from epbench.core.paths import cache_dir as cache_root
from epbench.harness.arms import ArmSpec
from epbench.harness.callgrind_dumps import DumpError, arm_counts, dump_label

METHODS = ("perf", "valgrind")
# Counted calls per arm (after WARM_CALLS uncounted ones): perf gives their mean;
# callgrind spreads them over COUNT_SESSIONS sessions and gives the cheapest session's
# median call (odd per session, so the median is one call's exact count).
COUNT_RUNS = 21
# Sessions per arm under callgrind. A session's count can sit a few instructions above
# the arm's (+9 to +18 of ~13,000 in one of five sessions: a lookup in ORT that walks
# further, as where its objects lie decides), never below; the cheapest of three
# sessions is the arm's.
COUNT_SESSIONS = 3
WARM_CALLS = 3
COUNTER_NAME = "instructions"
# How each method counts a Run, numbered: a count of one rule is not comparable with one
# of another (the history keeps them in separate series). valgrind 2: the interpreter's
# own instructions left out, names of one length (1: everything between the toggles).
RULES = {"perf": 1, "valgrind": 2}
# Every EP arm is registered under this name while counted, alone (see counting_groups).
COUNTING_NAME = "epbench_instructions_counted_arm"

_HELPER_SOURCE = r"""
#include <valgrind/callgrind.h>
void epbench_cg_start_instrumentation(void) { CALLGRIND_START_INSTRUMENTATION; }
void epbench_cg_stop_instrumentation(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void epbench_cg_zero(void) { CALLGRIND_ZERO_STATS; }
void epbench_cg_toggle_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
void epbench_cg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
/* One counted call: only `run` itself between the toggles, no interpreter around it. */
typedef struct _object PyObject;
extern PyObject *PyObject_CallObject(PyObject *callable, PyObject *args);
extern void Py_DecRef(PyObject *o);
int epbench_cg_count_call(PyObject *run) {
    CALLGRIND_TOGGLE_COLLECT;
    PyObject *result = PyObject_CallObject(run, 0);
    CALLGRIND_TOGGLE_COLLECT;
    if (result == 0) return -1;
    Py_DecRef(result);
    return 0;
}
"""
CALLGRIND_HEADER = Path("/usr/include/valgrind/callgrind.h")

# perf_event_open(2) on x86-64 / aarch64, and the ioctls of linux/perf_event.h.
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
_PERF_TYPE_HARDWARE = 0
_PERF_COUNT_HW_INSTRUCTIONS = 1
_PERF_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5
_FLAG_DISABLED, _FLAG_EXCLUDE_KERNEL, _FLAG_EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
_IOC_ENABLE, _IOC_DISABLE, _IOC_RESET = 0x2400, 0x2401, 0x2403


class InstructionsError(EpbenchError):
    """Instruction counts were asked for but this machine cannot give them."""


# --------------------------------------------------------------------------- perf


class PerfCounter:
    """Retired user-space instructions of this thread, via perf_event_open(2)."""

    def __init__(self) -> None:
        import struct

        machine = os.uname().machine
        if machine not in _SYS_PERF_EVENT_OPEN:
            raise InstructionsError(f"perf_event_open: unsupported architecture {machine}; "
                                    "use --instructions valgrind")
        attr = bytearray(_PERF_ATTR_SIZE)
        struct.pack_into("IIQ", attr, 0, _PERF_TYPE_HARDWARE, _PERF_ATTR_SIZE,
                         _PERF_COUNT_HW_INSTRUCTIONS)
        struct.pack_into("Q", attr, 40, _FLAG_DISABLED | _FLAG_EXCLUDE_KERNEL | _FLAG_EXCLUDE_HV)
        libc = ctypes.CDLL(None, use_errno=True)
        buf = (ctypes.c_char * _PERF_ATTR_SIZE).from_buffer(attr)
        fd = libc.syscall(_SYS_PERF_EVENT_OPEN[machine], buf, 0, -1, -1, 0)
        if fd < 0:
            errno = ctypes.get_errno()
            raise InstructionsError(f"perf_event_open: {os.strerror(errno)} ({_perf_hint(errno)})"
                                    "; use --instructions valgrind")
        self._libc, self.fd = libc, fd

    def _ioctl(self, request: int) -> None:
        if self._libc.ioctl(self.fd, request, 0) != 0:
            raise InstructionsError(f"perf ioctl failed: {os.strerror(ctypes.get_errno())}")

    def start(self) -> None:
        self._ioctl(_IOC_RESET)
        self._ioctl(_IOC_ENABLE)

    def stop(self) -> int:
        self._ioctl(_IOC_DISABLE)
        return int.from_bytes(os.read(self.fd, 8), "little")

    def close(self) -> None:
        os.close(self.fd)


def _perf_hint(errno: int) -> str:
    import errno as e

    return {
        e.ENOENT: "no hardware instruction counter: typical in a VM without a virtual PMU",
        e.EOPNOTSUPP: "no hardware instruction counter: typical in a VM without a virtual PMU",
        e.EACCES: "not permitted: see /proc/sys/kernel/perf_event_paranoid",
        e.EPERM: "not permitted: see /proc/sys/kernel/perf_event_paranoid",
        e.ENOSYS: "the kernel has no perf events",
    }.get(errno, "the kernel refused the counter")


def perf_available() -> tuple[bool, str]:
    """Can this process count its own user-space instructions with perf_event_open?"""
    try:
        counter = PerfCounter()
    except InstructionsError as exc:
        return False, str(exc)
    try:
        counter.start()
        count = counter.stop()
    finally:
        counter.close()
    if count <= 0:
        return False, "perf_event_open opened the counter but it counted nothing (a VM quirk)"
    return True, "hardware counter of retired user-space instructions"


# --------------------------------------------------------------------------- valgrind


def valgrind_available() -> tuple[bool, str]:
    """Is valgrind, its callgrind client-request header and a C compiler present?"""
    exe = shutil.which("valgrind")
    if exe is None:
        return False, "valgrind is not installed (Debian: apt-get install valgrind)"
    if not CALLGRIND_HEADER.is_file():
        return False, f"{CALLGRIND_HEADER} is missing (Debian's valgrind package ships it)"
    if shutil.which("cc") is None:
        return False, "no C compiler (cc) to build the callgrind toggle helper"
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"valgrind does not start: {exc}"
    return True, f"{version} (callgrind, collection only around the counted calls)"


def availability() -> dict[str, dict[str, Any]]:
    """Per method: is it available here, and why (not)."""
    out = {}
    for method, probe in (("perf", perf_available), ("valgrind", valgrind_available)):
        ok, detail = probe()
        out[method] = {"available": ok, "detail": detail}
    return out


def helper_library(cache_dir: Path | None = None) -> Path:
    """The callgrind toggle helper, compiled once per source and cached."""

    digest = hashlib.sha256(_HELPER_SOURCE.encode()).hexdigest()[:12]
    folder = Path(cache_dir) if cache_dir is not None else cache_root("callgrind")
    target = folder / f"epbench_callgrind_{digest}.so"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / f"epbench_callgrind_{digest}.c"
    source.write_text(_HELPER_SOURCE, encoding="utf-8")
    partial = folder / f".{target.name}.{os.getpid()}"
    result = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(partial), str(source)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise InstructionsError(f"building the callgrind helper failed: {result.stderr.strip()}"
                                "; check that valgrind's headers are installed")
    os.replace(partial, target)  # atomic: two workers building at once both end up fine
    return target


def valgrind_prefix(out_dir: Path) -> list[str]:
    """The command that runs a worker under callgrind, everything off until asked."""
    # A fixed hash seed: Python's dict probing (and so its instruction count) depends on it.
    return ["env", "PYTHONHASHSEED=0", "valgrind", "--tool=callgrind", "--instr-atstart=no",
            "--collect-atstart=no", "--dump-instr=no", "--compress-strings=no", "--compress-pos=no",
            f"--callgrind-out-file={out_dir}/callgrind.out.%p", "--quiet"]


def interpreter_object() -> str | None:
    """The real path of the object file that holds this interpreter's C API (libpython,
    or the python executable itself), from /proc/self/maps; None where it cannot tell."""
    address = ctypes.cast(ctypes.pythonapi.PyObject_CallObject, ctypes.c_void_p).value
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        low, _, high = fields[0].partition("-")
        if len(fields) == 6 and address is not None and int(low, 16) <= address < int(high, 16):
            return os.path.realpath(fields[5].strip())
    return None


# --------------------------------------------------------------------------- worker side


def count_in_worker(worker: Any) -> None:
    """The worker's ``instructions`` mode: count each arm's calls in every case, report.

    One worker counts every case of the request (``cases``), so the interpreter, ORT
    and the libraries start once under valgrind, not once per case (the quick grid's
    pass with four arms, on a shared machine: 111 s one worker per case, 65 s one
    worker in all, instrumented only while counting). In each case every EP arm takes
    a turn of its own beside the control (`counting_groups`), registered for the turn
    and unregistered after it; the control's count is its first turn's.
    Each case is read from where the runner saved it (``built``, by case name; see
    cases.built). The request's ``instructions`` field names the method; for valgrind,
    ``helper`` is the toggle library and ``dump_dir`` where callgrind writes; the event
    then names each arm's dumps, which the parent reads (`per_run_of`), where perf's
    gives the counts. A case that cannot be counted reports its error and the next case
    is counted all the same.
    """

    request = worker.request
    method = request["instructions"]
    if method == "valgrind":
        worker.config = {**worker.config, "sessions": COUNT_SESSIONS}
    count = _perf_counts if method == "perf" else _callgrind_counts(request)
    dump_dir = Path(request["dump_dir"]) if method == "valgrind" else None
    groups = counting_groups(request)
    for index, case in enumerate(request["cases"]):
        spec = CaseSpec.from_dict(case)
        worker.emit({"event": "counting", "case": spec.name})  # a crash is pinned on it
        counted_by_arm: dict[str, Any] = {}
        try:
            built = load_built_case(request["built"][spec.name])
            for n, (group, key) in enumerate(groups):
                worker.request = group
                arms = worker.setup_arms()
                try:
                    worker.build_sessions(arms, built, spec)
                    counted = count(arms, index)
                finally:
                    _release(arms)
                for state in arms:  # the control once, from the first group
                    if state.registration is not None:
                        counted_by_arm[key] = counted.pop(state.arm.key)
                    elif n == 0:
                        counted_by_arm[state.arm.key] = counted.pop(state.arm.key)
                _discard_dumps(counted, dump_dir)  # the control's later turns: not reported
        except Exception as exc:  # noqa: BLE001 -- one case's failure is that case's record
            _discard_dumps(counted_by_arm, dump_dir)
            worker.emit({"event": "instructions", "case": spec.name,
                         "error": f"{type(exc).__name__}: {exc}"})
            continue
        finally:
            worker.request = request
        worker.emit({"event": "instructions", "case": spec.name, "method": method,
                     "runs": COUNT_RUNS,
                     ("per_run" if method == "perf" else "dumps"): counted_by_arm})


def _discard_dumps(counted: dict[str, Any], dump_dir: Path | None) -> None:
    """Delete the callgrind dumps in ``counted`` (arm -> session -> names) that no event
    will name to the parent; perf's counts (``dump_dir`` None) leave nothing behind."""
    if dump_dir is None:
        return
    for sessions in counted.values():
        for names in sessions.values():
            for name in names:
                (dump_dir / name).unlink(missing_ok=True)


def counting_groups(request: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """The request of each turn of a case's count, with the key of the EP arm it counts:
    every EP arm in a turn of its own, beside the control, registered as COUNTING_NAME.

    Counted side by side, copies of one library differed: ORT keeps what each registered
    EP's devices add in shared tables, and a lookup walked past the other copies' equal
    entries (+9 instructions per copy, in some sessions). Alone, under one name, every
    copy meets the same tables. The name is 32 bytes or more: ORT compares it per Run
    (memcmp), and under 32 bytes the compare's cost depends on where the name lies.
    """
    items = list(request["arms"])
    control = [item for item in items if item["arm"]["kind"] == "ort"]
    groups = []
    for item in sorted((i for i in items if i["arm"]["kind"] != "ort"),
                       key=lambda i: ArmSpec.from_dict(i["arm"]).key):
        alone = {**item, "arm": {**item["arm"], "name": COUNTING_NAME}}
        groups.append(({**request, "arms": [*control, alone]},
                       ArmSpec.from_dict(item["arm"]).key))
    if not groups:  # the control alone
        groups.append(({**request, "arms": control}, ""))
    return groups


def _release(arms: list[Any]) -> None:
    """Free a turn's sessions, then unregister its EP library (a session keeps its EP)."""
    import onnxruntime as ort

    for state in arms:
        state.sessions.clear()
        state.bounds.clear()
    for state in arms:
        if state.registration is not None:
            ort.unregister_execution_provider_library(state.registration.registration_name)


def _perf_counts(arms: list[Any], _index: int) -> dict[str, float]:
    per_run: dict[str, float] = {}
    counter = PerfCounter()
    try:
        for state in arms:
            for _ in range(WARM_CALLS):
                state.bound.run()
            counter.start()
            for _ in range(COUNT_RUNS):
                state.bound.run()
            per_run[state.arm.key] = counter.stop() / COUNT_RUNS
    finally:
        counter.close()
    return per_run


def _count_calls(lib: Any, arms: list[Any], index: int) -> None:
    for state in arms:
        for bound in state.bounds:
            for _ in range(WARM_CALLS):
                bound.run()
    # One dump per call, labelled case/arm#session.call: a session's median call is immune
    # to the rare call that does more (a hash table of ORT's grows). The arms take
    # turns, in a rotating order, as in the timed rounds: the interpreter's heap still
    # grows during a process's first case, and one arm counted after the other would see
    # a different heap (seen: 1.2 % between two copies of one library, in the first case).
    # The helper's count_call toggles collection around the call alone: toggled from
    # Python, ctypes' own call and return (an AttributeError built and freed, pymalloc
    # pools) were counted too, +70 to +170 instructions in some calls and not others.
    count_call, zero, dump = lib.epbench_cg_count_call, lib.epbench_cg_zero, lib.epbench_cg_dump
    for i in range(COUNT_RUNS):
        for j in range(len(arms)):
            state = arms[(i + j) % len(arms)]
            session = i % len(state.bounds)
            zero()
            count_call(state.bounds[session].run)
            dump(f"{index}/{state.arm.key}#{session}.{i}".encode())


def _callgrind_counts(request: dict[str, Any]) -> Callable[[list[Any], int], dict[str, Any]]:
    """A counter of one case's arms under callgrind (the toggle helper loaded once), which
    gives each arm's dump files by session; one that refuses every case when the
    interpreter's object file is unknown."""
    interpreter = interpreter_object()
    if interpreter is None:
        # Rule 2 leaves the interpreter's own instructions out; with them in, the count
        # would be labelled exact (RULES) and be up to 0.35 % off. No count instead.
        def refuse(_arms: list[Any], _index: int) -> dict[str, Any]:
            raise InstructionsError("cannot tell which file holds the interpreter (from "
                                    "/proc/self/maps), so its instructions cannot be left "
                                    "out; use --instructions perf")

        return refuse
    # PyDLL: the GIL stays held, and an exception `run` raised inside count_call is raised.
    lib = ctypes.PyDLL(request["helper"])
    lib.epbench_cg_dump.argtypes = [ctypes.c_char_p]
    lib.epbench_cg_count_call.argtypes = [ctypes.py_object]
    dump_dir = Path(request["dump_dir"])

    # Dumps already given to a turn: the parent reads and deletes them only after the
    # case's last turn, and a later turn must not take them again.
    claimed: set[str] = set()

    def count(arms: list[Any], index: int) -> dict[str, dict[str, list[str]]]:
        # Instrumented code runs tens of times slower: only the counting is, never the
        # building of the next case's sessions.
        lib.epbench_cg_start_instrumentation()
        try:
            _count_calls(lib, arms, index)
        finally:
            lib.epbench_cg_stop_instrumentation()
        # Only each dump's label is read here; the parent parses the dumps (per_run_of):
        # under valgrind, parsing a case's 42 dumps (3.4 MB) took 1.2 to 1.7 s, twice
        # its counted calls (the quick grid, one EP arm, 2026-12-07).
        dumps: dict[str, dict[str, list[str]]] = {}
        for path in sorted(dump_dir.glob(f"callgrind.out.{os.getpid()}.*")):
            if path.name in claimed:
                continue
            label = dump_label(path)
            if label is None or "#" not in label or not label.startswith(f"{index}/"):
                path.unlink()
                continue
            claimed.add(path.name)
            where, _, call = label.rpartition("#")
            session = call.partition(".")[0]
            dumps.setdefault(where.split("/", 1)[1], {}).setdefault(session, []).append(
                path.name)
        missing = [s.arm.key for s in arms
                   if sum(map(len, dumps.get(s.arm.key, {}).values())) != COUNT_RUNS]
        if missing:
            _discard_dumps(dumps, dump_dir)
            raise InstructionsError(f"callgrind wrote no count for arm(s) {missing}: is this "
                                    "worker running under valgrind --tool=callgrind?")
        return dumps

    return count


def per_run_of(event: dict[str, Any], method: str, dump_dir: Path) -> dict[str, float]:
    """An ``instructions`` event's counts per Run, by arm key: perf's as the worker sent
    them; callgrind's read here from the dumps the worker named in ``dump_dir``, each
    deleted once read. Anything malformed (the worker runs the EP under test) is an
    InstructionsError, which costs the case its count and nothing else."""
    if method == "perf":
        per_run = event.get("per_run")
        if not isinstance(per_run, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                for k, v in per_run.items()):
            raise InstructionsError("the perf pass sent counts that are not numbers by arm")
        return {k: float(v) for k, v in per_run.items()}
    leave_out = interpreter_object()
    if leave_out is None:
        raise InstructionsError("cannot tell which file holds the interpreter (from "
                                "/proc/self/maps), so its instructions cannot be left out; "
                                "use --instructions perf")
    dumps = event.get("dumps")
    if not isinstance(dumps, dict):
        raise InstructionsError("the callgrind pass named no dumps by arm")
    try:
        return arm_counts(dumps, dump_dir, leave_out)
    except DumpError as exc:
        raise InstructionsError(str(exc)) from None


def worker_request(request: dict[str, Any], method: str, dump_dir: Path) -> tuple[
        dict[str, Any], list[str]]:
    """The request and command prefix of the instruction-count pass of a run's cases."""
    if method not in METHODS:
        raise InstructionsError(f"--instructions must be one of {', '.join(METHODS)}")
    extra: dict[str, Any] = {"mode": "instructions", "instructions": method}
    prefix: list[str] = []
    if method == "valgrind":
        ok, detail = valgrind_available()
        if not ok:
            raise InstructionsError(f"--instructions valgrind: {detail}")
        extra.update(helper=str(helper_library()), dump_dir=str(dump_dir))
        prefix = valgrind_prefix(dump_dir)
    return {**request, **extra}, prefix


def check_method(method: str | None) -> None:
    """Refuse, before anything runs, a method this machine cannot provide."""
    if method is None:
        return
    if method not in METHODS:
        raise InstructionsError(f"--instructions must be one of {', '.join(METHODS)}")
    ok, detail = perf_available() if method == "perf" else valgrind_available()
    if not ok:
        raise InstructionsError(f"--instructions {method}: {detail}")


def add_counts(arms_info: dict[str, Any], per_run: dict[str, float]) -> None:
    """Put the counts into each arm's counters_per_run (created for arms without a probe)."""
    for key, value in per_run.items():
        record = arms_info.get(key)
        if record is None:
            continue
        counters = dict(record.get("counters_per_run") or {})
        counters[COUNTER_NAME] = value
        record["counters_per_run"] = counters
