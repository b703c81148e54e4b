"""The history workflow's runner matrix: machine classes x shards, merged per class.

The workflow is parsed (the matrix, the artifact names and paths that carry each shard
to `record`, the needs and outputs between the jobs), and its step scripts are run as
GitHub runs them (bash, inputs through env) in throw-away workspaces: each shard job's
`epbench-out/` is copied into `record`'s `shards/` as download-artifact's merge-multiple
does, then `record` merges and adds into a real PostgreSQL server. `.venv/bin/epbench`
in each workspace is this tree's epbench (with tiny measuring settings for `run`).
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from epbench.cases.grids import load_grid
from epbench.cases.shards import shard_cases
from epbench.core.results import write_results
from epbench.reports.history.changes import series
from epbench.reports.history.store import HistoryStore
from tests.support import synthetic
from tests.support.postgres import PgServer
from tests.test_workflows import load

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "history.yml"
RUNNERS = ["ubuntu-latest", "ubuntu-24.04-arm"]
SHA = "ab12" * 10
COMMIT_URL = "https://github.com/OWNER/REPO/commit/"  # what the step's env: gives it
# Settings that make a real run take seconds (as tests/test_shards.py's).
FAST = ["--rounds", "2", "--processes", "1", "--block-ms", "0.2", "--max-block-iters", "10",
        "--warmup-ms", "1", "--gate", "off", "--quiet"]
# engine's true time over ORT's, per class: each class's series must hold its own runs.
ENGINE_RATIO = {"ubuntu-latest": 0.5, "ubuntu-24.04-arm": 0.8}

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def doc() -> Doc:
    return load(WORKFLOW)


def _named(doc: Doc, job: str, name: str) -> dict[str, Any]:
    (step,) = [s for s in doc["jobs"][job]["steps"] if s.get("name") == name]
    return step


def _uses(doc: Doc, job: str, action: str) -> list[dict[str, Any]]:
    return [s for s in doc["jobs"][job]["steps"] if str(s.get("uses", "")).startswith(action)]


def _shards(doc: Doc) -> int:
    return int(doc["env"]["SHARDS"])


# -- the workflow, parsed -------------------------------------------------------------


def test_the_matrix_is_machine_classes_by_the_shards_of_one_grid(doc):
    measure = doc["jobs"]["measure"]
    matrix = measure["strategy"]["matrix"]
    assert set(matrix) == {"runner", "shard"}
    assert matrix["runner"] == RUNNERS  # x86-64 and arm64
    assert _shards(doc) == 3 and matrix["shard"] == [1, 2, 3]  # 1..SHARDS, each once
    assert measure["runs-on"] == "${{ matrix.runner }}"
    # One class's failed slice does not cancel the other class's.
    assert measure["strategy"]["fail-fast"] is False
    step = _named(doc, "measure", "Measure this shard (two runs)")
    assert step["env"] == {"RUNNER": "${{ matrix.runner }}", "SHARD": "${{ matrix.shard }}"}
    assert '--shard "$SHARD/$SHARDS"' in step["run"]
    assert '--out "epbench-out/$RUNNER/$SHARD/$run"' in step["run"]


def test_each_shard_reaches_record_under_its_class_and_number(doc):
    (upload,) = _uses(doc, "measure", "actions/upload-artifact@")
    assert upload["with"]["path"] == "epbench-out/"
    assert upload["with"]["if-no-files-found"] == "error"
    names = [upload["with"]["name"].replace("${{ matrix.runner }}", r).replace(
        "${{ matrix.shard }}", str(k)) for r, k in itertools.product(RUNNERS, [1, 2, 3])]
    assert "${{" not in "".join(names) and len(set(names)) == 6  # one artifact per job
    (download,) = _uses(doc, "record", "actions/download-artifact@")
    pattern = download["with"]["pattern"]
    assert all(fnmatch.fnmatchcase(n, pattern) for n in names)
    assert not fnmatch.fnmatchcase("history-store", pattern)  # the store is not a shard
    # Every artifact into one folder: shards/<runner>/<shard>/<run>/results.json.
    assert download["with"]["merge-multiple"] is True
    assert download["with"]["path"] == "shards"
    merge = _named(doc, "record", "Merge each class's shards")["run"]
    assert 'file="shards/$runner/$shard/$run/results.json"' in merge
    assert '--out "merged/$runner/$run"' in merge


def test_record_follows_the_matrix_and_push_follows_record(doc):
    jobs = doc["jobs"]
    assert jobs["record"]["needs"] == "measure"
    # After a failed slice the complete classes are still added; never when skipped.
    assert jobs["record"]["if"] == "${{ !cancelled() && needs.measure.result != 'skipped' }}"
    assert jobs["record"]["runs-on"] == "ubuntu-latest"
    assert jobs["push"]["needs"] == "record"
    assert "outputs" not in jobs["measure"]  # a matrix job's outputs are the last one's
    steps = jobs["record"]["steps"]
    order = [s.get("name") for s in steps]
    download = steps.index(_uses(doc, "record", "actions/download-artifact@")[0])
    merge = order.index("Merge each class's shards")
    add = order.index("Add each class's runs and detect change points")
    upload = steps.index(_uses(doc, "record", "actions/upload-artifact@")[0])
    assert download < merge < add < upload
    add_script = steps[add]["run"]
    assert '--machine-class "$MACHINE_CLASS_PREFIX$runner"' in add_script
    assert doc["env"]["MACHINE_CLASS_PREFIX"] == "github-"  # the series x86 had before
    assert "merged/*/*/results.json" in add_script


# -- the scripts, run -------------------------------------------------------------------


def _workspace(path: Path, *, fast_run: bool = False) -> Path:
    """A job's workspace whose .venv/bin/epbench is this tree's epbench."""
    bin_dir = path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    py = f'PYTHONPATH="{ROOT}" exec "{sys.executable}" -m epbench.cli.main'
    fast = " ".join(FAST)
    run = f'if [ "$1" = run ]; then shift; {py} run "$@" {fast}; fi\n' if fast_run else ""
    (bin_dir / "epbench").write_text(f"#!/bin/sh\n{run}{py} \"$@\"\n")
    (bin_dir / "epbench").chmod(0o755)
    return path


def _bash(doc: Doc, script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    assert "${{" not in script  # every input comes through env:, as GitHub passes it
    clean = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
             **{k: str(v) for k, v in doc["env"].items()}, **env}
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=clean, capture_output=True,
                          text=True, timeout=600)


def _quick_shard(k: int, n: int) -> list[str]:
    return [c.name for c in shard_cases(load_grid("quick"), k, n)]


def _synthetic_shard(runner: str, k: int, n: int, run: int) -> Doc:
    ratio = ENGINE_RATIO[runner]
    cases = {name: {"ort": 2000.0, "engine": 2000.0 * ratio} for name in _quick_shard(k, n)}
    # Each slice on its own VM of the class: another host key, as behind one runner label.
    doc = synthetic.results_doc(cases, rounds=8, seed=100 * run + 10 * k + len(runner),
                                host_key=f"{runner[-3:]}-vm{k}")
    doc["config"].update(shard=f"{k}/{n}", grids=["quick"])
    doc["host"]["git_commit"] = SHA
    doc["created"] = f"2026-03-01T00:{run:02d}:{k:02d}Z"
    return doc


def _synthetic_shards(record: Path, n: int) -> None:
    """What download-artifact leaves in `record`: every shard job's epbench-out/ in one."""
    for runner, k, run in itertools.product(RUNNERS, range(1, n + 1), (1, 2)):
        folder = record / "shards" / runner / str(k) / str(run)
        folder.mkdir(parents=True)
        write_results(folder / "results.json", _synthetic_shard(runner, k, n, run))


def _fresh_db(server: PgServer) -> str:
    name = "m_" + uuid.uuid4().hex[:12]
    server.createdb(name)
    return server.url(database=name)


def _record(doc: Doc, record: Path, url: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """record's merge step, then its add-and-detect step; (the add's result, the summary)."""
    merged = _bash(doc, _named(doc, "record", "Merge each class's shards")["run"], record)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    summary = record / "summary.md"
    added = _bash(doc, _named(doc, "record", "Add each class's runs and detect change points")
                  ["run"], record, EPBENCH_DB=url, GITHUB_SHA=SHA, GITHUB_REF_NAME="main",
                  GITHUB_STEP_SUMMARY=str(summary), COMMIT_URL=COMMIT_URL)
    assert added.returncode == 0, added.stdout + added.stderr
    return added, summary.read_text()


def test_record_merges_each_class_and_adds_it_under_its_class(doc, tmp_path, pg_server):
    n = _shards(doc)
    record = _workspace(tmp_path / "record")
    _synthetic_shards(record, n)
    url = _fresh_db(pg_server)
    added, summary = _record(doc, record, url)
    assert added.stdout.count("added run ") == 4  # 2 classes x 2 runs
    assert summary.startswith("## epbench history: change points\n")
    # Each merged run holds exactly its class's slices, all of them, once.
    for runner, run in itertools.product(RUNNERS, (1, 2)):
        merged = json.loads((record / "merged" / runner / str(run) / "results.json")
                            .read_text())
        assert [s["source"] for s in merged["shards"]] == [
            f"shards/{runner}/{k}/{run}/results.json" for k in range(1, n + 1)]
        assert [s["shard"] for s in merged["shards"]] == [f"{k}/{n}" for k in range(1, n + 1)]
        assert sorted(merged["cases"]) == sorted(c.name for c in load_grid("quick"))
        assert {s["machine"] for s in merged["shards"]} == {
            f"{runner[-3:]}-vm{k}" for k in range(1, n + 1)}
        assert merged["merge_forced"]  # the VMs differed, and the file says so
    with HistoryStore.open(url) as store:
        runs = store.runs()
        assert sorted((r.machine_class, r.commit, r.branch, r.points) for r in runs) \
            == sorted((f"github-{r}", SHA, "main", 12) for r in RUNNERS for _ in (1, 2))
        for runner in RUNNERS:
            # One point per commit: the median of the class's two runs, at its own level.
            (point,) = series(store, "relu_d10_w8", "engine", f"github-{runner}")
            assert point.runs == 2
            assert point.ratio == pytest.approx(ENGINE_RATIO[runner], rel=0.1)
    # The page the `pages` job deploys, drawn by its own step after the history is stored:
    # a plot per case and class, the commit linked.
    drawn = _bash(doc, _named(doc, "record", "Draw the history page")["run"], record,
                  EPBENCH_DB=url, COMMIT_URL=COMMIT_URL)
    assert drawn.returncode == 0, drawn.stdout + drawn.stderr
    page = (record / "history-page" / "index.html").read_text(encoding="utf-8")
    assert page.count('<figure id="history-') == 2 * len(load_grid("quick"))
    assert f'<a href="{COMMIT_URL}{SHA}">' in page and "<script" not in page


def test_a_class_missing_a_shard_is_left_out_and_the_others_added(doc, tmp_path):
    n = _shards(doc)
    record = _workspace(tmp_path / "record")
    _synthetic_shards(record, n)
    shutil.rmtree(record / "shards" / "ubuntu-24.04-arm" / "2" / "1")
    script = _named(doc, "record", "Merge each class's shards")["run"]
    result = _bash(doc, script, record)
    assert result.returncode == 0, result.stderr
    assert re.findall(r"::error::.*", result.stdout) == [
        f"::error::ubuntu-24.04-arm run 1 has {n - 1} of {n} shards; not added"]
    assert sorted(str(p.relative_to(record / "merged"))
                  for p in (record / "merged").glob("*/*/results.json")) == [
        "ubuntu-24.04-arm/2/results.json", "ubuntu-latest/1/results.json",
        "ubuntu-latest/2/results.json"]
    # Nothing complete at all: the job fails, and `push` (needs: record) pushes nothing.
    shutil.rmtree(record / "merged")
    for runner in RUNNERS:
        shutil.rmtree(record / "shards" / runner / "1")
    for _ in range(2):  # then no shard at all (every slice failed)
        result = _bash(doc, script, record)
        assert result.returncode == 1
        assert re.findall(r"::error::.*", result.stdout)[-1] == (
            f"::error::no class has all {n} shards of a run; nothing to add")
        shutil.rmtree(record / "shards")
        (record / "shards").mkdir()
    assert re.findall(r"::error::.*", result.stdout) == [
        f"::error::no class has all {n} shards of a run; nothing to add"]


@pytest.mark.slow
def test_real_shards_measured_merged_and_added(doc, tmp_path, pg_server):
    # One class, each slice measured for real by the measure step in its own workspace
    # (at once, as the matrix runs them), handed over as the artifacts are, then recorded.
    n, runner = _shards(doc), "ubuntu-latest"
    script = _named(doc, "measure", "Measure this shard (two runs)")["run"]
    jobs = {k: _workspace(tmp_path / f"measure-{k}", fast_run=True) for k in range(1, n + 1)}
    running = {
        k: subprocess.Popen(
            ["bash", "-c", script], cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={"PATH": os.environ["PATH"], "HOME": str(ws),
                            **{a: str(b) for a, b in doc["env"].items()},
                            "RUNNER": runner, "SHARD": str(k)})
        for k, ws in jobs.items()}
    for k, proc in running.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0 and "::warning::" not in out, (k, out, err)
    record = _workspace(tmp_path / "record")
    for ws in jobs.values():
        shutil.copytree(ws / "epbench-out", record / "shards", dirs_exist_ok=True)
    url = _fresh_db(pg_server)
    added, _ = _record(doc, record, url)
    assert added.stdout.count("added run ") == 2
    with HistoryStore.open(url) as store:
        runs = store.runs()
        quick = len(load_grid("quick"))
        assert [(r.machine_class, r.commit, r.points) for r in runs] == [
            (f"github-{runner}", SHA, 2 * quick)] * 2
