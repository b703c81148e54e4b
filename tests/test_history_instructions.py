"""Instructions per Run as a history series, on both backends (SQLite and a real
PostgreSQL): stored with how they were counted, migrated into an old store, and
`history detect` finding the exact commit that moved a count, with no false point."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.harness.instructions import RULES
from epbench.reports.defaults import HISTORY_INSTRUCTIONS_CHANGE
from epbench.reports.history.changes import detect
from epbench.reports.history.instruction_series import (
    EXACT_METHODS,
    instruction_changes,
    instruction_series,
)
from epbench.reports.history.page import load_history
from epbench.reports.history.store import SCHEMA_VERSION, HistoryStore, run_record
from tests.support import synthetic
from tests.support.synthetic import as_results

CASE, ARM, HOST = "relu_d10_w8", "engine", "host0001"
BASE_COUNT = 13009.0
COUNTED = {"method": "valgrind", "rule": 2, "runs": 15, "error": None}


def counted_doc(seed: int, instructions: float | None, *,
                counted: dict | None = COUNTED) -> dict:
    """A run of one commit (seed) whose engine arm counted `instructions` per Run."""
    counters = None if instructions is None else {
        CASE: {"engine": {"instructions": instructions}, "ort": {"instructions": 38832.0}}}
    doc = synthetic.results_doc({CASE: {"ort": 400.0, "engine": 150.0}}, rounds=8, seed=seed,
                                host_key=HOST, counters=counters)
    if instructions is not None:
        doc["cases"][CASE]["instructions"] = dict(counted) if counted else None
    doc["host"]["git_commit"] = f"{seed:040x}"
    doc["created"] = f"2026-03-01T{seed // 3600:02d}:{seed // 60 % 60:02d}:{seed % 60:02d}Z"
    return doc


def add_all(db_url: str, docs: list[dict]) -> None:
    with HistoryStore.open(db_url) as store:
        for doc in docs:
            store.add(run_record(as_results(doc), source="test"))


def test_a_count_is_stored_with_the_way_it_was_counted(db_url):
    add_all(db_url, [counted_doc(1, BASE_COUNT), counted_doc(2, None)])
    with HistoryStore.open(db_url) as store:
        rows = store.points(CASE, ARM, HOST)
    assert [(r.instructions, r.instructions_method) for r in rows] == [
        (BASE_COUNT, "valgrind/2"), (None, None)]


def test_an_old_store_is_migrated_keeping_its_counts_apart_from_new_ones(db_url):
    """Counts stored before schema 3 have no method: they stay, and a series of the
    current way of counting does not join them (no false step at the upgrade)."""
    store = HistoryStore.open(db_url, migrate=False)
    store._migrate(target=2)
    store.close()
    with HistoryStore.open(db_url, migrate=False) as old:
        assert old.schema_version() == 2
        # What an epbench of schema 2 wrote: a count of the old rule, no method column.
        record = run_record(as_results(counted_doc(1, 18304.0)), source="old")
        old._db.execute(
            "INSERT INTO runs (run_key, commit_sha, created, added, machine, results_schema) "
            "VALUES (?, ?, ?, ?, ?, ?)", (record.run_key, record.commit, record.created,
                                          record.created, record.machine,
                                          record.results_schema))
        (run_id,), = old._db.execute("SELECT id FROM runs")
        old._db.execute(
            "INSERT INTO points (run_id, case_name, arm, status, ratio, rounds, "
            "round_medians_ns, instructions) VALUES (?, ?, ?, 'ok', 0.4, 0, '[]', ?)",
            (run_id, CASE, ARM, 18304.0))
    result = CliRunner().invoke(cli, ["history", "migrate", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert f"from schema version 2 to {SCHEMA_VERSION}" in result.output
    add_all(db_url, [counted_doc(2, BASE_COUNT), counted_doc(3, BASE_COUNT)])
    with HistoryStore.open(db_url) as store:
        assert store.schema_version() == SCHEMA_VERSION == 3
        rows = store.points(CASE, ARM, HOST)
        counted = instruction_series(store, CASE, ARM, HOST)
    assert [(r.instructions, r.instructions_method) for r in rows] == [
        (18304.0, None), (BASE_COUNT, "valgrind/2"), (BASE_COUNT, "valgrind/2")]
    assert [p.commit for p in counted] == [f"{2:040x}", f"{3:040x}"]
    assert instruction_changes(counted) == []


def test_a_run_without_a_rule_is_counted_under_rule_one():
    from epbench.reports.history.store import instructions_method

    assert instructions_method({"method": "valgrind", "runs": 15, "error": None}) == "valgrind/1"
    assert instructions_method({"method": "perf", "rule": 1, "error": None}) == "perf/1"
    assert instructions_method({"method": "valgrind", "error": "no valgrind"}) is None
    assert instructions_method(None) is None


def test_detect_finds_a_half_percent_step_at_its_commit_and_nothing_on_100_unchanged(db_url):
    """100 unchanged commits, whose counts wander within what two copies of one library
    differ by (9 instructions: 0.07 ‰ of 13,009), then a +0.5 % step at commit 100."""
    wander = [0.0, 9.0, 2.0, 0.0, 1.0]
    docs = [counted_doc(seed, BASE_COUNT + wander[seed % len(wander)]) for seed in range(100)]
    step = BASE_COUNT * 1.005
    docs += [counted_doc(seed, step + wander[seed % len(wander)]) for seed in range(100, 106)]
    add_all(db_url, docs)
    with HistoryStore.open(db_url) as store:
        found = detect(store, cases=(CASE,), arms=(ARM,))
    assert found.instruction_series == 1
    (finding,) = found.instruction_findings
    assert (finding.before, finding.after, finding.index) == (f"{99:040x}", f"{100:040x}", 100)
    assert finding.regression and finding.change == pytest.approx(step / BASE_COUNT - 1.0)
    result = CliRunner().invoke(cli, ["history", "detect", "--db", db_url, "--case", CASE,
                                      "--arm", ARM, "--format", "json", "--fail-on", "any"])
    assert result.exit_code == 5, result.output
    doc = json.loads(result.output)
    assert [(f["after"], f["direction"]) for f in doc["instruction_findings"]] == [
        (f"{100:040x}", "regression")]


def test_a_move_of_just_over_the_threshold_is_found_and_one_just_under_is_not():
    from epbench.reports.history.instruction_series import InstructionPoint

    def series(*counts: float) -> list[InstructionPoint]:
        return [InstructionPoint(f"c{i}", "t", c, 1, "valgrind/2") for i, c in enumerate(counts)]

    over, under = 1.0 + HISTORY_INSTRUCTIONS_CHANGE * 1.01, 1.0 + HISTORY_INSTRUCTIONS_CHANGE * 0.99
    assert [f.after for f in instruction_changes(series(1e4, 1e4, 1e4 * over, 1e4 * over))] == [
        "c2"]
    assert instruction_changes(series(1e4, 1e4 * under, 1e4, 1e4 * under)) == []
    # A slow drift is measured from the level held, so it is found where it adds up.
    drift = [1e4 * (1.0 + HISTORY_INSTRUCTIONS_CHANGE * 0.4 * i) for i in range(5)]
    assert [f.after for f in instruction_changes(series(*drift))] == ["c3"]


def test_the_exact_way_of_counting_is_the_harness_rule_that_leaves_the_interpreter_out():
    assert {f"valgrind/{RULES['valgrind']}"} == EXACT_METHODS


PERF = {"method": "perf", "rule": RULES["perf"], "runs": 21, "error": None}


def test_perf_counts_are_shown_but_never_tested_for_change_points(db_url):
    """perf counts carry the interpreter's noise (about 1 %): a 0.5 % move is noise."""
    wobble = [0.0, 0.005, -0.004, 0.006, -0.005, 0.003]
    add_all(db_url, [counted_doc(seed, BASE_COUNT * (1.0 + w), counted=PERF)
                     for seed, w in enumerate(wobble)])
    with HistoryStore.open(db_url) as store:
        counted = instruction_series(store, CASE, ARM, HOST)
        found = detect(store, cases=(CASE,), arms=(ARM,))
    assert [p.method for p in counted] == ["perf/1"] * 6
    assert instruction_changes(counted) == []
    assert found.instruction_findings == [] and found.instruction_series == 0
    result = CliRunner().invoke(cli, ["history", "detect", "--db", db_url, "--case", CASE,
                                      "--arm", ARM, "--fail-on", "any"])
    assert result.exit_code == 0, result.output
    assert "instruction change" not in result.output


def test_the_history_page_draws_the_counts_of_the_latest_way_of_counting_only(db_url):
    """Two perf runs, then two valgrind runs: the page's instructions are valgrind's."""
    add_all(db_url, [counted_doc(0, 20000.0, counted=PERF), counted_doc(1, 20100.0,
                                                                        counted=PERF),
                     counted_doc(2, BASE_COUNT), counted_doc(3, BASE_COUNT + 65.0)])
    ((series, _),) = [entry for entry in load_history(db_url) if entry[0].case == CASE
                      and entry[0].arm.startswith(ARM)]
    assert series.instructions == [None, None, BASE_COUNT, BASE_COUNT + 65.0]


def test_show_puts_time_and_instructions_side_by_side(db_url):
    add_all(db_url, [counted_doc(seed, BASE_COUNT if seed < 3 else 13100.0)
                     for seed in range(5)])
    result = CliRunner().invoke(cli, ["history", "show", "--db", db_url, "--case", CASE,
                                      "--arm", ARM])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("ratio to the in-run ORT control, and instructions per Run")
    assert "13,009 instr" in lines[1] and "13,100 instr" in lines[4]
    assert lines[4].endswith(f"<- instructions {(13100.0 / BASE_COUNT - 1) * 100:+.2f} %")
    assert sum("<- instructions" in line for line in lines) == 1
    result = CliRunner().invoke(cli, ["history", "show", "--db", db_url, "--case", CASE,
                                      "--arm", ARM, "--format", "json"])
    doc = json.loads(result.output)
    assert [p["instructions"] for p in doc["points"]] == [BASE_COUNT] * 3 + [13100.0] * 2
    assert [f["after"] for f in doc["instruction_findings"]] == [f"{3:040x}"]
