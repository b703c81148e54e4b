"""action.yml, the reusable comment.yml and the example's two caller workflows: valid,
safe, and saying what we mean.

The checks of tests/test_workflows.py apply to them too (read-only where the PR's code
runs; epbench's own code, installed before the artifact is read as data, the PR number
checked against the run's head, in a read-only job whose plan a job that installs
nothing posts with the write token). What differs: action.yml is a
composite action run inside the caller's job (epbench installed from the action's own
files), and comment.yml is called by another repository's workflow, so the code it runs
is epbench's at the commit the caller named (job.workflow_repository @ job.workflow_sha).
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epbench.cli.action_command import action as action_command
from epbench.workflows.action import INPUT_PREFIX
from tests.support.action_steps import EXPRESSION, load
from tests.test_workflows import (
    as_default_branch_code,
    asked_permissions,
    caller_code_in_comment,
    comment_caller_problems,
    has_write,
    pr_code_next_to_write_token,
    token_permissions,
    unconfirmed_pr_numbers,
    write_job_problems,
)

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
COMMENT = ROOT / ".github" / "workflows" / "comment.yml"
BENCH_COMMENT = ROOT / ".github" / "workflows" / "bench-comment.yml"
EXAMPLE = ROOT / "examples" / "external-ep"
CALLER_BENCH = EXAMPLE / ".github" / "workflows" / "bench.yml"
CALLER_COMMENT = EXAMPLE / ".github" / "workflows" / "comment.yml"
# How the example names this repository and the ref a user pins (a commit SHA, or a tag).
PLACEHOLDER = "OWNER/epbench"
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s*([^@\s]+)@(\S+)(.*)$")
CALLER_MAX_LINES = 25
# Inputs the action's own steps use, not handed to the measuring step.
ACTION_OWN_INPUTS = {"python-version", "checkout", "artifact"}

Doc = dict[str, Any]


def action_steps(doc: Doc) -> list[dict[str, Any]]:
    return doc["runs"]["steps"]


def comment_job(doc: Doc) -> dict[str, Any]:
    """comment.yml's read-only job: it reads the artifact and plans the comment."""
    return doc["jobs"]["plan"]


def one(items: list[dict[str, Any]], predicate: Callable[[dict[str, Any]], bool]
        ) -> dict[str, Any]:
    found = [s for s in items if predicate(s)]
    assert len(found) == 1, f"expected one matching step, found {len(found)}"
    return found[0]


def uses(action: str) -> Callable[[dict[str, Any]], bool]:
    return lambda s: str(s.get("uses", "")).startswith(action + "@")


def validate(schema: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema,
         *map(str, paths)], capture_output=True, text=True, timeout=120)


# -- the checks, each a function returning the problems it finds ----------------------------


def unpinned(text: str) -> list[str]:
    """Every action from another repository is pinned by a full commit SHA, tag in a comment."""
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = PINNED.match(line)
        if match is None or match.group(1).startswith(("./", PLACEHOLDER)):
            continue
        if not re.fullmatch(r"[0-9a-f]{40}", match.group(2)):
            problems.append(f"line {number}: {match.group(1)}@{match.group(2)} is not a SHA pin")
        elif not re.fullmatch(r"\s+#\s*v\d+(\.\d+){0,2}\s*", match.group(3)):
            problems.append(f"line {number}: {match.group(1)} pinned without `# vX.Y.Z`")
    return problems


def action_problems(doc: Doc) -> list[str]:
    """What would let the pull request's code, or an input, steer the action's harness."""
    problems = []
    steps = action_steps(doc)
    for index, step in enumerate(steps):
        where = f"step {index + 1} ({step.get('name') or step.get('uses')})"
        run = str(step.get("run", ""))
        if EXPRESSION.search(run):
            problems.append(f"{where}: an expression in a script: pass it through env:")
        if uses("actions/checkout")(step):
            options = step.get("with") or {}
            if options.get("persist-credentials") is not False:
                problems.append(f"{where}: leaves the token in .git/config")
            if options.get("fetch-depth") != 0:
                problems.append(f"{where}: a shallow checkout cannot reach the base commit")
        if "secrets." in str(step) or "github.token" in str(step):
            problems.append(f"{where}: hands a token or secret to a step of the PR's job")
    install = [s for s in steps if re.search(r"\bpip\s+install\b", str(s.get("run", "")))]
    if len(install) != 1:
        problems.append(f"{len(install)} install steps, not one")
    else:
        run, env = str(install[0]["run"]), install[0].get("env") or {}
        if not re.search(r'pip install --quiet "\$ACTION_PATH"\s*$', run, re.MULTILINE):
            problems.append("the install is not of the action's own files ($ACTION_PATH)")
        if env.get("ACTION_PATH") != "${{ github.action_path }}":
            problems.append(f"ACTION_PATH is {env.get('ACTION_PATH')!r}, not the action's path")
        if re.search(r"\s-e\b|--editable", run):
            problems.append("an editable install: the workspace could shadow it")
        if '"$RUNNER_TEMP/' not in run:
            problems.append("the venv is not outside the workspace ($RUNNER_TEMP)")
    measure = [s for s in steps if "action --out" in str(s.get("run", ""))]
    if len(measure) != 1:
        problems.append(f"{len(measure)} measuring steps, not one")
    else:
        env = measure[0].get("env") or {}
        if env.get("EPBENCH") != "${{ steps.install.outputs.epbench }}":
            problems.append(f"the measuring step runs {env.get('EPBENCH')!r}, not the "
                            "epbench the install step made")
        for name in doc["inputs"]:
            if name in ACTION_OWN_INPUTS:
                continue
            variable = INPUT_PREFIX + name.upper().replace("-", "_")
            if env.get(variable) != f"${{{{ inputs.{name} }}}}":
                problems.append(f"input {name} does not reach the measuring step as {variable}")
    return problems


# -- the real files -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def action() -> Doc:
    return load(ACTION)


@pytest.fixture(scope="module")
def reusable() -> Doc:
    return load(COMMENT)


def test_the_files_validate_against_githubs_schemas(tmp_path: Path) -> None:
    result = validate("vendor.github-actions", ACTION)
    assert result.returncode == 0, result.stdout + result.stderr
    result = validate("vendor.github-workflows", COMMENT, CALLER_BENCH, CALLER_COMMENT)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = ACTION.read_text(encoding="utf-8").replace("using: composite", "usin: composite")
    (tmp_path / "action.yml").write_text(broken, encoding="utf-8")
    assert validate("vendor.github-actions", tmp_path / "action.yml").returncode != 0


def test_every_third_party_action_is_pinned_by_sha_with_its_tag() -> None:
    for path in (ACTION, COMMENT, CALLER_BENCH, CALLER_COMMENT):
        assert unpinned(path.read_text(encoding="utf-8")) == [], path
    # The check does catch a tag, and a SHA without its tag comment.
    assert unpinned("      - uses: actions/cache@v4\n")
    assert unpinned("    uses: actions/cache@5a3ec84eff668545956fd18022155c47e93e2684\n")


def test_the_action_installs_its_own_files_and_hands_inputs_over_as_data(action: Doc) -> None:
    assert action["runs"]["using"] == "composite"
    assert action_problems(action) == []
    # Its checkout runs unless a caller that checked out the PR itself says `false`.
    assert action["inputs"]["checkout"]["default"] == "true"
    assert one(action_steps(action), uses("actions/checkout"))["if"] == (
        "inputs.checkout != 'false'")
    # Every input it passes on is an option of `epbench action`, read from that variable.
    envvars = {p.envvar for p in action_command.params if isinstance(p.envvar, str)}
    measure = one(action_steps(action), lambda s: "action --out" in str(s.get("run", "")))
    assert {k for k in measure["env"] if k.startswith(INPUT_PREFIX)} <= envvars


ACTION_MUTATIONS: dict[str, tuple[Callable[[Doc], None], str]] = {
    "install of the workspace": (
        lambda d: _install(d).update(run=_install(d)["run"].replace('"$ACTION_PATH"', ".")),
        "not of the action's own files",
    ),
    "editable install": (
        lambda d: _install(d).update(run=_install(d)["run"].replace(
            'install --quiet "$ACTION_PATH"', 'install --quiet -e "$ACTION_PATH"')),
        "an editable install",
    ),
    "action path from the workspace": (
        lambda d: _install(d)["env"].update(ACTION_PATH="${{ github.workspace }}"),
        "not the action's path",
    ),
    "an input pasted into the script": (
        lambda d: _measure(d).update(run=_measure(d)["run"] + " --build '${{ inputs.build }}'"),
        "an expression in a script",
    ),
    "an input left out": (
        lambda d: _measure(d)["env"].pop("INPUT_CASES"), "input cases does not reach",
    ),
    "the token kept by the checkout": (
        lambda d: one(action_steps(d), uses("actions/checkout"))["with"].pop(
            "persist-credentials"), "leaves the token",
    ),
    "a shallow checkout": (
        lambda d: one(action_steps(d), uses("actions/checkout"))["with"].pop("fetch-depth"),
        "a shallow checkout",
    ),
    "the token handed to a step": (
        lambda d: _measure(d)["env"].update(GITHUB_TOKEN="${{ github.token }}"),
        "hands a token or secret",
    ),
}


def _install(doc: Doc) -> dict[str, Any]:
    return one(action_steps(doc), lambda s: s.get("id") == "install")


def _measure(doc: Doc) -> dict[str, Any]:
    return one(action_steps(doc), lambda s: "action --out" in str(s.get("run", "")))


@pytest.mark.parametrize("mutation", list(ACTION_MUTATIONS))
def test_an_action_that_lets_the_pr_steer_the_harness_is_caught(action: Doc,
                                                                mutation: str) -> None:
    mutate, expected = ACTION_MUTATIONS[mutation]
    doc = copy.deepcopy(action)
    mutate(doc)
    assert any(expected in p for p in action_problems(doc)), action_problems(doc)


def test_the_action_uploads_the_artifact_the_comment_workflow_downloads(
    action: Doc, reusable: Doc
) -> None:
    upload = one(action_steps(action), uses("actions/upload-artifact"))
    assert upload["if"] == "${{ !cancelled() }}"  # a regression's exit still uploads
    assert upload["with"]["path"].rstrip("/") == "${{ steps.install.outputs.out }}"
    assert upload["with"]["overwrite"] is True
    download = one(comment_job(reusable)["steps"], uses("actions/download-artifact"))
    # Named by input `artifact` (a runner matrix names each slice); by default bench-out.
    assert upload["with"]["name"] == "${{ inputs.artifact }}"
    assert download["with"]["name"] == action["inputs"]["artifact"]["default"]
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"


def test_the_comment_workflow_is_called_and_runs_epbenchs_own_code(reusable: Doc) -> None:
    assert set(reusable["on"]) == {"workflow_call"}
    assert caller_code_in_comment(reusable) == []
    checked = as_default_branch_code(reusable)
    assert pr_code_next_to_write_token(checked) == []
    assert unconfirmed_pr_numbers(checked) == []
    assert write_job_problems(checked) == []
    assert reusable["permissions"] == {"contents": "read"}
    assert comment_job(reusable)["permissions"] == {
        "contents": "read", "actions": "read", "pull-requests": "read"}
    assert not has_write(token_permissions(reusable, comment_job(reusable)))
    assert reusable["jobs"]["post"]["permissions"] == {"pull-requests": "write"}


COMMENT_MUTATIONS: dict[str, tuple[Callable[[Doc], None], Callable[[Doc], list[str]], str]] = {
    "checkout of the caller's repository": (
        lambda d: _checkout(d).pop("repository"), caller_code_in_comment, "checks out",
    ),
    "checkout of the run's head sha": (
        lambda d: _checkout(d).update(ref="${{ github.event.workflow_run.head_sha }}"),
        caller_code_in_comment, "checks out",
    ),
    "install after the download": (
        lambda d: _swap_install_and_download(d),
        lambda d: pr_code_next_to_write_token(as_default_branch_code(d)),
        "installs or builds after the artifact is downloaded",
    ),
    "no --run-head-sha": (
        lambda d: _post(d).update(run=_post(d)["run"].replace(
            '--run-head-sha "$RUN_HEAD_SHA"', "")),
        unconfirmed_pr_numbers, "no --run-head-sha",
    ),
    "pip install in the write job": (
        lambda d: d["jobs"]["post"]["steps"].insert(1, {"run": "pip install epbench"}),
        lambda d: write_job_problems(as_default_branch_code(d)), "installs packages",
    ),
}


def _checkout(doc: Doc) -> dict[str, Any]:
    return one(comment_job(doc)["steps"], uses("actions/checkout"))["with"]


def _post(doc: Doc) -> dict[str, Any]:
    return one(comment_job(doc)["steps"], lambda s: "epbench comment" in str(s.get("run", "")))


def _swap_install_and_download(doc: Doc) -> None:
    steps = comment_job(doc)["steps"]
    install = one(steps, lambda s: "pip install" in str(s.get("run", "")))
    steps.remove(install)
    steps.insert(steps.index(one(steps, uses("actions/download-artifact"))) + 1, install)


@pytest.mark.parametrize("mutation", list(COMMENT_MUTATIONS))
def test_a_comment_workflow_that_runs_other_code_is_caught(reusable: Doc, mutation: str) -> None:
    mutate, check, expected = COMMENT_MUTATIONS[mutation]
    doc = copy.deepcopy(reusable)
    mutate(doc)
    assert any(expected in p for p in check(doc)), check(doc)


def test_this_repositorys_bot_is_the_comment_workflow(reusable: Doc) -> None:
    # bench-comment.yml makes every check comment.yml makes by being it: one job that calls
    # it by its local path (the default branch's copy), with nothing of its own.
    caller = load(BENCH_COMMENT)
    assert comment_caller_problems(caller, reusable) == []
    (job,) = caller["jobs"].values()
    assert set(job) == {"permissions", "uses"}
    assert ROOT / job["uses"] == COMMENT


# -- the example's caller workflows -----------------------------------------------------------


def test_the_callers_workflows_are_short_and_use_this_action() -> None:
    for path in (CALLER_BENCH, CALLER_COMMENT):
        assert len(path.read_text(encoding="utf-8").splitlines()) <= CALLER_MAX_LINES, path
    bench = load(CALLER_BENCH)
    assert set(bench["on"]) == {"pull_request"}
    assert bench["permissions"] == {"contents": "read"}
    (job,) = bench["jobs"].values()
    (step,) = job["steps"]
    assert step["uses"] == f"{PLACEHOLDER}@REF"
    assert set(step["with"]) <= set(load(ACTION)["inputs"])
    build = step["with"]["build"]
    assert (EXAMPLE / build).is_file()  # the example's own build script

    comment = load(CALLER_COMMENT)
    assert comment["on"] == {"workflow_run": {"workflows": [bench["name"]],
                                              "types": ["completed"]}}
    assert comment["permissions"] == {"contents": "read"}
    (caller,) = comment["jobs"].values()
    repo, path = caller["uses"].split("@")[0].split("/", 2)[1:]
    assert (repo, path) == ("epbench", str(COMMENT.relative_to(ROOT)))
    # The caller grants what the called job asks for (it can only narrow them).
    assert caller["permissions"] == asked_permissions(load(COMMENT))


def test_the_examples_readme_shows_the_caller_and_every_input() -> None:
    text = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Use it in CI\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```yaml\n(.*?)^```", section, flags=re.S | re.M)
    assert blocks[0] == CALLER_BENCH.read_text(encoding="utf-8")
    documented = re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.M)
    assert documented == list(load(ACTION)["inputs"])
