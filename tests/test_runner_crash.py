"""A worker that dies on a signal: the case is reported crashed, nothing measured is lost."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from epbench.cases.grids import case_by_name
from epbench.core.results import load_results
from epbench.harness.arms import parse_arm
from epbench.harness.run_config import RunConfig
from epbench.harness.runner import run

pytestmark = pytest.mark.slow

CASES = ("relu_d1_w8", "relu_d10_w8", "add_d10_w8")


def _config(tmp_path, **kw) -> RunConfig:
    return RunConfig(
        cases=tuple(case_by_name(n) for n in CASES), arms=(parse_arm("ort:name=ort_b"),),
        rounds=4, block_target_ms=0.2, max_block_iters=20, warmup_ms=1.0, gate_policy="off",
        out_dir=tmp_path, **{"processes": 1, "sessions": 1, **kw},
    )


@pytest.mark.parametrize("signame", ["SIGSEGV", "SIGABRT"])
def test_crash_mid_case_keeps_its_rounds_and_the_other_cases(tmp_path, monkeypatch, signame):
    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",
                        "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", f"crash:relu_d10_w8:2:{signame}")
    doc = run(_config(tmp_path)).to_dict()
    import signal

    crashed = doc["cases"]["relu_d10_w8"]
    assert crashed["status"] == "crashed"
    assert crashed["signal"] == getattr(signal, signame)
    assert signame in crashed["error"]
    assert len(crashed["rounds"]) == 2  # the rounds reported before the crash are kept
    assert doc["cases"]["relu_d1_w8"]["status"] == "ok"
    assert doc["cases"]["add_d10_w8"]["status"] == "ok"  # the harness went on
    assert [len(doc["cases"][n]["rounds"]) for n in CASES] == [4, 2, 4]

    # The JSON-lines file holds every process as it ended, crash included.
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [x["type"] for x in lines] == ["header", "process", "process", "process", "end"]
    assert [x["name"] for x in lines[1:4]] == list(CASES)
    assert lines[-1]["interrupted"] is False  # a crash is not an interruption
    assert lines[2]["result"]["status"] == "crashed"
    # And the final document is the same as the stream rebuilt.
    stream = load_results(tmp_path / "results.jsonl")
    assert stream.to_dict()["cases"] == load_results(tmp_path).to_dict()["cases"]


def test_a_crashed_process_costs_only_its_own_rounds(tmp_path, monkeypatch):
    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",
                        "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "crashp:relu_d10_w8:1:1:SIGSEGV")
    # 4 rounds over 3 processes: 2 each (whole designs of the 2 arms), 6 in all.
    results = run(_config(tmp_path, processes=3))
    doc = results.to_dict()
    case = doc["cases"]["relu_d10_w8"]
    assert case["status"] == "ok"  # the other two processes finished
    assert [p["status"] for p in case["processes"]] == ["ok", "crashed", "ok"]
    assert [r["process"] for r in case["rounds"]] == [0, 0, 1, 2, 2]
    assert case["lost_rounds"] == 1
    assert "1 of 3 process(es) crashed, 1 round(s) lost" in case["error"]
    assert [len(doc["cases"][n]["rounds"]) for n in CASES] == [6, 5, 6]
    # Process p of every case ran before process p + 1 of any.
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [(x["name"], x["process"]) for x in lines if x["type"] == "process"] == [
        (n, p) for p in range(3) for n in CASES]
    assert load_results(tmp_path / "results.jsonl").to_dict()["cases"][
        "relu_d10_w8"]["rounds"] == case["rounds"]
    from epbench.cli.exit_codes import exit_code_for

    assert exit_code_for(run=results)[0] == 4  # a crash is never silent


def test_a_crashed_case_fails_the_run_with_exit_4(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from epbench.cli.main import cli

    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",

                        "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "crash:relu_d1_w8:1:SIGSEGV")
    result = CliRunner().invoke(cli, [
        "run", "--case", "relu_d1_w8", "--case", "relu_d10_w8", "--arm", "ort:name=ort_b",
        "--rounds", "2", "--block-ms", "0.2", "--max-block-iters", "10", "--warmup-ms", "1",
        "--gate", "off", "--quiet", "--processes", "1", "--out", str(tmp_path / "out"),
    ])
    assert result.exit_code == 4, result.output
    assert "relu_d1_w8" in result.output
    assert (tmp_path / "out" / "report.md").read_text().count("SIGSEGV") == 1


def test_a_worker_that_exits_mid_case_is_reported_crashed(tmp_path, monkeypatch):
    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",
                        "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "exit:relu_d10_w8:1:7")
    doc = run(_config(tmp_path)).to_dict()
    case = doc["cases"]["relu_d10_w8"]
    assert (case["status"], case["signal"], len(case["rounds"])) == ("crashed", None, 1)
    assert "status 7 after 1 round(s)" in case["error"]


# Not serial: its 5 s of silence are idle time the other xdist worker can use. A worker's
# start-up has its own allowance (STARTUP_TIMEOUT_S); after its first event, these cases'
# longest gap between two events was 0.04 s, with three busy loops on the 2 cores.
def test_a_hung_worker_is_killed_after_the_silence_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",
                        "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "hang:relu_d10_w8:3")
    doc = run(_config(tmp_path, silence_timeout_s=5.0)).to_dict()
    case = doc["cases"]["relu_d10_w8"]
    assert case["status"] == "crashed" and len(case["rounds"]) == 3
    assert "nothing reported for 5 s after 3 round(s)" in case["error"]
    assert doc["cases"]["add_d10_w8"]["status"] == "ok"


def test_a_worker_s_start_up_gets_longer_than_its_silence_timeout(monkeypatch):
    """Before its first event a worker gets STARTUP_TIMEOUT_S (starting Python and ORT on a
    busy machine); after it, the silence timeout (a hung case) holds."""
    from epbench.harness import worker_process

    monkeypatch.setattr(worker_process, "WORKER_MODULE", "tests.support.slow_start_worker")
    monkeypatch.setattr(worker_process, "STARTUP_TIMEOUT_S", 30.0)
    # Silent over 1 s before its first event, against a 0.5 s silence timeout: not killed.
    outcome = worker_process.run_worker({"before_s": 1.0, "after_s": 0.0}, None, 0.5)
    assert not outcome.timed_out and outcome.returncode == 0
    assert [e["event"] for e in outcome.events] == ["started", "done"]
    # Silent for an hour after it: killed after the silence timeout.
    outcome = worker_process.run_worker({"before_s": 0.0, "after_s": 3600.0}, None, 0.5)
    assert outcome.timed_out and outcome.waited_s == 0.5
    assert [e["event"] for e in outcome.events] == ["started"]
    # Silent for an hour before it: killed after the start-up's allowance.
    monkeypatch.setattr(worker_process, "STARTUP_TIMEOUT_S", 1.5)
    outcome = worker_process.run_worker({"before_s": 3600.0, "after_s": 0.0}, None, 0.5)
    assert outcome.timed_out and outcome.waited_s == 1.5 and outcome.events == []
    # The allowance only ever lengthens a start-up: a silence timeout longer than it holds.
    monkeypatch.setattr(worker_process, "STARTUP_TIMEOUT_S", 0.5)
    outcome = worker_process.run_worker({"before_s": 1.0, "after_s": 0.0}, None, 1.5)
    assert not outcome.timed_out and outcome.returncode == 0


def test_a_worker_that_never_reports_is_stopped_after_its_start_up_allowance(
        tmp_path, monkeypatch):
    """A case whose worker reports nothing at all: crashed, and the message says it was
    the start that took too long, for how long, and what to raise."""
    from dataclasses import replace

    from epbench.harness import worker_process

    monkeypatch.setattr(worker_process, "WORKER_MODULE", "tests.support.faulty_worker")
    monkeypatch.setattr(worker_process, "STARTUP_TIMEOUT_S", 1.0)
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "stall:relu_d10_w8")
    config = replace(_config(tmp_path, silence_timeout_s=0.5),
                     cases=(case_by_name("relu_d10_w8"),))
    case = run(config).to_dict()["cases"]["relu_d10_w8"]
    assert case["status"] == "crashed" and case["rounds"] == []
    assert case["error"] == (
        "worker stopped: it reported nothing within 1 s of starting (Python and ORT's "
        "import: a machine too busy?); raise --case-timeout above 1 s if it is that slow")


CRASHER_C = """
/* A library that claims to be a plugin EP and crashes as ORT loads it. */
#include <signal.h>
void *CreateEpFactories(void *a, void *b, void *c, void *d, unsigned long e, void *f) {
    (void)a; (void)b; (void)c; (void)d; (void)e; (void)f;
    raise(SIGSEGV);
    return 0;
}
void *ReleaseEpFactory(void *f) { (void)f; return 0; }
"""


HANGER_C = """
/* A library that claims to be a plugin EP and hangs as ORT loads it. */
#include <unistd.h>
void *CreateEpFactories(void *a, void *b, void *c, void *d, unsigned long e, void *f) {
    (void)a; (void)b; (void)c; (void)d; (void)e; (void)f;
    for (;;) pause();
    return 0;
}
void *ReleaseEpFactory(void *f) { (void)f; return 0; }
"""


def _plugin(tmp_path, name: str, source: str) -> str:
    import shutil
    import subprocess

    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the library")
    (tmp_path / f"{name}.c").write_text(source)
    library = tmp_path / f"lib{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / f"{name}.c")],
                   check=True)
    return str(library)


@pytest.fixture
def hanging_library(tmp_path, monkeypatch) -> Iterator[str]:
    """A library whose registration never returns; a 1 s start-up allowance; and a test
    that would hang instead (the timeout it checks missing) is stopped after 120 s."""
    import faulthandler

    from epbench.harness import worker_process

    monkeypatch.setattr(worker_process, "STARTUP_TIMEOUT_S", 1.0)
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        yield _plugin(tmp_path, "hanger", HANGER_C)
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_a_library_that_hangs_while_loading_is_refused_before_any_case(
        tmp_path, hanging_library):
    """Its registration never returns: the probe stops after the silence timeout (the arm
    before it reported, so the start-up allowance is over) and names the hung arm, not the
    one loaded before it."""
    from epbench.core.errors import ArmError

    config = RunConfig(cases=(case_by_name("relu_d1_w8"),),
                       arms=(parse_arm("engine:name=fine"), parse_arm(f"plugin:{hanging_library}")),
                       rounds=2, gate_policy="off", out_dir=tmp_path / "out",
                       silence_timeout_s=0.5, aa_twin=None)
    with pytest.raises(ArmError, match=re.escape(
            f"arm 'plugin:{hanging_library}' reported nothing within 0.5 s while loading")):
        run(config)
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_hang_while_loading_is_not_probed_again_without_the_twin(
        tmp_path, hanging_library, monkeypatch):
    """A twin's failed load is probed once more without it; a hang would only wait as long
    again, and is reported as it is."""
    from epbench.core.errors import ArmError
    from epbench.harness import runner

    probes = []
    real_probe = runner.probe_arms

    def probe(arms, libraries, silence_timeout_s=None):
        probes.append(len(arms))
        return real_probe(arms, libraries, silence_timeout_s)

    monkeypatch.setattr(runner, "probe_arms", probe)
    config = RunConfig(cases=(case_by_name("relu_d1_w8"),),
                       arms=(parse_arm(f"plugin:{hanging_library}:name=h"),), rounds=2,
                       gate_policy="off", out_dir=tmp_path / "out", silence_timeout_s=0.5,
                       aa_twin="h")
    with pytest.raises(ArmError, match="reported nothing within 1 s while loading") as caught:
        run(config)
    assert "twin" not in str(caught.value)
    assert probes == [3]  # the control, the arm and its twin: once


def test_a_probe_that_loaded_every_arm_but_hung_at_exit_says_so(monkeypatch):
    from epbench.core.errors import ArmError
    from epbench.harness import worker_process

    arm = parse_arm("engine:name=e")
    monkeypatch.setattr(worker_process, "run_worker", lambda request, on_event, timeout: (
        worker_process.WorkerOutcome(
            events=[{"event": "arm", "key": "e"}, {"event": "done"}], returncode=-9,
            stderr_tail="", timed_out=True, waited_s=timeout)))
    with pytest.raises(ArmError, match="every arm loaded, but the probe's worker did not "
                                       "exit within 7 s"):
        worker_process.probe_arms([arm], {"e": "/x.so"}, 7.0)


def test_a_library_that_crashes_while_loading_is_refused_before_any_case(tmp_path):
    import shutil
    import subprocess

    from epbench.core.errors import ArmError

    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the crashing library")
    source = tmp_path / "crasher.c"
    source.write_text(CRASHER_C)
    library = tmp_path / "libcrasher.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    config = RunConfig(cases=(case_by_name("relu_d1_w8"),),
                       arms=(parse_arm(f"plugin:{library}"),), rounds=2, gate_policy="off",
                       out_dir=tmp_path / "out")
    with pytest.raises(ArmError, match=r"crashed the process while loading \(SIGSEGV\)"):
        run(config)
    assert not (tmp_path / "out").exists()  # nothing written for a run that never started
