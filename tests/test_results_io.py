"""Results I/O: atomic writes, the JSON-lines stream as a crash log, schema versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epbench.core.results import (
    OUTPUT_FILES,
    SCHEMA,
    JsonlWriter,
    ResultsError,
    atomic_write_text,
    load_results,
    open_output,
    prepare_out_dir,
    read_document,
)
from epbench.harness.runner import SAMPLES_FILE


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
    # The raw document: these minimal records are not whole cases for the typed model.
    doc, _ = read_document(path)
    assert list(doc["cases"]) == ["a", "b"]
    assert doc["cases"]["b"]["status"] == "crashed"
    assert doc["interrupted"] is True  # no final document was written


def test_directory_prefers_the_final_document(tmp_path) -> None:
    (tmp_path / "results.jsonl").write_text(json.dumps(_header()) + "\n")
    (tmp_path / "results.json").write_text(json.dumps({"schema": SCHEMA, "cases": {"x": {}}}))
    doc, found = read_document(tmp_path)
    assert list(doc["cases"]) == ["x"] and found == tmp_path / "results.json"


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
    assert read_document(path)[0]["interrupted"] is True  # no end line: cut short
    with open(path, "a") as fh:
        fh.write(json.dumps({"type": "end", "interrupted": False}) + "\n")
    assert read_document(path)[0]["interrupted"] is False


def test_a_schema_1_file_migrates_to_processes_and_summaries():
    import json as _json

    from epbench.core.numbers import block_summary
    from epbench.core.results import load_results

    path = Path(__file__).parent / "fixtures" / "results" / "base.json"
    old = _json.loads(path.read_text())
    assert old["schema"] == "epbench.results/1"
    doc = load_results(path).to_dict()
    assert doc["schema"] == "epbench.results/2"
    assert doc["config"]["processes"] == 1 and doc["twin"] is None
    assert "floor" not in doc and "overhead" in doc
    for name, case in doc["cases"].items():
        before = old["cases"][name]
        assert case["lost_rounds"] == 0
        assert case["processes"][0]["rounds"] == len(before["rounds"])
        for new_round, old_round in zip(case["rounds"], before["rounds"], strict=True):
            assert (new_round["process"], new_round["session"]) == (0, 0)
            assert "samples_ns" not in new_round
            assert new_round["summary_ns"] == {
                arm: block_summary(s) for arm, s in old_round["samples_ns"].items()}


@pytest.mark.parametrize("option", ["--processes", "--sessions"])
def test_zero_processes_or_sessions_is_one_clear_line(option):
    from click.testing import CliRunner

    from epbench.cli.main import cli

    result = CliRunner().invoke(cli, ["run", "--case", "relu_d1_w8", option, "0"])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert errors == [f"Error: Invalid value for '{option}': 0 is not in the range x>=1."]


def test_a_twin_of_an_arm_the_run_lacks_is_refused_before_anything_runs(tmp_path):
    from epbench.cases.grids import case_by_name
    from epbench.core.errors import ArmError
    from epbench.harness.arms import parse_arm
    from epbench.harness.run_config import RunConfig
    from epbench.harness.runner import run

    config = RunConfig(cases=(case_by_name("relu_d1_w8"),), arms=(parse_arm("engine"),),
                       aa_twin="plugin:other", out_dir=tmp_path / "out")
    with pytest.raises(ArmError, match=r"--aa-twin 'plugin:other' names no arm of this run"):
        run(config)
    assert not (tmp_path / "out").exists()


def test_a_library_that_cannot_be_copied_for_the_twin_says_so(tmp_path):
    from epbench.core.errors import ArmError
    from epbench.harness.arms import copy_library

    with pytest.raises(ArmError, match=r"cannot copy .* for the A/A twin \(.*\); point TMPDIR "
                       r"at a folder you can write to, or run without the A/A twin "
                       r"\(--no-aa-twin\)$"):
        copy_library(str(tmp_path / "missing.so"), tmp_path)


# ------------------------------------------------------------------ symbolic links in --out


@pytest.mark.parametrize("name", OUTPUT_FILES)
def test_run_refuses_a_symlink_it_did_not_make_in_its_out_folder(tmp_path, name) -> None:
    """A link planted in --out (dangling, or at someone's file) is refused before the run
    writes anything, --overwrite or not: the run never writes, or deletes, through it."""
    from click.testing import CliRunner

    from epbench.cli.main import cli

    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / name).symlink_to(outside / "stolen")  # dangling: the run would create it
    (outside / "kept").write_text("theirs")
    for target, extra in ((outside / "stolen", []), (outside / "kept", ["--overwrite"])):
        (out / name).unlink()
        (out / name).symlink_to(target)
        result = CliRunner().invoke(cli, ["run", "--case", "relu_d1_w8", "--arm", "ort",
                                          "--out", str(out), "--quiet", *extra])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert result.output.splitlines() == [
            f"Error: {out / name} is a symbolic link, which epbench did not make (it writes "
            "only files of its own into --out); remove it or choose another --out"]
        assert sorted(p.name for p in out.iterdir()) == [name] and (out / name).is_symlink()
    assert sorted(p.name for p in outside.iterdir()) == ["kept"]
    assert (outside / "kept").read_text() == "theirs"


@pytest.mark.parametrize(("opener", "name"), [
    (lambda path: JsonlWriter(path), "results.jsonl"),
    (lambda path: open_output(path, "wb"), SAMPLES_FILE),
])
def test_a_symlink_planted_after_the_folder_was_checked_is_refused(tmp_path, opener,
                                                                   name) -> None:
    prepare_out_dir(tmp_path / "out")
    (tmp_path / "out" / name).symlink_to(tmp_path / "stolen")
    with pytest.raises(ResultsError, match=r"is a symbolic link, which epbench did not make"):
        opener(tmp_path / "out" / name)
    assert not (tmp_path / "stolen").exists()


def test_the_runner_opens_its_streams_without_following_links(tmp_path, monkeypatch) -> None:
    """Links planted between the check of --out and the first write: the run stops
    before measuring, and nothing is written through them."""
    from epbench.cases.grids import case_by_name
    from epbench.harness import run_config, runner
    from epbench.harness.arms import parse_arm

    out = tmp_path / "out"
    planted: list[str] = []

    def prepare_then_plant(out_dir, overwrite=False):
        prepare_out_dir(out_dir, overwrite)
        for name in planted:
            (out_dir / name).symlink_to(tmp_path / f"stolen-{name}")

    monkeypatch.setattr(runner, "prepare_out_dir", prepare_then_plant)
    config = run_config.RunConfig(cases=(case_by_name("relu_d1_w8"),), arms=(parse_arm("ort"),),
                                  rounds=2, keep_samples=True, gate_policy="off", out_dir=out,
                                  overwrite=True)
    for name in ("results.jsonl", SAMPLES_FILE):
        planted[:] = [name]
        with pytest.raises(ResultsError, match=f"{name} is a symbolic link"):
            runner.run(config)
        assert not list(tmp_path.glob("stolen-*"))
        (out / name).unlink()
