"""GitHub annotations: one ::error/::warning line per flagged case, escaped GitHub's way."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli import run_commands
from epbench.cli.main import cli
from epbench.harness.commits import BuiltSide
from epbench.reports.bot.annotations import (
    annotation_lines,
    escape_data,
    escape_property,
    workflow_command,
)
from epbench.reports.comparison import Comparison
from epbench.workflows.compare_commits import CommitsResult
from tests.support.synthetic import as_results, results_doc
from tests.test_reports_render import _separate

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "results"

# The fixtures' two flagged cases (a crashed PR side, an alert), as GitHub must receive
# them: `%` in the message is %25, `:` in the title %3A.
EXPECTED = [
    "::error title=epbench%3A add_d10_w8 failed::❌ add_d10_w8 failed: pr crashed: crashed: "
    "synthetic",
    # A flagged case's interval is at its false-coverage-adjusted level, and says so.
    "::error title=epbench%3A relu_d100_w8 regressed (alert)::🔴 relu_d100_w8 regressed "
    "(alert): +11.5%25 (98.33 %25 CI [+7.9%25, +15.3%25]), threshold 2.4%25",
]


def test_escaping_follows_githubs_workflow_command_format() -> None:
    assert escape_data("50% a\r\nb: c, d") == "50%25 a%0D%0Ab: c, d"
    assert escape_property("50% a\r\nb: c, d") == "50%25 a%0D%0Ab%3A c%2C d"
    # `%` first, so an escape already in the text is not decoded into something else.
    assert escape_data("%0A") == "%250A"
    assert workflow_command("warning", "m", title="model:x,y") == "::warning title=model%3Ax%2Cy::m"
    assert workflow_command("error", "m") == "::error::m"


def test_flagged_cases_and_only_those_are_annotated() -> None:
    comparison = Comparison.from_json(_separate().to_json())
    assert annotation_lines(comparison) == EXPECTED
    # A ⚠️ regression is a warning; every other verdict stays silent.
    regression = replace(comparison.cases[1], verdict="regression")
    quiet = [replace(comparison.cases[1], verdict=v)
             for v in ("inconclusive", "not_comparable", "improvement", "no_change")]
    (line,) = annotation_lines(replace(comparison, cases=(regression, *quiet)))
    assert line.startswith("::warning title=epbench%3A relu_d100_w8 regressed::⚠️ relu_d100_w8")


def test_a_newline_in_a_name_cannot_start_a_second_command() -> None:
    comparison = Comparison.from_json(_separate().to_json())
    row = replace(comparison.cases[0], case="x\n::error::forged", reason="a\r\n::warning::b")
    (line,) = annotation_lines(replace(comparison, cases=(row,)))
    assert "\n" not in line and "\r" not in line
    assert line == (
        "::error title=epbench%3A x%0A%3A%3Aerror%3A%3Aforged failed::❌ x%0A::error::forged "
        "failed: a%0D%0A::warning::b"
    )


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    for name in ("base.json", "pr.json", "profile.json"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    return tmp_path


def _compare(files: Path, *extra: str, env: dict[str, str | None]) -> Any:
    args = ["compare", str(files / "base.json"), str(files / "pr.json"), "--profile",
            str(files / "profile.json"), "--fail-on", "never", *extra]
    return CliRunner().invoke(cli, args, env=env)


@pytest.mark.parametrize(
    ("flag", "github_actions", "annotated"),
    [
        ([], "true", True),
        ([], None, False),
        ([], "false", False),
        (["--no-github-annotations"], "true", False),
        (["--github-annotations"], None, True),
    ],
)
def test_compare_annotates_by_default_in_github_actions(
    files: Path, flag: list[str], github_actions: str | None, annotated: bool
) -> None:
    result = _compare(files, *flag, env={"GITHUB_ACTIONS": github_actions})
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("::")]
    assert lines == (EXPECTED if annotated else [])
    assert "::" not in result.stderr


def test_json_on_stdout_stays_json_and_the_annotations_go_to_stderr(files: Path) -> None:
    result = _compare(files, "--format", "json", env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 0
    assert json.loads(result.stdout)["schema"] == "epbench.comparison/1"
    assert result.stderr.splitlines() == EXPECTED


def test_compare_commits_annotates_in_github_actions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    comparison = _separate()

    def fake_comparison(**kwargs: Any) -> CommitsResult:
        side = BuiltSide("base", "a", "a" * 40, "/lib/a.so", cached=True, sha256="0" * 64)
        return CommitsResult(side, side, as_results(results_doc({})), comparison, {})

    monkeypatch.setattr(run_commands, "run_comparison", fake_comparison)
    args = ["compare-commits", "a", "b", "--case", "relu_d1_w8", "--out", str(tmp_path / "o"),
            "--fail-on", "never"]
    on = CliRunner().invoke(cli, args, env={"GITHUB_ACTIONS": "true"})
    assert on.exit_code == 0, on.output
    assert [ln for ln in on.stdout.splitlines() if ln.startswith("::")] == EXPECTED
    off = CliRunner().invoke(cli, [*args, "--no-github-annotations"],
                             env={"GITHUB_ACTIONS": "true"})
    assert off.exit_code == 0 and "::error" not in off.output
