"""Only the bot's own comment is edited: the sticky comment is its marker AND its author.

Anyone can paste the hidden marker into a comment of theirs. Against the local stub of
GitHub's REST API (tests/support/github_stub.py), a marked comment by anyone but the
token's identity is never edited, and does not stop the bot from posting its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli.comment_command import comment
from epbench.core.errors import EXIT_USER_ERROR
from epbench.reports.bot.github import ACTIONS_BOT_LOGIN
from epbench.reports.bot.sticky_comment import upsert_sticky_comment
from epbench.reports.sticky import STICKY_MARKER
from tests.support.github_stub import (
    BOT_LOGIN,
    HEAD_SHA,
    PR,
    REPO,
    TOKEN,
    FakeSleep,
    StubGitHub,
    no_proxies,
    serve_stub,
)

HIJACK = f"{STICKY_MARKER}\nLGTM, ship it"  # a PR author's comment that carries the marker


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubGitHub]:
    no_proxies(monkeypatch)
    with serve_stub() as state:
        yield state


def upsert(stub: StubGitHub, body: str = "## Benchmarks\n", **kwargs: Any):
    return upsert_sticky_comment(REPO, PR, body, TOKEN, stub.base, sleep=FakeSleep(), **kwargs)


def test_the_stub_speaks_for_github_actions_as_the_client_assumes() -> None:
    assert BOT_LOGIN == ACTIONS_BOT_LOGIN


def test_a_users_comment_with_the_marker_is_left_alone_and_a_new_one_posted(
    stub: StubGitHub,
) -> None:
    mallory = stub.add_comment(HIJACK, login="mallory")
    result = upsert(stub)
    assert result.action == "created"
    assert [(r.method, r.path) for r in stub.requests] == [
        ("GET", f"/repos/{REPO}/issues/{PR}/comments"),
        ("GET", "/user"),  # 403: GITHUB_TOKEN is an installation token
        ("POST", f"/repos/{REPO}/issues/{PR}/comments"),
    ]
    assert mallory["body"] == HIJACK
    assert len(stub.comments) == 2
    posted = stub.comments[1]
    assert posted["user"] == {"login": BOT_LOGIN, "type": "Bot"}
    assert posted["body"] == f"{STICKY_MARKER}\n## Benchmarks\n"


def test_a_users_copy_of_the_body_does_not_stop_the_post(stub: StubGitHub) -> None:
    # Before: the copy was taken for the bot's comment, "unchanged", and nothing posted.
    stub.add_comment(f"{STICKY_MARKER}\n## Benchmarks\n", login="mallory")
    result = upsert(stub)
    assert result.action == "created" and len(stub.comments) == 2


def test_the_bots_own_comment_is_edited_even_after_an_older_user_copy(
    stub: StubGitHub,
) -> None:
    mallory = stub.add_comment(HIJACK, login="mallory")
    ours = stub.add_comment(f"{STICKY_MARKER}\nold numbers")
    result = upsert(stub)
    assert result.action == "updated" and result.comment_id == ours["id"]
    assert stub.methods() == ["GET", "GET", "PATCH"]  # comments, /user (asked once), edit
    assert ours["body"] == f"{STICKY_MARKER}\n## Benchmarks\n"
    assert mallory["body"] == HIJACK


def test_a_user_account_that_calls_itself_a_bot_is_not_the_bot(stub: StubGitHub) -> None:
    # The login matches, the account type does not: GitHub's bots are type "Bot".
    fake = stub.add_comment(HIJACK, login=BOT_LOGIN, user_type="User")
    result = upsert(stub)
    assert result.action == "created" and fake["body"] == HIJACK


def test_bot_login_overrides_the_identity_for_a_github_apps_token(stub: StubGitHub) -> None:
    app = stub.add_comment(f"{STICKY_MARKER}\nold", login="bench-app[bot]")
    actions = stub.add_comment(f"{STICKY_MARKER}\nother", login=BOT_LOGIN)
    result = upsert(stub, bot_login="Bench-App[bot]")  # logins are case-insensitive
    assert result.action == "updated" and result.comment_id == app["id"]
    assert stub.methods() == ["GET", "PATCH"]  # no GET /user: the identity was given
    assert actions["body"] == f"{STICKY_MARKER}\nother"


def test_a_users_token_is_the_user(stub: StubGitHub) -> None:
    stub.as_user("alice")
    bot = stub.add_comment(f"{STICKY_MARKER}\nthe workflow's", login=BOT_LOGIN)
    alice = stub.add_comment(f"{STICKY_MARKER}\nmine, from my laptop", login="alice")
    result = upsert(stub)
    assert result.action == "updated" and result.comment_id == alice["id"]
    assert bot["body"] == f"{STICKY_MARKER}\nthe workflow's"


def test_an_invalid_bot_login_is_refused_before_any_request(stub: StubGitHub) -> None:
    result = CliRunner().invoke(
        comment, ["--repo", REPO, "--pr", str(PR), "--body", "-", "--api-url", stub.base,
                  "--bot-login", "mallory\n::error::x"],
        input="## hi\n", env={"GITHUB_TOKEN": TOKEN},
    )
    assert result.exit_code == EXIT_USER_ERROR
    assert result.output == (
        "Error: --bot-login 'mallory\\n::error::x' is not a GitHub login: pass the account "
        "the token comments as, e.g. github-actions[bot] or my-app[bot]\n")
    assert stub.requests == []


def test_the_comment_workflows_command_ignores_a_users_marker(
    stub: StubGitHub, tmp_path: Path
) -> None:
    from tests.test_reports_render import _separate

    folder = tmp_path / "bench-out"
    folder.mkdir()
    (folder / "compare.json").write_text(_separate().to_json(), encoding="utf-8")
    (folder / "pull-request.json").write_text(json.dumps({"number": PR}), encoding="utf-8")
    mallory = stub.add_comment(HIJACK, login="mallory")
    result = CliRunner().invoke(
        comment, ["--from-artifact", str(folder), "--repo", REPO, "--run-head-sha", HEAD_SHA,
                  "--api-url", stub.base],
        env={"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": None, "GITHUB_API_URL": None},
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"created the epbench comment on {REPO}#{PR}")
    assert f"comment {mallory['id']} on pull request #{PR} in {REPO} carries the epbench " \
        f"marker but was not written by {BOT_LOGIN}: leaving it alone" in result.stderr
    assert mallory["body"] == HIJACK
    assert [c["user"]["login"] for c in stub.comments] == ["mallory", BOT_LOGIN]
