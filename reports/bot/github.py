"""The pull-request bot's client: keep one sticky comment up to date on a PR.

`upsert_sticky_comment` finds the comment that carries `STICKY_MARKER` (an HTML
comment, invisible once rendered) AND was written by the token's own identity, by
walking every page of the PR's issue comments, then PATCHes it, or POSTs a new one
when there is none. Only the standard library is used (urllib.request), so the bot
adds no dependency.

Safety rules this module keeps:
- only the bot's own comment is ever edited: anyone may paste the marker into a
  comment of theirs, so a marked comment counts only if its `user.login` is the
  token's identity (`bot_login`, or `GET /user`; an installation token such as
  GITHUB_TOKEN cannot call that and is `github-actions[bot]`); a marker in anyone
  else's comment is ignored and a new comment is posted;
- the token travels only in the `Authorization` header, added as an
  "unredirected" header, and redirects are never followed (a 3xx is an error),
  so it is never sent anywhere but `api_url`; pagination links to another host
  are refused for the same reason;
- the token never appears in a message, a log line or a repr: every message is
  built here and passed through `_redact` before it leaves;
- retries are bounded: 5xx and network errors back off exponentially, rate
  limits wait as long as GitHub says (`Retry-After`, or `x-ratelimit-reset` when
  `x-ratelimit-remaining` is 0, else at least a minute, doubling), and a wait
  longer than `RetryPolicy.max_wait_s` fails at once instead of hanging the job;
- a POST that failed with a 5xx or a dropped connection may still have created
  the comment, so it is not blindly re-sent: the comments are listed again
  first, and the comment found then is PATCHed (no duplicates);
- with `expect_head_sha`, the PR number is a claim (read from a bench run's
  artifact, which the PR's code may have written): the PR is fetched first and
  nothing is listed or posted unless its head commit is the one that run measured.

`plan_sticky_comment` makes every check and lookup `upsert_sticky_comment` makes, with
a read-only token, and stops short of writing: it returns the one request to make (a
CommentPlan), which `write_plan` saves as three small files for a job that holds the
write token and runs none of this code (.github/workflows/comment.yml, job `post`).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epbench.core.errors import EpbenchError
from epbench.reports.bot.body import COMMENT_LIMIT, comment_length, fit_comment_body
from epbench.reports.sticky import STICKY_MARKER  # written by the renderer, searched for here

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
PER_PAGE = 100  # the largest page GitHub serves
MAX_PAGES = 200  # 20,000 comments: beyond that a Link header is going round in circles

_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# A git commit id: SHA-1 (40 hex digits) or SHA-256 (64).
_SHA_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
# Who writes a comment with a workflow's GITHUB_TOKEN. An installation token (this one,
# or a GitHub App's) cannot call GET /user, so it cannot tell; an App's is SLUG[bot].
ACTIONS_BOT_LOGIN = "github-actions[bot]"
# A login as GitHub spells them: a user's (letters, digits, hyphens; `_` on Enterprise)
# or an App's bot ("name[bot]"). Brackets are never in a user's login, so no user can be a bot.
_LOGIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}(?:\[bot\])?$")


class GitHubError(EpbenchError):
    """GitHub refused or failed a request; the message says what to fix."""


class PullRequestMismatch(GitHubError):
    """The pull request named is not the one whose head commit was measured."""


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try. Attempts are per request (and per upsert round)."""

    attempts: int = 5
    first_delay_s: float = 1.0  # 5xx / network: 1, 2, 4, 8 s ...
    rate_limit_delay_s: float = 60.0  # GitHub: "wait at least one minute" when it names no time
    max_wait_s: float = 900.0  # a single wait longer than this fails instead


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


@dataclass(frozen=True)
class UpsertResult:
    action: str  # "created" | "updated" | "unchanged"
    comment_id: int
    html_url: str | None
    trimmed: bool
    length: int  # of the body sent, in comment_length units


# A comment id or PR number the post job's shell puts in a URL: a positive integer that
# fits GitHub's 64-bit ids (and its PR numbers, which are smaller).
MAX_ID = 2**63 - 1
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


def _is_id(value: object) -> bool:
    return type(value) is int and 1 <= value <= MAX_ID  # not a bool, not a float


class _AmbiguousWrite(Exception):
    """A non-idempotent request failed in a way that may have applied it."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # urllib would turn a redirected POST into a GET and report success; a
    # redirect here means the repository moved, which the user must fix.
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        return None


def _redact(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _github_message(resp: HttpResponse) -> str:
    """GitHub's own explanation from an error body, on one line."""
    try:
        doc = resp.json()
    except (ValueError, UnicodeDecodeError):
        return _one_line(resp.body.decode("utf-8", "replace"))
    if not isinstance(doc, dict):
        return ""
    parts = [str(doc.get("message", ""))]
    for err in doc.get("errors") or []:
        if isinstance(err, dict):
            parts.append(str(err.get("message") or err.get("code") or ""))
        else:
            parts.append(str(err))
    return _one_line("; ".join(p for p in parts if p))


def parse_link_header(value: str | None) -> dict[str, str]:
    """`<url>; rel="next", <url>; rel="last"` -> {"next": url, "last": url}."""
    links: dict[str, str] = {}
    if not value:
        return links
    for part in value.split(","):
        match = re.match(r"\s*<([^>]*)>(.*)", part)
        if not match:
            continue
        rel = re.search(r';\s*rel\s*=\s*"?([^";]+)"?', match.group(2))
        if rel:
            for name in rel.group(1).split():
                links[name] = match.group(1)
    return links


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def check_api_url(api_url: str) -> str:
    """The API base without a trailing slash; refuses URLs the token must not go to."""
    parts = urllib.parse.urlsplit(api_url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host:
        return api_url.rstrip("/")
    if parts.scheme == "http" and host in _LOOPBACK_HOSTS:
        return api_url.rstrip("/")
    raise GitHubError(
        f"--api-url {api_url!r} is not an https URL: pass https://api.github.com, or "
        "https://HOST/api/v3 for GitHub Enterprise Server"
    )


class GitHubClient:
    """A minimal REST client for issue comments. The token is never shown."""

    def __init__(
        self,
        token: str,
        api_url: str = DEFAULT_API_URL,
        *,
        token_source: str = "GITHUB_TOKEN",
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, shared safely
        sleep: Callable[[float], None] | None = None,
        now: Callable[[], float] | None = None,
        log: Callable[[str], None] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.api_url = check_api_url(api_url)
        self._token = token
        self.token_source = token_source
        self.retry = retry
        # Looked up now, not at import, so tests can swap the clock.
        self._sleep = sleep or time.sleep
        self._now = now or time.time
        self._log = log
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(_NoRedirects())
        if not token:
            raise self._error(
                f"no GitHub token: ${token_source} is empty or unset; set it to a token "
                "that may write pull request comments (in a workflow: "
                "`env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}`)"
            )

    def __repr__(self) -> str:
        return f"GitHubClient(api_url={self.api_url!r}, token=<from ${self.token_source}>)"

    # -- plumbing ---------------------------------------------------------

    def _error(self, message: str) -> GitHubError:
        return GitHubError(_redact(message, self._token))

    def _say(self, message: str) -> None:
        if self._log is not None:
            self._log(_redact(message, self._token))

    def _path(self, url: str) -> str:
        """The URL without the API base, for messages."""
        return url[len(self.api_url) :] if url.startswith(self.api_url) else url

    def _send(self, method: str, url: str, payload: dict[str, Any] | None) -> HttpResponse:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/vnd.github+json")
        request.add_header("X-GitHub-Api-Version", API_VERSION)
        request.add_header("User-Agent", "epbench-comment")  # GitHub rejects requests without one
        if data is not None:
            request.add_header("Content-Type", "application/json; charset=utf-8")
        # Unredirected: urllib never copies it to another request.
        request.add_unredirected_header("Authorization", f"Bearer {self._token}")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as resp:
                return HttpResponse(
                    resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
                )
        except urllib.error.HTTPError as exc:
            try:
                body = exc.read()
            except OSError:
                body = b""
            headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
            return HttpResponse(exc.code, headers, body)

    def _rate_limit_wait(self, resp: HttpResponse, attempt: int) -> float | None:
        """Seconds to wait if `resp` is a rate limit, else None."""
        if resp.status not in (403, 429):
            return None
        retry_after = resp.headers.get("retry-after")
        if retry_after:
            try:
                return max(0.0, float(retry_after))
            except ValueError:
                when = email.utils.parsedate_to_datetime(retry_after)
                if when is not None:
                    return max(0.0, when.timestamp() - self._now())
        if resp.headers.get("x-ratelimit-remaining") == "0":
            try:
                reset = float(resp.headers.get("x-ratelimit-reset", ""))
            except ValueError:
                reset = None
            if reset is not None:
                return max(1.0, reset - self._now())
        if resp.status == 429 or "rate limit" in _github_message(resp).lower():
            return self.retry.rate_limit_delay_s * 2 ** (attempt - 1)
        return None

    def _refusal(self, method: str, url: str, resp: HttpResponse, what: str) -> GitHubError:
        """The one-line error for a response that retrying cannot fix."""
        said = _github_message(resp) or "no message"
        where = f"{method} {self._path(url)}"
        status = resp.status
        if status == 401:
            return self._error(
                f"GitHub rejected the token (401 {said}) on {where}: set ${self.token_source} "
                "to a valid, unexpired token"
            )
        if status == 403:
            return self._error(
                f"GitHub refused {where} (403 {said}): the token may not write comments on "
                f"{what}; give the job `permissions: pull-requests: write` (a pull request "
                "from a fork only ever gets a read-only token)"
            )
        if status == 404:
            return self._error(
                f"GitHub found no {what} (404 {said}) on {where}: check --repo and --pr; "
                "a private repository also answers 404 to a token that cannot see it"
            )
        if status == 422:
            return self._error(
                f"GitHub rejected the comment on {what} (422 {said}): check that --body is "
                "the markdown comment file and that the pull request is not locked"
            )
        if 300 <= status < 400:
            moved = resp.headers.get("location", "elsewhere")
            return self._error(
                f"GitHub redirected {where} ({status}) to {moved}: the repository was "
                "renamed or transferred; pass its current OWNER/NAME as --repo"
            )
        return self._error(
            f"GitHub answered {status} to {where} ({said}): check --repo, --pr and --api-url"
        )

    def request(
        self,
        method: str,
        url: str,
        payload: dict[str, Any] | None = None,
        *,
        what: str,
        idempotent: bool = True,
        answers: tuple[int, ...] = (),
    ) -> HttpResponse:
        """Send with bounded retries; a 2xx response, one whose status is in `answers`
        (an answer the caller reads, not a failure), or a GitHubError.

        `idempotent=False` (POST): a 5xx or a network error raises
        _AmbiguousWrite instead of re-sending, since it may have been applied.
        """
        if _origin(url) != _origin(self.api_url):
            raise self._error(
                f"refusing to send the token to {_origin(url)[1]}, which is not the API host "
                f"of {self.api_url}: check --api-url"
            )
        policy = self.retry
        where = f"{method} {self._path(url)}"
        for attempt in range(1, policy.attempts + 1):
            try:
                resp = self._send(method, url, payload)
            except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
                reason = getattr(exc, "reason", exc)
                problem = f"cannot reach {self.api_url} ({reason})"
                remedy = "check --api-url and the network, then run the command again"
                if not idempotent:
                    raise _AmbiguousWrite(problem) from None
                wait = policy.first_delay_s * 2 ** (attempt - 1)
            else:
                if 200 <= resp.status < 300:
                    return resp
                rate_wait = self._rate_limit_wait(resp, attempt)
                if rate_wait is not None:
                    problem = f"rate limited ({resp.status} {_github_message(resp)})"
                    remedy = "run the command again later"
                    wait = rate_wait
                    if wait > policy.max_wait_s:
                        raise self._error(
                            f"GitHub's rate limit on {where} asks to wait {wait:.0f} s, longer "
                            f"than the {policy.max_wait_s:.0f} s this command waits: run it "
                            "again later"
                        )
                elif resp.status in answers:
                    return resp
                elif resp.status >= 500:
                    problem = f"GitHub answered {resp.status} {_github_message(resp)}".rstrip()
                    remedy = "check https://www.githubstatus.com and run the command again"
                    if not idempotent:
                        raise _AmbiguousWrite(problem)
                    wait = policy.first_delay_s * 2 ** (attempt - 1)
                else:
                    raise self._refusal(method, url, resp, what)
            if attempt == policy.attempts:
                raise self._error(
                    f"{where} failed {policy.attempts} times, last: {problem}: {remedy}"
                )
            wait = min(wait, policy.max_wait_s)
            self._say(
                f"{where}: {problem}; retrying in {wait:.0f} s "
                f"(attempt {attempt + 1} of {policy.attempts})"
            )
            self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    # -- issue comments ---------------------------------------------------

    def _comments_url(self, repo: str, pr: int) -> str:
        return f"{self.api_url}/repos/{repo}/issues/{pr}/comments"

    def token_login(self) -> str:
        """The login that comments made with this token are written by.

        GET /user names a user's token; an installation token (GITHUB_TOKEN, or a
        GitHub App's) is refused there with 403, and is taken to be GitHub Actions'
        bot: an App's token needs --bot-login SLUG[bot] (else its own comment is not
        recognised, and a new one is posted each time: never someone else's edited).
        """
        url = f"{self.api_url}/user"
        resp = self.request("GET", url, what="the token's own user", answers=(403,))
        if resp.status == 403:
            self._say(
                f"${self.token_source} is an installation token (GET /user: 403), so it "
                f"comments as {ACTIONS_BOT_LOGIN}; a GitHub App's token needs --bot-login "
                "SLUG[bot]"
            )
            return ACTIONS_BOT_LOGIN
        doc = resp.json()
        login = doc.get("login") if isinstance(doc, dict) else None
        if not isinstance(login, str) or not _LOGIN_RE.match(login):
            raise self._error(
                f"GitHub answered GET {self._path(url)} without a login: check --api-url "
                "points at the REST API, or pass --bot-login"
            )
        return login

    def find_comment(
        self, repo: str, pr: int, marker: str, author: str | Callable[[], str]
    ) -> dict[str, Any] | None:
        """The oldest comment on the PR whose body contains `marker` and whose author is
        `author` (a login, or a function asked once, only when a marked comment turns
        up), following pagination. A marked comment by anyone else is ignored."""
        what = f"pull request #{pr} in {repo}"
        login: str | None = author if isinstance(author, str) else None
        url: str | None = f"{self._comments_url(repo, pr)}?per_page={PER_PAGE}"
        for _page in range(MAX_PAGES):
            if url is None:
                return None
            resp = self.request("GET", url, what=what)
            comments = resp.json()
            if not isinstance(comments, list):
                raise self._error(
                    f"GitHub answered GET {self._path(url)} with something other than a list "
                    "of comments: check --api-url points at the REST API"
                )
            for comment in comments:
                if not (isinstance(comment, dict) and marker in (comment.get("body") or "")):
                    continue
                if login is None:
                    login = author() if callable(author) else author
                if _written_by(comment, login):
                    return comment
                self._say(
                    f"comment {comment.get('id')} on {what} carries the epbench marker but "
                    f"was not written by {login}: leaving it alone"
                )
            url = parse_link_header(resp.headers.get("link")).get("next")
        raise self._error(
            f"more than {MAX_PAGES} pages of comments on {what}: GitHub's pagination did not "
            "end; run the command again"
        )

    def pull_request_head(self, repo: str, pr: int) -> str:
        """The sha of the pull request's head commit, as GitHub has it now."""
        url = f"{self.api_url}/repos/{repo}/pulls/{pr}"
        doc = self.request("GET", url, what=f"pull request #{pr} in {repo}").json()
        head = doc.get("head") if isinstance(doc, dict) else None
        sha = head.get("sha") if isinstance(head, dict) else None
        if not isinstance(sha, str) or not _SHA_RE.match(sha):
            raise self._error(
                f"GitHub answered GET {self._path(url)} without a head commit sha: check "
                "--api-url points at the REST API"
            )
        return sha

    def create_comment(self, repo: str, pr: int, body: str) -> dict[str, Any]:
        resp = self.request(
            "POST",
            self._comments_url(repo, pr),
            {"body": body},
            what=f"pull request #{pr} in {repo}",
            idempotent=False,
        )
        return resp.json()

    def update_comment(self, repo: str, comment_id: int, body: str) -> dict[str, Any]:
        resp = self.request(
            "PATCH",
            f"{self.api_url}/repos/{repo}/issues/comments/{comment_id}",
            {"body": body},
            what=f"comment {comment_id} in {repo}",
        )
        return resp.json()


def _written_by(comment: Mapping[str, Any], login: str) -> bool:
    """Is `comment` (a REST issue comment) written by `login`? GitHub logins are
    case-insensitive; a bot login ("x[bot]") must also be a Bot account."""
    user = comment.get("user")
    if not isinstance(user, Mapping):
        return False
    author = user.get("login")
    if not isinstance(author, str) or author.lower() != login.lower():
        return False
    return not login.endswith("[bot]") or user.get("type") == "Bot"


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
            comment_id = int(existing["id"])
            if existing.get("body") == text:
                return UpsertResult(
                    "unchanged", comment_id, existing.get("html_url"), trimmed, comment_length(text)
                )
            updated = client.update_comment(repo, comment_id, text)
            return UpsertResult(
                "updated", comment_id, updated.get("html_url"), trimmed, comment_length(text)
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
            "created", int(created["id"]), created.get("html_url"), trimmed, comment_length(text)
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
    existing = client.find_comment(repo, pr, marker, _author(client, bot_login))
    comment_id = None if existing is None else existing.get("id")
    if comment_id is not None and not _is_id(comment_id):
        raise client._error(
            f"GitHub listed a comment on {repo}#{pr} whose id is {_one_line(repr(comment_id), 40)}"
            ": check --api-url points at the REST API"
        )
    return CommentPlan(pr, comment_id, text, trimmed)


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
