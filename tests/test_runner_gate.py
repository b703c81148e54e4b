"""The idle gate inside a real run: strict stops the case (exit 3), wait marks rounds unquiet."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.errors import EXIT_GATE
from epbench.core.results import load_results

pytestmark = pytest.mark.slow

ARGS = ["run", "--case", "relu_d1_w8", "--arm", "ort:name=ort_b", "--rounds", "2",
        "--block-ms", "0.2", "--max-block-iters", "5", "--warmup-ms", "1", "--quiet",
        "--processes", "1"]


@pytest.fixture
def busy_machine(monkeypatch):
    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",
                        "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "busy:steal_vm")


def test_strict_gate_stops_the_case_with_exit_3(tmp_path, busy_machine) -> None:
    result = CliRunner().invoke(cli, [*ARGS, "--gate", "strict", "--out", str(tmp_path)])
    assert result.exit_code == EXIT_GATE, result.output
    case = load_results(tmp_path).to_dict()["cases"]["relu_d1_w8"]
    assert case["status"] == "failed"
    assert case["error_kind"] == "gate"
    assert case["rounds"] == []


def test_wait_gate_runs_the_round_but_marks_it_unquiet(tmp_path, busy_machine) -> None:
    result = CliRunner().invoke(cli, [*ARGS, "--gate", "wait", "--gate-max-wait", "0",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rounds = load_results(tmp_path).to_dict()["cases"]["relu_d1_w8"]["rounds"]
    assert [r["quiet"] for r in rounds] == [False, False]
    assert all(r["gate"]["passed"] is False for r in rounds)
    assert "0 of 2 rounds passed the idle gate" in (tmp_path / "report.md").read_text()


def test_gate_off_records_no_reading(tmp_path, busy_machine) -> None:
    result = CliRunner().invoke(cli, [*ARGS, "--gate", "off", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rounds = load_results(tmp_path).to_dict()["cases"]["relu_d1_w8"]["rounds"]
    assert [r["quiet"] for r in rounds] == [True, True]
    assert all(r["gate"]["attempts"] == 0 for r in rounds)
    report = (tmp_path / "report.md").read_text()
    assert "idle gate off (rounds not checked before running)" in report
    assert "passed the idle gate" not in report


def test_a_run_on_a_machine_that_stays_busy_stops_waiting_and_says_so(tmp_path,
                                                                       busy_machine) -> None:
    """Every look fails: processes get their share of the case's pause budget until 16
    rounds in a row had no passing look, then none; the file and the report say so."""
    result = CliRunner().invoke(cli, [*ARGS[:-2], "--processes", "3", "--rounds", "24",
                                      "--gate", "wait", "--gate-max-wait", "0.01",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = load_results(tmp_path).to_dict()
    share = doc["config"]["gate"]["budget_s"]
    processes = doc["cases"]["relu_d1_w8"]["processes"]
    assert [p["rounds"] for p in processes] == [8, 8, 8]
    assert share > 0 and [p["gate_budget_s"] for p in processes] == [share, share, 0.0]
    assert ("the gate stopped waiting for quiet in 1 of 3 processes (after 16 rounds in a row "
            "had no passing look: a sustained load)") in (tmp_path / "report.md").read_text()
