"""A worker that dies on a signal: the case is reported crashed, nothing measured is lost."""

from __future__ import annotations

import json

import pytest

from cases.grids import case_by_name
from harness.arms import parse_arm
from harness.results import load_results
from harness.runner import RunConfig, run

pytestmark = pytest.mark.slow

CASES = ("relu_d1_w8", "relu_d10_w8", "add_d10_w8")


def _config(tmp_path, **kw) -> RunConfig:
    return RunConfig(
        cases=tuple(case_by_name(n) for n in CASES), arms=(parse_arm("ort:name=ort_b"),),
        rounds=4, block_target_ms=0.2, max_block_iters=20, warmup_ms=1.0, gate_policy="off",
        out_dir=tmp_path, progress=False, **kw,
    )


@pytest.mark.parametrize("signame", ["SIGSEGV", "SIGABRT"])
def test_crash_mid_case_keeps_its_rounds_and_the_other_cases(tmp_path, monkeypatch, signame):
    monkeypatch.setattr("harness.runner.WORKER_MODULE", "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", f"crash:relu_d10_w8:2:{signame}")
    doc = run(_config(tmp_path))
    import signal

    crashed = doc["cases"]["relu_d10_w8"]
    assert crashed["status"] == "crashed"
    assert crashed["signal"] == getattr(signal, signame)
    assert signame in crashed["error"]
    assert len(crashed["rounds"]) == 2  # the rounds reported before the crash are kept
    assert doc["cases"]["relu_d1_w8"]["status"] == "ok"
    assert doc["cases"]["add_d10_w8"]["status"] == "ok"  # the harness went on
    assert [len(doc["cases"][n]["rounds"]) for n in CASES] == [4, 2, 4]

    # The JSON-lines file holds every case as it ended, crash included.
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [x["type"] for x in lines] == ["header", "case", "case", "case", "end"]
    assert [x["name"] for x in lines[1:4]] == list(CASES)
    assert lines[-1]["interrupted"] is False  # a crash is not an interruption
    assert lines[2]["result"]["status"] == "crashed"
    # And the final document is the same as the stream rebuilt.
    assert load_results(tmp_path / "results.jsonl")["cases"] == load_results(tmp_path)["cases"]


def test_a_crashed_case_fails_the_run_with_exit_4(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from harness.cli import cli

    monkeypatch.setattr("harness.runner.WORKER_MODULE", "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "crash:relu_d1_w8:1:SIGSEGV")
    result = CliRunner().invoke(cli, [
        "run", "--case", "relu_d1_w8", "--case", "relu_d10_w8", "--arm", "ort:name=ort_b",
        "--rounds", "2", "--block-ms", "0.2", "--max-block-iters", "10", "--warmup-ms", "1",
        "--gate", "off", "--quiet", "--out", str(tmp_path / "out"),
    ])
    assert result.exit_code == 4, result.output
    assert "relu_d1_w8" in result.output
    assert (tmp_path / "out" / "report.md").read_text().count("SIGSEGV") == 1
