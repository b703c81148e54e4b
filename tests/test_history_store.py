"""The history store, on both backends: real SQLite files and a real throw-away PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.paths import DB_ENV
from epbench.core.results import ResultsError, dumps, load_results, read_document, write_results
from epbench.reports import stats
from epbench.reports.history.changes import (
    SeriesPoint,
    read_series_with_changes,
    series,
    series_frame,
)
from epbench.reports.history.db import HistoryError
from epbench.reports.history.store import (
    SCHEMA_VERSION,
    AddResult,
    HistoryStore,
    RunRecord,
    add_file,
    import_dir,
    resolve_db_url,
    run_key,
    run_record,
)
from tests.support import synthetic
from tests.support.synthetic import as_results

ROOT = Path(__file__).resolve().parent.parent
CASES = {"relu_d100_w8": {"ort": 2000.0, "engine": 700.0},
         "relu_d10_w8": {"ort": 400.0, "engine": 150.0}}
COUNTERS = {"relu_d100_w8": {"engine": {"api_calls": 3.0, "heap_allocs": 1.0,
                                        "instructions": 52000.0}}}


def make_doc(seed: int = 0, *, commit: str | None = None, created: str | None = None,
             host: str = "host0001", slower: float = 1.0) -> dict:
    cases = {c: {a: ns * (slower if a == "engine" else 1.0) for a, ns in arms.items()}
             for c, arms in CASES.items()}
    doc = synthetic.results_doc(cases, rounds=8, seed=seed, host_key=host, counters=COUNTERS)
    doc["host"]["git_commit"] = commit if commit is not None else f"{seed:040x}"
    doc["created"] = created or f"2026-02-01T00:{seed // 60:02d}:{seed % 60:02d}Z"
    return doc




def _add(url: str, doc: dict, **kw) -> AddResult:
    with HistoryStore.open(url) as store:
        return store.add(run_record(as_results(doc), source="test", **kw))


def test_a_run_is_stored_with_everything_the_series_needs(db_url):
    doc = make_doc(3)
    done = _add(db_url, doc, branch="main")
    assert done.added and done.points == 4
    with HistoryStore.open(db_url) as store:
        (run,) = store.runs()
        assert (run.commit, run.branch, run.created, run.machine) == (
            f"{3:040x}", "main", doc["created"], "host0001")
        assert run.epbench_version
        (point,) = store.points("relu_d100_w8", "engine", "host0001")
    case = as_results(doc).cases["relu_d100_w8"]
    engine, ort = stats.round_medians(case, "engine"), stats.round_medians(case, "ort")
    (change,) = stats.paired_changes([stats.log_ratios(engine, ort)])
    assert point.ratio == pytest.approx(change.ratio, rel=1e-12)
    assert (point.ratio_lo, point.ratio_hi) == pytest.approx((change.lo, change.hi))
    assert point.p50_ns == pytest.approx(float(np.median(engine)))
    assert point.round_medians_ns == pytest.approx(list(engine))
    assert point.counters == COUNTERS["relu_d100_w8"]["engine"]
    assert point.instructions == 52000.0


def test_the_same_run_added_twice_is_stored_once(db_url):
    doc = make_doc(1)
    first, second = _add(db_url, doc), _add(db_url, json.loads(json.dumps(doc)))
    assert first.added and not second.added and first.run_id == second.run_id
    with HistoryStore.open(db_url) as store:
        assert len(store.runs()) == 1
        assert len(store.points("relu_d10_w8", "engine", "host0001")) == 1


def test_an_add_that_fails_half_way_leaves_nothing(db_url):
    record = run_record(as_results(make_doc(2)), source="test")
    # The same case x arm twice: the database refuses the second point row.
    broken = RunRecord(**{**record.__dict__, "points": record.points + record.points[:1]})
    with HistoryStore.open(db_url) as store:
        with pytest.raises(HistoryError, match="refused a write"):
            store.add(broken)
        assert store.runs() == []
        assert store.points(record.points[0].case, record.points[0].arm, "host0001") == []


def test_a_series_is_per_machine_unless_grouped_into_a_class(db_url):
    _add(db_url, make_doc(1, host="hostA"))
    _add(db_url, make_doc(2, host="hostB"))
    with HistoryStore.open(db_url) as store:
        assert {m for _, _, m in store.series_keys()} == {"hostA", "hostB"}
    _add(db_url, make_doc(3, host="hostA"), machine_class="ci-2core")
    _add(db_url, make_doc(4, host="hostB"), machine_class="ci-2core")
    with HistoryStore.open(db_url) as store:
        grouped = series(store, "relu_d100_w8", "engine", "ci-2core")
        assert [p.commit for p in grouped] == [f"{3:040x}", f"{4:040x}"]
        assert ("relu_d100_w8", "ort", "hostA") not in store.series_keys()  # the control


def test_a_commit_measured_twice_is_one_point_at_the_median(db_url):
    for seed in (1, 2, 3):
        _add(db_url, make_doc(seed, commit="c" * 40))
    with HistoryStore.open(db_url) as store:
        rows = store.points("relu_d100_w8", "engine", "host0001")
        (point,) = series(store, "relu_d100_w8", "engine", "host0001")
        frame = series_frame(store, "relu_d100_w8", "engine", "host0001")
    assert point.runs == 3
    assert point.ratio == pytest.approx(float(np.median([r.ratio for r in rows])))
    assert list(frame.columns) == ["commit", "created", "ratio", "lo", "hi", "runs"]
    assert frame["ratio"].tolist() == [point.ratio]


def test_an_old_database_is_upgraded_on_first_use(db_url):
    store = HistoryStore.open(db_url, migrate=False)
    store._migrate(target=1)
    store._db.execute(
        "INSERT INTO runs (run_key, commit_sha, branch, created, added, machine, "
        "results_schema) VALUES ('k1', 'abc1234', 'main', '2026-01-01', '2026-01-01', 'h1', "
        "'epbench.results/1')")
    assert store.schema_version() == 1
    store.close()
    with HistoryStore.open(db_url) as store:
        assert store.schema_version() == SCHEMA_VERSION == 3
        (run,) = store.runs()
        assert (run.commit, run.machine_class) == ("abc1234", None)
    _add(db_url, make_doc(5), machine_class="m")  # the new column works


def test_a_database_of_a_newer_schema_is_refused_untouched(db_url):
    _add(db_url, make_doc(1))
    with HistoryStore.open(db_url) as store:
        store._db.execute("INSERT INTO schema_version (version, applied) VALUES (99, 'x')")
    with pytest.raises(HistoryError, match=r"schema version 99, newer than this epbench "
                                                rf"understands \({SCHEMA_VERSION}\); upgrade"):
        HistoryStore.open(db_url)
    store = HistoryStore.open(db_url, migrate=False)
    assert len(store.runs()) == 1 and store.schema_version() == 99
    store.close()


def test_a_results_file_of_a_newer_schema_is_refused_and_nothing_stored(db_url, tmp_path):
    doc = make_doc(1)
    doc["schema"] = "epbench.results/99"
    write_results(tmp_path / "results.json", doc)
    with HistoryStore.open(db_url) as store:
        with pytest.raises(ResultsError, match="newer than this epbench understands"):
            add_file(store, tmp_path / "results.json")
        assert store.runs() == []


def test_a_run_without_a_commit_says_how_to_give_one(db_url):
    doc = make_doc(1, commit="")
    with pytest.raises(HistoryError, match=r"records no git commit .*pass --commit SHA"):
        _add(db_url, doc)
    assert _add(db_url, doc, commit="feedbeef").commit == "feedbeef"


def test_import_adds_oldest_first_and_stops_before_adding_on_a_bad_file(db_url, tmp_path):
    for seed in (3, 1, 2):
        (tmp_path / f"r{seed}").mkdir()
        write_results(tmp_path / f"r{seed}" / "results.json", make_doc(seed))
    with HistoryStore.open(db_url) as store:
        done = import_dir(store, tmp_path)
        assert [r.commit for _, r in done] == [f"{s:040x}" for s in (1, 2, 3)]
        bad = tmp_path / "r9"
        bad.mkdir()
        write_results(bad / "results.json", {**make_doc(9), "schema": "epbench.results/99"})
        write_results(tmp_path / "r3" / "results.json", make_doc(4))  # a new run, not added
        with pytest.raises(ResultsError):
            import_dir(store, tmp_path)
        assert len(store.runs()) == 3


def _writer(db_url: str, folder: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "epbench.cli.main", "history", "import",
                             str(folder), "--db", db_url], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_concurrent_writers_lose_nothing_and_duplicate_nothing(db_url, tmp_path):
    # Two runners import overlapping sets of runs into one fresh database at the same time
    # (both also race to create the schema): every run once, every point kept.
    docs = [make_doc(seed) for seed in range(12)]
    for name, seeds in (("a", range(0, 8)), ("b", range(4, 12))):
        for seed in seeds:
            (tmp_path / name / str(seed)).mkdir(parents=True)
            write_results(tmp_path / name / str(seed) / "results.json", docs[seed])
    writers = [_writer(db_url, tmp_path / "a"), _writer(db_url, tmp_path / "b")]
    outputs = [w.communicate(timeout=300) for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outputs
    added = sum(int(out.strip().splitlines()[-1].split()[0]) for out, _ in outputs)
    assert added == 12
    with HistoryStore.open(db_url) as store:
        runs = store.runs()
        assert sorted(r.commit for r in runs) == sorted(f"{s:040x}" for s in range(12))
        assert [r.points for r in runs] == [4] * 12
        assert store.schema_version() == SCHEMA_VERSION


def test_an_unreachable_server_is_one_clear_line():
    url = f"postgresql://epbench:x@127.0.0.1:{_closed_port()}/nothing"
    with pytest.raises(HistoryError) as err:
        HistoryStore.open(url)
    message = err.value.message
    assert message.startswith("cannot reach the PostgreSQL server at postgresql://epbench:***@")
    assert message.endswith("check that it is running and that host and port in --db are right")
    assert "\n" not in message


def test_a_wrong_password_is_one_clear_line_without_the_password(pg_server):
    with pytest.raises(HistoryError) as err:
        HistoryStore.open(pg_server.url(password="not-the-password"))
    message = err.value.message
    assert "refused the password" in message and "password authentication failed" in message
    assert "not-the-password" not in message and "\n" not in message


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # a port free a moment ago: nobody listens, connects are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_default_database_lives_under_the_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(DB_ENV, raising=False)
    assert resolve_db_url(None) == str(tmp_path / "cache" / "history.sqlite")
    monkeypatch.setenv(DB_ENV, "sqlite:///elsewhere.db")
    assert resolve_db_url(None) == "sqlite:///elsewhere.db"
    assert resolve_db_url("x.db") == "x.db"
    with HistoryStore.open(f"sqlite://{tmp_path}/a/b.sqlite") as store:
        assert store.kind == "sqlite"
    assert (tmp_path / "a" / "b.sqlite").is_file()
    assert math.isnan(SeriesPoint("c", "t", 1.0, None, None, 1, None).weight)


def test_runners_opening_a_new_database_at_once_migrate_it_once(db_url):
    # Four connections migrate one empty database at the same moment: one creates the
    # schema, the others wait for it (an advisory lock / BEGIN IMMEDIATE) and find it made.
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def open_store() -> None:
        barrier.wait()
        try:
            HistoryStore.open(db_url).close()
        except BaseException as exc:  # noqa: BLE001 -- collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    store = HistoryStore.open(db_url, migrate=False)
    versions = store._db.execute("SELECT version FROM schema_version ORDER BY version")
    store.close()
    assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))


def test_a_report_reads_a_series_and_its_change_point_in_one_call(db_url):
    # 8 commits at one level, 8 at 5 % slower: the report's entry point finds the step.
    for seed in range(16):
        _add(db_url, make_doc(seed, slower=1.05 if seed >= 8 else 1.0))
    found = read_series_with_changes(db_url, "relu_d100_w8", "engine")
    assert found.machine == "host0001" and len(found.points) == 16
    (finding,) = found.findings
    assert (finding.index, finding.before, finding.after) == (8, f"{7:040x}", f"{8:040x}")
    assert finding.regression and 1.03 < finding.change.ratio < 1.07
    assert finding.counters_changed == {}
    other = read_series_with_changes(db_url, "relu_d10_w8", "engine")  # slowed too
    assert [f.index for f in other.findings] == [8]


def test_a_run_is_one_run_from_its_document_or_its_stream(db_url, tmp_path):
    """A real run: its results.json and its results.jsonl give one run_key, so adding both
    stores it once (the stream's end line carries the run's overhead)."""
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, [
        "run", "--case", "relu_d1_w8", "--arm", "ort:name=ort_b", "--rounds", "2",
        "--processes", "1", "--block-ms", "0.2", "--max-block-iters", "10",
        "--warmup-ms", "1", "--gate", "off", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    whole, stream = load_results(out / "results.json"), load_results(out / "results.jsonl")
    assert whole.overhead is not None and stream.overhead == whole.overhead
    assert stream.to_dict() == whole.to_dict()
    assert run_key(stream) == run_key(whole)
    with HistoryStore.open(db_url) as store:
        first = store.add(run_record(whole, source="results.json", commit="c" * 40))
        second = store.add(run_record(stream, source="results.jsonl", commit="c" * 40))
        assert first.added and not second.added and first.run_id == second.run_id
        assert len(store.runs()) == 1


def test_a_run_key_is_the_hash_of_the_document_as_written():
    """Pinned: a changed hash would make every stored run look new and be added again."""
    doc = load_results(ROOT / "tests" / "fixtures" / "results" / "run_v2.json")
    raw, _ = read_document(ROOT / "tests" / "fixtures" / "results" / "run_v2.json")
    assert run_key(doc) == hashlib.sha256(dumps(raw).encode()).hexdigest()[:32]
    assert run_key(doc) == "e7d5d920f0c672cb05815c53dbf69435"
