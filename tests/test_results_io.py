"""Results I/O: atomic writes, the JSON-lines stream as a crash log, schema versions."""

from __future__ import annotations

import json

import pytest

from epbench.core.results import (
    SCHEMA,
    JsonlWriter,
    ResultsError,
    atomic_write_text,
    load_results,
    prepare_out_dir,
)


def _header() -> dict:
    return {"type": "header", "schema": SCHEMA, "config": {"rounds": 2}, "arms": {}}


def test_jsonl_stream_rebuilds_the_document_even_when_cut_mid_line(tmp_path) -> None:
    path = tmp_path / "results.jsonl"
    writer = JsonlWriter(path)
    writer.write(_header())
    writer.write({"type": "case", "name": "a", "result": {"status": "ok"}})
    writer.write({"type": "case", "name": "b", "result": {"status": "crashed"}})
    writer.close()
    with open(path, "a") as fh:
        fh.write('{"type": "case", "name": "c", "res')  # a kill mid-write
    doc = load_results(path)
    assert list(doc["cases"]) == ["a", "b"]
    assert doc["cases"]["b"]["status"] == "crashed"
    assert doc["interrupted"] is True  # no final document was written


def test_directory_prefers_the_final_document(tmp_path) -> None:
    (tmp_path / "results.jsonl").write_text(json.dumps(_header()) + "\n")
    (tmp_path / "results.json").write_text(json.dumps({"schema": SCHEMA, "cases": {"x": {}}}))
    assert list(load_results(tmp_path)["cases"]) == ["x"]


def test_newer_schema_is_refused_with_a_remedy(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": "epbench.results/99"}))
    with pytest.raises(ResultsError, match="upgrade epbench"):
        load_results(path)


@pytest.mark.parametrize("content", ['{"schema": "pyperf/1"}', "[1, 2]", "not json"])
def test_foreign_files_are_refused(tmp_path, content) -> None:
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(ResultsError):
        load_results(path)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ResultsError, match="no results file"):
        load_results(tmp_path / "nope.json")


def test_atomic_write_leaves_no_partial_file_on_failure(tmp_path, monkeypatch) -> None:
    target = tmp_path / "results.json"
    target.write_text("old")

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("epbench.core.results.os.replace", failing_replace)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_out_dir_is_never_silently_overwritten(tmp_path) -> None:
    prepare_out_dir(tmp_path)
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(ResultsError, match="--overwrite"):
        prepare_out_dir(tmp_path)
    prepare_out_dir(tmp_path, overwrite=True)
    assert not (tmp_path / "results.json").exists()


def test_unwritable_out_dir(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ResultsError, match="choose another --out"):
        prepare_out_dir(blocker / "sub")


def test_each_jsonl_record_is_on_disk_before_the_writer_closes(tmp_path) -> None:
    path = tmp_path / "results.jsonl"
    writer = JsonlWriter(path)
    writer.write(_header())
    writer.write({"type": "case", "name": "a", "result": {}})
    assert len(path.read_text().splitlines()) == 2  # read through another handle
    writer.close()


def test_end_line_decides_whether_the_stream_was_finished(tmp_path) -> None:
    path = tmp_path / "results.jsonl"
    lines = [_header(), {"type": "case", "name": "a", "result": {}}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert load_results(path)["interrupted"] is True  # no end line: cut short
    with open(path, "a") as fh:
        fh.write(json.dumps({"type": "end", "interrupted": False}) + "\n")
    assert load_results(path)["interrupted"] is False
