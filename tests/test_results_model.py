"""The typed results model: read once, checked when loaded, and the JSON kept whole."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from epbench.cases.grids import case_by_name
from epbench.core import model as model_module
from epbench.core.model import (
    Arm,
    Block,
    Case,
    CaseArm,
    Config,
    GateConfig,
    Host,
    Process,
    Record,
    Results,
    Round,
    Twin,
    json_path,
)
from epbench.core.results import ResultsError, load_results, migrate_to_2, read_document
from epbench.harness import worker_process
from epbench.reports.comparison import Side
from tests.support import synthetic

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "results"
# base, pr, same_run: schema 1 (migrated on load); run_v2: a real `epbench run` (relu_d1_w8,
# ort and engine, 2 processes), its document and its stream.
RESULTS_FIXTURES = ["base.json", "pr.json", "same_run.json", "run_v2.json", "run_v2.jsonl"]


def _synthetic() -> dict:
    return synthetic.results_doc({"relu_d1_w8": {"ort": 1000.0, "ep": 900.0},
                                  "relu_d10_w8": {"ort": 3000.0, "ep": 2000.0}},
                                 rounds=6, processes=2, twin={"of": "ep", "key": "ep"})


@pytest.mark.parametrize("name", RESULTS_FIXTURES)
def test_every_fixture_round_trips_key_for_key(name) -> None:
    doc, _ = read_document(FIXTURES / name)  # migrated when older
    expected = copy.deepcopy(doc)
    model = Results.from_dict(doc, source=name)
    assert model.to_dict() == expected
    # And through the serializer: the bytes a writer would put on disk are the same.
    assert json.dumps(model.to_dict(), sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert load_results(FIXTURES / name) == model


def test_a_run_reads_the_same_from_its_stream_as_from_its_document() -> None:
    stream, whole = load_results(FIXTURES / "run_v2.jsonl"), load_results(FIXTURES / "run_v2.json")
    assert stream.cases == whole.cases and stream.arms == whole.arms
    # run_v2.jsonl predates the end line carrying the run's own overhead: an older stream
    # still loads, its overhead null (tests/test_history_store.py runs a current one).
    assert stream.overhead is None and whole.overhead is not None


def test_a_document_as_the_runner_writes_it_round_trips(tmp_path) -> None:
    doc = _synthetic()
    doc["cases"]["relu_d1_w8"]["rerun_errors"] = ["crashed: signal 11"]
    doc["cases"]["relu_d1_w8"]["reruns"] = 1
    doc["cases"]["relu_d1_w8"]["instructions"] = {"method": "callgrind"}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    model = load_results(tmp_path)
    assert model.to_dict() == doc
    case = model.cases["relu_d1_w8"]
    assert (case.reruns, case.rerun_errors, case.instructions) == (
        1, ["crashed: signal 11"], {"method": "callgrind"})
    assert model.twin is not None and (model.twin.of, model.twin.key) == ("ep", "ep")
    assert [r.process for r in case.rounds] == [r["process"] for r in
                                                doc["cases"]["relu_d1_w8"]["rounds"]]


def test_keys_this_version_does_not_know_survive_and_absent_ones_stay_absent() -> None:
    doc = _synthetic()
    doc["written_by"] = "epbench 9.9"
    doc["config"]["future_option"] = {"a": 1}
    case = doc["cases"]["relu_d1_w8"]
    case["arms"]["ep"]["new_counter_kind"] = [1, 2]
    case["rounds"][0]["summary_ns"]["ep"]["p99"] = 5.0
    del case["lost_rounds"], doc["twin"]
    model = Results.from_dict(copy.deepcopy(doc))
    assert model.to_dict() == doc
    assert model.extra == {"written_by": "epbench 9.9"}
    assert model.twin is None and "twin" not in model.to_dict()
    assert model.cases["relu_d1_w8"].lost_rounds == 0  # the reader's default


def test_a_replaced_record_writes_the_keys_it_was_given_and_keeps_the_rest() -> None:
    doc = _synthetic()
    case = doc["cases"]["relu_d1_w8"]
    del case["lost_rounds"], doc["twin"]
    model = Results.from_dict(copy.deepcopy(doc))
    changed = model.replaced(
        interrupted=True,
        twin=Twin.from_dict({"of": "ep", "key": "ep_aa"}),
        cases={**model.cases, "relu_d1_w8": model.cases["relu_d1_w8"].replaced(lost_rounds=2)})
    out = changed.to_dict()
    # A key the document lacked is written once given; the others are as they were.
    assert out["twin"] == {"of": "ep", "key": "ep_aa"}
    assert out["cases"]["relu_d1_w8"]["lost_rounds"] == 2 and out["interrupted"] is True
    assert {k: v for k, v in out.items() if k not in ("twin", "cases", "interrupted")} == {
        k: v for k, v in doc.items() if k not in ("cases", "interrupted")}
    # The record it came from is unchanged, absent keys still absent.
    assert model.to_dict() == doc


@pytest.mark.parametrize(("where", "key", "said"), [
    (lambda d: d, "cases", "cases: missing"),
    (lambda d: d["host"], "key", "host.key: missing"),
    (lambda d: d["cases"]["relu_d10_w8"], "status", "cases.relu_d10_w8.status: missing"),
    (lambda d: d["cases"]["relu_d10_w8"]["arms"]["ep"], "verified",
     "cases.relu_d10_w8.arms.ep.verified: missing"),
    (lambda d: d["cases"]["relu_d10_w8"]["rounds"][3], "summary_ns",
     "cases.relu_d10_w8.rounds[3].summary_ns: missing"),
])
def test_a_renamed_key_fails_when_the_file_is_loaded_naming_key_and_file(
        tmp_path, where, key, said) -> None:
    doc = _synthetic()
    record = where(doc)
    record[key + "_renamed"] = record.pop(key)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError) as err:
        load_results(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {said};"), message
    assert "\n" not in message and "re-run it" in message


def test_a_results_stream_is_checked_like_the_document(tmp_path) -> None:
    doc = _synthetic()
    del doc["cases"]["relu_d1_w8"]["rounds"][0]["quiet"]
    header = {k: v for k, v in doc.items() if k != "cases"}
    lines = [{"type": "header", **header}]
    for name, case in doc["cases"].items():
        lines.append({"type": "case", "name": name, "result": case})
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(ResultsError, match=r"results\.jsonl: cases\.relu_d1_w8\.rounds\[0\]"
                                           r"\.quiet: missing;"):
        load_results(path)


def test_a_newer_schema_is_refused_in_one_line_and_an_older_one_migrated(tmp_path) -> None:
    doc = _synthetic()
    doc["schema"] = "epbench.results/3"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError) as err:
        load_results(path)
    assert "newer than this epbench understands" in str(err.value)
    assert "upgrade epbench" in str(err.value) and "\n" not in str(err.value)
    migrated = load_results(FIXTURES / "base.json")  # schema 1 on disk
    assert migrated.schema == "epbench.results/2"
    assert all(r.summary_ns for c in migrated.cases.values() for r in c.rounds)


def test_a_value_of_the_wrong_shape_is_refused_at_load(tmp_path) -> None:
    doc = _synthetic()
    doc["cases"]["relu_d1_w8"]["rounds"] = {"0": {}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=r"cases\.relu_d1_w8\.rounds: an object is not an "
                                           r"array;"):
        load_results(path)


# Where each record of the model sits in a copy of the real run_v2.json (relu_d1_w8, arms
# ort and engine, 2 processes of 4 rounds; a twin is added, the run has none), and what
# the loader calls that place. A record the table lacks fails the test below it.
def _places(doc: dict) -> dict[type[Record], tuple[dict, tuple]]:
    doc["twin"] = {"of": "engine", "key": "engine_twin"}
    case = doc["cases"]["relu_d1_w8"]
    return {
        Results: (doc, ()),
        Host: (doc["host"], ("host",)),
        Config: (doc["config"], ("config",)),
        GateConfig: (doc["config"]["gate"], ("config", "gate")),
        Arm: (doc["arms"]["engine"], ("arms", "engine")),
        Twin: (doc["twin"], ("twin",)),
        Case: (case, ("cases", "relu_d1_w8")),
        CaseArm: (case["arms"]["engine"], ("cases", "relu_d1_w8", "arms", "engine")),
        Process: (case["processes"][1], ("cases", "relu_d1_w8", "processes", 1)),
        Round: (case["rounds"][5], ("cases", "relu_d1_w8", "rounds", 5)),
        Block: (case["rounds"][5]["summary_ns"]["engine"],
                ("cases", "relu_d1_w8", "rounds", 5, "summary_ns", "engine")),
    }


def _keys_where(predicate) -> list[tuple[type[Record], str]]:
    """(record, key) of every model field whose metadata satisfies `predicate`."""
    places = _places(json.loads((FIXTURES / "run_v2.json").read_text()))
    assert set(places) == set(Record.__subclasses__()), "a record without a place"
    return [(cls, f.metadata["key"]) for cls in places for f in dataclasses.fields(cls)
            if "key" in f.metadata and predicate(f.metadata)]


REQUIRED = _keys_where(lambda meta: meta["required"])
NOT_NULL = _keys_where(lambda meta: not meta["null"])


def test_the_required_and_never_null_keys_are_the_ones_readers_rely_on() -> None:
    # Written out, so a key made optional (or nullable) fails here, not silently below.
    named = lambda pairs: {f"{cls.__name__}.{key}" for cls, key in pairs}  # noqa: E731
    assert named(REQUIRED) == {
        "Results.schema", "Results.host", "Results.config", "Results.arms", "Results.cases",
        "Host.key", "Config.rounds", "Arm.key", "Arm.kind", "Arm.spec", "Twin.of", "Twin.key",
        "Case.spec", "Case.status", "Case.arms", "Case.rounds",
        "CaseArm.verified", "CaseArm.nodes_executed", "CaseArm.nodes_by_ep",
        "CaseArm.counters_per_run",
        "Process.index", "Process.status", "Process.rounds", "Process.planned",
        "Round.index", "Round.quiet", "Round.summary_ns",
    }
    assert named(NOT_NULL) == {
        "Results.host", "Results.config", "Results.arms", "Results.cases", "Results.control",
        "Config.gate",
        "Config.block_slices",
        "Case.spec", "Case.arms", "Case.rounds", "Case.processes",
        "Round.summary_ns", "Round.order", "Round.gate", "Round.interference",
        "Round.process", "Round.session",
    }


def _damaged(tmp_path: Path, cls: type[Record], damage) -> tuple[Path, str]:
    doc = json.loads((FIXTURES / "run_v2.json").read_text())
    record, where = _places(doc)[cls]
    damage(record)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    return path, where


def _one_line_error(path: Path, read=load_results) -> str:
    with pytest.raises(ResultsError) as err:
        read(path)
    message = str(err.value)
    assert "\n" not in message and "re-run it with `epbench run`" in message, message
    return message


@pytest.mark.parametrize(("cls", "key"), REQUIRED, ids=lambda x: getattr(x, "__name__", x))
def test_a_missing_required_key_is_one_line_naming_file_place_and_key(
        tmp_path, cls, key) -> None:
    path, where = _damaged(tmp_path, cls, lambda record: record.pop(key))
    read = load_results
    if (cls, key) == (Results, "schema"):
        # The loader checks the version first: a file without one is a foreign file.
        with pytest.raises(ResultsError, match="is not an epbench results file"):
            load_results(path)
        read = lambda p: Results.from_dict(json.loads(p.read_text()), source=str(p))  # noqa: E731
    assert _one_line_error(path, read).startswith(f"{path}: {json_path((*where, key))}: missing;")


@pytest.mark.parametrize(("cls", "key"), NOT_NULL, ids=lambda x: getattr(x, "__name__", x))
def test_a_null_where_readers_need_a_value_is_refused_at_load(tmp_path, cls, key) -> None:
    path, where = _damaged(tmp_path, cls, lambda record: record.__setitem__(key, None))
    assert _one_line_error(path).startswith(f"{path}: {json_path((*where, key))}: null is not ")


def test_nulls_the_writers_do_write_still_load(tmp_path) -> None:
    """What a run legitimately leaves null: a case that never started (the runner's
    empty_case), an interrupted run's stream, a schema-1 file after migration."""
    doc = json.loads((FIXTURES / "run_v2.json").read_text())
    doc["cases"]["never_started"] = {
        **worker_process.empty_case(case_by_name("relu_d10_w8")), "status": "interrupted"}
    doc["interrupted"] = True
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert load_results(tmp_path).cases["never_started"].rounds == []
    for name in RESULTS_FIXTURES:
        load_results(FIXTURES / name)


def test_migrating_a_schema_1_document_gives_every_case_its_lost_rounds() -> None:
    old = json.loads((FIXTURES / "base.json").read_text())
    assert old["schema"] == "epbench.results/1"
    assert all("lost_rounds" not in case for case in old["cases"].values())
    migrated = migrate_to_2(old)  # the raw document, before the model's defaults
    assert {name: case["lost_rounds"] for name, case in migrated["cases"].items()} == {
        name: 0 for name in migrated["cases"]}


def test_a_comparison_side_takes_the_model_not_a_dict() -> None:
    doc = _synthetic()
    with pytest.raises(TypeError, match="Side takes a Results .* not dict"):
        Side("base", doc, "ep")
    assert Side("base", Results.from_dict(doc), "ep").control == "ort"


def test_records_are_frozen_at_the_top_level_and_share_the_documents_nested_values() -> None:
    """What the docs promise, no more: a record's fields cannot be reassigned, but the
    nested mappings and lists are the source document's own (not to be modified)."""
    doc = _synthetic()
    model = Results.from_dict(doc)
    case = model.cases["relu_d1_w8"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        case.status = "failed"  # type: ignore[misc]
    assert case.spec is doc["cases"]["relu_d1_w8"]["spec"]
    assert case.rounds[0].gate is doc["cases"]["relu_d1_w8"]["rounds"][0]["gate"]
    for text in (model_module.__doc__, (ROOT / "docs" / "design.md").read_text()):
        flat = " ".join(text.split())
        assert "frozen at the top level only" in flat and "not to be modified" in flat
        assert "immutable" not in flat


def test_changed_counters_hides_only_a_counter_added_at_zero() -> None:
    from epbench.core.model import changed_counters

    older = {"runs": 1.0, "ort_api_calls": 4.0}         # a build before injected_delay_ns
    newer = {**older, "injected_delay_ns": 0.0}
    assert changed_counters(older, newer) == {}
    assert changed_counters(older, {**newer, "injected_delay_ns": 17.0}) == {
        "injected_delay_ns": (None, 17.0)}
    assert changed_counters(older, {**newer, "ort_api_calls": 5.0}) == {
        "ort_api_calls": (4.0, 5.0)}
    # A counter a build stopped reporting is a change, even one that was 0.
    assert changed_counters(newer, older) == {"injected_delay_ns": (0.0, None)}
    # A side without the probe (ORT's CPU EP has `instructions` at most) differs in every
    # counter the other reports, zeros too.
    for no_probe in (None, {"instructions": 9.0}):
        assert changed_counters(no_probe, newer)["injected_delay_ns"] == (None, 0.0)
