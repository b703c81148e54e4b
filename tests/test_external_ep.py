"""The adoption path end to end: an outside EP repository, the action, the comment.

examples/external-ep is copied into a git repository with two commits, the second making
the EP slower on one case only (its `delay_ns` knob: a per-Run cost when the model has a
symbolic dimension). Then the steps of action.yml run as the action runs them: each
`run:` step's own script, with the `env:` its expressions give (`uses:` steps stand for
what a runner provides: the checkout is the repository here, the install is this
epbench). Then comment.yml's posting step runs against a stub of GitHub's REST API on
127.0.0.1, and the comment it posts must flag the slowed case and show every case's
verdict as compare.json has it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from epbench.core.errors import EXIT_REGRESSION
from epbench.engine import build as engine_build
from epbench.reports.bot.artifact import COMPARE_FILE, PR_FILE
from epbench.reports.sticky import STICKY_MARKER
from tests.support.action_steps import epbench_bin, load, resolve, run_step
from tests.support.github_stub import PR, REPO, TOKEN, no_proxies, serve_stub
from tests.support.gitrepo import git, init_repo

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "external-ep"
ACTION = ROOT / "action.yml"
COMMENT = ROOT / ".github" / "workflows" / "comment.yml"
SLOWED = "relu_d10_w8_dyn"  # the only case with a symbolic dimension
UNTOUCHED = ("relu_d1_w8", "relu_d10_w8")
# 20 µs per Run on cases that take a few µs: flagged on a loaded 2-core machine too.
DELAY_NS = 20000
# Few rounds, no re-runs: this test checks the path, not the statistics. With the idle gate
# off a slowdown can be ⚠️ rather than 🔴 when rounds show load: fail-on is `regression`.
# 4 processes, not 3: with 2 degrees of freedom a +215 % case (control drifting +43 %)
# came out at p 0.0169 against BH's 0.0167 and read ❔ (CI, 2026-12-07).
FAST = "--rounds 6 --processes 4 --gate off --no-instructions --quiet"


def example_repo(where: Path) -> tuple[Path, str, str]:
    """The example as a repository: HEAD~1 as committed, HEAD with the per-Run cost."""
    repo = where / "relu-ep"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("build"))
    init_repo(repo)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "A Relu EP")
    base = git(repo, "rev-parse", "HEAD")
    assert (repo / "delay_ns").read_text().strip() == "0"
    (repo / "delay_ns").write_text(f"{DELAY_NS}\n")
    git(repo, "commit", "-qam", "Check the shape of a dynamic input at every Run")
    return repo, base, git(repo, "rev-parse", "HEAD")


def table_rows(body: str, cases: set[str]) -> dict[str, list[str]]:
    """The comment's verdict rows of ``cases``: case -> the status cell of each of its rows
    (other tables, of the host and versions, have code spans in their second column too)."""
    rows: dict[str, list[str]] = {}
    for line in body.splitlines():
        match = re.match(r"^\|\s*(\S+)\s*\|\s*`([^`]+)`\s*\|", line)
        if match and match.group(2) in cases:
            rows.setdefault(match.group(2), []).append(match.group(1))
    return rows


@pytest.mark.slow
@pytest.mark.serial  # the slowed case must be flagged against real noise
def test_the_action_and_the_comment_flag_the_slowed_case_of_an_outside_ep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ORT's headers as this machine has them (fetched once into the user's cache); the
    # commits' libraries in a fresh cache, so both are built here.
    headers = str(engine_build.ort_include_dir())
    repo, base, head = example_repo(tmp_path)
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {
        "number": PR, "base": {"sha": base}, "head": {"sha": head}}}))
    summary = tmp_path / "summary.md"
    env = {
        **os.environ, "PYTHONPATH": str(ROOT), "EPBENCH_CACHE_DIR": str(tmp_path / "cache"),
        "ORT_INCLUDE_DIR": headers, "RUNNER_TEMP": str(runner_temp), "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_PATH": str(event), "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_WORKSPACE": str(repo),
    }
    out = runner_temp / "epbench-out"
    action = load(ACTION)
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs.update({"build": "./build.sh", "cases": " ".join((*UNTOUCHED, SLOWED)),
                   "ort-headers": "true", "budget": "0", "fail-on": "regression",
                   "args": FAST})
    context = {f"inputs.{name}": value for name, value in inputs.items()}
    context.update({"github.action_path": str(ROOT), "runner.temp": str(runner_temp),
                    "runner.os": "Linux", "steps.install.outputs.out": str(out),
                    "steps.install.outputs.epbench": str(epbench_bin(tmp_path / "venv"))})

    measured = uploaded = 0
    for step in action["runs"]["steps"]:
        if step.get("id") == "install":
            continue  # its outputs are in `context`: this checkout's epbench
        if "run" in step:
            measuring = run_step(step, context, env, cwd=repo)
            measured += 1
        elif step["uses"].startswith("actions/upload-artifact@"):
            assert Path(resolve(step["with"]["path"], context)) == out
            assert step["if"] == "${{ !cancelled() }}"  # a regression's exit still uploads
            uploaded += 1
    assert (measured, uploaded) == (1, 1)
    assert (out / COMPARE_FILE).is_file(), measuring.stderr[-3000:]
    assert json.loads((out / PR_FILE).read_text()) == {"number": PR}
    verdicts = {row["case"]: row for row in json.loads((out / COMPARE_FILE).read_text())["cases"]}
    assert sorted(verdicts) == sorted((*UNTOUCHED, SLOWED))
    assert verdicts[SLOWED]["verdict"] in ("alert", "regression"), verdicts[SLOWED]
    # compare-commits' own exit: the slowed case matched --fail-on.
    assert measuring.returncode == EXIT_REGRESSION, measuring.stderr[-3000:]
    # The untouched cases are measured, not judged here: two builds of one source differ
    # in layout, and CI on 2026-12-07 saw relu_d10_w8 at +4.3 % (🔴 against t = 2 %). What
    # the path must keep is their order: the 20 µs case stands far above them.
    for case in UNTOUCHED:
        assert verdicts[case]["verdict"] != "failed", verdicts[case]
        assert verdicts[case]["change"] < verdicts[SLOWED]["change"] / 4, verdicts[case]
    assert summary.read_text().startswith((out / "report.md").read_text())

    # comment.yml's two scripts, on the artifact as the download step lays it out: the
    # plan job's reader, then the post job's one request on the plan it wrote (the plan's
    # upload and download both use RUNNER_TEMP/comment-plan).
    shutil.copytree(out, runner_temp / "bench-artifact")
    jobs = load(COMMENT)["jobs"]
    (planning,) = [s for s in jobs["plan"]["steps"] if "epbench comment" in str(s.get("run", ""))]
    (posting,) = [s for s in jobs["post"]["steps"] if "run" in s]
    workspace = tmp_path / "epbench-checkout"
    epbench_bin(workspace / ".venv" / "bin")  # what the install step makes
    no_proxies(monkeypatch)
    with serve_stub() as stub:
        stub.head_sha = head
        context = {
            "github.token": TOKEN, "github.event.workflow_run.head_sha": head,
            "github.event.workflow_run.html_url": "https://github.test/run/1",
        }
        # No proxy: curl and urllib reach the stub on 127.0.0.1 directly.
        step_env = {k: v for k, v in env.items() if "proxy" not in k.lower()}
        step_env.update(GITHUB_REPOSITORY=REPO, GITHUB_API_URL=stub.base)
        proc = run_step(planning, context, step_env, cwd=workspace)
        assert proc.returncode == 0, proc.stderr[-3000:]
        proc = run_step(posting, context, step_env, cwd=tmp_path)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert stub.methods().count("POST") == 1
    (posted,) = stub.comments
    assert posted["body"].count(STICKY_MARKER) == 1
    rows = table_rows(posted["body"], {*UNTOUCHED, SLOWED})
    assert rows[SLOWED] == [verdicts[SLOWED]["emoji"]] and rows[SLOWED][0] in ("🔴", "⚠️")
    for case in UNTOUCHED:
        assert rows[case] == [verdicts[case]["emoji"]], (case, rows[case])
