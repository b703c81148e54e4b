"""The PR comment in two jobs: a read-only one plans, a write one posts with curl alone.

comment.yml's `plan` job runs every check of `epbench comment --from-artifact` and
writes the one request to make (`--plan-out`); its `post` job, which holds the write
token and installs nothing, makes that request. Here both steps' scripts run verbatim
(tests/support/action_steps.py) against the local stub of GitHub's REST API, the plan
handed from one to the other as the artifact would hand it, for a new comment and an
edit; and a plan whose PR number or comment id is not an integer makes no request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli.comment_command import comment
from epbench.core.errors import EXIT_USER_ERROR
from epbench.reports import render
from epbench.reports.bot.github import GitHubError
from epbench.reports.bot.sticky_comment import (
    PLAN_COMMENT_FILE,
    PLAN_PR_FILE,
    PLAN_REQUEST_FILE,
    CommentPlan,
    plan_sticky_comment,
    write_plan,
)
from epbench.reports.comparison import Comparison
from epbench.reports.sticky import STICKY_MARKER
from tests.support.action_steps import epbench_bin, load, run_step
from tests.support.github_stub import HEAD_SHA, PR, REPO, TOKEN, StubGitHub, no_proxies, serve_stub
from tests.test_artifact import write_artifact
from tests.test_reports_render import _verdicts

ROOT = Path(__file__).resolve().parent.parent
REUSABLE = ROOT / ".github" / "workflows" / "comment.yml"
HIJACK = f"{STICKY_MARKER}\nLGTM, ship it"  # a PR author's comment that carries the marker


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubGitHub]:
    no_proxies(monkeypatch)
    with serve_stub() as state:
        yield state


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    return load(REUSABLE)


@pytest.fixture(scope="module")
def comparison() -> dict[str, Any]:
    return json.loads(_verdicts().to_json())


def _named(job: dict[str, Any], prefix: str) -> dict[str, Any]:
    (step,) = [s for s in job["steps"] if str(s.get("name", "")).startswith(prefix)]
    return step


def _runner_env(stub: StubGitHub, temp: Path) -> dict[str, str]:
    """What a runner sets for every step; no proxy, so curl reaches the stub directly."""
    return {
        "PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "RUNNER_TEMP": str(temp),
        "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": stub.base,
    }


CONTEXT = {
    "github.token": TOKEN,
    "github.event.workflow_run.head_sha": HEAD_SHA,
    "github.event.workflow_run.html_url": f"https://github.test/{REPO}/actions/runs/1",
}


def plan_step(workflow: dict[str, Any], stub: StubGitHub, tmp_path: Path,
              comparison: dict[str, Any]) -> None:
    """The plan job's step, verbatim, on a downloaded artifact: the plan in RUNNER_TEMP."""
    temp = tmp_path / "runner-temp"
    write_artifact(temp / "bench-artifact", comparison)
    epbench_bin(tmp_path / "work" / ".venv" / "bin")  # what the install step provides
    step = _named(workflow["jobs"]["plan"], "Check the artifact and plan")
    done = run_step(step, CONTEXT, _runner_env(stub, temp), tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("planned: ")


def post_step(workflow: dict[str, Any], stub: StubGitHub, tmp_path: Path):  # noqa: ANN201
    """The post job's step, verbatim: curl, the plan where the download put it."""
    step = _named(workflow["jobs"]["post"], "Post or update the sticky PR comment")
    temp = tmp_path / "runner-temp"
    work = tmp_path / "post-work"
    work.mkdir(exist_ok=True)
    return run_step(step, CONTEXT, _runner_env(stub, temp), work)


def test_the_plan_reaches_the_post_job_where_it_looks(workflow: dict[str, Any]) -> None:
    upload = _named(workflow["jobs"]["plan"], "Upload the plan")["with"]
    download = _named(workflow["jobs"]["post"], "Download the plan")["with"]
    assert upload["name"] == download["name"]
    assert upload["path"] == download["path"] == "${{ runner.temp }}/comment-plan"
    assert "run-id" not in download  # this run's own artifact, written by the plan job


def test_the_token_reaches_curl_on_stdin_only(workflow: dict[str, Any]) -> None:
    # Not in curl's argv (visible to every process on the runner), nor in a log line.
    script = _named(workflow["jobs"]["post"], "Post or update the sticky PR comment")["run"]
    uses = [line.strip() for line in script.splitlines() if "GITHUB_TOKEN" in line]
    assert uses == [
        """status="$(printf 'Authorization: Bearer %s\\n' "$GITHUB_TOKEN" | curl --silent \\"""]
    assert "--header @-" in script and "set -x" not in script


def test_a_new_comment_is_planned_read_only_and_posted_by_curl(
    workflow: dict[str, Any], stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any]
) -> None:
    plan_step(workflow, stub, tmp_path, comparison)
    plan = tmp_path / "runner-temp" / "comment-plan"
    assert (plan / PLAN_PR_FILE).read_text() == f"{PR}\n"
    assert (plan / PLAN_COMMENT_FILE).read_text() == "none\n"
    # Planning reads only: the PR's head, then its comments.
    assert [(r.method, r.path) for r in stub.requests] == [
        ("GET", f"/repos/{REPO}/pulls/{PR}"), ("GET", f"/repos/{REPO}/issues/{PR}/comments"),
    ]
    done = post_step(workflow, stub, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"POST of the sticky comment on #{PR}: 201\n"
    assert [(r.method, r.path) for r in stub.requests[2:]] == [
        ("POST", f"/repos/{REPO}/issues/{PR}/comments"),
    ]
    (posted,) = stub.comments
    assert posted["body"] == render.render_markdown(Comparison.from_json(comparison)) + (
        "\nPlots of every case and the forest plot: `report.html` in the run's artifact, "
        f"{CONTEXT['github.event.workflow_run.html_url']}\n")
    assert TOKEN not in done.stdout + done.stderr


def test_the_bots_own_comment_is_edited_and_a_hijack_left_alone(
    workflow: dict[str, Any], stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any]
) -> None:
    mallory = stub.add_comment(HIJACK, login="mallory")
    ours = stub.add_comment(f"{STICKY_MARKER}\nold verdicts")
    plan_step(workflow, stub, tmp_path, comparison)
    plan = tmp_path / "runner-temp" / "comment-plan"
    assert (plan / PLAN_COMMENT_FILE).read_text() == f"{ours['id']}\n"
    before = len(stub.requests)
    done = post_step(workflow, stub, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"PATCH of the sticky comment on #{PR}: 200\n"
    assert [(r.method, r.path) for r in stub.requests[before:]] == [
        ("PATCH", f"/repos/{REPO}/issues/comments/{ours['id']}"),
    ]
    assert mallory["body"] == HIJACK
    assert ours["body"].startswith(STICKY_MARKER) and "old verdicts" not in ours["body"]
    assert len(stub.comments) == 2


REFUSED = {
    "a PR number that is a word": ("seven", "none", "pull request number"),
    "a PR number with a path": ("7/../../pulls/8", "none", "pull request number"),
    "a PR number of zero": ("0", "none", "pull request number"),
    "a negative PR number": ("-7", "none", "pull request number"),
    "a PR number with a second line": ("7\n8", "none", "pull request number"),
    "an empty PR number": ("", "none", "pull request number"),
    "a comment id with a query": ("7", "9001?x=1", "comment id"),
    "a comment id in another repository": ("7", "../../../other/repo/issues/comments/1",
                                           "comment id"),
    "a comment id as a float": ("7", "9001.0", "comment id"),
    "a comment id with a space": ("7", "9001 9002", "comment id"),
    "an empty comment id": ("7", "", "comment id"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_plan_whose_numbers_are_not_integers_makes_no_request(
    workflow: dict[str, Any], stub: StubGitHub, tmp_path: Path, case: str
) -> None:
    pr, comment_id, named = REFUSED[case]
    plan = tmp_path / "runner-temp" / "comment-plan"
    plan.mkdir(parents=True)
    (plan / PLAN_PR_FILE).write_text(f"{pr}\n")
    (plan / PLAN_COMMENT_FILE).write_text(f"{comment_id}\n")
    (plan / PLAN_REQUEST_FILE).write_text(json.dumps({"body": f"{STICKY_MARKER}\nhi"}))
    done = post_step(workflow, stub, tmp_path)
    assert done.returncode == 1
    assert done.stdout.startswith(f"::error::the plan's {named} is ")
    assert done.stdout.endswith(": not posting\n") and done.stdout.count("\n") == 1
    assert stub.requests == []


# -- the library: the plan is checked before it is written -------------------------------


def test_a_plan_is_what_upserting_would_do_without_writing(stub: StubGitHub) -> None:
    ours = stub.add_comment(f"{STICKY_MARKER}\nold")
    plan = plan_sticky_comment(REPO, PR, "## Benchmarks\n", TOKEN, stub.base,
                               expect_head_sha=HEAD_SHA)
    assert plan == CommentPlan(PR, ours["id"], f"{STICKY_MARKER}\n## Benchmarks\n", False)
    assert plan.action == "update"
    assert set(stub.methods()) == {"GET"}


def test_a_plan_for_another_head_is_refused_before_the_comments_are_read(
    stub: StubGitHub,
) -> None:
    stub.head_sha = "d" * 40
    with pytest.raises(GitHubError, match="not commenting"):
        plan_sticky_comment(REPO, PR, "x", TOKEN, stub.base, expect_head_sha=HEAD_SHA)
    assert [r.path for r in stub.requests] == [f"/repos/{REPO}/pulls/{PR}"]


@pytest.mark.parametrize(
    ("pr", "comment_id", "body"),
    [(0, None, STICKY_MARKER), (True, None, STICKY_MARKER), (7, 0, STICKY_MARKER),
     (7, "9001", STICKY_MARKER), (7, 2**63, STICKY_MARKER), (7, None, "no marker"),
     (7, None, STICKY_MARKER + "x" * 65536)],
    ids=["pr 0", "pr True", "id 0", "id a string", "id past 64 bits", "no marker", "too long"],
)
def test_a_plan_the_post_job_would_refuse_is_never_made(pr: Any, comment_id: Any,
                                                        body: str) -> None:
    with pytest.raises(GitHubError, match="^plan: "):
        CommentPlan(pr, comment_id, body, False)


def test_a_comment_id_github_did_not_give_as_a_number_is_refused(stub: StubGitHub) -> None:
    stub.add_comment(f"{STICKY_MARKER}\nold")["id"] = "9001; rm -rf"
    with pytest.raises(GitHubError, match="whose id is '9001; rm -rf'"):
        plan_sticky_comment(REPO, PR, "x", TOKEN, stub.base)


def test_the_plan_is_written_only_into_an_empty_folder(tmp_path: Path) -> None:
    plan = CommentPlan(PR, None, f"{STICKY_MARKER}\nnaïve ✅", False)
    folder = write_plan(plan, tmp_path / "plan")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [PLAN_PR_FILE, PLAN_COMMENT_FILE, PLAN_REQUEST_FILE])
    request = (folder / PLAN_REQUEST_FILE).read_bytes()
    assert request.isascii() and json.loads(request) == {"body": plan.body}
    with pytest.raises(GitHubError, match="is not empty: pass a new folder"):
        write_plan(plan, folder)


def test_plan_out_goes_with_from_artifact_only(tmp_path: Path) -> None:
    body = tmp_path / "report.md"
    body.write_text("## hi\n")
    result = CliRunner().invoke(
        comment, ["--repo", REPO, "--pr", "7", "--body", str(body), "--plan-out",
                  str(tmp_path / "plan")], env={"GITHUB_TOKEN": TOKEN})
    assert result.exit_code == EXIT_USER_ERROR
    assert "--plan-out goes with --from-artifact" in result.output
    assert not (tmp_path / "plan").exists()
