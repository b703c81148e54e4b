"""The pull-request bot's sticky comment: write it, or plan the one request that will.

`upsert_sticky_comment` finds the comment that carries `STICKY_MARKER` (an HTML
comment, invisible once rendered) AND was written by the token's own identity, then
PATCHes it, or POSTs a new one when there is none; a POST that may have landed despite
an error is not re-sent before the comments are listed again. With `expect_head_sha`
the PR number is only a claim, checked against the PR's head before anything is read.
The REST calls, and the safety rules they keep, are in reports/bot/github.py.

`plan_sticky_comment` makes every check and lookup `upsert_sticky_comment` makes, with
a read-only token, and stops short of writing: it returns the one request to make (a
CommentPlan), which `write_plan` saves as three small files for a job that holds the
write token and runs none of this code (.github/workflows/comment.yml, job `post`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from epbench.reports.bot.body import COMMENT_LIMIT, comment_length, fit_comment_body
from epbench.reports.bot.github import (
    _LOGIN_RE,
    _SHA_RE,
    DEFAULT_API_URL,
    GitHubClient,
    GitHubError,
    PullRequestMismatch,
    RetryPolicy,
    _AmbiguousWrite,
    _is_id,
)
from epbench.reports.sticky import STICKY_MARKER  # written by the renderer, searched for here

_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class UpsertResult:
    action: str  # "created" | "updated" | "unchanged"
    comment_id: int
    html_url: str | None
    trimmed: bool
    length: int  # of the body sent, in comment_length units


# The plan's files, one fact each, so the post job reads them with no JSON parser:
# the PR number, the comment to edit ("none": create one), and the request's JSON body.
PLAN_PR_FILE = "pull-request"
PLAN_COMMENT_FILE = "comment-id"
PLAN_REQUEST_FILE = "request.json"
PLAN_NO_COMMENT = "none"


@dataclass(frozen=True)
class CommentPlan:
    """The one request that writes the sticky comment: PATCH comment `comment_id`, or
    POST a new comment on `pr` when it is None. `body` is fitted and carries the marker."""

    pr: int
    comment_id: int | None
    body: str
    trimmed: bool

    def __post_init__(self) -> None:
        # Checked here, so no plan that the post job would have to refuse is ever written.
        if not _is_id(self.pr):
            raise GitHubError(f"plan: PR number {self.pr!r} is not a positive integer: "
                              "pass the PR's number")
        if self.comment_id is not None and not _is_id(self.comment_id):
            raise GitHubError(f"plan: comment id {self.comment_id!r} is not a positive "
                              "integer: check --api-url points at the REST API")
        if STICKY_MARKER not in self.body or comment_length(self.body) > COMMENT_LIMIT:
            raise GitHubError("plan: the body lacks the sticky marker or is over GitHub's "
                              "limit: fit it with fit_comment_body first")

    @property
    def action(self) -> str:
        return "create" if self.comment_id is None else "update"

def upsert_sticky_comment(
    repo: str,
    pr: int,
    body: str,
    token: str,
    api_url: str = DEFAULT_API_URL,
    *,
    marker: str = STICKY_MARKER,
    artifact_hint: str | None = None,
    token_source: str = "GITHUB_TOKEN",
    expect_head_sha: str | None = None,
    bot_login: str | None = None,
    retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, shared safely
    sleep: Callable[[float], None] | None = None,
    now: Callable[[], float] | None = None,
    log: Callable[[str], None] | None = None,
) -> UpsertResult:
    """Create or update the one comment on `repo`#`pr` that carries `marker` and was
    written by the token's identity: `bot_login` when given, else GitHubClient.token_login
    (asked only when a marked comment is found). A marked comment by anyone else is
    left alone, and a new comment is posted.

    The body is fitted to GitHub's limit first (see fit_comment_body). With
    `expect_head_sha`, `pr` is only a claim: the comment is written only if GitHub
    says that PR's head commit is `expect_head_sha` (PullRequestMismatch otherwise,
    before any comment is read or written). Raises GitHubError, with a message that
    never contains the token.
    """
    client, text, trimmed = _confirmed_client(
        repo, pr, body, token, api_url, marker=marker, artifact_hint=artifact_hint,
        token_source=token_source, expect_head_sha=expect_head_sha, bot_login=bot_login,
        retry=retry, sleep=sleep, now=now, log=log,
    )
    author = _author(client, bot_login)
    last_problem = ""
    for attempt in range(1, retry.attempts + 1):
        existing = client.find_comment(repo, pr, marker, author)
        if existing is not None:
            if existing.body == text:
                return UpsertResult(
                    "unchanged", existing.id, existing.html_url, trimmed, comment_length(text)
                )
            updated = client.update_comment(repo, existing.id, text)
            return UpsertResult(
                "updated", existing.id, updated.html_url, trimmed, comment_length(text)
            )
        try:
            created = client.create_comment(repo, pr, text)
        except _AmbiguousWrite as exc:
            # It may have been created anyway: look again before posting again.
            last_problem = exc.problem
            if attempt < retry.attempts:
                wait = min(retry.first_delay_s * 2 ** (attempt - 1), retry.max_wait_s)
                client._say(
                    f"POST comment on {repo}#{pr}: {exc.problem}; checking whether it landed, "
                    f"in {wait:.0f} s (attempt {attempt + 1} of {retry.attempts})"
                )
                client._sleep(wait)
            continue
        return UpsertResult(
            "created", created.id, created.html_url, trimmed, comment_length(text)
        )
    raise client._error(
        f"could not post the comment on {repo}#{pr} in {retry.attempts} attempts, last: "
        f"{last_problem}: check https://www.githubstatus.com and run the command again"
    )


def _confirmed_client(
    repo: str,
    pr: int,
    body: str,
    token: str,
    api_url: str,
    *,
    marker: str,
    artifact_hint: str | None,
    token_source: str,
    expect_head_sha: str | None,
    bot_login: str | None,
    retry: RetryPolicy,
    sleep: Callable[[float], None] | None,
    now: Callable[[], float] | None,
    log: Callable[[str], None] | None,
) -> tuple[GitHubClient, str, bool]:
    """Check the arguments, confirm the PR's head when asked, and fit the body: what
    upserting and planning share. Returns the client, the text to post and whether it
    was trimmed."""
    if not _REPO_RE.match(repo or ""):
        raise GitHubError(f"--repo {repo!r} is not OWNER/NAME: pass e.g. --repo octo/widgets")
    if pr < 1:
        raise GitHubError(f"--pr {pr} is not a pull request number: pass the PR's number, e.g. 42")
    if bot_login is not None and not _LOGIN_RE.match(bot_login):
        raise GitHubError(
            f"--bot-login {bot_login[:80]!r} is not a GitHub login: pass the account the "
            "token comments as, e.g. github-actions[bot] or my-app[bot]"
        )
    if expect_head_sha is not None and not _SHA_RE.match(expect_head_sha):
        raise GitHubError(
            f"--run-head-sha {expect_head_sha[:80]!r} is not a full commit sha: pass the "
            "bench run's head commit, ${{ github.event.workflow_run.head_sha }}"
        )
    client = GitHubClient(
        token, api_url, token_source=token_source, retry=retry, sleep=sleep, now=now, log=log
    )
    if expect_head_sha is not None:
        head = client.pull_request_head(repo, pr)
        if head != expect_head_sha:
            raise PullRequestMismatch(
                f"pull request #{pr} in {repo} has head {head[:12]}, but the bench run measured "
                f"{expect_head_sha[:12]}: not commenting; if the PR was pushed to since, its "
                "newer bench run will comment, otherwise the artifact's PR number is not that "
                "run's (look at what wrote it)"
            )
    text, trimmed = fit_comment_body(body, marker=marker, artifact_hint=artifact_hint)
    if trimmed:
        client._say(
            f"the comment is longer than GitHub's {COMMENT_LIMIT}-character limit: trimmed it "
            "and pointed at the full report"
        )
    return client, text, trimmed


def _author(client: GitHubClient, bot_login: str | None) -> Callable[[], str]:
    """The token's identity, asked of GitHub once, only when a marked comment turns up."""
    identity: list[str] = [bot_login] if bot_login else []

    def author() -> str:
        if not identity:  # asked once, however often the comments are listed
            identity.append(client.token_login())
        return identity[0]

    return author


def plan_sticky_comment(
    repo: str,
    pr: int,
    body: str,
    token: str,
    api_url: str = DEFAULT_API_URL,
    *,
    marker: str = STICKY_MARKER,
    artifact_hint: str | None = None,
    token_source: str = "GITHUB_TOKEN",
    expect_head_sha: str | None = None,
    bot_login: str | None = None,
    retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, shared safely
    sleep: Callable[[float], None] | None = None,
    now: Callable[[], float] | None = None,
    log: Callable[[str], None] | None = None,
) -> CommentPlan:
    """What upsert_sticky_comment would write, without writing: every check it makes
    (the PR's head with `expect_head_sha`, the comment by marker AND author), with a
    token that only needs to read. Returns the plan; an unchanged comment is planned
    as an update (the same body again), so the post job always makes one request."""
    client, text, trimmed = _confirmed_client(
        repo, pr, body, token, api_url, marker=marker, artifact_hint=artifact_hint,
        token_source=token_source, expect_head_sha=expect_head_sha, bot_login=bot_login,
        retry=retry, sleep=sleep, now=now, log=log,
    )
    # find_comment refuses a comment whose id may not go into a URL.
    existing = client.find_comment(repo, pr, marker, _author(client, bot_login))
    return CommentPlan(pr, None if existing is None else existing.id, text, trimmed)


def write_plan(plan: CommentPlan, folder: str | Path) -> Path:
    """Save `plan` for the post job as PLAN_PR_FILE, PLAN_COMMENT_FILE (an id, or
    PLAN_NO_COMMENT) and PLAN_REQUEST_FILE (the JSON request body, ASCII). The folder is
    made; one that already holds anything is refused, so no stale file rides along."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if any(folder.iterdir()):
            raise GitHubError(f"--plan-out {folder} is not empty: pass a new folder")
        comment_id = PLAN_NO_COMMENT if plan.comment_id is None else plan.comment_id
        files = {
            PLAN_PR_FILE: f"{plan.pr}\n",
            PLAN_COMMENT_FILE: f"{comment_id}\n",
            PLAN_REQUEST_FILE: json.dumps({"body": plan.body}) + "\n",
        }
        for name, text in files.items():
            (folder / name).write_text(text, encoding="ascii")
    except OSError as exc:
        raise GitHubError(f"cannot write the plan in {folder} ({exc.strerror}): pass a "
                          "folder you may write") from None
    return folder
