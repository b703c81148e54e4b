"""A team's history server: `epbench history migrate`, compose.yaml, and concurrent adds.

The server is a real throw-away PostgreSQL (tests/support/postgres.py), the same major
version docs/history/compose.yaml starts. Four `epbench history add` processes are held
at one lock by the test and let go together, so they really write at the same moment.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.results import write_results
from epbench.harness.merge import Shard, merge_shards
from epbench.reports.history.db import MIGRATION_LOCK
from epbench.reports.history.store import SCHEMA_VERSION, HistoryStore
from tests.support import synthetic
from tests.support.postgres import PASSWORD, USER, PgServer, server_bin_dir
from tests.support.synthetic import as_results
from tests.support.workflow_rules import load

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docs" / "history" / "compose.yaml"
DOCS = ROOT / "docs" / "history.md"
SHARD_CASES = (("relu_d1_w8", "relu_d10_w8"), ("add_d10_w8",), ("matmul_64x64",))
# A bound for the writers to reach the test's lock, far above the ~1 s it takes.
WAIT_FOR_WRITERS_S = 240


def _migrate(db_url: str) -> str:
    result = CliRunner().invoke(cli, ["history", "migrate", "--db", db_url])
    assert result.exit_code == 0, result.output
    return result.output


# -- epbench history migrate -----------------------------------------------------------


def test_migrate_creates_the_schema_once_and_then_has_nothing_to_do(db_url):
    shown = HistoryStore.open(db_url, migrate=False)
    where = shown.url
    shown.close()
    v = SCHEMA_VERSION
    assert _migrate(db_url) == f"upgraded {where} from schema version 0 to {v}\n"
    assert _migrate(db_url) == f"{where} is at schema version {v}; nothing to do\n"
    with HistoryStore.open(db_url, migrate=False) as store:
        rows = store._db.execute("SELECT version FROM schema_version ORDER BY version")
        assert [r for (r,) in rows] == list(range(1, v + 1))  # each step applied once
        assert store.runs() == []


def test_migrate_upgrades_an_old_store_in_place_keeping_its_runs(db_url):
    store = HistoryStore.open(db_url, migrate=False)
    store._migrate(target=1)
    store._db.execute(
        "INSERT INTO runs (run_key, commit_sha, branch, created, added, machine, "
        "results_schema) VALUES ('k1', 'abc1234', 'main', '2026-01-01', '2026-01-01', 'h1', "
        "'epbench.results/1')")
    where = store.url
    store.close()
    assert _migrate(db_url) == (f"upgraded {where} from schema version 1 to "
                                f"{SCHEMA_VERSION}\n")
    with HistoryStore.open_for_reading(db_url) as store:
        (run,) = store.runs()
        assert (run.commit, run.machine_class) == ("abc1234", None)


def test_migrate_refuses_a_newer_store_and_leaves_it_alone(db_url):
    _migrate(db_url)
    with HistoryStore.open(db_url, migrate=False) as store:
        store._db.execute("INSERT INTO schema_version (version, applied) VALUES (99, 'x')")
    result = CliRunner().invoke(cli, ["history", "migrate", "--db", db_url])
    assert result.exit_code == 1
    assert "schema version 99, newer than this epbench understands" in result.output
    with HistoryStore.open(db_url, migrate=False) as store:
        assert store.schema_version() == 99


# -- the compose file and its documentation ---------------------------------------------


def test_compose_starts_postgresql_15_with_a_volume_and_a_password_file():
    doc = load(COMPOSE)
    (name, db), = doc["services"].items()
    assert db["image"] == "postgres:15"
    # The tests run against the same major version.
    bin_dir = server_bin_dir()
    if bin_dir is not None and bin_dir.parent.name.isdigit():
        assert bin_dir.parent.name == "15"
    env = db["environment"]
    assert "POSTGRES_PASSWORD" not in env  # never inline: the file below
    assert env["POSTGRES_PASSWORD_FILE"] == "/run/secrets/epbench_db_password"
    assert db["secrets"] == ["epbench_db_password"]
    secret_file = doc["secrets"]["epbench_db_password"]["file"]
    ignored = subprocess.run(["git", "check-ignore", "-q", secret_file], cwd=COMPOSE.parent)
    assert ignored.returncode == 0, f"{secret_file} must be gitignored"
    (volume,) = db["volumes"]
    assert volume == "epbench-history:/var/lib/postgresql/data"
    assert set(doc["volumes"]) == {"epbench-history"}
    user, database = env["POSTGRES_USER"], env["POSTGRES_DB"]
    assert f"pg_isready -U {user} -d {database}" in db["healthcheck"]["test"][1]
    # The docs' URL names this user and database, and migrate runs once.
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("\n## A team's history server\n", 1)[1].split("\n## ", 1)[0]
    assert "docs/history/compose.yaml" in section
    assert f"postgresql://{user}:" in section and f"/{database}" in section
    assert "epbench history migrate" in section and "EPBENCH_DB" in section


# -- four concurrent writers --------------------------------------------------------------


def _merged_shards(commit: str, machine: str, seed: int) -> dict:
    """A merge of three shards of one run: what `record` adds for one class."""
    shards = []
    for k, names in enumerate(SHARD_CASES, start=1):
        doc = synthetic.results_doc({n: {"ort": 2000.0, "engine": 900.0} for n in names},
                                    rounds=6, seed=seed * 10 + k, host_key=machine)
        doc["config"].update(shard=f"{k}/3", seed=seed)
        doc["host"]["git_commit"] = commit
        doc["created"] = f"2026-04-0{1 + seed}T00:00:0{k}Z"
        shards.append(Shard(f"{machine}/{k}", as_results(doc)))
    return merge_shards(shards).to_dict()


def _waiting(conn, sql: str) -> int:
    return conn.execute(sql).fetchone()[0]


WRITERS = [("a" * 40, "x86"), ("a" * 40, "arm"), ("b" * 40, "x86"), ("b" * 40, "arm")]
WAITING_ON_RUNS = ("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                   "WHERE c.relname = 'runs' AND NOT l.granted")
WAITING_ON_MIGRATION = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        f"AND objid = {MIGRATION_LOCK} AND NOT granted")


@pytest.mark.parametrize("migrated", [True, False], ids=["migrated-once", "fresh-database"])
def test_four_concurrent_adds_store_every_run(pg_server: PgServer, tmp_path, migrated):
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    pg_server.createdb(name)
    url = pg_server.url(database=name)
    files = []
    for i, (commit, machine) in enumerate(WRITERS):
        path = tmp_path / f"w{i}" / "results.json"
        path.parent.mkdir()
        write_results(path, _merged_shards(commit, machine, i))
        files.append(path)
    if migrated:
        _migrate(url)  # as docs/history.md says: once, by the server's owner
    # The gate: the test holds what every writer needs first (the runs table, or on a
    # new database the migration lock), starts the four, and lets them go together.
    gate = psycopg.connect(f"host=127.0.0.1 port={pg_server.port} dbname={name} user={USER}",
                           password=PASSWORD, autocommit=True)
    waiting = WAITING_ON_RUNS if migrated else WAITING_ON_MIGRATION
    try:
        if migrated:
            gate.execute("BEGIN")
            gate.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
        else:
            gate.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        writers = [subprocess.Popen(
            [sys.executable, "-m", "epbench.cli.main", "history", "add", str(path),
             "--machine-class", f"github-{machine}", "--branch", "main", "--db", url],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for path, (_, machine) in zip(files, WRITERS, strict=True)]
        deadline = time.monotonic() + WAIT_FOR_WRITERS_S
        while _waiting(gate, waiting) < len(writers):
            assert time.monotonic() < deadline, "the writers never all reached the gate"
            assert all(w.poll() is None for w in writers), [w.communicate() for w in writers]
            time.sleep(0.05)
    finally:
        if migrated:
            gate.execute("COMMIT")
        else:
            gate.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        gate.close()
    outputs = [w.communicate(timeout=300) for w in writers]
    assert [w.returncode for w in writers] == [0] * 4, outputs
    assert [err for _, err in outputs] == [""] * 4
    assert all(out.startswith("added run ") for out, _ in outputs), outputs
    with HistoryStore.open(url) as store:
        runs = store.runs()
        assert sorted((r.commit, r.machine_class, r.points) for r in runs) == sorted(
            (c, f"github-{m}", 8) for c, m in WRITERS)
        assert len({r.id for r in runs}) == 4
        assert store.schema_version() == SCHEMA_VERSION
