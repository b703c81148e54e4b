"""Hostile results files: each is refused at load, through every command that reads one,
in one line naming the file and the key, never with a traceback (issue 45)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.errors import EXIT_USER_ERROR
from epbench.core.model import REMEDY, Results
from epbench.core.results import MAX_DEPTH, ResultsError, load_results, parse_json
from epbench.reports.summary import family_of

FIXTURES = Path(__file__).parent / "fixtures" / "results"
CASE = "relu_d1_w8"  # run_v2.json: a real run of this case, arms ort and engine
BLOCK = f"cases.{CASE}.rounds[3].summary_ns.ort"

# Every command that reads a results file, as the arguments that make it read `path`.
COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "summary": lambda path, tmp: ["summary", str(path)],
    "compare": lambda path, tmp: ["compare", str(path), "--base", "ort", "--pr", "engine"],
    "report --html": lambda path, tmp: ["report", str(path), "--html", str(tmp / "html")],
    "history add": lambda path, tmp: ["history", "add", str(path), "--db",
                                      str(tmp / "history.sqlite")],
    "export": lambda path, tmp: ["export", str(path), "--out", str(tmp / "export.json")],
}


def _v2() -> dict:
    return json.loads((FIXTURES / "run_v2.json").read_text())


def _v1() -> dict:
    return json.loads((FIXTURES / "base.json").read_text())


def _block(doc: dict) -> dict:
    return doc["cases"][CASE]["rounds"][3]["summary_ns"]["ort"]


def _refused(command: str, path: Path, tmp_path: Path, said: str) -> None:
    """`command` on `path` exits 1 with exactly `Error: PATH: said; REMEDY`, nothing else."""
    result = CliRunner().invoke(cli, COMMANDS[command](path, tmp_path))
    assert result.exit_code == EXIT_USER_ERROR, (result.output, result.exception)
    assert "Traceback" not in result.output
    assert result.output.splitlines() == [f"Error: {path}: {said}; {REMEDY}"], result.output


def _written(tmp_path: Path, doc_or_text: dict | str, name: str = "results.json") -> Path:
    path = tmp_path / name
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
    path.write_text(text)
    return path


# ------------------------------------------------------------------ the findings


@pytest.mark.parametrize("command", COMMANDS)
def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path, command) -> None:
    path = _written(tmp_path, "[" * 100_000 + "]" * 100_000)
    _refused(command, path, tmp_path, "[0]" * MAX_DEPTH + ": nested deeper than the "
             f"{MAX_DEPTH} levels a results file has")


def test_nesting_in_a_key_the_schema_does_not_know_names_that_key(tmp_path) -> None:
    doc = _v2()
    doc["cases"][CASE]["spec"]["dims"] = [[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]
    path = _written(tmp_path, doc)
    _refused("summary", path, tmp_path, f"cases.{CASE}.spec.dims" + "[0]" * 12
             + f": nested deeper than the {MAX_DEPTH} levels a results file has")


def test_nesting_up_to_the_limit_loads_and_brackets_inside_strings_do_not_count(
        tmp_path) -> None:
    doc = _v2()
    # 16 levels in all: the document, cases, the case, spec, then 12 arrays.
    doc["cases"][CASE]["spec"]["dims"] = [[[[[[[[[[[["deep"]]]]]]]]]]]]
    # Brackets and escaped quotes inside strings are text, not nesting, either way round.
    doc["host"]["note"] = "]]]]]]]]]] \\\" [[[[[[[[[[[[[[[[[[[[ {{{{{{{{{{{{{{{{{{{{{{"
    doc["host"]["]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"] = "\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\"
    load_results(_written(tmp_path, doc))
    # ... and a string full of closing brackets does not hide nesting after it.
    doc["cases"][CASE]["spec"]["dims"] = [[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]
    with pytest.raises(ResultsError, match=f"cases.{CASE}.spec.dims" + r"(\[0\]){12}: nested"):
        load_results(_written(tmp_path, doc))


@pytest.mark.parametrize("value", [[], None])
@pytest.mark.parametrize("fixture", [_v1, _v2], ids=["schema 1", "schema 2"])
def test_cases_of_the_wrong_type_are_one_line(tmp_path, fixture, value) -> None:
    doc = fixture()
    doc["cases"] = value
    path = _written(tmp_path, doc)
    _refused("summary", path, tmp_path,
             f"cases: {'an array' if value == [] else 'null'} is not an object")


@pytest.mark.parametrize("line", ["[1, 2]", '"text"', "3", "null"])
def test_a_stream_line_that_is_not_an_object_names_its_line(tmp_path, line) -> None:
    lines = (FIXTURES / "run_v2.jsonl").read_text().splitlines()
    path = _written(tmp_path, "\n".join([lines[0], line, *lines[1:]]) + "\n", "results.jsonl")
    result = CliRunner().invoke(cli, ["summary", str(path)])
    assert result.exit_code == EXIT_USER_ERROR and "Traceback" not in result.output
    shown = {"[1, 2]": "an array"}.get(line, line)
    assert result.output.splitlines() == [
        f"Error: {path}:2: the top level: {shown} is not an object; {REMEDY}"]


@pytest.mark.parametrize(("damage", "where", "said"), [
    # A process line without what the stream reader takes from it.
    (lambda r: r.pop("planned"), "planned", "missing"),
    (lambda r: r.__setitem__("name", ["a"]), "name", "an array is not a string"),
    (lambda r: r["result"].__setitem__("rounds", {}), "result.rounds",
     "an object is not an array"),
    (lambda r: r["result"]["rounds"].__setitem__(0, 7), "result.rounds[0]",
     "7 is not an object"),
    (lambda r: r["result"]["arms"].__setitem__("ort", "x"), "result.arms.ort",
     '"x" is not an object'),
])
def test_a_stream_line_of_the_wrong_shape_names_line_and_key(
        tmp_path, damage, where, said) -> None:
    lines = [json.loads(x) for x in (FIXTURES / "run_v2.jsonl").read_text().splitlines()]
    number = next(i for i, r in enumerate(lines, 1) if r["type"] == "process")
    damage(lines[number - 1])
    path = _written(tmp_path, "".join(json.dumps(r) + "\n" for r in lines), "results.jsonl")
    result = CliRunner().invoke(cli, ["summary", str(path)])
    assert result.exit_code == EXIT_USER_ERROR and "Traceback" not in result.output
    assert result.output.splitlines() == [f"Error: {path}:{number}: {where}: {said}; {REMEDY}"]


@pytest.mark.parametrize(("lines", "number", "where", "said"), [
    ([{"type": "header", "cases": {"a": 1}}], 1, "cases.a", "1 is not an object"),
    ([{"type": "header"}, {"type": "case", "name": "a", "result": []}], 2, "result",
     "an array is not an object"),
    ([{"type": "header"}, {"type": "case", "name": "a", "result": {}},
      {"type": "process", "name": "a", "process": 0, "planned": 1,
       "result": {"rounds": [], "arms": {}, "status": "ok", "error": None,
                  "error_kind": None, "signal": None, "core": None, "overhead": None}}],
     3, "name", 'case "a" came before from a line that was not a `process` line'),
    ([{"type": "header"}, {"type": "case", "name": "a", "result": {}},
      {"type": "instructions", "name": "a", "instructions": {}, "arms": []}], 3, "arms",
     "an array is not an object"),
    ([{"type": "header"}, {"type": "end", "interrupted": "no"}], 2, "interrupted",
     '"no" is not true or false'),
])
def test_stream_lines_in_an_order_or_shape_no_run_writes_are_one_line(
        tmp_path, lines, number, where, said) -> None:
    path = _written(tmp_path, "".join(json.dumps(r) + "\n" for r in lines), "results.jsonl")
    with pytest.raises(ResultsError) as err:
        load_results(path)
    assert str(err.value) == f"{path}:{number}: {where}: {said}; {REMEDY}"


@pytest.mark.parametrize("command", COMMANDS)
def test_string_samples_are_one_line(tmp_path, command) -> None:
    doc = _v2()
    _block(doc)["median"] = "5571"
    _refused(command, _written(tmp_path, doc), tmp_path,
             f'{BLOCK}.median: "5571" is not a positive finite number')


def test_string_raw_samples_of_a_schema_1_file_are_one_line(tmp_path) -> None:
    doc = _v1()
    name = next(iter(doc["cases"]))
    doc["cases"][name]["rounds"][2]["samples_ns"]["ort"][1] = "3493"
    _refused("summary", _written(tmp_path, doc), tmp_path,
             f'cases.{name}.rounds[2].samples_ns.ort[1]: "3493" is not a positive finite number')


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_samples_are_one_line_at_history_add(tmp_path, token) -> None:
    text = json.dumps(_v2())
    text = text.replace('"median": 5571.0', f'"median": {token}', 1)  # round 0's ort block
    assert token in text
    _refused("history add", _written(tmp_path, text), tmp_path,
             f"cases.{CASE}.rounds[0].summary_ns.ort.median: {token} is not a finite number")


def test_a_non_finite_number_is_refused_in_a_key_the_model_does_not_read(tmp_path) -> None:
    text = json.dumps(_v2()).replace('"pyperf": "2.11.0"', '"pyperf": NaN', 1)
    _refused("summary", _written(tmp_path, text), tmp_path,
             "host.pyperf: NaN is not a finite number")


@pytest.mark.parametrize("value", [0.0, -21500.0, 0])
def test_zero_or_negative_samples_are_one_line_at_report_html(tmp_path, value) -> None:
    doc = _v2()
    for block in (b for r in doc["cases"][CASE]["rounds"] for b in r["summary_ns"].values()):
        block.update(median=value, min=value, q1=value, q3=value)
    _refused("report --html", _written(tmp_path, doc), tmp_path,
             f"cases.{CASE}.rounds[0].summary_ns.engine.median: {json.dumps(value)} is not a "
             "positive finite number")
    assert not (tmp_path / "html").exists()


def test_summary_refuses_a_negative_time_rather_than_print_it(tmp_path) -> None:
    doc = _v2()
    _block(doc)["min"] = -21500.0
    _refused("summary", _written(tmp_path, doc), tmp_path,
             f"{BLOCK}.min: -21500.0 is not a positive finite number")


@pytest.mark.parametrize("value", [0, -3476])
def test_zero_or_negative_raw_samples_of_a_schema_1_file_are_refused(tmp_path, value) -> None:
    doc = _v1()
    name = next(iter(doc["cases"]))
    doc["cases"][name]["rounds"][0]["samples_ns"]["ort"][2] = value
    _refused("report --html", _written(tmp_path, doc), tmp_path,
             f"cases.{name}.rounds[0].samples_ns.ort[2]: {value} is not a positive finite "
             "number")


@pytest.mark.parametrize(("value", "said"), [
    (0, "0 is not a positive finite number"),
    (-1.5, "-1.5 is not a positive finite number"),
    ("7", '"7" is not a positive finite number'),
    (True, "true is not a positive finite number"),
    (2 ** 70, f"{2 ** 70} is not a positive finite number"),
])
def test_one_bad_sample_among_thousands_is_found_and_named(tmp_path, value, said) -> None:
    """Long sample arrays are checked all at once (no Python call per sample); the one
    bad sample is still the one named."""
    doc = _v1()
    name = next(iter(doc["cases"]))
    samples = [3000 + i % 7 for i in range(5000)]
    samples[4321] = value
    doc["cases"][name]["rounds"][1]["samples_ns"]["ort"] = samples
    with pytest.raises(ResultsError) as err:
        load_results(_written(tmp_path, doc))
    assert str(err.value).endswith(
        f": cases.{name}.rounds[1].samples_ns.ort[4321]: {said}; {REMEDY}")


# ------------------------------------------------------------------ wrong types elsewhere


R2 = f"cases.{CASE}.rounds[2]"


def _set(where: Callable[[dict], dict], key: str, value: object) -> Callable[[dict], None]:
    return lambda doc: where(doc).__setitem__(key, value)


@pytest.mark.parametrize(("damage", "path", "said"), [
    (_set(lambda d: d["cases"][CASE]["rounds"][2], "quiet", "yes"), f"{R2}.quiet",
     '"yes" is not true or false'),
    (_set(lambda d: d["cases"][CASE]["rounds"][2], "index", -1), f"{R2}.index",
     "-1 is not a non-negative integer"),
    (_set(lambda d: d["cases"][CASE]["rounds"][2], "index", True), f"{R2}.index",
     "true is not a non-negative integer"),
    # A round's process and session label it for the statistics (stats.round_labels):
    # never null, and an int64.
    (_set(lambda d: d["cases"][CASE]["rounds"][2], "process", None), f"{R2}.process",
     "null is not a non-negative integer"),
    (_set(lambda d: d["cases"][CASE]["rounds"][2], "process", 2 ** 70), f"{R2}.process",
     f"{2 ** 70} is not a non-negative integer"),
    (_set(lambda d: d["cases"][CASE]["rounds"][2], "session", 2 ** 63), f"{R2}.session",
     f"{2 ** 63} is not a non-negative integer"),
    (_set(lambda d: d["cases"][CASE]["rounds"][2], "order", ["ort", 3]), f"{R2}.order[1]",
     "3 is not a string"),
    (_set(lambda d: d["cases"][CASE]["rounds"][2]["summary_ns"]["ort"], "n", 2.5),
     f"{R2}.summary_ns.ort.n", "2.5 is not a non-negative integer"),
    (_set(lambda d: d["cases"][CASE]["rounds"][2]["summary_ns"]["ort"], "q3", 2 ** 70),
     f"{R2}.summary_ns.ort.q3", f"{2 ** 70} is not a positive finite number"),
    (_set(lambda d: d["cases"][CASE]["rounds"][2]["gate"]["steal"], "cpu1", "x"),
     f"{R2}.gate.steal.cpu1", '"x" is not a finite number'),
    (_set(lambda d: d["cases"][CASE]["rounds"][2]["interference"], "own_steal", []),
     f"{R2}.interference.own_steal", "an array is not a finite number"),
    (_set(lambda d: d["cases"][CASE]["arms"]["engine"]["counters_per_run"], "runs", "1"),
     f"cases.{CASE}.arms.engine.counters_per_run.runs", '"1" is not a finite number'),
    (_set(lambda d: d["cases"][CASE]["arms"]["engine"], "nodes_by_ep", {"engine": -1}),
     f"cases.{CASE}.arms.engine.nodes_by_ep.engine", "-1 is not a non-negative integer"),
    (_set(lambda d: d["cases"][CASE]["spec"], "depth", "10"), f"cases.{CASE}.spec.depth",
     '"10" is not a non-negative integer'),
    (_set(lambda d: d["cases"][CASE]["processes"][1], "status", 0),
     f"cases.{CASE}.processes[1].status", "0 is not a string"),
    (_set(lambda d: d["cases"][CASE]["overhead"], "timer_ns", -1.0),
     f"cases.{CASE}.overhead.timer_ns", "-1.0 is not a non-negative finite number"),
    (_set(lambda d: d["config"], "rounds", "8"), "config.rounds",
     '"8" is not a non-negative integer'),
    (_set(lambda d: d["config"]["gate"], "threshold", {}), "config.gate.threshold",
     "an object is not a finite number"),
    (_set(lambda d: d["arms"]["ort"], "options", {"a": 1}), "arms.ort.options.a",
     "1 is not a string"),
    (_set(lambda d: d["host"], "key", 7), "host.key", "7 is not a string"),
    (_set(lambda d: d, "interrupted", "no"), "interrupted", '"no" is not true or false'),
    (_set(lambda d: d, "twin", []), "twin", "an array is not an object"),
])
def test_a_value_of_the_wrong_type_names_its_key(tmp_path, damage, path, said) -> None:
    doc = _v2()
    damage(doc)
    file = _written(tmp_path, doc)
    with pytest.raises(ResultsError) as err:
        load_results(file)
    assert str(err.value) == f"{file}: {path}: {said}; {REMEDY}"


@pytest.mark.parametrize("value", [None, 2 ** 70])
def test_a_round_with_no_usable_process_is_one_line_at_compare(tmp_path, value) -> None:
    # Before, compare crashed in stats.round_labels (int(None), or int64 overflow).
    doc = _v2()
    doc["cases"][CASE]["rounds"][2]["process"] = value
    said = f"{'null' if value is None else value} is not a non-negative integer"
    _refused("compare", _written(tmp_path, doc), tmp_path, f"{R2}.process: {said}")


def test_a_hostile_key_is_quoted_and_the_message_stays_one_line(tmp_path) -> None:
    doc = _v2()
    doc["cases"]["evil\ncase.x"] = copy.deepcopy(doc["cases"][CASE])
    doc["cases"]["evil\ncase.x"]["rounds"][0]["quiet"] = "no"
    with pytest.raises(ResultsError) as err:
        load_results(_written(tmp_path, doc))
    message = str(err.value)
    assert "\n" not in message
    assert ': cases["evil\\ncase.x"].rounds[0].quiet: "no" is not true or false;' in message


# ------------------------------------------------------------------ still loads


def test_every_fixture_and_a_document_held_in_memory_still_load() -> None:
    for name in ("base.json", "pr.json", "same_run.json", "run_v2.json", "run_v2.jsonl"):
        load_results(FIXTURES / name)
    # An in-memory document may hold tuples and numpy numbers (the workflows build some).
    np = pytest.importorskip("numpy")
    doc = _v2()
    block = _block(doc)
    block.update(n=np.int64(block["n"]), median=np.float64(block["median"]))
    doc["cases"][CASE]["rounds"][3]["order"] = tuple(doc["cases"][CASE]["rounds"][3]["order"])
    Results.from_dict(doc)


def test_parse_json_names_the_first_non_finite_number_only_when_there_is_one() -> None:
    assert parse_json('{"a": [1.5, 2e300, -0.0]}', "f") == {"a": [1.5, 2e300, -0.0]}
    with pytest.raises(ResultsError, match=r"^f: a\[1\]: -1E\+999 is not a finite number;"):
        parse_json('{"a": [1.5, -1E+999]}', "f")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_value_in_a_long_list_held_in_memory_is_named(bad) -> None:
    """A document built in memory never went through the parser's NaN check: the bulk
    test of a long list still refuses NaN and infinities, naming the index."""
    from epbench.core.model import TIME, array_of, check

    values = [1000.0 + i for i in range(100)]
    values[61] = bad
    with pytest.raises(ResultsError, match=r"^memory: xs\[61\]: -?(NaN|Infinity) is not a "
                                           r"positive finite number;"):
        check(values, array_of(TIME), ("xs",), "memory")
    check(values[:61], array_of(TIME), ("xs",), "memory")



@pytest.mark.parametrize("command", ["summary", "compare"])
def test_a_spec_tolerance_past_a_float_leaves_the_case_without_a_family(
        tmp_path, command) -> None:
    # Its spec is foreign (no family: summary.family_of), the times still count. Before,
    # the spec's own check raised OverflowError out of every command.
    doc = _v2()
    doc["cases"][CASE]["spec"]["tolerance"] = 10**400
    result = CliRunner().invoke(cli, COMMANDS[command](_written(tmp_path, doc), tmp_path))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and CASE in result.output
    assert family_of(doc["cases"][CASE]["spec"]) is None


def test_a_null_control_is_one_line(tmp_path) -> None:
    # Read as the arm None before, then a KeyError in summary.
    doc = _v2()
    doc["control"] = None
    _refused("summary", _written(tmp_path, doc), tmp_path, "control: null is not a string")
