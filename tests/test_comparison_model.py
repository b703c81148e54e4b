"""The comparison as a typed model: JSON only at the edge, and one way back from it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from epbench.reports import compare
from epbench.reports.bot.artifact import comparison_schema
from epbench.reports.comparison import CompareError, Comparison

FIXTURES = Path(__file__).parent / "fixtures" / "results"


def _comparisons() -> list[Comparison]:
    return [
        compare.compare_files([str(FIXTURES / "same_run.json")], base_arm="base", pr_arm="pr"),
        compare.compare_files([str(FIXTURES / "base.json"), str(FIXTURES / "pr.json")],
                              profile_path=str(FIXTURES / "profile.json")),
    ]


@pytest.fixture(scope="module")
def comparisons() -> list[Comparison]:
    return _comparisons()


def test_to_json_matches_the_schema_and_reads_back_to_the_same_comparison(comparisons):
    validator = jsonschema.Draft202012Validator(comparison_schema())
    for comparison in comparisons:
        text = comparison.to_json()
        validator.validate(json.loads(text))
        back = Comparison.from_json(text)
        assert back == comparison
        assert back.to_json() == text
        assert Comparison.from_json(json.loads(text)) == comparison


def test_the_model_is_frozen(comparisons):
    with pytest.raises(dataclasses.FrozenInstanceError):
        comparisons[0].cases[0].verdict = "no_change"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        comparisons[0].warnings = ()  # type: ignore[misc]


def test_an_older_file_without_the_optional_keys_still_reads(comparisons):
    doc = comparisons[1].to_dict()
    for key in ("twin", "between_runs", "threads"):
        del doc[key]
    for row in doc["cases"]:
        for key in ("ci_level", "held_back", "control_shift", "p", "q", "extra"):
            row.pop(key)
    old = Comparison.from_json(doc)
    assert old.twin == () and old.between_runs is None and old.threads is None
    assert all(r.held_back is None and r.ci_level is None for r in old.cases)
    assert "held_back" not in old.to_dict()["cases"][0]  # not written as null either


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(schema="epbench.comparison/2"), "comparison is not a comparison of schema"),
    (lambda d: d.update(surprise=1), "comparison has the unknown key 'surprise'"),
    (lambda d: d.pop("mode"), "comparison lacks 'mode'"),
    (lambda d: d["cases"][0].update(rounds="many"), "comparison.cases[0].rounds is str, "
                                                    "not an integer"),
    (lambda d: d["cases"][0].update(rounds=True), "comparison.cases[0].rounds is bool"),
    (lambda d: d["cases"][0].update(ci=[0.1]), "comparison.cases[0].ci is list, not a list "
                                               "of 2"),
    (lambda d: d["settings"].update(resamples=0), "--resamples must be at least"),
    # null is how NaN is written: a k or floor of NaN would judge nothing.
    (lambda d: d["settings"].update(k=None), "--floor must be >= 0 and --k > 0"),
    (lambda d: d["settings"].update(floor=None), "--floor must be >= 0 and --k > 0"),
    (lambda d: d["settings"].update(alert=1e308 * 10), "--alert is a fractional change"),
    # float() cannot take it: an OverflowError before.
    (lambda d: d["cases"][0].update(threshold=10 ** 400), "comparison.cases[0].threshold "
                                                          "is int, not a number a float can"),
])
def test_a_document_that_does_not_fit_is_refused_naming_the_key(comparisons, edit, message):
    doc = comparisons[0].to_dict()
    edit(doc)
    with pytest.raises(CompareError) as caught:
        Comparison.from_json(doc)
    assert message in str(caught.value)


def test_report_on_a_folder_whose_compare_json_holds_a_400_digit_number_is_one_line(
        comparisons, tmp_path):
    from click.testing import CliRunner

    from epbench.cli.main import cli

    doc = comparisons[0].to_dict()
    doc["cases"][0]["threshold"] = "@"
    (tmp_path / "compare.json").write_text(json.dumps(doc).replace('"@"', "9" * 400))
    result = CliRunner().invoke(cli, ["report", str(tmp_path), "--html", str(tmp_path / "h")])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        f"Error: {tmp_path / 'compare.json'}.cases[0].threshold is int, not a number a float "
        "can hold; write it again with this epbench's compare"]
