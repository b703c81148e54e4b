"""The harness's overhead: its shape, the `overhead` and `validate` commands, its record."""

from __future__ import annotations

import json
from itertools import count

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.numbers import median
from epbench.harness import overhead as fl

FLOOR_KEYS = {"samples", "timer_ns", "noop_call_ns", "ort_trivial_run_ns", "case", "threads",
              "loop", "loops", "c_loop_note"}


def ticking_clock(step: int):
    """A clock that advances ``step`` ns per read: every timed interval is exactly ``step``."""
    ticks = count(0, step)
    return lambda: next(ticks)


def test_overhead_medians_come_from_the_clock():
    result = fl.measure_overhead(samples=9, clock=ticking_clock(7))
    assert set(result) == FLOOR_KEYS
    assert result["timer_ns"] == 7.0
    assert result["noop_call_ns"] == 7.0
    assert result["ort_trivial_run_ns"] == 7.0
    assert result["loops"] == {"python": 7.0, "c": None}
    assert result["case"] == "relu_d1_w8" and result["samples"] == 9


def test_median_of_even_and_odd():
    assert median([5, 1, 3]) == 3.0
    assert median([4, 1, 3, 2]) == 2.5
    assert median([]) is None


def test_overhead_command_json_shape():
    out = CliRunner().invoke(cli, ["overhead", "--samples", "50", "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert FLOOR_KEYS | {"instructions"} == set(doc)
    assert set(doc["instructions"]) == {"perf", "valgrind"}
    for info in doc["instructions"].values():
        assert set(info) == {"available", "detail"} and info["detail"]
    assert doc["timer_ns"] > 0 and doc["ort_trivial_run_ns"] > 0


def test_overhead_command_text_lines():
    out = CliRunner().invoke(cli, ["overhead", "--samples", "50"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert [line.split()[0] for line in lines] == [
        "timer", "timed", "ORT", "timing", "medians", "instructions", "instructions"]
    assert lines[-2].startswith("instructions via perf ")
    assert lines[-1].startswith("instructions via valgrind ")


def test_overhead_refuses_no_samples():
    from epbench.core.errors import EpbenchError

    with pytest.raises(EpbenchError, match="--samples"):
        fl.measure_overhead(samples=0)


@pytest.mark.slow
def test_every_results_file_records_the_overhead(tmp_path):
    from epbench.cases.grids import case_by_name
    from epbench.core.results import load_results
    from epbench.harness.arms import parse_arm
    from epbench.harness.run_config import RunConfig
    from epbench.harness.runner import run

    run(RunConfig(cases=(case_by_name("relu_d1_w8"),), arms=(parse_arm("ort"),), rounds=1,
                  warmup_ms=5.0, gate_policy="off", out_dir=tmp_path / "o"))
    doc = load_results(tmp_path / "o" / "results.json").to_dict()  # validates against the schema
    assert set(doc["overhead"]) == FLOOR_KEYS
    assert doc["cases"]["relu_d1_w8"]["overhead"] == doc["overhead"]


def test_validate_command_writes_both_files(tmp_path, monkeypatch):
    """The thin command: options reach the plan, files are written, the numbers printed."""
    from epbench.cli import validate_commands
    from epbench.workflows import validate as val
    from epbench.workflows import validate_plan as vplan
    from tests.test_validate import FakeRunner

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # Not this host's valgrind: the plan's instruction counting is the test's to say.
    monkeypatch.setattr(validate_commands, "default_instructions", lambda: ("valgrind", "ok"))
    fake = FakeRunner()
    plans = []
    real = val.validate

    def with_fake(plan, **kw):
        plans.append(plan)
        return real(plan, run=fake, clock=fake.clock, load_factory=fake.load, **kw)

    monkeypatch.setattr(val, "validate", with_fake)
    out = CliRunner().invoke(cli, ["validate", "--case", "relu_d1_w8", "--budget", "100",
                                   "--rounds", "10", "--processes", "2", "--sessions", "1",
                                   "--load", "none,sustained", "--out", str(tmp_path / "v"),
                                   "-q"])
    assert out.exit_code == 0, out.output
    p = plans[0]
    assert (p.budget_s, p.rounds, p.processes, p.sessions) == (100.0, 10, 2, 1)
    assert p.loads == ("none", "sustained") and p.aa_twin is True
    assert [c.name for c in p.cases] == ["relu_d1_w8"]
    assert p.paths == vplan.PATHS and p.commit_instructions == "valgrind"
    for path in vplan.PATHS:
        for load in ("none", "sustained"):
            assert f"{path}, {load} load, without profile: 0/1 A/A flagged" in out.output
    # One case is its own median: no other case's share to give.
    md = (tmp_path / "v" / "validation.md").read_text()
    assert "engine time (`relu_d1_w8`); each case's table gives\n  the change it saw." in md
    doc = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert doc["plan"]["loads"] == ["none", "sustained"] and doc["plan"]["processes"] == 2
