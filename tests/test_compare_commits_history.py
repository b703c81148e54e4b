"""compare-commits --history: does the base commit sit in a known change point?

A real git repository of 16 commits, a real SQLite history built from synthetic results
documents of 15 of them (commit 8 is never measured) with the engine 10 % slower from
commit 8 on, and the comparison itself run by the workflow (only the two builds and the
timed run are stood in for: they are what takes minutes, not what is tested here).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from epbench.cases.grids import case_by_name
from epbench.cli.main import cli
from epbench.core.errors import EXIT_USER_ERROR
from epbench.harness.commits import BuiltSide, is_ancestor
from epbench.harness.runner import RunConfig
from epbench.reports import history as hist
from epbench.reports import render
from epbench.reports.artifact import comment_body, comparison_schema
from epbench.reports.compare import Settings
from epbench.workflows import compare_commits as cc
from tests.support import synthetic
from tests.support.gitrepo import git, init_repo

CASE = "relu_d10_w8"
HOST = "host0001"
COMMITS = 16
STEP_AT = 8  # the first slower commit, never measured itself
QUIET = synthetic.NoiseModel(arm_sigma=0.004, machine_sigma=0.0, spike_prob=0.0)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, list[str], str]:
    """(repo, its commits oldest first, the history's SQLite path)."""
    root = tmp_path_factory.mktemp("base-history")
    repo = init_repo(root / "repo")
    shas = []
    for i in range(COMMITS):
        (repo / "CHANGES").write_text(f"change {i}\n")
        git(repo, "add", "CHANGES")
        git(repo, "commit", "-qm", f"change {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    db = root / "history.sqlite"
    with hist.HistoryStore.open(str(db)) as store:
        for i, sha in enumerate(shas):
            if i == STEP_AT:
                continue
            engine = 500.0 * (1.10 if i >= STEP_AT else 1.0)
            doc = synthetic.results_doc({CASE: {"ort": 1000.0, "engine": engine}}, rounds=8,
                                        seed=i, noise=QUIET, host_key=HOST)
            doc["host"]["git_commit"] = sha
            doc["created"] = f"2026-03-01T00:00:{i:02d}Z"
            store.add(hist.run_record(synthetic.as_results(doc), source=f"run {i}"))
    return repo, shas, str(db)


def _report(history, base: int, **kw) -> dict:
    repo, shas, db = history
    with hist.HistoryStore.open(db) as store:
        return hist.base_report(store, shas[base], cases=[CASE], machine=HOST,
                                is_ancestor=lambda a, b: is_ancestor(repo, a, b), **kw)


def test_the_history_finds_the_step_between_the_last_old_and_the_first_new_measured_commit(
        history):
    _, shas, db = history
    with hist.HistoryStore.open(db) as store:
        (found,) = hist.series_with_changes(store, CASE, "engine", HOST).findings
    assert (found.before, found.after) == (shas[STEP_AT - 1], shas[STEP_AT + 1])
    assert found.regression and found.change.ratio == pytest.approx(1.10, abs=0.02)


@pytest.mark.parametrize(("base", "kind", "measured"), [
    (STEP_AT, hist.BASE_INSIDE, False),  # not measured: git places it inside the range
    (STEP_AT + 1, hist.BASE_INSIDE, True),  # the first new-level commit: the range's end
    (STEP_AT + 2, hist.BASE_AFTER, True),  # on the slower level, after the change
    (COMMITS - 1, hist.BASE_AFTER, True),
    (STEP_AT - 1, None, True),  # the last old-level commit: the range starts after it
    (2, None, True),
])
def test_where_the_base_sits_against_the_change_point(history, base, kind, measured):
    report = _report(history, base)
    assert report["measured"] is measured
    assert (report["series"], report["tested"], report["too_short"]) == (1, 1, 0)
    assert [f["kind"] for f in report["findings"]] == ([kind] if kind else [])
    if kind:
        (f,) = report["findings"]
        _, shas, _ = history
        assert (f["case"], f["arm"], f["direction"]) == (CASE, "engine", "regression")
        assert (f["before"], f["after"]) == (shas[STEP_AT - 1], shas[STEP_AT + 1])
        assert f["lo"] <= f["change"] <= f["hi"]


def test_an_unmeasured_base_inside_the_range_is_not_placed_without_git(history):
    repo, shas, db = history
    with hist.HistoryStore.open(db) as store:
        report = hist.base_report(store, shas[STEP_AT], cases=[CASE], machine=HOST)
    assert report["findings"] == [] and not report["placed_by_git"]
    (line,) = render.base_history_lines({"base_history": report})
    assert "has no run in the history and nothing placed it" in line


def test_a_later_improvement_ends_a_regression_for_the_bases_after_it():
    points = [hist.SeriesPoint(f"{i:040x}", "", 1.0, None, None, 1, None) for i in range(30)]

    def finding(index: int, ratio: float) -> hist.Finding:
        change = hist.stats.Change(ratio, ratio - 0.01, ratio + 0.01, 0.0, 8)
        return hist.Finding("c", "a", "m", points[index - 1].commit, points[index].commit,
                            index, change, 0.001, {})

    up, down = finding(10, 1.05), finding(20, 0.95)
    assert hist.base_touches(points, [up, down], points[15].commit) == [(hist.BASE_AFTER, up)]
    assert hist.base_touches(points, [up, down], points[20].commit) == [(hist.BASE_INSIDE, down)]
    assert hist.base_touches(points, [up, down], points[25].commit) == []


def test_no_series_of_this_machine_is_one_short_line(history):
    report = _report(history, STEP_AT + 1, arms=("engine",))
    assert report["findings"]
    other = _report(history, 3, arms=("no-such-arm",))
    assert other["series"] == 0
    (line,) = render.base_history_lines({"base_history": other})
    assert line.startswith(f"Base `{history[1][3][:7]}`: the history holds no series")


def _compare(history, tmp_path, monkeypatch, base: int) -> tuple[Path, cc.CommitsResult]:
    repo, shas, db = history

    def fake_run(config):  # the timed run: head 30 % slower than base
        return synthetic.results_doc(
            {c.name: {"ort": 1000.0, "base": 1000.0, "head": 1300.0} for c in config.cases},
            rounds=config.rounds, seed=3, noise=QUIET, host_key=HOST)

    monkeypatch.setattr(cc, "run", fake_run)
    monkeypatch.setattr(cc, "build_commit", lambda repo, label, rev, sha, build=None: BuiltSide(
        label, rev, sha, f"/lib/{label}.so", cached=True))
    out = tmp_path / "out"
    out.mkdir()
    config = RunConfig(cases=(case_by_name(CASE),), arms=(), rounds=12, progress=False,
                       out_dir=out)
    result = cc.compare_commits(repo=repo, base_rev=shas[base], head_rev=shas[-1], build=None,
                                config=config, settings=Settings(), profile_path=None,
                                budget_s=0, history_db=db)
    return out, result


def test_compare_commits_says_the_base_sits_inside_a_change_point_in_every_report(
        history, tmp_path, monkeypatch):
    _, shas, _ = history
    out, result = _compare(history, tmp_path, monkeypatch, STEP_AT)
    doc = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(comparison_schema()).validate(doc)
    assert doc["base_history"]["commit"] == shas[STEP_AT]
    assert [f["kind"] for f in doc["base_history"]["findings"]] == ["inside"]
    sentence = (f"Base `{shas[STEP_AT][:7]}` sits inside a regression change point of `{CASE}`, "
                f"engine: +")
    between = f"between `{shas[STEP_AT - 1][:7]}` and `{shas[STEP_AT + 1][:7]}`"
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "### Base commit in the history" in md and sentence in md and between in md
    assert "the base itself may carry that change" in md
    page = (out / "report.html").read_text(encoding="utf-8")
    assert f"Base <code>{shas[STEP_AT][:7]}</code> sits inside a regression change point" in page
    comment = comment_body(doc)
    assert sentence in comment and between in comment
    assert sentence in render.render_terminal(result.comparison)


def test_a_base_no_change_point_touches_is_one_line_in_the_report_and_none_in_the_comment(
        history, tmp_path, monkeypatch):
    _, shas, _ = history
    out, _ = _compare(history, tmp_path, monkeypatch, 3)
    doc = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(comparison_schema()).validate(doc)
    line = (f"Base `{shas[3][:7]}` is in the history; no change point of its 1 series tested "
            "touches it.")
    assert line in (out / "report.md").read_text(encoding="utf-8")
    assert "Base commit in the history" not in (out / "report.md").read_text(encoding="utf-8")
    comment = comment_body(doc)
    assert shas[3][:7] not in comment.split("Host")[0] and "in the history" not in comment


def test_a_missing_history_file_is_one_line_and_exit_1_before_anything_is_built(
        history, tmp_path):
    repo, _, _ = history
    missing = tmp_path / "nope.sqlite"
    result = CliRunner().invoke(cli, ["compare-commits", "HEAD~1", "HEAD", "--repo", str(repo),
                                      "--history", str(missing), "--no-instructions",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == EXIT_USER_ERROR, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines == [f"Error: no history database at {missing}; pass the file `epbench history "
                     f"add` wrote (--db or $EPBENCH_DB), or leave --history out"]
    assert not missing.exists() and not (tmp_path / "out").exists()


def test_epbench_db_naming_a_missing_file_is_a_note_and_no_check(tmp_path, monkeypatch):
    missing = tmp_path / "gone.sqlite"
    monkeypatch.setenv(hist.DB_ENV, str(missing))
    url, note = hist.history_to_check(None)
    assert url is None and note.startswith(f"${hist.DB_ENV} names {missing}, which does not")
    assert not missing.exists()
    monkeypatch.delenv(hist.DB_ENV)
    assert hist.history_to_check(None) == (None, None)
