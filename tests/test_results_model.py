"""The typed results model: read once, checked when loaded, and the JSON kept whole."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from epbench.core.model import Results
from epbench.core.results import ResultsError, load_results, read_document
from tests.support import synthetic

FIXTURES = Path(__file__).parent / "fixtures" / "results"
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
    # The stream has no line for the run's own overhead; only results.json records it.
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


@pytest.mark.parametrize(("where", "key", "said"), [
    (lambda d: d, "cases", "the document has no 'cases' key"),
    (lambda d: d["host"], "key", "host has no 'key' key"),
    (lambda d: d["cases"]["relu_d10_w8"], "status", "case 'relu_d10_w8' has no 'status' key"),
    (lambda d: d["cases"]["relu_d10_w8"]["arms"]["ep"], "verified",
     "case 'relu_d10_w8' arm 'ep' has no 'verified' key"),
    (lambda d: d["cases"]["relu_d10_w8"]["rounds"][3], "summary_ns",
     "case 'relu_d10_w8' round 3 has no 'summary_ns' key"),
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
    with pytest.raises(ResultsError, match=r"results\.jsonl: case 'relu_d1_w8' round 0 has "
                                           r"no 'quiet' key"):
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
    with pytest.raises(ResultsError, match="case 'relu_d1_w8' rounds are not a list"):
        load_results(path)
