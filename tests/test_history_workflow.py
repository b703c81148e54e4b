"""The history workflow: valid for GitHub, on pushes to the default branch, add then detect.

Three jobs, for least privilege: `measure` (a matrix of machine classes x shards,
tests/test_history_matrix.py) installs and measures; `record` merges, adds and uploads
the SQLite file with a read-only token; `push`, the only job with `contents: write`,
installs nothing and pushes that file. The scripts that move the file between them
are run here against throw-away git repositories.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from epbench.cli.history_commands import history
from epbench.cli.report_command import report
from tests.support.gitrepo import git, init_repo
from tests.support.workflow_rules import SECRET, installs
from tests.test_workflows import load, validate

WORKFLOW = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "history.yml"
DOC = Path(__file__).resolve().parent.parent / "docs" / "history.md"
SECRET_EXPR = "${{ secrets.EPBENCH_DB }}"

Step = dict[str, Any]


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return load(WORKFLOW)


def _steps(doc: dict[str, Any], job: str) -> list[Step]:
    return doc["jobs"][job]["steps"]


def _named(doc: dict[str, Any], job: str, name: str) -> Step:
    (step,) = [s for s in _steps(doc, job) if s.get("name") == name]
    return step


def _index(steps: list[Step], predicate: Any) -> int:
    (index,) = [i for i, s in enumerate(steps) if predicate(s)]
    return index


def test_the_history_workflow_validates_against_githubs_schema():
    result = validate(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_records_pushes_to_the_default_branch_one_writer_at_a_time(doc):
    assert "push" in doc["on"] and "pull_request" not in doc["on"]
    assert set(doc["jobs"]) == {"measure", "record", "push", "pages"}
    assert doc["jobs"]["measure"]["if"] == "github.ref == format('refs/heads/{0}', " \
                                           "github.event.repository.default_branch)"
    assert doc["concurrency"] == {"group": "epbench-history", "cancel-in-progress": False}
    # Read-only everywhere but the push job, which follows the measuring one.
    assert doc["permissions"] == {"contents": "read"}
    assert "permissions" not in doc["jobs"]["measure"]
    assert "permissions" not in doc["jobs"]["record"]
    assert doc["jobs"]["push"]["permissions"] == {"contents": "write"}
    assert doc["jobs"]["record"]["needs"] == "measure"
    assert doc["jobs"]["push"]["needs"] == "record"


def test_the_page_is_built_from_the_store_and_deployed_by_a_job_that_runs_nothing(doc):
    record = _steps(doc, "record")
    add = _named(doc, "record", "Add each class's runs and detect change points")
    page = _named(doc, "record", "Draw the history page")
    # Its own step, after the history file is uploaded for `push`: a page that fails to
    # draw fails neither `record` nor `push` (the adds are stored whatever the page does).
    assert "epbench report" not in add["run"]
    stored = _index(record, lambda s: s.get("name") == "Upload the history file for the push job")
    assert record.index(add) < stored < record.index(page)
    assert page["continue-on-error"] is True and page["id"] == "page"
    script = page["run"].replace("\\\n", " ")
    assert script.startswith("set -euo pipefail\n")
    (line,) = [x for x in script.splitlines() if "epbench report" in x]
    args = shlex.split(line.split("epbench report", 1)[1])
    assert args == ["--history", "$EPBENCH_DB", "--html", "history-page",
                    "--commit-url", "$COMMIT_URL"]
    known = {o for p in report.params for o in p.opts}
    assert {a for a in args if a.startswith("--")} <= known
    assert page["env"]["COMMIT_URL"] == ("${{ github.server_url }}/${{ github.repository }}"
                                         "/commit/")
    assert page["env"]["EPBENCH_DB"] == SECRET_EXPR
    upload = _index(record, lambda s: str(s.get("uses", "")).startswith(
        "actions/upload-pages-artifact@"))
    assert upload == record.index(page) + 1
    assert record[upload]["with"]["path"] == "history-page"
    assert record[upload]["if"] == "steps.page.outcome == 'success'"
    assert record[upload]["continue-on-error"] is True
    assert record[upload]["id"] == "page-upload"
    assert doc["jobs"]["record"]["outputs"]["page"] == "${{ steps.page-upload.outcome }}"
    # The deploying job: the two scopes deploy-pages needs, no contents, one step.
    pages = doc["jobs"]["pages"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert pages["needs"] == ["record", "push"]
    # Only where the repository opted in, and only a stored history with a page drawn:
    # not when the branch push failed (skipped for PostgreSQL is fine), not when record
    # failed, not when the page failed to draw or upload.
    assert pages["if"] == ("${{ vars.EPBENCH_PAGES == 'true' && !cancelled() "
                           "&& needs.record.result == 'success' "
                           "&& needs.push.result != 'failure' "
                           "&& needs.record.outputs.page == 'success' }}")
    assert "`EPBENCH_PAGES` to `true`" in DOC.read_text(encoding="utf-8")
    assert pages["environment"] == {"name": "github-pages",
                                    "url": "${{ steps.deploy.outputs.page_url }}"}
    (step,) = pages["steps"]
    assert str(step["uses"]).startswith("actions/deploy-pages@") and installs(step) is None
    assert set(step) == {"name", "id", "uses"}


def _history_calls(script: str) -> list[list[str]]:
    joined = script.replace("\\\n", " ")
    calls = []
    for line in joined.splitlines():
        match = re.search(r"epbench history (\w+)(.*?)(\|\||2>&1|$)", line)
        if match:
            calls.append([match.group(1), *shlex.split(match.group(2))])
    return calls


def test_detect_runs_after_each_add_into_the_job_summary_with_real_options(doc):
    record = _steps(doc, "record")
    add = _index(record, lambda s: "epbench history add" in s.get("run", ""))
    script = record[add]["run"]
    calls = _history_calls(script)
    assert [c[0] for c in calls] == ["add", "detect"]
    assert "GITHUB_STEP_SUMMARY" in script.split("epbench history detect")[1]
    for name, *args in calls:
        known = {o for p in history.commands[name].params for o in p.opts}
        used = {a for a in args if a.startswith("--")}
        assert used <= known, (name, used - known)
    # The file leaves the job only after the add; the push job pushes it.
    upload = _index(record, lambda s: str(s.get("uses", "")).startswith(
        "actions/upload-artifact@"))
    assert add < upload
    assert "git push" in _named(doc, "push", "Push the history branch")["run"]


def test_the_push_job_gets_the_file_the_recording_job_uploads_as_data(doc):
    record, push = doc["jobs"]["record"], doc["jobs"]["push"]
    (upload,) = [s for s in record["steps"] if "upload-artifact" in str(s.get("uses"))]
    (download,) = [s for s in push["steps"] if "download-artifact" in str(s.get("uses"))]
    assert upload["with"]["name"] == download["with"]["name"] == "history-store"
    assert upload["with"]["path"] == "history-store/history.sqlite"
    assert upload["with"]["if-no-files-found"] == "error"
    assert download["with"]["path"] == "${{ runner.temp }}/history-store"
    pushing = _named(doc, "push", "Push the history branch")
    assert 'cp "$RUNNER_TEMP/history-store/history.sqlite"' in pushing["run"]
    # Pushed only when the SQLite store is in use, on the commit the add started from.
    ids = {s.get("id") for s in record["steps"]}
    assert record["outputs"] == {
        "store": "${{ steps.store.outputs.kind }}",
        "history-base": "${{ steps.base.outputs.commit }}",
        "page": "${{ steps.page-upload.outcome }}",
    }
    assert {"store", "base"} <= ids
    # Only after `record` succeeded (it runs after a failed slice too, so the default
    # success() would skip the push of the classes it added).
    assert push["if"] == ("${{ !cancelled() && needs.record.result == 'success' "
                          "&& needs.record.outputs.store == 'sqlite' }}")
    assert pushing["env"] == {"HISTORY_BASE": "${{ needs.record.outputs.history-base }}"}
    # The push job runs git and nothing else.
    assert [s for s in push["steps"] if installs(s)] == []
    assert all(str(s.get("uses", "")).startswith(
        ("actions/checkout@", "actions/download-artifact@")) for s in push["steps"] if "uses" in s)


def test_the_secret_reaches_only_the_three_steps_that_read_it_before_any_install(doc):
    holders = [
        (job, s.get("name")) for job in doc["jobs"] for s in _steps(doc, job)
        if SECRET.search(str(s))
    ]
    assert holders == [
        ("record", "Choose the store (PostgreSQL when the EPBENCH_DB secret is set)"),
        ("record", "Add each class's runs and detect change points"),
        ("record", "Draw the history page"),
    ]
    for _, name in holders:
        assert _named(doc, "record", name)["env"]["EPBENCH_DB"] == SECRET_EXPR
    record = _steps(doc, "record")
    first_install = min(i for i, s in enumerate(record) if installs(s))
    # The store and the history branch are settled before any package is installed.
    for name in ("Choose the store (PostgreSQL when the EPBENCH_DB secret is set)",
                 "Check out the history branch", "Record the history commit this add builds on"):
        assert record.index(_named(doc, "record", name)) < first_install
    checkout = _named(doc, "record", "Check out the history branch")
    assert checkout["with"]["ref"] == "${{ env.HISTORY_BRANCH }}"
    assert checkout["with"]["persist-credentials"] is False
    assert checkout["continue-on-error"] is True  # absent on the first run


# -- the scripts, run ------------------------------------------------------------------


def _bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    assert "${{" not in script  # every input comes through env:, as GitHub passes it
    clean = {
        "PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
        "HISTORY_BRANCH": "epbench-history", **env,
    }
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=clean, capture_output=True,
                          text=True, timeout=60)


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.mark.parametrize(("secret", "kind"), [("", "sqlite"),
                                              ("postgresql://u:pw@db:5432/h", "postgresql")])
def test_the_store_is_chosen_by_the_secrets_presence(doc, tmp_path, secret, kind):
    step = _named(doc, "record", "Choose the store (PostgreSQL when the EPBENCH_DB secret is set)")
    out = tmp_path / "out"
    result = _bash(step["run"], tmp_path, EPBENCH_DB=secret, GITHUB_OUTPUT=str(out))
    assert result.returncode == 0, result.stderr
    assert _outputs(out) == {"kind": kind}
    assert "pw" not in result.stdout + result.stderr + out.read_text()


def test_the_base_is_the_checked_out_commit_or_none(doc, tmp_path):
    script = _named(doc, "record", "Record the history commit this add builds on")["run"]
    store = init_repo(tmp_path / "history-store")
    (store / "history.sqlite").write_bytes(b"one")
    git(store, "add", "history.sqlite")
    git(store, "commit", "-q", "-m", "one")
    out = tmp_path / "out"
    result = _bash(script, tmp_path, CHECKOUT="success", GITHUB_OUTPUT=str(out))
    assert result.returncode == 0, result.stderr
    assert _outputs(out) == {"commit": git(store, "rev-parse", "HEAD")}
    # A failed checkout (no branch yet) leaves a half-made repository: it is cleared.
    out.unlink()
    result = _bash(script, tmp_path, CHECKOUT="failure", GITHUB_OUTPUT=str(out))
    assert result.returncode == 0, result.stderr
    assert _outputs(out) == {"commit": ""}
    assert list(store.iterdir()) == []


class Origin:
    """A bare repository standing in for GitHub, and the push job's checkouts of it."""

    def __init__(self, root: Path, script: str) -> None:
        self.root, self.script, self.runs = root, script, 0
        self.bare = root / "origin.git"
        seed = init_repo(root / "seed")
        (seed / "README.md").write_text("x\n")
        git(seed, "add", "README.md")
        git(seed, "commit", "-q", "-m", "main")
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.bare)], check=True)
        git(seed, "push", "-q", self.bare.as_uri(), "main")

    def push(self, content: bytes, base: str) -> subprocess.CompletedProcess[str]:
        """The push job: a fresh shallow checkout, the downloaded file, the script."""
        self.runs += 1
        run = self.root / f"run{self.runs}"
        subprocess.run(["git", "clone", "-q", "--depth", "1", self.bare.as_uri(), str(run / "w")],
                       check=True)
        (run / "tmp" / "history-store").mkdir(parents=True)
        (run / "tmp" / "history-store" / "history.sqlite").write_bytes(content)
        return _bash(self.script, run / "w", HISTORY_BASE=base, RUNNER_TEMP=str(run / "tmp"),
                     GITHUB_SHA=self.sha())

    def sha(self) -> str:
        """The pushed commit of the latest run, as $GITHUB_SHA says it."""
        return f"{self.runs:02x}" + "c0ffee" * 6 + "00"

    def tip(self) -> str:
        return git(self.bare, "rev-parse", "--verify", "-q", "epbench-history") \
            if self.has_branch() else ""

    def has_branch(self) -> bool:
        return bool(git(self.bare, "branch", "--list", "epbench-history"))


@pytest.fixture
def origin(doc, tmp_path) -> Origin:
    return Origin(tmp_path, _named(doc, "push", "Push the history branch")["run"])


def test_the_first_push_starts_the_branch_and_later_ones_add_to_it(origin):
    first = origin.push(b"one", base="")
    assert first.returncode == 0, first.stderr
    tip = origin.tip()
    # An orphan branch holding only the file, one commit per add.
    assert git(origin.bare, "ls-tree", "--name-only", tip) == "history.sqlite"
    assert git(origin.bare, "rev-list", "--count", tip) == "1"
    assert git(origin.bare, "log", "-1", "--format=%s", tip) == f"history: add {origin.sha()[:10]}"
    second = origin.push(b"two", base=tip)
    assert second.returncode == 0, second.stderr
    assert git(origin.bare, "rev-parse", f"{origin.tip()}^") == tip
    assert git(origin.bare, "show", f"{origin.tip()}:history.sqlite") == "two"


def test_a_push_from_a_stale_or_missing_base_is_refused(origin):
    assert origin.push(b"one", base="").returncode == 0
    tip = origin.tip()
    assert origin.push(b"two", base=tip).returncode == 0
    moved = origin.tip()
    # The add started from the older commit, or found no branch (a failed checkout):
    # pushing would drop what came between, so nothing is pushed.
    for base in (tip, ""):
        refused = origin.push(b"stale", base=base)
        assert refused.returncode != 0
        assert f"::error::epbench-history is at {moved}" in refused.stdout
        assert origin.tip() == moved
    # The branch gone while the add started from it: refused too.
    git(origin.bare, "branch", "-D", "epbench-history")
    refused = origin.push(b"lost", base=moved)
    assert refused.returncode != 0
    assert "::error::cannot fetch epbench-history" in refused.stdout
    assert not origin.has_branch()
