"""The history workflow: valid for GitHub, on pushes to the default branch, add then detect."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from epbench.cli.history_commands import history
from tests.test_workflows import load, steps, validate

WORKFLOW = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "history.yml"


def test_the_history_workflow_validates_against_githubs_schema():
    result = validate(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_records_pushes_to_the_default_branch_one_writer_at_a_time():
    doc = load(WORKFLOW)
    assert "push" in doc["on"] and "pull_request" not in doc["on"]
    (job,) = doc["jobs"].values()
    assert job["if"] == "github.ref == format('refs/heads/{0}', " \
                        "github.event.repository.default_branch)"
    assert doc["concurrency"] == {"group": "epbench-history", "cancel-in-progress": False}
    assert doc["permissions"] == {"contents": "write"}


def _history_calls(script: str) -> list[list[str]]:
    joined = script.replace("\\\n", " ")
    calls = []
    for line in joined.splitlines():
        match = re.search(r"epbench history (\w+)(.*?)(\|\||2>&1|$)", line)
        if match:
            calls.append([match.group(1), *shlex.split(match.group(2))])
    return calls


def test_detect_runs_after_each_add_into_the_job_summary_with_real_options():
    all_steps = steps(load(WORKFLOW))
    (step,) = [s for s in all_steps if "epbench history add" in s.get("run", "")]
    script = step["run"]
    calls = _history_calls(script)
    assert [c[0] for c in calls] == ["add", "detect"]
    assert "GITHUB_STEP_SUMMARY" in script.split("epbench history detect")[1]
    for name, *args in calls:
        known = {o for p in history.commands[name].params for o in p.opts}
        used = {a for a in args if a.startswith("--")}
        assert used <= known, (name, used - known)
    # The file is pushed back only after the add, to the dedicated branch.
    names = [s.get("name", "") for s in all_steps]
    assert names.index(step["name"]) < names.index("Push the history branch")
