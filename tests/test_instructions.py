"""Instruction counts: callgrind plumbing on a tiny real case, perf detection, parsing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from epbench.harness import callgrind_dumps as cgd
from epbench.harness import instructions as ins
from epbench.reports.defaults import INSTRUCTIONS_THRESHOLD
from tests.support.synthetic import as_results

FIXTURES = Path(__file__).parent / "fixtures" / "callgrind"
VALGRIND_OK, VALGRIND_WHY = ins.valgrind_available()


def test_parse_dump_reads_label_and_total():
    text = (FIXTURES / "dump_arm_x.txt").read_text()
    assert cgd.parse_dump(text) == ("arm_x", 721)


def test_parse_dump_refuses_a_file_without_totals():
    with pytest.raises(cgd.DumpError, match="totals"):
        cgd.parse_dump("version: 1\nevents: Ir\n")


def test_add_counts_creates_counters_for_arms_without_a_probe():
    arms = {"ort": {"counters_per_run": None},
            "engine": {"counters_per_run": {"ort_api_calls": 5.0}}}
    ins.add_counts(arms, {"ort": 100.0, "engine": 80.5, "gone": 1.0})
    assert arms == {"ort": {"counters_per_run": {"instructions": 100.0}},
                    "engine": {"counters_per_run": {"ort_api_calls": 5.0,
                                                    "instructions": 80.5}}}


def test_unknown_method_is_refused():
    with pytest.raises(ins.InstructionsError, match="one of perf, valgrind"):
        ins.check_method("papi")


def test_perf_detection_says_why_not(monkeypatch):
    import ctypes
    import errno

    ok, detail = ins.perf_available()
    assert isinstance(ok, bool) and detail
    # A kernel without a PMU answers ENOENT: the message names the VM case and the way out.
    monkeypatch.setattr(ctypes, "get_errno", lambda: errno.ENOENT)

    class NoSyscall:
        def syscall(self, *args):
            return -1

    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: NoSyscall())
    ok, detail = ins.perf_available()
    assert not ok
    assert "typical in a VM" in detail and "--instructions valgrind" in detail
    with pytest.raises(ins.InstructionsError, match="--instructions perf: perf_event_open"):
        ins.check_method("perf")


def test_valgrind_prefix_collects_nothing_until_asked(tmp_path):
    prefix = ins.valgrind_prefix(tmp_path)
    assert "--instr-atstart=no" in prefix and "--collect-atstart=no" in prefix
    assert "PYTHONHASHSEED=0" in prefix
    assert f"--callgrind-out-file={tmp_path}/callgrind.out.%p" in prefix


@pytest.mark.slow
@pytest.mark.skipif(not VALGRIND_OK, reason=f"callgrind unavailable: {VALGRIND_WHY}")
def test_valgrind_counts_are_exact_and_reach_the_counter_table(tmp_path, monkeypatch):
    from epbench.cases.grids import case_by_name
    from epbench.harness.arms import parse_arm
    from epbench.harness.run_config import RunConfig
    from epbench.harness.runner import run
    from epbench.reports.comparison import Side
    from epbench.reports.findings import counter_changes

    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    config = RunConfig(
        cases=(case_by_name("relu_d1_w8"), case_by_name("relu_d10_w8")),
        arms=(parse_arm("engine:name=a"), parse_arm("engine:name=c,inject_api_calls_per_run=50")),
        rounds=2, processes=1, warmup_ms=5.0, gate_policy="off", instructions="valgrind",
        # The timed rounds only have to finish: nothing here reads a time, the counters
        # are per Run, and the callgrind pass sets its own sessions (COUNT_SESSIONS).
        # The defaults' 20 ms blocks on two sessions took 3 of each run's 20 s.
        sessions=1, block_target_ms=1.0,
    )
    counts = []
    for _ in range(2):
        doc = run(config).to_dict()
        # Both cases counted in one pass, each under its own label: ten nodes cost the
        # engine more instructions per Run than one.
        deep = doc["cases"]["relu_d10_w8"]
        assert deep["instructions"]["error"] is None
        assert (deep["arms"]["a"]["counters_per_run"]["instructions"]
                > doc["cases"]["relu_d1_w8"]["arms"]["a"]["counters_per_run"]["instructions"])
        case = doc["cases"]["relu_d1_w8"]
        assert case["status"] == "ok", case["error"]
        assert case["instructions"] == {"method": "valgrind", "rule": ins.RULES["valgrind"],
                                        "runs": ins.COUNT_RUNS, "error": None}
        counts.append({k: v["counters_per_run"]["instructions"]
                       for k, v in case["arms"].items()})
    assert set(counts[0]) == {"ort", "a", "c"}
    # Nearly identical from process to process on the same binary, never a mark: the
    # engine arms were seen to differ by up to 70 of ~20,000 instructions per Run (0.33 %)
    # between two worker processes, and with the case's place in the pass (object
    # addresses steer Python's dict probes; the interpreter's heap is still growing in a
    # pass's first case); ORT's own CPU EP by up to 101 (0.5 %) in a fresh-clone CI run.
    # All stay below the 1 % at which a change in instructions is marked
    # (INSTRUCTIONS_THRESHOLD), which is what matters.
    for key, bound in (("a", INSTRUCTIONS_THRESHOLD / 2), ("c", INSTRUCTIONS_THRESHOLD / 2),
                       ("ort", INSTRUCTIONS_THRESHOLD)):
        assert abs(counts[0][key] - counts[1][key]) < bound * counts[0][key], (key, counts)
    # Fifty extra ORT calls per Run cost instructions, beyond what the arms differ by
    # between processes (five did not always: 20,894 against 20,897 once on a 2-core VM);
    # the comparator shows the change exactly.
    # (617 more were counted; over 4 a call is well clear of the +-70.)
    assert all(count["c"] - count["a"] > 200 for count in counts), counts
    run = as_results(doc)
    rows = counter_changes(Side("base", run, "a"), Side("pr", run, "c"), ["relu_d1_w8"])
    shown = {r.counter: (r.base, r.pr) for r in rows}
    assert shown["instructions"] == (counts[1]["a"], counts[1]["c"])
    assert shown["ort_api_calls"][1] - shown["ort_api_calls"][0] == 50
    assert doc["config"]["instructions"] == "valgrind"


# How closely two copies of one library agree on every quick case. Issue 49 asks for
# 0.05 %; one step more along a hash chain of ORT's (+9 instructions, 0.07 % of the
# smallest case), which depends on where a registration's objects lie, still happens
# to one copy in some cases of some runs (2 of 24 cases in four quick-grid runs).
COPIES_AGREE = 0.001


@pytest.mark.slow
@pytest.mark.skipif(not VALGRIND_OK, reason=f"callgrind unavailable: {VALGRIND_WHY}")
def test_two_copies_of_one_library_count_alike_on_every_quick_case(tmp_path, monkeypatch):
    """Byte-identical copies at paths of different lengths, registered under names of
    different lengths (as compare-commits' base, head and base_twin are): every quick
    case counts them alike, within COPIES_AGREE (most cases to the instruction).
    Counted from Python with the interpreter's instructions in, they differed by up to
    0.38 %; counted side by side, by 0.06 to 0.13 %."""
    from epbench.cases.grids import load_grid
    from epbench.engine.library import library_path
    from epbench.harness.arms import parse_arm
    from epbench.harness.run_config import RunConfig
    from epbench.harness.runner import run

    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    library = Path(library_path())
    copies = {"a": tmp_path / "s", "b" + "_long" * 8: tmp_path / ("deep" * 20) / "er"}
    arms = []
    for name, folder in copies.items():
        folder.mkdir(parents=True)
        shutil.copyfile(library, folder / library.name)
        arms.append(parse_arm(f"engine@{folder / library.name}:name={name}"))
    config = RunConfig(cases=tuple(load_grid("quick")), arms=tuple(arms), rounds=1,
                       processes=1, sessions=1, warmup_ms=1.0, block_target_ms=1.0,
                       gate_policy="off", instructions="valgrind")
    doc = run(config).to_dict()
    counts = {}
    for name, case in doc["cases"].items():
        assert case["instructions"]["error"] is None, (name, case["instructions"])
        counts[name] = [case["arms"][key]["counters_per_run"]["instructions"] for key in copies]
    assert len(counts) == len(load_grid("quick"))
    apart = {name: abs(a - b) / min(a, b) for name, (a, b) in counts.items()}
    assert max(apart.values()) <= COPIES_AGREE, counts


def test_parse_dump_leaves_out_one_object_s_own_instructions():
    """The interpreter's own instructions are left out; its callees' (ORT's, here) are
    not, nor the cost a caller's `calls=` line carries for them."""
    text = "\n".join([
        "events: Ir", "desc: Trigger: Client Request: 0/x#1", "summary: 1000", "",
        "ob=/lib/libpython3.11.so.1.0", "fl=???", "fn=PyObject_CallObject", "0 300",
        "cob=/lib/libort.so", "cfn=OrtRun", "calls=1 0", "0 650", "",
        "fn=_PyObject_Free", "0 20", "",
        "ob=/lib/libort.so", "fn=OrtRun", "0 600", "cob=/lib/libc.so.6", "cfn=memcmp",
        "calls=2 0", "0 50", "",
        "ob=/lib/libc.so.6", "fn=memcmp", "0 50", "", "totals: 1000", ""])
    assert cgd.parse_dump(text) == ("0/x#1", 1000)
    assert cgd.parse_dump(text, "/lib/libpython3.11.so.1.0") == ("0/x#1", 680)
    assert cgd.parse_dump(text, "/lib/elsewhere.so") == ("0/x#1", 1000)


def test_the_interpreter_object_is_the_file_that_holds_the_c_api():
    import ctypes
    import sys

    found = ins.interpreter_object()
    assert found is not None and Path(found).is_file()
    name = Path(found).name
    assert name.startswith("libpython") or Path(found) == Path(sys.executable).resolve()
    # It exports what the helper's count_call calls.
    assert ctypes.CDLL(found).PyObject_CallObject


def test_without_the_interpreter_object_callgrind_gives_an_error_not_a_rule_2_count(
        monkeypatch, tmp_path):
    """Rule 2 leaves the interpreter's instructions out: when its file is unknown, every
    case gets an error (no count, so no `valgrind/2` label), before valgrind counts."""
    monkeypatch.setattr(ins, "interpreter_object", lambda: None)
    count = ins._callgrind_counts({"helper": str(tmp_path / "absent.so"),
                                   "dump_dir": str(tmp_path)})
    with pytest.raises(ins.InstructionsError, match="cannot tell which file holds the "
                                                    "interpreter"):
        count([], 0)


def test_each_ep_arm_is_counted_alone_beside_the_control_under_one_name():
    """A turn per EP arm, in the order of their keys, each with the control, each EP
    registered under COUNTING_NAME (32 bytes or more); the key leads back to the arm."""
    from epbench.harness.arms import parse_arm

    arms = [parse_arm(spec) for spec in
            ("ort", "engine:name=head", "engine:name=base", "engine:name=base_twin")]
    request = {"mode": "instructions",
               "arms": [{"arm": a.to_dict(), "library": f"/x/{a.key}.so"} for a in arms]}
    groups = ins.counting_groups(request)
    assert request["arms"][1]["arm"]["name"] == "head"  # the caller's request is not changed
    assert [key for _, key in groups] == ["base", "base_twin", "head"]
    for group, key in groups:
        control, alone = group["arms"]
        assert control == request["arms"][0]
        assert alone["arm"]["name"] == ins.COUNTING_NAME and alone["library"] == f"/x/{key}.so"
    assert len(ins.COUNTING_NAME) >= 32


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_helper_library_is_built_once_and_cached(tmp_path):
    if not ins.CALLGRIND_HEADER.is_file():
        pytest.skip(f"{ins.CALLGRIND_HEADER} missing")
    first = ins.helper_library(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert ins.helper_library(tmp_path) == first
    assert first.stat().st_mtime_ns == stamp
    import ctypes

    lib = ctypes.CDLL(str(first))
    # Outside valgrind the client requests do nothing (and must not crash).
    lib.epbench_cg_toggle_collect()
    lib.epbench_cg_zero()


def _pass_with(monkeypatch, worker, method: str = "perf"):
    from epbench.harness import worker_process

    monkeypatch.setattr(worker_process, "run_worker", worker)
    monkeypatch.setattr(ins, "worker_request", lambda request, method, dump_dir: (
        {**request, "dump_dir": str(dump_dir)}, []))
    cases = {name: {"arms": {"ort": {}, "x": {"counters_per_run": {"heap_allocs": 0.0}}}}
             for name in ("a", "b", "c", "d")}
    seen = []
    def count() -> None:
        worker_process.count_instructions({"cases": list(cases)}, cases, seen.append,
                                          method=method, silence_timeout_s=5.0)

    return cases, seen, count


def test_one_pass_counts_every_case_and_keeps_each_case_s_own_error(monkeypatch):
    """The runner side of the batched pass: one worker for all cases; a case's error is its
    own; a crash is pinned on the case being counted, not on those after it."""
    from epbench.harness import worker_process

    started = []

    def crashing_worker(request, on_event, silence_timeout_s, prefix):
        started.append(list(request["cases"]))
        on_event({"event": "counting", "case": "a"})
        on_event({"event": "instructions", "case": "a", "method": "perf", "runs": 15,
                  "per_run": {"ort": 100.0, "x": 90.0}})
        on_event({"event": "counting", "case": "b"})
        on_event({"event": "instructions", "case": "b", "error": "CaseError: outputs differ"})
        on_event({"event": "counting", "case": "c"})
        return worker_process.WorkerOutcome(events=[], returncode=-11,
                                            stderr_tail="Segmentation fault")

    cases, seen, count = _pass_with(monkeypatch, crashing_worker)
    count()
    assert started == [["a", "b", "c", "d"]]
    assert seen == ["a", "b", "c", "d"]
    assert cases["a"]["instructions"]["error"] is None
    assert cases["a"]["arms"]["x"]["counters_per_run"] == {"heap_allocs": 0.0,
                                                           "instructions": 90.0}
    assert cases["b"]["instructions"]["error"] == "CaseError: outputs differ"
    assert "instructions" not in cases["b"]["arms"]["x"]["counters_per_run"]
    assert cases["c"]["instructions"]["error"] == (
        "the perf pass ended with status -11: Segmentation fault (while counting this case)")
    assert cases["d"]["instructions"]["error"].endswith("(before this case)")


def test_a_pass_stopped_for_its_silence_says_so(monkeypatch):
    from epbench.harness import worker_process

    def silent_worker(request, on_event, silence_timeout_s, prefix):
        on_event({"event": "counting", "case": "a"})
        return worker_process.WorkerOutcome(events=[], returncode=-9, stderr_tail="",
                                            timed_out=True, waited_s=silence_timeout_s)

    cases, seen, count = _pass_with(monkeypatch, silent_worker)
    count()
    assert cases["a"]["instructions"]["error"] == (
        "the perf pass reported nothing for 5 s and was stopped (raise --case-timeout) "
        "(while counting this case)")


def test_ctrl_c_in_the_pass_marks_the_uncounted_cases_and_propagates(monkeypatch):
    def interrupted_worker(request, on_event, silence_timeout_s, prefix):
        on_event({"event": "counting", "case": "a"})
        on_event({"event": "instructions", "case": "a", "method": "perf", "runs": 15,
                  "per_run": {"ort": 100.0, "x": 90.0}})
        raise KeyboardInterrupt

    cases, seen, count = _pass_with(monkeypatch, interrupted_worker)
    with pytest.raises(KeyboardInterrupt):
        count()
    assert cases["a"]["instructions"]["error"] is None
    assert [cases[n]["instructions"]["error"] for n in "bcd"] == [
        "interrupted before this case was counted"] * 3
    assert seen == ["a", "b", "c", "d"]


def test_the_worker_counts_each_case_on_fresh_sessions_and_goes_on_after_a_failure(
        monkeypatch, tmp_path):
    """count_in_worker: a case whose sessions fail reports its error and no counts; the
    next case is counted on its own sessions only, under its own name, from the case the
    runner saved for it."""
    from types import SimpleNamespace

    from epbench.cases.built import save_built_case
    from epbench.cases.grids import case_by_name
    from epbench.cases.spec import CaseSpec

    events = []
    built = []
    specs = [case_by_name("relu_d1_w8"), case_by_name("relu_d10_w8")]

    class FakeWorker:
        request = {"instructions": "valgrind", "cases": [s.to_dict() for s in specs],
                   "dump_dir": str(tmp_path),
                   "arms": [{"arm": {"spec": "ort", "kind": "ort", "target": None,
                                     "options": [], "name": "x"}, "library": None}],
                   "built": {s.name: save_built_case(s.build(), tmp_path, f"case{i}")
                             for i, s in enumerate(specs)}}
        config = {"sessions": 1}
        arms = [SimpleNamespace(arm=SimpleNamespace(key="x"), sessions=[], bounds=[],
                                registration=None)]

        def emit(self, event):
            events.append(event)

        def setup_arms(self):
            return self.arms

        def build_sessions(self, arms, model, spec):
            assert all(not a.sessions and not a.bounds for a in arms)  # fresh per case
            assert model.definition_sha256 == expected[spec.name]  # its own case's
            built.append(spec.name)
            for a in arms:
                a.sessions.append(spec.name)
                a.bounds.append(spec.name)
            if spec.name == "relu_d1_w8":
                raise RuntimeError("no session")

    expected = {s.name: s.definition_sha256 for s in specs}
    # The worker reads what the runner saved; building (and so onnx) is the parent's.
    monkeypatch.setattr(CaseSpec, "build", lambda self: pytest.fail("the worker built a case"))
    monkeypatch.setattr(ins, "_callgrind_counts", lambda request: (
        lambda arms, index: {a.arm.key: {"0": [f"callgrind.out.1.{index}"]} for a in arms}))
    ins.count_in_worker(FakeWorker())
    assert built == ["relu_d1_w8", "relu_d10_w8"]
    assert events == [
        {"event": "counting", "case": "relu_d1_w8"},
        {"event": "instructions", "case": "relu_d1_w8", "error": "RuntimeError: no session"},
        {"event": "counting", "case": "relu_d10_w8"},
        {"event": "instructions", "case": "relu_d10_w8", "method": "valgrind",
         "runs": ins.COUNT_RUNS, "dumps": {"x": {"0": ["callgrind.out.1.1"]}}},
    ]


def _dump(label: str, own: int, ort: int | str) -> str:
    """A callgrind dump of one call: ``own`` instructions in the interpreter itself, ``ort``
    in what it called."""
    return "\n".join([
        "version: 1", f"desc: Trigger: Client Request: {label}", "", "events: Ir",
        "summary: 0", "", f"ob={ins.interpreter_object()}", "fn=PyObject_Call",
        f"0 {own}", "cob=/lib/libort.so", "cfn=OrtRun", "calls=1 0", f"0 {ort}", "",
        "ob=/lib/libort.so", "fn=OrtRun", f"0 {ort}", "",
        f"totals: {own + ort if isinstance(ort, int) else own}", ""])


def _valgrind_event(dump_dir: Path, sessions: dict[str, list[int]], pid: int = 7) -> dict:
    """An instructions event naming one dump per call of arm x, written to ``dump_dir``."""
    names: dict[str, list[str]] = {}
    for s, totals in sessions.items():
        for i, ort in enumerate(totals):
            name = f"callgrind.out.{pid}.{s}{i}"
            (dump_dir / name).write_text(_dump(f"0/x#{s}.{i}", own=1000, ort=ort))
            names.setdefault(s, []).append(name)
    return {"event": "instructions", "case": "c", "method": "valgrind", "dumps": {"x": names}}


def test_the_parent_reads_each_arm_s_dumps_and_deletes_them(tmp_path):
    """Callgrind's counts are parsed by the parent, off valgrind: each arm's count is its
    cheapest session's median call, the interpreter's own instructions left out."""
    event = _valgrind_event(tmp_path, {"0": [100, 100, 190], "1": [60, 140, 140],
                                       "2": [97, 97, 300]})
    assert ins.per_run_of(event, "valgrind", tmp_path) == {"x": 97.0}
    assert list(tmp_path.iterdir()) == []
    perf = {"event": "instructions", "case": "c", "method": "perf", "per_run": {"x": 9.5}}
    assert ins.per_run_of(perf, "perf", tmp_path) == {"x": 9.5}


@pytest.mark.parametrize(("method", "event"), [
    ("perf", {"per_run": {"x": "lots"}}), ("perf", {"per_run": ["x"]}), ("perf", {}),
    ("perf", {"per_run": {"x": True}}), ("valgrind", {"per_run": {"x": 9.5}})])
def test_counts_the_pass_did_not_send_as_its_method_sends_them_are_refused(
        tmp_path, method, event):
    with pytest.raises(ins.InstructionsError, match="the (perf|callgrind) pass"):
        ins.per_run_of(event, method, tmp_path)


@pytest.mark.parametrize("name", ["../outside", "{tmp}/outside", "callgrind.out.1.2/../../outside",
                                  "callgrind.out.\u0661.2", 7, None])
def test_a_dump_name_from_the_worker_is_only_ever_a_file_of_the_pass(tmp_path, name):
    """The worker runs the EP under test: a name it sends that is not one of callgrind's
    files in the pass's folder is refused, and nothing outside is read or deleted."""
    folder = tmp_path / "pass"
    (folder / "callgrind.out.1.2").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.write_text(_dump("0/x#0.0", own=1, ort=1))
    if isinstance(name, str):
        name = name.format(tmp=tmp_path)  # an absolute path, still inside this test's folder
    event = {"event": "instructions", "dumps": {"x": {"0": [name]}}}
    with pytest.raises(ins.InstructionsError, match="not one of its dumps"):
        ins.per_run_of(event, "valgrind", folder)
    assert outside.is_file()


def test_a_dump_that_is_a_link_or_a_fifo_is_refused_unread(tmp_path):
    """A link (to a file outside) or a FIFO under a dump's name: refused, without reading
    through the link or blocking on the FIFO; the target stays."""
    outside = tmp_path / "outside"
    outside.write_text(_dump("0/x#0.0", own=1, ort=1))
    folder = tmp_path / "pass"
    folder.mkdir()
    (folder / "callgrind.out.1.1").symlink_to(outside)
    os.mkfifo(folder / "callgrind.out.1.2")
    for name, why in (("callgrind.out.1.1", "links"), ("callgrind.out.1.2", "regular file")):
        event = {"event": "instructions", "dumps": {"x": {"0": [name]}}}
        with pytest.raises(ins.InstructionsError, match=why):
            ins.per_run_of(event, "valgrind", folder)
    assert outside.read_text() == _dump("0/x#0.0", own=1, ort=1)


@pytest.mark.parametrize("dumps", [[], {"x": {}}, {"x": {"0": []}}, {"x": "callgrind.out.1.1"}])
def test_an_event_that_names_no_dump_for_an_arm_is_refused(tmp_path, dumps):
    with pytest.raises(ins.InstructionsError, match="named no dump"):
        ins.per_run_of({"event": "instructions", "dumps": dumps}, "valgrind", tmp_path)


def _unparsable(label: str) -> str:
    """A dump whose interpreter's own cost is not a number."""
    return _dump(label, own=1, ort=1).replace("fn=PyObject_Call\n0 1\n",
                                              "fn=PyObject_Call\n0 12abc\n")


def test_a_missing_or_unparsable_dump_is_an_instructions_error(tmp_path):
    missing = {"event": "instructions", "dumps": {"x": {"0": ["callgrind.out.1.1"]}}}
    with pytest.raises(ins.InstructionsError, match="callgrind.out.1.1: No such file"):
        ins.per_run_of(missing, "valgrind", tmp_path)
    (tmp_path / "callgrind.out.1.1").write_text(_unparsable("0/x#0.0"))
    with pytest.raises(ins.InstructionsError, match="callgrind.out.1.1: invalid literal"):
        ins.per_run_of(missing, "valgrind", tmp_path)
    (tmp_path / "callgrind.out.1.1").write_text("version: 1\nevents: Ir\n")
    with pytest.raises(ins.InstructionsError, match="^a callgrind dump without a totals line"):
        ins.per_run_of(missing, "valgrind", tmp_path)


def test_a_bad_dump_costs_its_own_case_s_count_only(monkeypatch):
    """The parent's side of a callgrind pass: counts parsed from the dumps each event
    names; a dump that cannot be parsed is that case's error, the next case is counted."""

    def worker(request, on_event, silence_timeout_s, prefix):
        folder = Path(request["dump_dir"])
        for n, (name, text) in enumerate((("a", _dump("0/x#0.0", own=5, ort=90)),
                                          ("b", _unparsable("1/x#0.0")),
                                          ("c", _dump("2/x#0.0", own=5, ort=80)))):
            on_event({"event": "counting", "case": name})
            (folder / f"callgrind.out.7.{n}").write_text(text)
            on_event({"event": "instructions", "case": name, "method": "valgrind",
                      "runs": 1, "dumps": {"x": {"0": [f"callgrind.out.7.{n}"]}}})
        return worker_process.WorkerOutcome(events=[], returncode=0, stderr_tail="")

    from epbench.harness import worker_process

    cases, seen, count = _pass_with(monkeypatch, worker, "valgrind")
    count()
    assert seen == ["a", "b", "c", "d"]
    assert cases["a"]["arms"]["x"]["counters_per_run"]["instructions"] == 90.0
    assert cases["c"]["arms"]["x"]["counters_per_run"]["instructions"] == 80.0
    assert cases["b"]["instructions"]["error"].startswith(
        "InstructionsError: callgrind dump callgrind.out.7.1: invalid literal")
    assert "instructions" not in cases["b"]["arms"]["x"]["counters_per_run"]


def test_a_dump_s_label_is_read_from_its_header_only(tmp_path):
    head, after = tmp_path / "head", tmp_path / "after"
    head.write_text(_dump("3/x#1.4", own=1, ort=1))
    after.write_text("version: 1\nevents: Ir\ndesc: Trigger: Client Request: 3/x#1.4\n")
    assert (cgd.dump_label(head), cgd.dump_label(after)) == ("3/x#1.4", None)


class _DumpingHelper:
    """The toggle library as _callgrind_counts uses it, writing a dump per label."""

    epbench_cg_dump = epbench_cg_count_call = type("Fn", (), {"argtypes": None})()

    def __init__(self, folder: Path) -> None:
        self.folder, self.written = folder, {}

    def epbench_cg_start_instrumentation(self) -> None:
        self.write("")  # a dump the process wrote on its own, with no label

    def epbench_cg_stop_instrumentation(self) -> None:
        pass

    def write(self, label: str) -> None:
        name = f"callgrind.out.{os.getpid()}.{len(self.written) + 1}"
        text = _dump(label, own=1, ort=1) if label else "version: 1\nevents: Ir\n"
        (self.folder / name).write_text(text)
        self.written[name] = label


def _counter(monkeypatch, folder: Path, calls: int = ins.COUNT_RUNS):
    lib = _DumpingHelper(folder)
    monkeypatch.setattr(ins.ctypes, "PyDLL", lambda path: lib)
    monkeypatch.setattr(ins, "_count_calls", lambda _lib, arms, index: [
        lib.write(f"{index}/{a.arm.key}#{i % ins.COUNT_SESSIONS}.{i}")
        for i in range(calls) for a in arms])
    return lib, ins._callgrind_counts({"helper": "fake.so", "dump_dir": str(folder)})


def test_the_worker_names_each_turn_s_own_dumps_by_session(monkeypatch, tmp_path):
    """Dumps stay in the folder until the parent reads them: a case's second turn (the same
    case index, the same arm keys) must not claim the first turn's again; a dump with no
    label, or another case's, is deleted; each name is filed under its call's session."""
    from types import SimpleNamespace

    lib, count = _counter(monkeypatch, tmp_path)
    lib.write("3/x#0.0")  # another case's, left over
    arms = [SimpleNamespace(arm=SimpleNamespace(key=k)) for k in ("ort", "x")]
    first, second = count(arms, 4), count(arms, 4)
    named = [n for turn in (first, second) for sessions in turn.values()
             for names in sessions.values() for n in names]
    assert len(named) == len(set(named)) == 2 * 2 * ins.COUNT_RUNS
    for turn in (first, second):
        assert sorted(turn) == ["ort", "x"]
        for key, sessions in turn.items():
            assert sorted(sessions) == [str(s) for s in range(ins.COUNT_SESSIONS)]
            for session, names in sessions.items():
                assert {lib.written[n].rpartition("#")[::2][0] for n in names} == {f"4/{key}"}
                assert {lib.written[n].split("#")[1].split(".")[0] for n in names} == {session}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(named)


def test_a_turn_with_calls_missing_leaves_no_dump_behind(monkeypatch, tmp_path):
    from types import SimpleNamespace

    _, count = _counter(monkeypatch, tmp_path, calls=ins.COUNT_RUNS - 1)
    arms = [SimpleNamespace(arm=SimpleNamespace(key="x"))]
    with pytest.raises(ins.InstructionsError, match=r"no count for arm\(s\) \['x'\]"):
        count(arms, 0)
    assert list(tmp_path.iterdir()) == []


def test_the_worker_deletes_the_dumps_no_event_names(monkeypatch, tmp_path):
    """The control is counted in every turn and reported from the first: its later turns'
    dumps are deleted; so are a failed case's."""
    from types import SimpleNamespace

    events = []

    def arm(name, kind):
        return {"arm": {"spec": kind, "kind": kind, "target": None, "options": [],
                        "name": name}, "library": None if kind == "ort" else f"/x/{name}.so"}

    class FakeWorker:
        request = {"instructions": "valgrind", "dump_dir": str(tmp_path),
                   "cases": [{"name": "ok"}, {"name": "fails"}], "built": {"ok": 0, "fails": 0},
                   "arms": [arm("ort", "ort"), arm("p", "engine"), arm("q", "engine")]}
        config = {"sessions": 1}

        def emit(self, event):
            events.append(event)

        def setup_arms(self):
            return [SimpleNamespace(arm=SimpleNamespace(key=ins.ArmSpec.from_dict(a["arm"]).key),
                                    registration=None if a["arm"]["kind"] == "ort" else 1)
                    for a in self.request["arms"]]

        def build_sessions(self, arms, built, spec):
            if spec.name == "fails" and arms[1].arm.key == ins.COUNTING_NAME and turns[0] == 3:
                raise RuntimeError("second turn")

    turns = [0]

    def count(arms, index):
        turns[0] += 1
        counted = {}
        for a in arms:
            name = f"callgrind.out.1.{turns[0]}{len(counted)}"
            (tmp_path / name).write_text("")
            counted[a.arm.key] = {"0": [name]}
        return counted

    monkeypatch.setattr(ins, "_callgrind_counts", lambda request: count)
    monkeypatch.setattr(ins, "_release", lambda arms: None)  # no ORT sessions here
    monkeypatch.setattr(ins, "load_built_case", lambda where: None)
    monkeypatch.setattr(ins.CaseSpec, "from_dict", lambda d: SimpleNamespace(**d))
    ins.count_in_worker(FakeWorker())
    ok, failed = events[1], events[3]
    assert failed == {"event": "instructions", "case": "fails",
                      "error": "RuntimeError: second turn"}
    assert sorted(ok["dumps"]) == ["ort", "p", "q"]
    named = {n for sessions in ok["dumps"].values() for names in sessions.values() for n in names}
    # Turn 1: ort and p; turn 2: q (its ort deleted); the failed case's turn 1 deleted.
    assert named == {"callgrind.out.1.10", "callgrind.out.1.11", "callgrind.out.1.21"}
    assert {p.name for p in tmp_path.iterdir()} == named


def test_arms_take_turns_in_a_rotating_order_while_counted():
    """No arm is counted wholly before another (the heap still changes during a process's
    first case): each counted call is dumped under its case, arm and call number."""
    from types import SimpleNamespace

    log = []

    class FakeHelper:
        def epbench_cg_zero(self):
            pass

        def epbench_cg_count_call(self, run):
            run()

        def epbench_cg_dump(self, label):
            log.append(label.decode())

    sessions = ins.COUNT_SESSIONS
    arms = [SimpleNamespace(arm=SimpleNamespace(key=k),
                            bounds=[SimpleNamespace(run=lambda: None)] * sessions)
            for k in ("a", "b", "c")]
    ins._count_calls(FakeHelper(), arms, 7)
    assert len(log) == 3 * ins.COUNT_RUNS
    # Labelled case/arm#session.call: the sessions take turns too.
    assert log[:6] == ["7/a#0.0", "7/b#0.0", "7/c#0.0", "7/b#1.1", "7/c#1.1", "7/a#1.1"]
    firsts = [label.split("#")[0] for label in log[0::3]]
    assert firsts[:3] == ["7/a", "7/b", "7/c"]


def test_an_arm_s_count_is_its_cheapest_session_s_median_call():
    """A session can sit a few instructions above the arm's count, never below; within
    a session, a rare call does more."""
    assert cgd.cheapest_session({"0": [13018, 13018, 13113, 13018, 22418],
                                 "1": [13009, 13104, 13009, 13009, 22409],
                                 "2": [13009, 13009, 13009, 30000, 13009]}) == 13009.0
