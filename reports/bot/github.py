"""The pull-request bot's GitHub REST client: the few calls that keep a sticky comment.

GitHubClient lists a PR's issue comments (every page), finds the one that carries a
marker AND was written by a given login, creates and edits comments, and reads a PR's
head commit and the token's identity. Only the standard library is used
(urllib.request), so the bot adds no dependency. The sticky comment's upsert and plan,
which drive this client, are in reports/bot/sticky_comment.py.

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
from typing import TYPE_CHECKING

from epbench.core.errors import EpbenchError

if TYPE_CHECKING:  # a type only: the client needs nothing but the standard library
    from epbench.reports.comparison import JsonValue

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
PER_PAGE = 100  # the largest page GitHub serves
# A comment id or PR number the post job's shell puts in a URL: a positive integer that
# fits GitHub's 64-bit ids (and its PR numbers, which are smaller).
MAX_ID = 2**63 - 1
MAX_PAGES = 200  # 20,000 comments: beyond that a Link header is going round in circles

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

    def json(self) -> JsonValue:
        return json.loads(self.body.decode("utf-8")) if self.body else None


@dataclass(frozen=True)
class Comment:
    """An issue comment, as much of GitHub's answer as the bot reads: its id (a positive
    64-bit integer, checked, since it goes into a URL), its body and its link."""

    id: int
    body: str
    html_url: str | None


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


def _is_id(value: object) -> bool:
    return type(value) is int and 1 <= value <= MAX_ID  # not a bool, not a float


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

    def _send(self, method: str, url: str, payload: Mapping[str, JsonValue] | None
              ) -> HttpResponse:
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
        payload: Mapping[str, JsonValue] | None = None,
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
    ) -> Comment | None:
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
                if not isinstance(comment, dict):
                    continue
                body = comment.get("body")
                if not (isinstance(body, str) and marker in body):
                    continue
                if login is None:
                    login = author() if callable(author) else author
                if _written_by(comment, login):
                    return self._comment(comment, f"listed a comment on {repo}#{pr}")
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

    def create_comment(self, repo: str, pr: int, body: str) -> Comment:
        url = self._comments_url(repo, pr)
        resp = self.request(
            "POST",
            url,
            {"body": body},
            what=f"pull request #{pr} in {repo}",
            idempotent=False,
        )
        return self._comment(resp.json(), f"answered POST {self._path(url)} with a comment")

    def update_comment(self, repo: str, comment_id: int, body: str) -> Comment:
        url = f"{self.api_url}/repos/{repo}/issues/comments/{comment_id}"
        resp = self.request(
            "PATCH",
            url,
            {"body": body},
            what=f"comment {comment_id} in {repo}",
        )
        return self._comment(resp.json(), f"answered PATCH {self._path(url)} with a comment")

    def _comment(self, doc: JsonValue, said: str) -> Comment:
        """The Comment in GitHub's answer `doc`; refused (`said` says where it came from)
        unless its id is one that may go into a URL."""
        fields = doc if isinstance(doc, dict) else {}
        comment_id, body, url = fields.get("id"), fields.get("body"), fields.get("html_url")
        if not _is_id(comment_id):
            raise self._error(
                f"GitHub {said} whose id is {_one_line(repr(comment_id), 40)}: check --api-url "
                "points at the REST API"
            )
        return Comment(comment_id, body if isinstance(body, str) else "",
                       url if isinstance(url, str) else None)


def _written_by(comment: Mapping[str, JsonValue], login: str) -> bool:
    """Is `comment` (a REST issue comment) written by `login`? GitHub logins are
    case-insensitive; a bot login ("x[bot]") must also be a Bot account."""
    user = comment.get("user")
    if not isinstance(user, Mapping):
        return False
    author = user.get("login")
    if not isinstance(author, str) or author.lower() != login.lower():
        return False
    return not login.endswith("[bot]") or user.get("type") == "Bot"
