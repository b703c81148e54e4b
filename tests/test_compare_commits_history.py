"""compare-commits --history: does the base commit sit in a known change point?

A real git repository of 16 commits, a real SQLite history built from synthetic results
documents of 15 of them (commit 8 is never measured) with the engine 10 % slower from
commit 8 on, and the comparison itself run by the workflow (only the two builds and the
timed run are stood in for: they are what takes minutes, not what is tested here).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from epbench.cases.grids import case_by_name
from epbench.cli.main import cli
from epbench.core.errors import EXIT_REGRESSION, EXIT_USER_ERROR
from epbench.core.paths import DB_ENV
from epbench.harness.commits import is_ancestor
from epbench.harness.run_config import RunConfig
from epbench.reports import render, stats
from epbench.reports.bot.artifact import comment_body, comparison_schema
from epbench.reports.comparison import Comparison
from epbench.reports.history import changepoints
from epbench.reports.history.changes import (
    BASE_AFTER,
    BASE_AFTER_COMMITS,
    BASE_INSIDE,
    BASE_UNKNOWN,
    Finding,
    SeriesPoint,
    base_report,
    base_touches,
    history_to_check,
    series_with_changes,
)
from epbench.reports.history.db import redact
from epbench.reports.history.store import SCHEMA_VERSION, HistoryStore, run_record
from epbench.reports.verdicts import Settings
from epbench.workflows import compare_commits as cc
from tests.support import synthetic
from tests.support.comparisons import comparison_of
from tests.support.fakebuild import fake_build_commit, fake_side
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
    with HistoryStore.open(str(db)) as store:
        for i, sha in enumerate(shas):
            if i == STEP_AT:
                continue
            engine = 500.0 * (1.10 if i >= STEP_AT else 1.0)
            doc = synthetic.results_doc({CASE: {"ort": 1000.0, "engine": engine}}, rounds=8,
                                        seed=i, noise=QUIET, host_key=HOST)
            doc["host"]["git_commit"] = sha
            doc["created"] = f"2026-03-01T00:00:{i:02d}Z"
            store.add(run_record(synthetic.as_results(doc), source=f"run {i}"))
    return repo, shas, str(db)


def _report(history, base: int, **kw) -> dict:
    repo, shas, db = history
    with HistoryStore.open(db) as store:
        return base_report(store, shas[base], cases=[CASE], machine=HOST,
                                is_ancestor=lambda a, b: is_ancestor(repo, a, b), **kw)


def test_the_history_finds_the_step_between_the_last_old_and_the_first_new_measured_commit(
        history):
    _, shas, db = history
    with HistoryStore.open(db) as store:
        (found,) = series_with_changes(store, CASE, "engine", HOST).findings
    assert (found.before, found.after) == (shas[STEP_AT - 1], shas[STEP_AT + 1])
    assert found.regression and found.change.ratio == pytest.approx(1.10, abs=0.02)


@pytest.mark.parametrize(("base", "kind", "measured"), [
    (STEP_AT, BASE_INSIDE, False),  # not measured: git places it inside the range
    (STEP_AT + 1, BASE_INSIDE, True),  # the first new-level commit: the range's end
    (STEP_AT + 2, BASE_AFTER, True),  # early on the slower level, after the change
    # The last of the new level's first BASE_AFTER_COMMITS measured commits (8 is not one).
    (STEP_AT + BASE_AFTER_COMMITS, BASE_AFTER, True),
    (STEP_AT + BASE_AFTER_COMMITS + 1, None, True),  # the level is established by now
    (COMMITS - 1, None, True),  # the newest commit is not told of an old, accepted change
    (STEP_AT - 1, None, True),  # the last old-level commit: the range starts after it
    (2, None, True),
])
def test_where_the_base_sits_against_the_change_point(history, base, kind, measured):
    report = _report(history, base)
    assert report.measured is measured
    assert (report.series, report.tested, report.too_short) == (1, 1, 0)
    assert [f.kind for f in report.findings] == ([kind] if kind else [])
    if kind:
        (f,) = report.findings
        _, shas, _ = history
        assert (f.case, f.arm, f.direction) == (CASE, "engine", "regression")
        assert (f.before, f.after) == (shas[STEP_AT - 1], shas[STEP_AT + 1])
        assert f.lo <= f.change <= f.hi


def test_an_unmeasured_base_inside_the_range_is_not_placed_without_git(history):
    repo, shas, db = history
    with HistoryStore.open(db) as store:
        report = base_report(store, shas[STEP_AT], cases=[CASE], machine=HOST)
    assert report.findings == () and not report.placed_by_git
    (line,) = render.base_history_lines(comparison_of([], base_history=report))
    assert "has no run in the history and nothing placed it" in line


def test_after_is_the_latest_change_point_and_only_early_on_its_level():
    points = [SeriesPoint(f"{i:040x}", "", 1.0, None, None, 1, None) for i in range(30)]

    def finding(index: int, ratio: float) -> Finding:
        change = stats.Change(ratio, ratio - 0.01, ratio + 0.01, 0.0, 8)
        return Finding("c", "a", "m", points[index - 1].commit, points[index].commit,
                            index, change, 0.001, {})

    up, down = finding(10, 1.05), finding(20, 0.95)
    early = 10 + BASE_AFTER_COMMITS - 1  # the last of the new level's first commits
    assert BASE_AFTER_COMMITS == changepoints.MIN_SEGMENT
    assert base_touches(points, [up, down], points[11].commit) == [(BASE_AFTER, up)]
    assert base_touches(points, [up, down], points[early].commit) == [(BASE_AFTER, up)]
    assert base_touches(points, [up, down], points[early + 1].commit) == []
    assert base_touches(points, [up, down], points[20].commit) == [(BASE_INSIDE, down)]
    assert base_touches(points, [up, down], points[21].commit) == []  # an improvement
    assert base_touches(points, [up, down], points[25].commit) == []


# A linear git history for base_touches' git path: measured commits p00..p29 and an
# unmeasured one after each of some of them (u21 is between p21 and p22). Names are
# shorter than match_commit's 4 characters, so a base never matches the store: even a
# base that is a measured commit's name goes by git, as one given in 3 characters would.
GIT_ORDER = [name for i in range(30)
             for name in ((f"p{i:02d}", f"u{i:02d}") if i in (21, 25) else (f"p{i:02d}",))]


def git_order(a: str, b: str) -> bool:
    """`git merge-base --is-ancestor a b` over GIT_ORDER: a commit is its own ancestor."""
    return GIT_ORDER.index(a) <= GIT_ORDER.index(b)


def _git_findings() -> tuple[list[SeriesPoint], Finding, Finding]:
    points = [SeriesPoint(f"p{i:02d}", "", 1.0, None, None, 1, None) for i in range(30)]

    def finding(index: int, ratio: float) -> Finding:
        change = stats.Change(ratio, ratio - 0.01, ratio + 0.01, 0.0, 8)
        return Finding("c", "a", "m", points[index - 1].commit, points[index].commit,
                            index, change, 0.001, {})

    return points, finding(10, 0.95), finding(20, 1.05)  # an improvement, then a regression


@pytest.mark.parametrize(("base", "kind"), [
    ("u21", BASE_AFTER),  # after the regression's first slower commit: reached, early
    ("p20", BASE_INSIDE),  # the first slower commit itself
    ("p19", None),  # the last old-level commit: the range starts after it
    ("u25", None),  # past the new level's first commits (p20..p23)
    ("p05", None),  # before both
    ("p12", None),  # after the improvement only: an improvement is never "after"
])
def test_an_unmeasured_base_is_placed_by_git(base, kind):
    points, down, up = _git_findings()
    # Kills: `reached` always False (u21), dropping `base != f.before` (p19: it descends
    # from itself), `is_ancestor(base, f.after)` as True (u21 would be inside), and the
    # earlier improvement ending the later regression (u21).
    expected = [(kind, up)] if kind else []
    assert base_touches(points, [down, up], base, git_order) == expected


def test_a_base_git_does_not_know_is_unplaced_not_cleared():
    points, down, up = _git_findings()
    unknown = base_touches(points, [down, up], "u21", lambda a, b: None)
    assert unknown == [(BASE_UNKNOWN, down), (BASE_UNKNOWN, up)]


def test_a_base_git_cannot_place_makes_no_claim_either_way(history):
    repo, shas, db = history
    with HistoryStore.open(db) as store:
        report = base_report(store, shas[STEP_AT], cases=[CASE], machine=HOST,
                                  is_ancestor=lambda a, b: None)
        measured = base_report(store, shas[STEP_AT + 1], cases=[CASE], machine=HOST,
                                    is_ancestor=lambda a, b: None)
    assert report.findings == () and not report.measured
    assert report.placed_by_git is False and report.unplaced == 1
    (line,) = render.base_history_lines(comparison_of([], base_history=report))
    assert "git does not know the commits of 1 change point(s)" in line
    assert "no claim either way" in line and "placed by git" not in line
    assert "touches it" not in line
    assert measured.measured and measured.placed_by_git is False
    assert measured.unplaced == 0 and [f.kind for f in measured.findings] == ["inside"]
    placed = _report(history, STEP_AT)  # real git knows them
    assert placed.placed_by_git is True and placed.unplaced == 0
    assert _report(history, STEP_AT + 1).placed_by_git is False


def test_no_series_of_this_machine_is_one_short_line(history):
    report = _report(history, STEP_AT + 1, arms=("engine",))
    assert report.findings
    other = _report(history, 3, arms=("no-such-arm",))
    assert other.series == 0
    (line,) = render.base_history_lines(comparison_of([], base_history=other))
    assert line.startswith(f"Base `{history[1][3][:7]}`: the history holds no series")


def _compare(history, tmp_path, monkeypatch, base: int,
             db: str | None = None) -> tuple[Path, cc.CommitsResult]:
    repo, shas, fixture_db = history
    db = db or fixture_db

    def fake_run(config):  # the timed run: head 30 % slower than base
        return synthetic.results_doc(
            {c.name: {"ort": 1000.0, "base": 1000.0, "head": 1300.0} for c in config.cases},
            rounds=config.rounds, seed=3, noise=QUIET, host_key=HOST)

    monkeypatch.setattr(cc, "run", synthetic.typed_runner(fake_run))
    monkeypatch.setattr(cc, "build_commit", fake_build_commit)
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
                f"`engine`: +")
    between = f"between `{shas[STEP_AT - 1][:7]}` and `{shas[STEP_AT + 1][:7]}`"
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "### Base commit in the history" in md and sentence in md and between in md
    assert "the base itself may carry that change" in md
    page = (out / "report.html").read_text(encoding="utf-8")
    assert f"Base <code>{shas[STEP_AT][:7]}</code> sits inside a regression change point" in page
    comment = comment_body(Comparison.from_json(doc))
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
    comment = comment_body(Comparison.from_json(doc))
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
    monkeypatch.setenv(DB_ENV, str(missing))
    url, note = history_to_check(None)
    assert url is None and note.startswith(
        f"the base commit is not checked against the history: ${DB_ENV} names {missing}, "
        f"which cannot be read (no history database at {missing};")
    assert not missing.exists()
    monkeypatch.delenv(DB_ENV)
    assert history_to_check(None) == (None, None)


# ------------------------------------------------------------ the store cannot be read


def _stub_run(monkeypatch, during_run=lambda: None) -> list[str]:
    """Stand in for the builds and the timed run (head 30 % slower); the sides built."""
    built: list[str] = []

    def fake_run(config):
        config.out_dir.mkdir(parents=True)  # as the runner does
        during_run()
        return synthetic.results_doc(
            {c.name: {"ort": 1000.0, "base": 1000.0, "head": 1300.0} for c in config.cases},
            rounds=config.rounds, seed=3, noise=QUIET, host_key=HOST)

    def fake_build(repo, label, rev, sha, build=None, out_dir=None, timeout_s=None):
        built.append(label)
        return fake_side(label, rev, sha)

    monkeypatch.setattr(cc, "run", synthetic.typed_runner(fake_run))
    monkeypatch.setattr(cc, "build_commit", fake_build)
    return built


def _cli(history, tmp_path, *extra: str):
    repo, shas, _ = history
    return CliRunner().invoke(cli, [
        "compare-commits", shas[3], shas[-1], "--repo", str(repo), "--case", CASE,
        "--rounds", "12", "--budget", "0", "--no-instructions", "--no-aa-twin",
        "--out", str(tmp_path / "out"), *extra])


def _schema_version(db: Path) -> int:
    store = HistoryStore.open(str(db), migrate=False)
    try:
        return store.schema_version()
    finally:
        store.close()


def _bump_schema(db: Path, version: int = 99) -> None:
    store = HistoryStore.open(str(db), migrate=False)
    store._db.execute("INSERT INTO schema_version (version, applied) VALUES (?, 'x')",
                      (version,))
    store.close()


def _old_store(path: Path) -> Path:
    """A history of schema version 1, as an older epbench wrote it."""
    store = HistoryStore.open(str(path), migrate=False)
    store._migrate(target=1)
    store.close()
    assert _schema_version(path) == 1
    return path


def _assert_reports_written(out: Path) -> dict:
    for name in ("results.json", "compare.json", "report.md", "report.html"):
        assert (out / name).is_file(), name
    doc = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(comparison_schema()).validate(doc)
    assert [r["verdict"] for r in doc["cases"]] == ["alert"]  # the run is all there: +30 %
    return doc


def test_a_history_that_fails_after_the_run_costs_the_check_not_the_reports(
        history, tmp_path, monkeypatch):
    # The store is upgraded by a newer epbench while the run goes on: the check after the
    # run cannot read it. Checked: without the `except HistoryError` in the workflow
    # this exits 1 with no compare.json, report.md or report.html.
    monkeypatch.delenv(DB_ENV, raising=False)
    db = shutil.copy(history[2], tmp_path / "history.sqlite")
    _stub_run(monkeypatch, during_run=lambda: _bump_schema(db))
    result = _cli(history, tmp_path, "--history", str(db))
    assert result.exit_code == EXIT_REGRESSION, result.output
    assert ("note: the base commit was not checked against the history: the history database "
            f"{db} has schema version 99, newer than this epbench understands") in result.output
    doc = _assert_reports_written(tmp_path / "out")
    bh = doc["base_history"]
    assert "schema version 99" in bh["error"] and bh["findings"] == [] and bh["series"] == 0
    line = f"Base `{history[1][3][:7]}` was not checked against the history, which could not"
    assert line in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "was not checked against the history" in (
        tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "history: " + line in result.output  # the terminal's verdicts
    # No finding: the PR comment says nothing.
    assert "not checked" not in comment_body(Comparison.from_json(doc))


def _unreadable(kind: str, tmp_path: Path, db: str) -> tuple[str, str]:
    """(a history that cannot be read, what the note says about it)."""
    if kind == "newer":
        path = shutil.copy(db, tmp_path / "newer.sqlite")
        _bump_schema(path)
        return str(path), "has schema version 99, newer than this epbench understands"
    if kind == "not-a-database":
        path = tmp_path / "notes.txt"
        path.write_text("not a database, just some notes\n" * 100, encoding="utf-8")
        return str(path), "is not a usable history database"
    return "postgresql://epbench@127.0.0.1:1/history", "cannot reach the PostgreSQL server"


@pytest.mark.parametrize("kind", ["newer", "not-a-database", "unreachable"])
def test_an_epbench_db_that_cannot_be_read_is_a_note_and_the_run_goes_on(
        history, tmp_path, monkeypatch, kind):
    # Checked: with history_to_check raising for $EPBENCH_DB (the old code's open in
    # the workflow) each of these exits 1 before anything is built.
    url, why = _unreadable(kind, tmp_path, history[2])
    monkeypatch.setenv(DB_ENV, url)
    built = _stub_run(monkeypatch)
    result = _cli(history, tmp_path)
    assert result.exit_code == EXIT_REGRESSION, result.output
    (note,) = [ln for ln in result.output.splitlines() if ln.startswith("note:")]
    assert note.startswith(f"note: the base commit is not checked against the history: "
                           f"${DB_ENV} names {redact(url)}, which cannot be read (")
    assert why in note
    assert built == ["base", "head"]
    assert "base_history" not in _assert_reports_written(tmp_path / "out")
    if kind == "newer":
        assert _schema_version(Path(url)) == 99


@pytest.mark.parametrize("kind", ["newer", "not-a-database", "unreachable"])
def test_a_history_given_that_cannot_be_read_is_one_line_and_exit_1_before_anything_is_built(
        history, tmp_path, monkeypatch, kind):
    monkeypatch.delenv(DB_ENV, raising=False)
    url, why = _unreadable(kind, tmp_path, history[2])
    built = _stub_run(monkeypatch)
    result = _cli(history, tmp_path, "--history", url)
    assert result.exit_code == EXIT_USER_ERROR, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
    assert line.startswith("Error: ") and why in line
    assert built == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", [True, False], ids=["--history", "EPBENCH_DB"])
def test_an_older_store_is_never_upgraded_by_the_check_but_named_with_how_to(
        history, tmp_path, monkeypatch, given):
    # Checked: with the workflow's HistoryStore.open (migrating) the file comes out at
    # the current schema version.
    db = _old_store(tmp_path / "old.sqlite")
    if given:
        monkeypatch.delenv(DB_ENV, raising=False)
        extra: tuple[str, ...] = ("--history", str(db))
    else:
        monkeypatch.setenv(DB_ENV, str(db))
        extra = ()
    _stub_run(monkeypatch)
    result = _cli(history, tmp_path, *extra)
    assert result.exit_code == EXIT_REGRESSION, result.output
    assert _schema_version(db) == 1
    (note,) = [ln for ln in result.output.splitlines() if ln.startswith("note:")]
    assert f"schema version 1, older than this epbench's ({SCHEMA_VERSION})" in note
    assert "run any `epbench history` command on it" in note
    assert "base_history" not in _assert_reports_written(tmp_path / "out")


def test_epbench_db_is_the_history_when_no_history_is_given(history, tmp_path, monkeypatch):
    # Checked: deleting `history_to_check(history_db)` in run_commands.py fails this.
    monkeypatch.setenv(DB_ENV, history[2])
    _stub_run(monkeypatch)
    result = _cli(history, tmp_path)
    assert result.exit_code == EXIT_REGRESSION, result.output
    assert "note:" not in result.output
    bh = _assert_reports_written(tmp_path / "out")["base_history"]
    assert (bh["commit"], bh["measured"], bh["tested"]) == (history[1][3], True, 1)
    assert "error" not in bh


def test_the_workflow_reads_an_older_store_as_it_is_and_says_why_it_could_not_check(
        history, tmp_path, monkeypatch):
    # The library called without history_to_check first. Checked: with the workflow's
    # HistoryStore.open (migrating) the file comes out at the current schema version.
    db = _old_store(tmp_path / "old.sqlite")
    out, result = _compare(history, tmp_path, monkeypatch, 3, db=str(db))
    assert _schema_version(db) == 1
    assert "schema version 1, older than" in result.comparison.base_history.error
    assert any("run any `epbench history` command" in note for note in result.notes)
    _assert_reports_written(out)
