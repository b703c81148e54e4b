"""The GitHub workflow files: valid against GitHub's schema, and saying what we mean.

The schema (vendored in check-jsonschema, so this runs offline) catches typos
and misplaced keys; the rest of this file checks what a schema cannot:
triggers, permissions, concurrency, the set-up step running the same `make`
target as the README, and the fork case.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epbench.cli.comment_command import comment

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
BENCH = WORKFLOWS / "bench.yml"
TESTS = WORKFLOWS / "tests.yml"


def load(path: Path) -> dict[str, Any]:
    # ruamel.yaml comes with check-jsonschema (test extras). It reads YAML 1.2,
    # where `on:` stays the string "on" (PyYAML's YAML 1.1 would make it True).
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))


def validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows"]
        + [str(p) for p in paths],
        capture_output=True,
        text=True,
        timeout=120,
    )


def steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    (job,) = doc["jobs"].values()
    return job["steps"]


def step_index(all_steps: list[dict[str, Any]], predicate) -> int:
    found = [i for i, s in enumerate(all_steps) if predicate(s)]
    assert len(found) == 1, f"expected one matching step, found {len(found)}"
    return found[0]


def uses(action: str):
    return lambda s: str(s.get("uses", "")).startswith(action + "@")


def runs(fragment: str):
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


# -- schema ----------------------------------------------------------------------


def test_workflows_validate_against_githubs_schema() -> None:
    result = validate(BENCH, TESTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_does_catch_a_broken_workflow(tmp_path: Path) -> None:
    # The negative control: the same check refuses a misspelt key.
    broken = tmp_path / "broken.yml"
    broken.write_text(
        BENCH.read_text(encoding="utf-8").replace("runs-on:", "run-on:"), encoding="utf-8"
    )
    result = validate(broken)
    assert result.returncode != 0


# -- bench.yml ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench() -> dict[str, Any]:
    return load(BENCH)


def test_bench_triggers(bench: dict[str, Any]) -> None:
    on = bench["on"]
    assert set(on) == {"pull_request", "workflow_dispatch"}
    assert sorted(on["pull_request"]["types"]) == ["opened", "reopened", "synchronize"]
    pr_input = on["workflow_dispatch"]["inputs"]["pr"]
    assert pr_input["required"] is True and pr_input["type"] == "number"


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
def test_bench_skips_docs_only_changes(bench: dict[str, Any], path: str, ignored: bool) -> None:
    patterns = bench["on"]["pull_request"]["paths-ignore"]
    assert any(github_glob(p).match(path) for p in patterns) is ignored


def test_bench_permissions_are_minimal(bench: dict[str, Any]) -> None:
    assert bench["permissions"] == {"contents": "read", "pull-requests": "write"}
    for job in bench["jobs"].values():
        assert "permissions" not in job  # no job widens them


def test_bench_concurrency_is_per_pr_and_cancels(bench: dict[str, Any]) -> None:
    concurrency = bench["concurrency"]
    assert concurrency["cancel-in-progress"] is True
    group = concurrency["group"]
    assert "github.event.pull_request.number" in group and "inputs.pr" in group


def test_bench_checks_out_full_history_without_keeping_the_token(bench: dict[str, Any]) -> None:
    all_steps = steps(bench)
    checkout = all_steps[step_index(all_steps, uses("actions/checkout"))]
    assert checkout["with"]["fetch-depth"] == 0
    assert checkout["with"]["persist-credentials"] is False
    assert "refs/pull/{0}/head" in checkout["with"]["ref"]  # a dispatched run fetches the PR


def test_bench_sets_up_python_with_pip_cache(bench: dict[str, Any]) -> None:
    all_steps = steps(bench)
    setup = all_steps[step_index(all_steps, uses("actions/setup-python"))]
    assert setup["with"]["cache"] == "pip"
    assert setup["with"]["cache-dependency-path"] == "pyproject.toml"


def make_prerequisites(target: str) -> list[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(target)}:([^=\n]*)$", text, re.MULTILINE)
    assert match, f"the Makefile has no `{target}` target"
    return match.group(1).split()


def test_bench_set_up_step_is_the_make_target_the_readme_uses(bench: dict[str, Any]) -> None:
    all_steps = steps(bench)
    setup = all_steps[step_index(all_steps, runs("make "))]
    assert setup["run"].strip() == "make setup"
    make_prerequisites("setup")
    # The README's two commands both start with this same set-up.
    assert "setup" in make_prerequisites("run")
    assert "setup" in make_prerequisites("test")
    readme = ROOT / "README.md"
    if not readme.exists():
        pytest.skip("README.md is not written yet; the Makefile half of the check passed")
    text = readme.read_text(encoding="utf-8")
    assert "make run" in text and "make test" in text


def test_bench_compares_the_prs_base_and_head(bench: dict[str, Any]) -> None:
    all_steps = steps(bench)
    compare = all_steps[step_index(all_steps, runs("epbench compare-commits"))]
    assert '"$BASE_SHA" "$HEAD_SHA" --out bench-out' in compare["run"]
    assert compare["env"]["BASE_SHA"].startswith("${{ github.event.pull_request.base.sha ||")
    assert compare["env"]["HEAD_SHA"].startswith("${{ github.event.pull_request.head.sha ||")
    resolve = all_steps[step_index(all_steps, runs("gh api"))]
    assert resolve["if"] == "github.event_name == 'workflow_dispatch'"
    assert "steps.pr.outputs.base" in compare["env"]["BASE_SHA"]
    assert "steps.pr.outputs.head" in compare["env"]["HEAD_SHA"]
    setup = step_index(all_steps, runs("make setup"))
    assert step_index(all_steps, uses("actions/checkout")) < setup < all_steps.index(compare)


def test_bench_reports_even_when_the_comparison_fails(bench: dict[str, Any]) -> None:
    all_steps = steps(bench)
    compare = step_index(all_steps, runs("epbench compare-commits"))
    upload = step_index(all_steps, uses("actions/upload-artifact"))
    summary = step_index(all_steps, runs("cat bench-out/report.md"))
    post = step_index(all_steps, runs("epbench comment"))
    assert compare < upload < summary < post
    for index in (upload, summary, post):
        # A regression exits non-zero; the artifact, summary and comment still happen.
        assert "!cancelled()" in all_steps[index]["if"]
    assert all_steps[upload]["with"]["path"].rstrip("/") == "bench-out"
    assert 'cat bench-out/report.md >> "$GITHUB_STEP_SUMMARY"' in all_steps[summary]["run"]


def test_bench_comment_step_skips_forks_with_a_note(bench: dict[str, Any]) -> None:
    all_steps = steps(bench)
    post = all_steps[step_index(all_steps, runs("epbench comment"))]
    same_repo = "github.event.pull_request.head.repo.full_name == github.repository"
    assert same_repo in post["if"]
    assert "github.event_name == 'workflow_dispatch'" in post["if"]
    assert "hashFiles('bench-out/comment.md')" in post["if"]
    fork = "github.event.pull_request.head.repo.full_name != github.repository"
    note = all_steps[step_index(all_steps, lambda s: fork in str(s.get("if", "")))]
    assert "$GITHUB_STEP_SUMMARY" in note["run"] and "::notice" in note["run"]


def test_only_the_comment_step_gets_the_write_token(bench: dict[str, Any]) -> None:
    all_steps = steps(bench)
    post = step_index(all_steps, runs("epbench comment"))
    assert all_steps[post]["env"]["GITHUB_TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"
    for index, step in enumerate(all_steps):
        if index != post:
            assert "GITHUB_TOKEN" not in step.get("env", {})
            assert "secrets." not in str(step)
    (job,) = bench["jobs"].values()
    assert "secrets." not in str(job.get("env", {}))


def test_bench_comment_step_uses_options_the_command_has(bench: dict[str, Any]) -> None:
    all_steps = steps(bench)
    run = all_steps[step_index(all_steps, runs("epbench comment"))]["run"]
    used = set(re.findall(r"(--[a-z][a-z-]*)", run))
    known = {opt for param in comment.params for opt in param.opts}
    assert used == {"--repo", "--pr", "--body", "--artifact-url"}
    assert used <= known
    assert "--body bench-out/comment.md" in run


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
