""".github/workflows/bench-matrix.yml: the action over runners x shards, for a pull request.

The workflow is parsed and its matrix expanded as GitHub would (runners x shards, each
job one slice with an artifact name its class's merge job, and no other, downloads); its
jobs are read-only and pass tests/support/workflow_rules.py. The path it runs is then run
here over 3 shards: `epbench action` with input shard K/3 (real compare-commits, tiny
round counts), the slices handed over as artifacts are, and `epbench action --merge-from`
joining and judging them into what comment.yml reads.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cases.grids import load_grid
from epbench.cli.action_command import verdict_settings
from epbench.cli.main import cli
from epbench.cli.run_commands import compare_commits
from epbench.core.errors import EXIT_CASE_FAILED, EXIT_USER_ERROR
from epbench.core.results import load_results
from epbench.engine.library import library_path
from epbench.reports.bot.artifact import read_artifact
from epbench.reports.comparison import FAIL_ON
from epbench.reports.defaults import FLOOR, K
from epbench.workflows import action as act
from tests.support.gitrepo import git, init_repo
from tests.support.workflow_rules import load, problems
from tests.test_action_workflows import validate

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / ".github" / "workflows" / "bench-matrix.yml"
ACTION = ROOT / "action.yml"
COMMENT = ROOT / ".github" / "workflows" / "comment.yml"
# Inputs of the action that the matrix sets itself, or that only the action's steps use.
SET_BY_THE_MATRIX = {"shard", "artifact", "checkout"}
NOT_OFFERED = {"history", "python-version"}  # a secret URL; the action's own Python
JUDGED_BY_THE_MERGE = {"fail-on"}  # a slice's verdicts never fail its job
EXPR = re.compile(r"\$\{\{\s*(matrix|inputs)\.([a-z-]+)\s*\}\}")

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def doc() -> Doc:
    return load(MATRIX)


def _render(text: str, matrix: dict[str, Any], inputs: dict[str, Any]) -> str:
    """`${{ matrix.X }}` and `${{ inputs.X }}` as GitHub substitutes them."""
    return EXPR.sub(lambda m: str((matrix if m[1] == "matrix" else inputs)[m[2]]), text)


def _shard_list(doc: Doc, shards: Any) -> subprocess.CompletedProcess[str]:
    """The plan job's step, run as the runner runs it, with `inputs.shards` = ``shards``."""
    (step,) = [s for s in doc["jobs"]["plan"]["steps"] if s.get("id") == "shards"]
    assert step["env"] == {"SHARDS": "${{ inputs.shards }}"}
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "output"
        output.touch()
        result = subprocess.run(["bash", "-c", step["run"]], capture_output=True, text=True,
                                env={"PATH": os.environ["PATH"], "SHARDS": str(shards),
                                     "GITHUB_OUTPUT": str(output)}, timeout=60)
        result.stdout += output.read_text()
    return result


def expand(doc: Doc, runners: list[str], shards: int) -> list[dict[str, str]]:
    """The measure jobs GitHub starts: each one's runner and its action step's inputs."""
    plan = _shard_list(doc, shards)
    assert plan.returncode == 0, plan.stderr
    listed = json.loads(plan.stdout.split("list=", 1)[1].splitlines()[0])
    job = doc["jobs"]["measure"]
    assert job["strategy"]["matrix"] == {"runner": "${{ fromJSON(inputs.runners) }}",
                                         "shard": "${{ fromJSON(needs.plan.outputs.shards) }}"}
    assert doc["jobs"]["plan"]["outputs"]["shards"] == "${{ steps.shards.outputs.list }}"
    (step,) = [s for s in job["steps"] if s.get("uses") == "./.epbench-action"]
    inputs = {name: spec.get("default", "")
              for name, spec in doc["on"]["workflow_call"]["inputs"].items()}
    inputs["shards"] = shards
    return [{"runs-on": _render(job["runs-on"], {"runner": r, "shard": k}, inputs),
             **{key: _render(str(value), {"runner": r, "shard": k}, inputs)
                for key, value in step["with"].items()}}
            for r in runners for k in listed]


def test_it_validates_and_passes_the_least_privilege_rules() -> None:
    result = validate("vendor.github-workflows", MATRIX)
    assert result.returncode == 0, result.stdout + result.stderr
    assert problems(MATRIX.read_text(encoding="utf-8")) == []


def test_every_job_is_read_only_and_sees_no_secret(doc: Doc) -> None:
    assert set(doc["on"]) == {"workflow_call"}
    assert doc["permissions"] == {"contents": "read"}
    assert all("permissions" not in job for job in doc["jobs"].values())
    assert "secrets" not in doc["on"]["workflow_call"]
    text = MATRIX.read_text(encoding="utf-8")
    assert "secrets." not in text and "github.token" not in text


def test_the_matrix_is_runners_by_shards_each_one_slice(doc: Doc) -> None:
    runners = ["ubuntu-24.04", "ubuntu-24.04-arm"]  # one label starts the other
    jobs = expand(doc, runners, 3)
    assert len(jobs) == 6
    assert sorted((j["runs-on"], j["shard"]) for j in jobs) == sorted(
        (r, f"{k}/3") for r in runners for k in (1, 2, 3))
    assert len({j["artifact"] for j in jobs}) == 6
    assert all(j["checkout"] == "False" for j in jobs)  # the job checked out the PR itself
    merge = doc["jobs"]["merge"]
    (download,) = [s for s in merge["steps"] if "download-artifact" in str(s.get("uses"))]
    for runner in runners:
        pattern = _render(download["with"]["pattern"], {"runner": runner}, {})
        taken = [j for j in jobs if fnmatch.fnmatchcase(j["artifact"], pattern)]
        assert sorted(j["shard"] for j in taken) == ["1/3", "2/3", "3/3"]
        assert {j["runs-on"] for j in taken} == {runner}
    assert [j["shard"] for j in expand(doc, ["ubuntu-latest"], 1)] == ["1/1"]


@pytest.mark.parametrize("shards", ["0", "abc", "3; echo hi", "100"])
def test_a_shard_count_that_is_no_whole_number_stops_the_plan(doc: Doc, shards: str) -> None:
    result = _shard_list(doc, shards)
    assert result.returncode == 1
    assert "is not a whole number from 1 to 99" in result.stdout


def _runner_check(doc: Doc, runners: str) -> subprocess.CompletedProcess[str]:
    """The plan job's check of input runners, run as the runner runs it."""
    (step,) = [s for s in doc["jobs"]["plan"]["steps"] if s["name"] == "Check the runner labels"]
    assert step["env"] == {"RUNNERS": "${{ inputs.runners }}"}
    assert doc["jobs"]["plan"]["steps"].index(step) == 0
    return subprocess.run(["bash", "-c", step["run"]], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "RUNNERS": runners}, timeout=60)


@pytest.mark.parametrize("runners", [
    '["ubuntu-latest"]', '["ubuntu-24.04", "ubuntu-24.04-arm", "self_hosted.x86"]'])
def test_plain_runner_labels_pass_the_plan(doc: Doc, runners: str) -> None:
    result = _runner_check(doc, runners)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


# Each would break an artifact's name or the merge's download pattern.
@pytest.mark.parametrize("runners", [
    "ubuntu-latest", "[]", '"ubuntu-latest"', '{"a": 1}', '[["self-hosted", "x64"]]',
    '["ubuntu-latest", "ubuntu-latest"]', '["ubuntu-*"]', '["a?b"]', '["a/b"]', '["a:b"]',
    '["a b"]', '[1]', '["ubuntu-latest\\n::warning::x"]', '[""]', '["a", "a-shard-1"]'])
def test_runner_labels_that_would_break_the_artifacts_stop_the_plan(doc: Doc,
                                                                    runners: str) -> None:
    result = _runner_check(doc, runners)
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert line.startswith("::error::input runners is not a JSON list of unique runner labels")
    assert "write e.g. '[\"ubuntu-latest\"]'" in line


def _fail_on_check(doc: Doc, fail_on: str) -> subprocess.CompletedProcess[str]:
    """The plan job's check of input fail-on, run as the runner runs it."""
    (step,) = [s for s in doc["jobs"]["plan"]["steps"] if s["name"] == "Check fail-on"]
    assert step["env"] == {"FAIL_ON": "${{ inputs.fail-on }}"}
    return subprocess.run(["bash", "-c", step["run"]], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "FAIL_ON": fail_on}, timeout=60)


def test_the_plan_takes_exactly_the_fail_on_levels_compare_knows(doc: Doc) -> None:
    (step,) = [s for s in doc["jobs"]["plan"]["steps"] if s["name"] == "Check fail-on"]
    (listed,) = re.findall(r"not in \(([^)]*)\)", step["run"])
    assert {w.strip().strip('"') for w in listed.split(",")} == {"", *FAIL_ON}
    for level in ["", " regression ", *FAIL_ON]:
        result = _fail_on_check(doc, level)
        assert (result.returncode, result.stdout) == (0, ""), level


# A typo here used to run every slice and stop only at the merge.
@pytest.mark.parametrize("fail_on", ["Alert", "regressions", "alert,never", "any",
                                     "never; echo hi", "::warning::x"])
def test_a_fail_on_compare_does_not_know_stops_the_plan(doc: Doc, fail_on: str) -> None:
    result = _fail_on_check(doc, fail_on)
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert line.startswith("::error::input fail-on is not one of alert, regression, never")
    assert fail_on not in line


@pytest.mark.parametrize("job", ["measure", "merge"])
def test_no_epbench_is_checked_out_without_the_commit_the_caller_named(doc: Doc,
                                                                       job: str) -> None:
    steps = doc["jobs"][job]["steps"]
    (guard,) = [s for s in steps
                if s["name"] == "Refuse to run without the commit the caller named"]
    checkout = next(s for s in steps if s.get("with", {}).get("ref") == "${{ job.workflow_sha }}")
    assert steps.index(guard) < steps.index(checkout)
    assert guard["env"] == {"WORKFLOW_REPOSITORY": "${{ job.workflow_repository }}",
                            "WORKFLOW_SHA": "${{ job.workflow_sha }}"}
    for repository, sha, code in (("o/epbench", "c" * 40, 0), ("", "c" * 40, 1),
                                  ("o/epbench", "", 1), ("", "", 1)):
        result = subprocess.run(["bash", "-c", guard["run"]], capture_output=True, text=True,
                                env={"PATH": os.environ["PATH"], "WORKFLOW_REPOSITORY": repository,
                                     "WORKFLOW_SHA": sha}, timeout=60)
        assert result.returncode == code, (repository, sha)
        said = "job.workflow_repository or job.workflow_sha is empty" in result.stdout
        assert said is bool(code)


def test_the_merge_needs_every_slice_and_uploads_what_the_comment_reads(doc: Doc) -> None:
    jobs = doc["jobs"]
    assert jobs["measure"]["needs"] == "plan"
    assert jobs["merge"]["needs"] == "measure"
    # Also after another class's failed slice: each class whose slices are all there is
    # judged (check_every_slice refuses the others), not when nothing was measured.
    assert jobs["merge"]["if"] == "${{ !cancelled() && needs.measure.result != 'skipped' }}"
    assert jobs["merge"]["strategy"]["matrix"] == {"runner": "${{ fromJSON(inputs.runners) }}"}
    steps = jobs["merge"]["steps"]
    names = [str(s.get("uses") or s.get("run")) for s in steps]
    install = next(i for i, n in enumerate(names) if "pip install" in n)
    download = next(i for i, n in enumerate(names) if "download-artifact" in n)
    assert install < download  # the slices are data, downloaded after the install
    join = next(s for s in steps if "--merge-from" in str(s.get("run")))
    assert join["env"] == {"INPUT_FAIL_ON": "${{ inputs.fail-on }}",
                           "INPUT_ARGS": "${{ inputs.args }}"}
    upload = next(s for s in steps if "upload-artifact" in str(s.get("uses")))
    comment_download = next(s for s in load(COMMENT)["jobs"]["plan"]["steps"]
                            if "download-artifact" in str(s.get("uses")))
    assert comment_download["with"]["name"] == "bench-out"
    assert upload["with"]["name"] == (
        "${{ matrix.runner == fromJSON(inputs.runners)[0] && 'bench-out' || "
        "format('bench-out-{0}', matrix.runner) }}")


def test_each_measuring_job_runs_the_named_commits_action_with_the_callers_inputs(
        doc: Doc) -> None:
    steps = doc["jobs"]["measure"]["steps"]
    epbench = next(s for s in steps if s.get("with", {}).get("path") == ".epbench-action")
    assert epbench["with"]["repository"] == "${{ job.workflow_repository }}"
    assert epbench["with"]["ref"] == "${{ job.workflow_sha }}"
    assert steps.index(epbench) < len(steps) - 1 and steps[-1]["uses"] == "./.epbench-action"
    offered = doc["on"]["workflow_call"]["inputs"]
    action_inputs = set(load(ACTION)["inputs"])
    handed = steps[-1]["with"]
    forwarded = action_inputs - SET_BY_THE_MATRIX - NOT_OFFERED - JUDGED_BY_THE_MERGE
    assert set(handed) == forwarded | SET_BY_THE_MATRIX
    assert {name: handed[name] for name in forwarded} == {
        name: f"${{{{ inputs.{name} }}}}" for name in forwarded}
    assert set(offered) == forwarded | JUDGED_BY_THE_MERGE | {"shards", "runners"}
    broken = copy.deepcopy(doc)
    broken["jobs"]["measure"]["strategy"]["matrix"]["shard"] = "[1, 2]"
    with pytest.raises(AssertionError):
        expand(broken, ["ubuntu-latest"], 3)


# -- the path the matrix runs, here, over 3 shards ---------------------------------------------

CASES = [c.name for c in load_grid("quick")]
SHARDS = 3
TINY = "--rounds 2 --processes 2 --sessions 1 --gate off --no-instructions --quiet"


@pytest.fixture(scope="module")
def pull_request(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A repository of two commits whose build prints the bundled engine, and its event."""
    root = tmp_path_factory.mktemp("matrix")
    repo = init_repo(root / "repo")
    (repo / "build.sh").write_text(f"#!/bin/sh\necho '{library_path()}'\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-qm", "head", "--allow-empty")
    head = git(repo, "rev-parse", "HEAD")
    path = root / "event.json"
    path.write_text(json.dumps({"pull_request": {"number": 9, "base": {"sha": base},
                                                 "head": {"sha": head}}}))
    return repo, path


@pytest.fixture(scope="module")
def slices(pull_request: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each slice measured by the action's own step, in the folder of its artifact."""
    repo, event_path = pull_request
    downloaded = tmp_path_factory.mktemp("shards")
    env = {**os.environ, "EPBENCH_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    for k in range(1, SHARDS + 1):
        code = act.run_action(
            act.ActionInputs(build="sh build.sh", cases="quick", args=TINY, budget="0",
                             shard=f"{k}/{SHARDS}", fail_on="alert"),
            event_path=event_path, out=downloaded / f"epbench-ubuntu-latest-shard-{k}",
            repo=repo, environ=env,
            known_options={opt for param in compare_commits.params for opt in param.opts})
        assert code == 0, k
    return downloaded


@pytest.mark.slow
def test_three_slices_join_into_the_artifact_the_comment_reads(
        pull_request: tuple[Path, Path], slices: Path, tmp_path: Path) -> None:
    _, event_path = pull_request
    measured = {}
    for k in range(1, SHARDS + 1):
        doc = json.loads((slices / f"epbench-ubuntu-latest-shard-{k}" / "results.json")
                         .read_text())
        assert doc["config"]["shard"] == f"{k}/{SHARDS}"
        measured[k] = set(doc["cases"])
    assert all(measured.values())
    assert sorted(n for names in measured.values() for n in names) == sorted(CASES)
    out, summary = tmp_path / "bench-out", tmp_path / "summary.md"
    result = CliRunner().invoke(cli, ["action", "--event", str(event_path), "--merge-from",
                                      str(slices), "--out", str(out), "--summary",
                                      str(summary)], env={"INPUT_FAIL_ON": "never"})
    assert result.exit_code == 0, result.output
    artifact = read_artifact(out)  # what comment.yml's plan job accepts
    assert artifact.pr_number == 9
    assert sorted(row.case for row in artifact.comparison.cases) == sorted(CASES)
    merged = load_results(out / "results.json")
    assert [s["shard"] for s in merged.extra["shards"]] == [f"{k}/{SHARDS}"
                                                            for k in range(1, SHARDS + 1)]
    # Each slice staged its libraries in a folder of its own: tolerated and recorded, and
    # not a warning (it is so in every matrix; a rebuilt library's bytes would be one).
    assert merged.extra["merge_forced"] == [f"epbench-ubuntu-latest-shard-{k}: the arms' "
                                            "library paths" for k in range(2, SHARDS + 1)]
    assert "the shards were joined despite" not in (out / "report.md").read_text()
    assert summary.read_text(encoding="utf-8").startswith((out / "report.md").read_text())


@pytest.mark.slow
def test_a_missing_slice_is_refused_before_anything_is_written(
        pull_request: tuple[Path, Path], slices: Path, tmp_path: Path) -> None:
    _, event_path = pull_request
    two = tmp_path / "two"
    for k in (1, 3):
        name = f"epbench-ubuntu-latest-shard-{k}"
        (two / name).mkdir(parents=True)
        (two / name / "results.json").write_bytes((slices / name / "results.json").read_bytes())
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["action", "--event", str(event_path), "--merge-from",
                                      str(two), "--out", str(out)])
    assert result.exit_code == EXIT_USER_ERROR
    assert "the slices downloaded are 1/3, 3/3, not each of 1/3 .. 3/3 once" in result.output
    assert not out.exists()


def _copy(slices: Path, to: Path) -> Path:
    for k in range(1, SHARDS + 1):
        name = f"epbench-ubuntu-latest-shard-{k}"
        (to / name).mkdir(parents=True)
        (to / name / "results.json").write_bytes((slices / name / "results.json").read_bytes())
    return to


@pytest.mark.slow
def test_a_crashed_case_in_a_slice_fails_the_merge_as_it_would_the_run(
        pull_request: tuple[Path, Path], slices: Path, tmp_path: Path) -> None:
    _, event_path = pull_request
    shards = _copy(slices, tmp_path / "shards")
    path = shards / "epbench-ubuntu-latest-shard-2" / "results.json"
    doc = json.loads(path.read_text())
    crashed = sorted(doc["cases"])[0]
    doc["cases"][crashed]["error_kind"] = "crash"  # its process died; its rounds kept
    path.write_text(json.dumps(doc))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["action", "--event", str(event_path), "--merge-from",
                                      str(shards), "--out", str(out)],
                                env={"INPUT_FAIL_ON": "never"})
    assert result.exit_code == EXIT_CASE_FAILED, result.output
    assert f"1 case(s) did not finish: {crashed}" in result.output
    assert read_artifact(out).pr_number == 9  # the comment still has what it needs


@pytest.mark.slow
def test_a_page_that_fails_to_draw_is_one_line_and_leaves_what_the_comment_needs(
        pull_request: tuple[Path, Path], slices: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, event_path = pull_request

    def broken(**_: Any) -> str:
        raise ValueError("Unknown symbol: \\pr\n  ^")  # as matplotlib's mathtext words it

    monkeypatch.setattr("epbench.reports.html.render_html", broken)
    out, summary = tmp_path / "out", tmp_path / "summary.md"
    result = CliRunner().invoke(cli, ["action", "--event", str(event_path), "--merge-from",
                                      str(slices), "--out", str(out), "--summary", str(summary)])
    assert result.exit_code == EXIT_USER_ERROR, result.output
    (line,) = result.output.splitlines()
    assert line.startswith("Error: drawing the join's report failed (Unknown symbol: \\pr); ")
    assert "Traceback" not in result.output
    assert read_artifact(out).pr_number == 9
    assert not (out / "report.html").exists()
    assert summary.read_text().startswith((out / "report.md").read_text())


def test_a_merge_with_no_slice_downloaded_says_what_to_download(tmp_path: Path) -> None:
    (tmp_path / "shards" / "epbench-ubuntu-latest-shard-1").mkdir(parents=True)
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps({"pull_request": {"number": 9, "base": {"sha": "a" * 40},
                                                       "head": {"sha": "b" * 40}}}))
    result = CliRunner().invoke(cli, ["action", "--event", str(event_path), "--merge-from",
                                      str(tmp_path / "shards"), "--out", str(tmp_path / "o")])
    assert result.exit_code == EXIT_USER_ERROR
    assert "holds 0 shard results" in result.output
    assert "download every shard's artifact of one runner class" in result.output


@pytest.mark.slow
def test_the_join_is_judged_with_the_verdict_options_each_slice_was_given(
        pull_request: tuple[Path, Path], slices: Path, tmp_path: Path) -> None:
    _, event_path = pull_request
    out = tmp_path / "bench-out"
    args = f"{TINY} --floor 0.07 --alert 0.3 --fdr 0.2"
    result = CliRunner().invoke(cli, ["action", "--event", str(event_path), "--merge-from",
                                      str(slices), "--out", str(out)],
                                env={"INPUT_FAIL_ON": "never", "INPUT_ARGS": args})
    assert result.exit_code == 0, result.output
    comparison = read_artifact(out).comparison
    assert comparison.settings.fdr == 0.2
    assert {row.threshold for row in comparison.cases} == {0.07}  # the twin's noise is lower
    assert {row.alert for row in comparison.cases} == {0.3}


@pytest.mark.parametrize("args", ["--floor -1", "--no-such-option", "--k 'open", "--help",
                                  "--fail-on never", "--profile p.json"])
def test_args_the_slices_could_not_have_taken_stop_the_join_before_any_output(
        tmp_path: Path, args: str) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    out = tmp_path / "bench-out"
    result = CliRunner().invoke(cli, ["action", "--event", str(tmp_path / "event.json"),
                                      "--merge-from", str(shards), "--out", str(out)],
                                env={"INPUT_FAIL_ON": "", "INPUT_ARGS": args})
    assert result.exit_code == EXIT_USER_ERROR, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: input args: ")
    assert not out.exists()


def test_the_joins_settings_are_every_verdict_option_of_args() -> None:
    settings = verdict_settings("--floor 0.02 --k 3 --alert 0.2 --confidence 0.9 --fdr 0.1 "
                                "--resamples 2500 --seed 7 --instructions-threshold 0.03 "
                                "--rounds 9")
    assert (settings.floor, settings.k, settings.alert, settings.confidence, settings.fdr,
            settings.resamples, settings.seed, settings.instructions_threshold) == (
        0.02, 3.0, 0.2, 0.9, 0.1, 2500, 7, 0.03)
    assert verdict_settings("--target-mde 3%").target_mde == 0.03
    assert (verdict_settings("").floor, verdict_settings("").k) == (FLOOR, K)
