"""The sticky-comment client against a local stub of GitHub's REST API.

The stub (tests/support/github_stub.py) keeps the PR's comments, paginates them
with Link headers like GitHub, refuses requests whose shape is wrong, and replays
scripted faults (502, rate limits, 4xx). Sleeps are faked, so no test waits for
real.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli.comment_command import comment
from epbench.core.errors import EpbenchError
from epbench.reports.bot import github
from epbench.reports.bot.body import COMMENT_LIMIT, comment_length, fit_comment_body
from epbench.reports.bot.github import (
    GitHubClient,
    GitHubError,
    RetryPolicy,
    parse_link_header,
)
from epbench.reports.bot.sticky_comment import upsert_sticky_comment
from epbench.reports.sticky import STICKY_MARKER
from tests.support.github_stub import (
    PR,
    REPO,
    TOKEN,
    FakeSleep,
    Fault,
    StubGitHub,
    no_proxies,
    serve_stub,
)


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubGitHub]:
    no_proxies(monkeypatch)
    with serve_stub() as state:
        yield state


def upsert(stub: StubGitHub, body: str = "## Benchmarks\n\nall good\n", **kwargs: Any):
    kwargs.setdefault("sleep", FakeSleep())
    return upsert_sticky_comment(REPO, PR, body, kwargs.pop("token", TOKEN), stub.base, **kwargs)


# -- create, update, pagination ---------------------------------------------


def test_creates_the_comment_when_none_carries_the_marker(stub: StubGitHub) -> None:
    stub.add_comment("LGTM")
    result = upsert(stub)
    assert stub.methods() == ["GET", "POST"]
    assert result.action == "created"
    assert len(stub.comments) == 2
    posted = stub.comments[1]
    assert posted["id"] == result.comment_id
    assert posted["body"].startswith(STICKY_MARKER + "\n## Benchmarks")
    assert result.html_url == posted["html_url"]
    assert stub.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_updates_the_marked_comment_in_place(stub: StubGitHub) -> None:
    stub.add_comment("first!")
    old = stub.add_comment(f"{STICKY_MARKER}\nold numbers")
    stub.add_comment("a reply")
    result = upsert(stub, f"{STICKY_MARKER}\nnew numbers")
    # A marked comment turned up: who the token is gets asked (once), then it is edited.
    assert [(r.method, r.path) for r in stub.requests] == [
        ("GET", f"/repos/{REPO}/issues/{PR}/comments"), ("GET", "/user"),
        ("PATCH", f"/repos/{REPO}/issues/comments/{old['id']}"),
    ]
    assert result.action == "updated" and result.comment_id == old["id"]
    assert len(stub.comments) == 3
    assert old["body"] == f"{STICKY_MARKER}\nnew numbers"


def test_identical_body_is_left_alone(stub: StubGitHub) -> None:
    stub.add_comment(f"{STICKY_MARKER}\nsame")
    result = upsert(stub, f"{STICKY_MARKER}\nsame")
    assert stub.methods() == ["GET", "GET"]  # the comments, and who the token is
    assert result.action == "unchanged"


def test_finds_the_marker_on_the_second_page(stub: StubGitHub) -> None:
    for index in range(150):
        stub.add_comment(f"chatter {index}")
    target = stub.comments[120]
    target["body"] = f"{STICKY_MARKER}\nold"
    result = upsert(stub, "fresh")
    assert stub.methods() == ["GET", "GET", "GET", "PATCH"]  # two pages, and GET /user
    assert [r.query.get("page") for r in stub.requests[:2]] == [None, ["2"]]
    assert result.comment_id == target["id"]
    assert len(stub.comments) == 150  # no duplicate


def test_link_header_parsing() -> None:
    links = parse_link_header(
        '<https://api.github.com/x?page=2>; rel="next", <https://api.github.com/x?page=9>; '
        'rel="last"'
    )
    assert links == {
        "next": "https://api.github.com/x?page=2",
        "last": "https://api.github.com/x?page=9",
    }
    assert parse_link_header(None) == {}


def test_refuses_to_follow_pagination_to_another_host(stub: StubGitHub) -> None:
    client = GitHubClient(TOKEN, stub.base, sleep=FakeSleep())
    with pytest.raises(GitHubError, match="refusing to send the token"):
        client.request("GET", "http://127.0.0.2:1/repos/x", what="x")
    assert stub.requests == []


# -- retries -------------------------------------------------------------------


def test_a_502_then_success_is_retried_after_a_back_off(stub: StubGitHub) -> None:
    stub.faults.append(Fault("GET", 502, body={"message": "Server Error"}))
    sleep = FakeSleep()
    result = upsert(stub, sleep=sleep)
    assert stub.methods() == ["GET", "GET", "POST"]
    assert sleep.waits == [1.0]
    assert result.action == "created" and len(stub.comments) == 1


def test_persistent_5xx_gives_up_after_the_bounded_attempts(stub: StubGitHub) -> None:
    stub.faults.extend(Fault("GET", 503, body={"message": "busy"}) for _ in range(10))
    sleep = FakeSleep()
    with pytest.raises(GitHubError, match=r"failed 4 times, last: GitHub answered 503"):
        upsert(stub, sleep=sleep, retry=RetryPolicy(attempts=4))
    assert stub.methods() == ["GET"] * 4
    assert sleep.waits == [1.0, 2.0, 4.0]


def test_a_post_that_failed_but_landed_is_not_posted_twice(stub: StubGitHub) -> None:
    stub.faults.append(Fault("POST", 502, body={"message": "Server Error"}, apply=True))
    result = upsert(stub, "hello")
    assert stub.methods() == ["GET", "POST", "GET", "GET"]  # ..., the comments, GET /user
    assert len(stub.comments) == 1
    assert result.action == "unchanged" and result.comment_id == stub.comments[0]["id"]


def test_a_post_that_failed_and_did_not_land_is_posted_again(stub: StubGitHub) -> None:
    stub.faults.append(Fault("POST", 502, body={"message": "Server Error"}))
    sleep = FakeSleep()
    result = upsert(stub, "hello", sleep=sleep)
    assert stub.methods() == ["GET", "POST", "GET", "POST"]
    assert sleep.waits == [1.0]
    assert result.action == "created" and len(stub.comments) == 1


@pytest.mark.parametrize("answer", [{"html_url": "https://x"}, {"id": "9001"}, {"id": True},
                                    ["not", "a", "comment"]],
                         ids=["no id", "id a string", "id a bool", "a list"])
def test_a_created_comment_github_answers_without_a_usable_id_is_refused(
    stub: StubGitHub, answer: object
) -> None:
    stub.faults.append(Fault("POST", 201, body=answer))
    with pytest.raises(GitHubError, match="answered POST .* with a comment whose id is "
                                          ".*: check --api-url"):
        upsert(stub, "hello")


def test_retry_after_is_honoured_on_a_secondary_rate_limit(stub: StubGitHub) -> None:
    stub.faults.append(
        Fault(
            "GET",
            403,
            headers={"Retry-After": "7"},
            body={"message": "You have exceeded a secondary rate limit."},
        )
    )
    sleep = FakeSleep()
    result = upsert(stub, sleep=sleep)
    assert sleep.waits == [7.0]
    assert stub.methods() == ["GET", "GET", "POST"]
    assert result.action == "created"


def test_rate_limit_reset_is_honoured_when_none_remain(stub: StubGitHub) -> None:
    stub.faults.append(
        Fault(
            "PATCH",
            429,
            headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000030"},
            body={"message": "API rate limit exceeded"},
        )
    )
    stub.add_comment(f"{STICKY_MARKER}\nold")
    sleep = FakeSleep()
    result = upsert(stub, sleep=sleep, now=lambda: 1000000.0)
    assert sleep.waits == [30.0]
    assert stub.methods() == ["GET", "GET", "PATCH", "PATCH"]
    assert result.action == "updated"


def test_secondary_rate_limit_without_headers_waits_a_minute_then_doubles(
    stub: StubGitHub,
) -> None:
    for _ in range(2):
        stub.faults.append(
            Fault("GET", 403, body={"message": "You have exceeded a secondary rate limit"})
        )
    sleep = FakeSleep()
    upsert(stub, sleep=sleep)
    assert sleep.waits == [60.0, 120.0]


def test_a_rate_limit_longer_than_the_cap_fails_at_once(stub: StubGitHub) -> None:
    stub.faults.append(Fault("GET", 429, headers={"Retry-After": "3600"}, body={}))
    sleep = FakeSleep()
    with pytest.raises(GitHubError, match="asks to wait 3600 s.*run it again later"):
        upsert(stub, sleep=sleep, retry=RetryPolicy(max_wait_s=600))
    assert sleep.waits == []
    assert stub.methods() == ["GET"]


def test_network_errors_are_retried_with_back_off_then_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connections are refused
        sleep = FakeSleep()
        with pytest.raises(
            GitHubError,
            match=r"failed 3 times, last: cannot reach http://127.*check --api-url and the network",
        ):
            upsert_sticky_comment(
                REPO,
                PR,
                "x",
                TOKEN,
                f"http://127.0.0.1:{port}",
                sleep=sleep,
                retry=RetryPolicy(attempts=3),
            )
    assert sleep.waits == [1.0, 2.0]


# -- errors that retrying cannot fix ------------------------------------------


def test_403_without_rate_limit_says_which_permission_is_missing(stub: StubGitHub) -> None:
    stub.faults.append(
        Fault("POST", 403, body={"message": "Resource not accessible by integration"})
    )
    sleep = FakeSleep()
    with pytest.raises(GitHubError) as info:
        upsert(stub, sleep=sleep)
    message = info.value.message
    assert "Resource not accessible by integration" in message
    assert message.endswith(
        "give the job `permissions: pull-requests: write` (a pull request from a fork only "
        "ever gets a read-only token)"
    )
    assert "\n" not in message
    assert sleep.waits == [] and stub.methods() == ["GET", "POST"]


def test_401_names_the_token_variable(stub: StubGitHub) -> None:
    with pytest.raises(GitHubError) as info:
        upsert(stub, token="wrong-token", token_source="BOT_TOKEN")
    assert "401 Bad credentials" in info.value.message
    assert info.value.message.endswith("set $BOT_TOKEN to a valid, unexpired token")
    assert stub.methods() == ["GET"]


def test_404_points_at_repo_and_pr(stub: StubGitHub) -> None:
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment("octo/nope", PR, "x", TOKEN, stub.base, sleep=FakeSleep())
    assert "found no pull request #7 in octo/nope (404 Not Found)" in info.value.message
    assert "check --repo and --pr" in info.value.message


def test_422_shows_githubs_validation_errors(stub: StubGitHub) -> None:
    stub.faults.append(
        Fault(
            "POST",
            422,
            body={
                "message": "Validation Failed",
                "errors": [{"resource": "IssueComment", "code": "custom", "message": "nope"}],
            },
        )
    )
    with pytest.raises(GitHubError) as info:
        upsert(stub)
    assert "(422 Validation Failed; nope)" in info.value.message
    assert "check that --body is the markdown comment file" in info.value.message


def test_errors_are_epbench_errors_with_exit_code_1() -> None:
    assert issubclass(GitHubError, EpbenchError)
    assert GitHubError("x").exit_code == 1


@pytest.mark.parametrize(
    ("repo", "pr", "api_url", "expected"),
    [
        ("not-a-repo", 7, "https://api.github.com", "is not OWNER/NAME"),
        (REPO, 0, "https://api.github.com", "is not a pull request number"),
        (REPO, 7, "http://api.github.com", "is not an https URL"),
        (REPO, 7, "ftp://example.com", "is not an https URL"),
    ],
)
def test_bad_arguments_are_refused_before_any_request(
    repo: str, pr: int, api_url: str, expected: str
) -> None:
    with pytest.raises(GitHubError, match=expected):
        upsert_sticky_comment(repo, pr, "x", TOKEN, api_url, sleep=FakeSleep())


def test_an_empty_token_is_refused_with_the_remedy() -> None:
    with pytest.raises(GitHubError, match=r"\$GITHUB_TOKEN is empty or unset; set it"):
        GitHubClient("", "https://api.github.com")


def test_repr_hides_the_token() -> None:
    client = GitHubClient(TOKEN, "https://api.github.com")
    assert TOKEN not in repr(client)
    assert TOKEN not in str(vars(client).get("token_source"))


# -- the size limit -------------------------------------------------------------


def test_an_oversize_body_is_trimmed_with_a_pointer_not_rejected(stub: StubGitHub) -> None:
    rows = "".join(f"| relu_d{i}_w8 | ✅ | +0.1 % |\n" for i in range(4000))
    body = f"{STICKY_MARKER}\n## Benchmarks\n\n| case | verdict | change |\n|---|---|---|\n{rows}"
    assert comment_length(body) > COMMENT_LIMIT
    result = upsert(stub, body, artifact_hint="https://github.test/run/1/artifacts/2")
    posted = stub.comments[0]["body"]
    assert result.trimmed and result.action == "created"
    assert comment_length(posted) <= COMMENT_LIMIT
    assert posted.startswith(f"{STICKY_MARKER}\n## Benchmarks")
    assert "(https://github.test/run/1/artifacts/2)" in posted
    assert "**Trimmed:**" in posted
    table_lines = [ln for ln in posted.splitlines() if ln.startswith("| relu_")]
    assert all(ln.endswith("|") for ln in table_lines)  # cut at a line boundary


def test_fit_counts_astral_characters_twice_and_keeps_the_limit() -> None:
    body = "🔴" * 40000  # 40000 code points, 80000 UTF-16 units
    text, trimmed = fit_comment_body(body, limit=COMMENT_LIMIT)
    assert trimmed
    assert comment_length(text) <= COMMENT_LIMIT
    assert len(text.encode("utf-16-le")) // 2 <= COMMENT_LIMIT


def test_fit_closes_an_open_fence_and_details_and_keeps_a_late_marker() -> None:
    body = (
        "<details><summary>raw</summary>\n\n```\n"
        + "x = 1\n" * 500
        + f"```\n</details>\n{STICKY_MARKER}\n"
    )
    text, trimmed = fit_comment_body(body, limit=1000, artifact_hint="the `bench-out` artifact")
    assert trimmed and comment_length(text) <= 1000
    assert text.startswith(STICKY_MARKER)
    head = text.split("\n\n---\n**Trimmed:**")[0]
    assert head.endswith("x = 1\n```\n</details>")
    assert "The full report is the `bench-out` artifact." in text


def test_fit_closes_only_real_details_not_text_in_code_spans() -> None:
    # Inert artifact text may hold "<details>": a cut must not add closers for it.
    row = "- `<details><details><summary>x`\n"
    text, trimmed = fit_comment_body("<details>\n\n" + row * 200, limit=1000)
    head = text.split("\n\n---\n**Trimmed:**")[0]
    assert trimmed and head.count("</details>") == 1 and head.endswith("`\n</details>")


def test_fit_leaves_a_small_body_alone_but_adds_the_marker() -> None:
    assert fit_comment_body("hi") == (f"{STICKY_MARKER}\nhi", False)
    assert fit_comment_body(f"a\n{STICKY_MARKER}") == (f"a\n{STICKY_MARKER}", False)
    exact = STICKY_MARKER + "x" * (COMMENT_LIMIT - len(STICKY_MARKER))
    assert fit_comment_body(exact) == (exact, False)


# -- the command, and the token never showing ----------------------------------


def run_comment(args: list[str], env: dict[str, str | None]):
    base_env: dict[str, str | None] = {
        "GITHUB_TOKEN": None,
        "GITHUB_REPOSITORY": None,
        "GITHUB_API_URL": None,
    }
    base_env.update(env)
    return CliRunner().invoke(comment, args, env=base_env)


def test_command_creates_then_updates(stub: StubGitHub, tmp_path) -> None:
    body = tmp_path / "comment.md"
    body.write_text("## Benchmarks\n", encoding="utf-8")
    args = ["--pr", "7", "--body", str(body), "--api-url", stub.base]
    first = run_comment(args, {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPO})
    assert first.exit_code == 0, first.output
    assert first.output.startswith("created the epbench comment on octo/widgets#7: https://")
    body.write_text("## Benchmarks v2\n", encoding="utf-8")
    second = run_comment(args + ["--repo", REPO, "--token-env", "BOT_TOKEN"], {"BOT_TOKEN": TOKEN})
    assert second.exit_code == 0, second.output
    assert second.stdout.startswith("updated the epbench comment")
    assert second.stderr == ("$BOT_TOKEN is an installation token (GET /user: 403), so it "
                             "comments as github-actions[bot]; a GitHub App's token needs "
                             "--bot-login SLUG[bot]\n")
    assert len(stub.comments) == 1
    assert stub.comments[0]["body"] == f"{STICKY_MARKER}\n## Benchmarks v2\n"
    assert TOKEN not in first.output + second.output


def test_command_missing_body_file_is_a_clear_error(tmp_path) -> None:
    result = run_comment(
        ["--repo", REPO, "--pr", "7", "--body", str(tmp_path / "nope.md")],
        {"GITHUB_TOKEN": TOKEN},
    )
    assert result.exit_code == 1
    assert "no comment body at" in result.output
    assert "Traceback" not in result.output


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ECHO = {"message": f"Bad credentials for Bearer {TOKEN}"}  # a server that echoes the token


@pytest.mark.parametrize(
    ("faults", "extra_env", "expected"),
    [
        ([], {"GITHUB_TOKEN": "ghs_wrong"}, "401 Bad credentials"),
        ([Fault("GET", 401, body=ECHO)], {}, "set $GITHUB_TOKEN to a valid"),
        ([Fault("POST", 403, body=ECHO)], {}, "pull-requests: write"),
        ([Fault("GET", 404, body=ECHO)], {}, "check --repo and --pr"),
        ([Fault("POST", 422, body=ECHO)], {}, "check that --body"),
        ([Fault("GET", 502, body=ECHO)] * 5, {}, "failed 5 times"),
        ([Fault("POST", 502, body=ECHO)] * 5, {}, "could not post the comment"),
        ([Fault("GET", 429, {"Retry-After": "99999"}, ECHO)], {}, "run it again later"),
        ([Fault("GET", 403, {"Retry-After": "1"}, ECHO)], {}, "created the epbench comment"),
        ([], {"GITHUB_TOKEN": ""}, "$GITHUB_TOKEN is empty or unset"),
        ("closed-port", {}, "cannot reach http://127.0.0.1:"),
        ("plain-http", {}, "is not an https URL"),
    ],
)
def test_command_never_shows_the_token(
    stub: StubGitHub,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
    faults: Any,
    extra_env: dict[str, str],
    expected: str,
) -> None:
    sleep = FakeSleep()
    monkeypatch.setattr(github.time, "sleep", sleep)
    body = tmp_path / "comment.md"
    body.write_text("## Benchmarks\n", encoding="utf-8")
    api_url = stub.base
    if faults == "closed-port":
        api_url = f"http://127.0.0.1:{_closed_port()}"
    elif faults == "plain-http":
        api_url = "http://ghe.example.com/api/v3"
    else:
        stub.faults.extend(faults)
    env = {"GITHUB_TOKEN": TOKEN, **extra_env}
    result = run_comment(
        ["--repo", REPO, "--pr", "7", "--body", str(body), "--api-url", api_url], env
    )
    assert expected in result.output
    assert result.exit_code == (0 if expected.startswith("created") else 1)
    assert TOKEN not in result.output
    assert "Traceback" not in result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert TOKEN not in repr(result.exception) and TOKEN not in str(result.exception)
    assert TOKEN not in repr(sleep.waits)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "say what to post: --pr N --body FILE, or --from-artifact DIR"),
        (["--pr", "7"], "say what to post"),
        (["--pr", "7", "--body", "x.md", "--run-head-sha", "a" * 40],
         "--run-head-sha goes with --from-artifact"),
    ],
)
def test_command_says_what_to_pass(stub: StubGitHub, args: list[str], expected: str) -> None:
    result = run_comment(["--repo", REPO, "--api-url", stub.base, *args],
                         {"GITHUB_TOKEN": TOKEN})
    assert result.exit_code == 1
    assert expected in result.output and len(result.output.splitlines()) == 1
    assert stub.requests == []
