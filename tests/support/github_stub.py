"""A local stub of GitHub's REST API, for the comment client and the artifact reader.

The stub (http.server on 127.0.0.1, an OS-chosen port, in a thread) keeps one PR's
comments, paginates them with Link headers like GitHub, answers GET of the PR itself
(its head commit is `head_sha`) and GET /user (403 for an installation token such as
GITHUB_TOKEN, as GitHub does; the user for a user's token), writes each comment by
the token's identity (`user.login`, `user.type`), refuses requests whose shape is
wrong (auth header, media type, API version, JSON body), and replays scripted faults
(502, rate limits, 4xx). Every request is recorded, so a test can assert that none was made.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from epbench.reports.bot.body import COMMENT_LIMIT

TOKEN = "ghs_SeCrEtToKeN1234567890abcdef"
REPO = "octo/widgets"
PR = 7
HEAD_SHA = "c0ffee" + "0" * 34  # the PR's head commit, as the stub's GitHub has it
BOT_LOGIN = "github-actions[bot]"  # who writes with a workflow's GITHUB_TOKEN


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Fault:
    """One scripted answer for the next request with this method."""

    method: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    apply: bool = False  # carry the request out anyway (a 502 after the write landed)


class StubGitHub:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.comments: list[dict[str, Any]] = []
        self.requests: list[Recorded] = []
        self.violations: list[str] = []
        self.faults: list[Fault] = []
        self.next_id = 9000
        self.base = ""  # set once the server listens
        self.head_sha = HEAD_SHA
        # The token's identity: an installation token (GET /user answers 403) writes as
        # the Actions bot; set `user_token` for a user's token, which GET /user names.
        self.login, self.user_type, self.user_token = BOT_LOGIN, "Bot", False

    def as_user(self, login: str) -> None:
        """Make the token a user's (a personal access token of `login`)."""
        self.login, self.user_type, self.user_token = login, "User", True

    def add_comment(
        self, body: str, login: str | None = None, user_type: str | None = None
    ) -> dict[str, Any]:
        """A comment on the PR, by the token's identity unless `login` names another."""
        self.next_id += 1
        if login is not None and user_type is None:
            user_type = "Bot" if login.endswith("[bot]") else "User"
        item = {
            "id": self.next_id,
            "body": body,
            "user": {"login": login or self.login, "type": user_type or self.user_type},
            "html_url": f"https://github.test/{REPO}/pull/{PR}#issuecomment-{self.next_id}",
        }
        self.comments.append(item)
        return item

    def methods(self) -> list[str]:
        return [r.method for r in self.requests]

    # -- request handling (called from the server thread) ------------------

    def handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        rec = Recorded(
            method,
            parts.path,
            urllib.parse.parse_qs(parts.query),
            {k.lower(): v for k, v in handler.headers.items()},
            body,
        )
        self.requests.append(rec)
        status, headers, payload = self._route(rec)
        data = b"" if payload is None else json.dumps(payload).encode()
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _shape_problems(self, rec: Recorded) -> list[str]:
        problems = []
        if rec.headers.get("accept") != "application/vnd.github+json":
            problems.append(f"Accept {rec.headers.get('accept')!r}")
        if rec.headers.get("x-github-api-version") != "2022-11-28":
            problems.append("X-GitHub-Api-Version missing")
        if not rec.headers.get("user-agent"):
            problems.append("User-Agent missing")
        if rec.method in ("POST", "PATCH"):
            if not rec.headers.get("content-type", "").startswith("application/json"):
                problems.append("Content-Type not JSON")
            if not (isinstance(rec.body, dict) and set(rec.body) == {"body"}):
                problems.append(f"payload {rec.body!r} is not {{'body': str}}")
            elif not isinstance(rec.body["body"], str):
                problems.append("body is not a string")
        comments = f"/repos/{REPO}/issues/{PR}/comments"
        if rec.method == "GET" and rec.path == comments and rec.query.get("per_page") != ["100"]:
            problems.append(f"per_page {rec.query.get('per_page')}")
        return problems

    def _route(self, rec: Recorded) -> tuple[int, dict[str, str], Any]:
        if rec.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {}, {"message": "Bad credentials"}
        problems = self._shape_problems(rec)
        if problems:
            self.violations.extend(problems)
            return 400, {}, {"message": "stub: bad request shape: " + "; ".join(problems)}
        fault = next((f for f in self.faults if f.method == rec.method), None)
        if fault is not None:
            self.faults.remove(fault)
            if fault.apply:
                self._serve(rec)
            return fault.status, fault.headers, fault.body
        return self._serve(rec)

    def _serve(self, rec: Recorded) -> tuple[int, dict[str, str], Any]:
        if rec.method == "GET" and rec.path == "/user":
            if not self.user_token:
                return 403, {}, {"message": "Resource not accessible by integration"}
            return 200, {}, {"login": self.login, "type": self.user_type}
        if rec.method == "GET" and rec.path == f"/repos/{REPO}/pulls/{PR}":
            return 200, {}, {"number": PR, "state": "open", "head": {"sha": self.head_sha}}
        list_path = f"/repos/{REPO}/issues/{PR}/comments"
        if rec.method == "GET" and rec.path == list_path:
            per_page = int(rec.query["per_page"][0])
            page = int(rec.query.get("page", ["1"])[0])
            chunk = self.comments[(page - 1) * per_page : page * per_page]
            last = max(1, -(-len(self.comments) // per_page))
            headers = {}
            if page < last:
                link = f"{self.base}{list_path}?per_page={per_page}&page="
                headers["Link"] = f'<{link}{page + 1}>; rel="next", <{link}{last}>; rel="last"'
            return 200, headers, chunk
        if rec.method in ("POST", "PATCH") and len(rec.body["body"]) > COMMENT_LIMIT:
            too_long = f"Body is too long (maximum is {COMMENT_LIMIT} characters)"
            return 422, {}, {"message": "Validation Failed", "errors": [{"message": too_long}]}
        if rec.method == "POST" and rec.path == list_path:
            return 201, {}, self.add_comment(rec.body["body"])
        prefix = f"/repos/{REPO}/issues/comments/"
        if rec.method == "PATCH" and rec.path.startswith(prefix):
            wanted = int(rec.path[len(prefix) :])
            for item in self.comments:
                if item["id"] == wanted:
                    # GitHub lets a token with write access edit anyone's comment: that
                    # is the hijack the client must avoid, so the stub allows it too.
                    item["body"] = rec.body["body"]
                    return 200, {}, item
        return 404, {}, {"message": "Not Found"}


@contextmanager
def serve_stub() -> Iterator[StubGitHub]:
    """A running stub; shut down (and checked for malformed requests) on exit."""
    state = StubGitHub()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            state.handle(self, "GET")

        def do_POST(self) -> None:  # noqa: N802
            state.handle(self, "POST")

        def do_PATCH(self) -> None:  # noqa: N802
            state.handle(self, "PATCH")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert state.violations == []


def no_proxies(monkeypatch: Any) -> None:
    """The stub is on 127.0.0.1: a proxy from the environment must not intercept it."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


class FakeSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
