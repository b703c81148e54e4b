"""`epbench history ...` end to end: real results files, a real git repository, real stores."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.errors import EXIT_OK, EXIT_REGRESSION, EXIT_USER_ERROR
from epbench.core.results import SCHEMA, write_results
from epbench.reports.history.store import SCHEMA_VERSION
from tests.support import synthetic
from tests.support.gitrepo import git, init_repo

BEFORE, AFTER = 10, 10  # measured commits either side of the slower one
SLOWER = 1.06


def invoke(*args: object) -> object:
    result = CliRunner().invoke(cli, ["history", *[str(a) for a in args]])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def make_run(folder: Path, seed: int, *, commit: str, slower: bool) -> Path:
    factor = SLOWER if slower else 1.0
    counters = {"relu_d100_w8": {"engine": {"api_calls": 3.0,
                                            "heap_allocs": 2.0 if slower else 1.0}}}
    doc = synthetic.results_doc(
        {"relu_d100_w8": {"ort": 2000.0, "engine": 700.0 * factor},
         "relu_d10_w8": {"ort": 400.0, "engine": 150.0}},
        rounds=8, seed=seed, counters=counters)
    doc["host"]["git_commit"] = commit
    doc["created"] = f"2026-03-01T10:{seed:02d}:00Z"
    folder.mkdir(parents=True)
    write_results(folder / "results.json", doc)
    return folder / "results.json"


@pytest.fixture(scope="module")
def history_repo(tmp_path_factory) -> tuple[Path, list[str], Path]:
    """A git repository of 21 commits, 20 of them measured (commit 11 was not), their runs."""
    root = tmp_path_factory.mktemp("hist")
    repo = init_repo(root / "repo")
    shas = []
    for i in range(BEFORE + AFTER + 1):
        (repo / "f.txt").write_text(f"{i}\n")
        git(repo, "add", "f.txt")
        git(repo, "commit", "-q", "-m", f"c{i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    measured = shas[:BEFORE] + shas[BEFORE + 1:]  # shas[BEFORE] made it slower, never measured
    runs = root / "runs"
    for i, sha in enumerate(measured):
        make_run(runs / f"r{i:02d}", i, commit=sha, slower=i >= BEFORE)
    return repo, measured, runs


@pytest.fixture
def db(db_url: str) -> str:
    """The shared store fixture (tests/conftest.py) under this module's short name."""
    return db_url


def test_detect_names_the_commits_around_a_slowdown_and_exits_5(history_repo, db):
    repo, measured, runs = history_repo
    imported = invoke("import", runs, "--db", db, "--branch", "main")
    assert imported.exit_code == 0 and "20 run(s) added, 0 already stored" in imported.output
    result = invoke("detect", "--db", db, "--repo", repo)
    assert result.exit_code == EXIT_REGRESSION, result.output
    lines = result.output.splitlines()
    (line,) = [x for x in lines if x.startswith("`")]
    assert line.startswith("`relu_d100_w8`, engine: +")
    assert line.endswith(f"between `{measured[BEFORE - 1][:7]}` and `{measured[BEFORE][:7]}` "
                         "(2 commits)")
    change = float(line.split(": ")[1].split(" %")[0])
    assert 4.0 < change < 8.0  # the true step is +6 %
    assert "    counters changed: heap_allocs 1.0 -> 2.0" in lines
    assert lines[-1] == "1 change point(s) in 2 series tested"
    # Machine-readable forms carry the same finding.
    doc = json.loads(invoke("detect", "--db", db, "--format", "json").output)
    (finding,) = doc["findings"]
    assert (finding["case"], finding["direction"], finding["after"]) == (
        "relu_d100_w8", "regression", measured[BEFORE])
    assert finding["counters_changed"] == {"heap_allocs": [1.0, 2.0]}
    rows = list(csv.DictReader(io.StringIO(invoke("detect", "--db", db, "--format", "csv").output)))
    assert [(r["case"], r["after"]) for r in rows] == [("relu_d100_w8", measured[BEFORE])]


def test_fail_on_and_since_choose_what_counts(history_repo, tmp_path):
    repo, measured, runs = history_repo
    db = tmp_path / "h.sqlite"
    invoke("import", runs, "--db", db)
    assert invoke("detect", "--db", db, "--fail-on", "never").exit_code == EXIT_OK
    after = invoke("detect", "--db", db, "--since", measured[BEFORE + 2][:8])
    assert after.exit_code == EXIT_OK and "0 change point(s) since" in after.output
    # A git revision of --repo is resolved to its sha, then found in the store.
    by_git = invoke("detect", "--db", db, "--repo", repo, "--since", "HEAD~12")
    assert by_git.exit_code == EXIT_REGRESSION
    unknown = invoke("detect", "--db", db, "--repo", repo, "--since", "no-such-rev")
    assert unknown.exit_code == EXIT_USER_ERROR
    assert unknown.output.strip().splitlines() == [
        "Error: --since 'no-such-rev': unknown revision (no stored run has it); "
        "`epbench history list` shows the stored commits"]
    assert invoke("detect", "--db", db, "--case", "relu_d10_w8").exit_code == EXIT_OK
    none = invoke("detect", "--db", db, "--case", "nope")
    assert none.exit_code == EXIT_USER_ERROR and "no stored series matches" in none.output


def test_a_series_too_short_to_test_says_how_many_points_it_needs(history_repo, tmp_path):
    _, _, runs = history_repo
    db = tmp_path / "h.sqlite"
    for i in range(3):
        invoke("add", runs / f"r{i:02d}" / "results.json", "--db", db)
    # A new team's nightly job: too few commits is a note and exit 0, whatever --fail-on.
    for fail_on in ("regression", "any"):
        result = CliRunner().invoke(cli, ["history", "detect", "--db", str(db), "--case",
                                          "relu_d100_w8", "--fail-on", fail_on])
        assert result.exit_code == EXIT_OK, result.output
        assert result.stdout == "0 change point(s) in 0 series tested\n"
        assert result.stderr.splitlines() == [
            "note: not tested: relu_d100_w8, engine on host0001: 3 commit(s) in the series, "
            "a change-point test needs at least 12 (9 more); add more runs",
            "note: no series is long enough to test yet; the longest needs 9 more "
            "commit(s) (12 in all)"]
    as_json = json.loads(invoke("detect", "--db", db, "--format", "json").stdout)
    assert (as_json["tested"], as_json["more_commits_needed"], as_json["findings"]) == (0, 9, [])


def test_add_twice_show_list_and_export(history_repo, tmp_path):
    _, measured, runs = history_repo
    db = tmp_path / "h.sqlite"
    first = invoke("add", runs / "r00" / "results.json", "--db", db, "--branch", "main")
    assert first.exit_code == 0 and first.output.startswith(
        f"added run 1: commit {measured[0][:7]} on main, 4 case x arm points")
    again = invoke("add", runs / "r00" / "results.json", "--db", db)
    assert again.output.strip() == (
        f"already stored as run 1 (commit {measured[0][:7]}); nothing added")
    invoke("import", runs, "--db", db)
    listing = invoke("list", "--db", db).output.splitlines()
    assert listing[-1] == f"20 run(s) in {db} (schema version {SCHEMA_VERSION})"
    assert invoke("list", "--series", "--db", db).output.splitlines()[0].split() == [
        "relu_d100_w8", "engine", "host0001", "20", "commit(s)"]
    shown = invoke("show", "--db", db, "--case", "relu_d100_w8", "--arm", "engine").output
    marked = [x for x in shown.splitlines() if "<- change" in x]
    assert len(marked) == 1 and marked[0].split()[0] == measured[BEFORE][:7]
    out = tmp_path / "all.csv"
    assert invoke("export", "--db", db, "--out", out).exit_code == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 20 * 4 and {r["arm"] for r in rows} == {"ort", "engine"}
    assert len(json.loads(rows[0]["round_medians_ns"])) == 8


def test_parquet_export_needs_pyarrow_and_says_so(tmp_path):
    result = invoke("export", "--db", tmp_path / "h.sqlite", "--format", "parquet",
                    "--out", tmp_path / "x.pq")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        assert result.exit_code == EXIT_USER_ERROR
        assert result.output.strip() == ("Error: --format parquet needs pyarrow, which is not "
                                         "installed; `pip install pyarrow`, or use --format csv")
    else:
        assert result.exit_code == 0 and (tmp_path / "x.pq").is_file()


def test_a_run_without_a_commit_and_a_newer_database_are_one_line_each(tmp_path):
    doc = synthetic.results_doc({"relu_d1_w8": {"ort": 100.0, "engine": 50.0}}, rounds=6)
    doc["host"]["git_commit"] = None
    write_results(tmp_path / "results.json", doc)
    db = tmp_path / "h.sqlite"
    result = invoke("add", tmp_path / "results.json", "--db", db)
    assert result.exit_code == EXIT_USER_ERROR
    assert result.output.strip() == (
        f"Error: {tmp_path / 'results.json'} records no git commit (it ran outside a git "
        "checkout); pass --commit SHA (and --branch NAME)")
    assert invoke("add", tmp_path / "results.json", "--db", db, "--commit", "abc1234"
                  ).exit_code == 0
    write_results(tmp_path / "newer.json", {**doc, "schema": "epbench.results/99"})
    newer_file = invoke("add", tmp_path / "newer.json", "--db", db, "--commit", "abc1234")
    assert newer_file.exit_code == EXIT_USER_ERROR
    assert newer_file.output.strip() == (
        f"Error: {tmp_path / 'newer.json'} uses epbench.results/99, newer than this epbench "
        f"understands ({SCHEMA}); upgrade epbench to read it")
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO schema_version VALUES (?, 'later')", (SCHEMA_VERSION + 1,))
    newer = invoke("list", "--db", db)
    assert newer.exit_code == EXIT_USER_ERROR
    assert newer.output.strip() == (
        f"Error: the history database {db} has schema version {SCHEMA_VERSION + 1}, newer "
        f"than this epbench understands ({SCHEMA_VERSION}); upgrade epbench")


def test_epbench_db_selects_the_store(tmp_path, monkeypatch):
    doc = synthetic.results_doc({"relu_d1_w8": {"ort": 100.0, "engine": 50.0}}, rounds=6)
    write_results(tmp_path / "results.json", doc)
    monkeypatch.setenv("EPBENCH_DB", str(tmp_path / "env.sqlite"))
    assert invoke("add", tmp_path / "results.json").exit_code == 0
    assert (tmp_path / "env.sqlite").is_file()


def test_the_html_report_draws_the_stored_history(history_repo, tmp_path):
    _, measured, runs = history_repo
    db = str(tmp_path / "h.sqlite")
    assert invoke("import", runs, "--db", db).exit_code == 0
    out = tmp_path / "pages"
    result = CliRunner().invoke(cli, ["report", "--history", db, "--html", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text(encoding="utf-8")
    # One figure per stored series (two cases of the engine arm), each an inline SVG.
    assert page.count('<figure id="history-') == 2
    assert page.count("<svg") >= 2
    assert "relu_d100_w8" in page and measured[0][:7] in page
    assert "http://" not in page.replace("http://www.w3.org", "") and "<script" not in page


def test_list_and_show_print_json_that_validates_against_their_schemas(history_repo, tmp_path):
    import jsonschema

    _, measured, runs = history_repo
    db = tmp_path / "h.sqlite"
    invoke("import", runs, "--db", db, "--branch", "main")
    reports = Path(__file__).resolve().parent.parent / "reports" / "history"
    schemas = {name: json.loads((reports / f"{name}.schema.json").read_text())
               for name in ("history_list", "history_series")}
    listed = json.loads(invoke("list", "--db", db, "--format", "json").output)
    jsonschema.validate(listed, schemas["history_list"])
    assert [r["commit"] for r in listed["runs"]] == measured
    assert listed["series"] is None
    series = json.loads(invoke("list", "--series", "--db", db, "--format", "json").output)
    jsonschema.validate(series, schemas["history_list"])
    assert [(s["case"], s["arm"], s["commits"]) for s in series["series"]] == [
        ("relu_d100_w8", "engine", 20), ("relu_d10_w8", "engine", 20)]
    out = tmp_path / "out" / "series.json"
    assert invoke("show", "--db", db, "--case", "relu_d100_w8", "--arm", "engine",
                  "--format", "json", "--out", out).exit_code == 0
    shown = json.loads(out.read_text())
    jsonschema.validate(shown, schemas["history_series"])
    assert [p["commit"] for p in shown["points"]] == measured
    starts = [p["commit"] for p in shown["points"] if p["change_point"] is not None]
    assert starts == [measured[BEFORE]] == [f["after"] for f in shown["findings"]]
    # The schemas refuse what the documents must not hold.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**listed, "extra": 1}, schemas["history_list"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**shown, "points": [{**shown["points"][0], "ratio": -1.0}]},
                            schemas["history_series"])


def test_two_runs_of_one_commit_merge_into_a_point_inside_its_interval():
    # The case the issue saw: two runs of one commit shown as 0.606 [0.602, 0.605].
    from epbench.reports.history.changes import merge_runs
    from epbench.reports.history.store import StoredPoint

    def stored(**fields: object) -> StoredPoint:
        unread = {"commit": "c" * 40, "branch": None, "machine": "host0001", "status": "ok",
                  "p50_ns": None, "round_medians_ns": [], "instructions": None,
                  "instructions_method": None, "run_id": 1}
        return StoredPoint(**{**unread, **fields})

    rows = [stored(ratio=0.6085, ratio_lo=0.6065, ratio_hi=0.6105, created="t1",
                   counters={"api_calls": 2.0}),
            stored(ratio=0.6035, ratio_lo=0.602, ratio_hi=0.605, created="t2",
                   counters={"api_calls": 1.0})]
    point = merge_runs("c" * 40, rows)
    assert point.ratio == pytest.approx((0.6035 * 0.6085) ** 0.5)
    assert (point.lo, point.hi, point.runs, point.created) == (0.602, 0.6105, 2, "t1")
    assert point.lo <= point.ratio <= point.hi
    # A run without an interval contributes its ratio only; none at all gives none.
    assert merge_runs("c", [replace(rows[1], ratio_lo=None, ratio_hi=None)]).lo is None
    three = merge_runs("c", [*rows, replace(rows[0], ratio=0.7, ratio_lo=None,
                                            ratio_hi=None)])
    assert three.ratio == 0.6085 and (three.lo, three.hi) == (0.602, 0.6105)
