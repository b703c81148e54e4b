"""History URLs and driver errors, as an adversary would try them: every spelling of the
scheme, passwords in every place, a full disk, names the database refuses. Each is one
line that never holds the password; the PostgreSQL cases run against a real server."""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.errors import EXIT_USER_ERROR
from epbench.core.paths import DB_ENV
from epbench.core.results import write_results
from epbench.reports.history.changes import history_to_check
from epbench.reports.history.db import HistoryError, redact
from epbench.reports.history.page import page_source
from epbench.reports.history.store import HistoryStore, run_record
from tests.support import postgres
from tests.support.synthetic import as_results
from tests.test_history_store import make_doc

SECRET = "hunter2-Zq9"


def invoke(*args: object) -> object:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def one_error_line(result) -> str:
    """The command's only output line, an error, exit 1, no traceback."""
    assert result.exit_code == EXIT_USER_ERROR, result.output
    assert "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: ")
    return line


def _pg(server: postgres.PgServer, scheme: str = "postgresql", *, user_info: str | None = None,
        query: str = "", database: str = postgres.DATABASE) -> str:
    if user_info is None:
        user_info = f"{postgres.USER}:{postgres.PASSWORD}"
    return f"{scheme}://{user_info}@127.0.0.1:{server.port}/{database}{query}"


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # free a moment ago: nobody listens
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "postgresql+psycopg",
                                    "Postgresql", "POSTGRES", "PostgreSQL+Psycopg"])
def test_every_spelling_of_the_scheme_names_postgresql_and_nothing_lands_on_disk(
        scheme, pg_server, tmp_path, monkeypatch):
    # Before: all but the first two were a SQLite path, and a folder named after the URL,
    # password included, was created under the working directory.
    monkeypatch.chdir(tmp_path)
    name = "h_" + uuid.uuid4().hex[:12]
    pg_server.createdb(name)
    with HistoryStore.open(_pg(pg_server, scheme, database=name)) as store:
        assert store.kind == "postgresql"
        assert store.url == f"{scheme}://{postgres.USER}:***@127.0.0.1:{pg_server.port}/{name}"
    assert list(tmp_path.iterdir()) == []


def test_sqlite_urls_and_plain_paths_stay_sqlite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for given, path in ((f"sqlite://{tmp_path}/a.sqlite", tmp_path / "a.sqlite"),
                        (f"SQLite://{tmp_path}/b.sqlite", tmp_path / "b.sqlite"),
                        ("sqlite:rel/c.sqlite", tmp_path / "rel" / "c.sqlite"),
                        ("d.sqlite", tmp_path / "d.sqlite"),
                        ("odd:name.sqlite", tmp_path / "odd:name.sqlite")):
        with HistoryStore.open(given) as store:
            assert store.kind == "sqlite"
        assert path.is_file(), given


@pytest.mark.parametrize("url", [f"mysql://u:{SECRET}@h/db", f"http://u:{SECRET}@h/db",
                                 f"file:///tmp/{SECRET}", f"postgresql+psycopg2://u:{SECRET}@h/d",
                                 f"pg://u:{SECRET}@h/db"])
def test_a_url_of_no_known_scheme_is_refused_not_taken_as_a_path(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_error_line(invoke("history", "list", "--db", url))
    scheme = url.split("://")[0]
    assert line == (f"Error: the history URL {scheme}://*** names no known scheme ({scheme!r}); "
                    "use postgresql://USER:PASSWORD@HOST:PORT/DB, sqlite:///PATH or a file "
                    "path")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("user_info,query", [
    (f"epbench:{SECRET}", ""),
    ("epbench", f"?password={SECRET}"),
    ("epbench", f"?sslmode=disable&password={SECRET}"),
    (f"epbench:{SECRET}@x", ""),  # an unescaped @ in the password
    (f"epbench:{SECRET}%40x", ""),
    ("epbench:other", f"?connect_timeout=3&sslpassword={SECRET}"),
])
def test_the_password_is_never_shown_wherever_the_url_holds_it(user_info, query):
    # Before: `?password=` was printed whole, and an unescaped @ printed the password's end.
    url = f"postgresql://{user_info}@127.0.0.1:{_closed_port()}/db{query}"
    line = one_error_line(invoke("history", "list", "--db", url))
    assert line.startswith("Error: cannot reach the PostgreSQL server at postgresql://epbench")
    assert SECRET not in line and "hunter" not in line and "@x" not in line
    assert "127.0.0.1" in line
    assert SECRET not in redact(url) and "hunter" not in redact(url)


def test_a_password_in_the_query_reaches_the_server(pg_server):
    url = _pg(pg_server, user_info=postgres.USER, query=f"?password={postgres.PASSWORD}")
    with HistoryStore.open(url) as store:
        assert store.kind == "postgresql" and store.url.endswith("?password=***")
    wrong = _pg(pg_server, user_info=postgres.USER, query=f"?password={SECRET}")
    line = one_error_line(invoke("history", "list", "--db", wrong))
    assert "refused the password" in line and SECRET not in line


def test_an_unescaped_at_in_the_password_is_the_password_not_the_host(pg_server):
    # libpq splits user info at the first @; the parser at the last, as RFC 3986 does.
    line = one_error_line(invoke("history", "list", "--db",
                                 _pg(pg_server, user_info=f"{postgres.USER}:{SECRET}@x")))
    assert "refused the password" in line and "hunter" not in line and "@x" not in line


@pytest.mark.parametrize("rest,why", [
    (f"epbench:{SECRET}/x@h/db", "has an @ after its host"),
    (f"epbench:{SECRET}#x@h/db", "has an @ after its host"),
    (f"epbench:12?{SECRET}@h/db", "has an @ after its host"),
    (f"epbench:{SECRET}/db", "has a port that is not a number"),
])
def test_a_password_with_an_unescaped_separator_is_refused_unshown(rest, why):
    line = one_error_line(invoke("history", "list", "--db", f"postgres://{rest}"))
    assert line.startswith(f"Error: the history URL postgres://*** {why}")
    assert SECRET not in line and "hunter" not in line


def test_driver_text_is_scrubbed_of_every_spelling_of_the_password(pg_server):
    # The driver echoes the database name; here it equals the password, so the message
    # carries it unless scrubbed (as would any driver text that echoes the conninfo).
    line = one_error_line(invoke("history", "list", "--db",
                                 _pg(pg_server, database=postgres.PASSWORD)))
    assert 'database "***" does not exist' in line and postgres.PASSWORD not in line
    from epbench.reports.history.db import parse_db_url

    parsed = parse_db_url("postgresql://u:a%2Fb%40c@h/d?sslpassword=x%20y")
    assert parsed.secrets == {"password": "a/b@c", "sslpassword": "x y"}
    assert "a/b@c" not in parsed.conninfo and "x%20y" not in parsed.conninfo
    assert parsed.scrub("a/b@c a%2Fb%40c x y x%20y") == "*** *** *** ***"


def test_an_unknown_scheme_in_epbench_db_is_a_note_and_given_is_an_error(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    url = f"Postgres+asyncpg://u:{SECRET}@h/db"
    monkeypatch.setenv(DB_ENV, url)
    checked, note = history_to_check(None)
    assert checked is None and SECRET not in note and "Postgres+asyncpg://***" in note
    with pytest.raises(HistoryError, match="names no known scheme") as err:
        history_to_check(url)
    assert SECRET not in err.value.message
    assert list(tmp_path.iterdir()) == []


def test_the_html_report_of_a_history_never_holds_the_password(pg_server, tmp_path):
    # Before: the page's source line and the "holds no series" error showed the URL whole.
    name = "h_" + uuid.uuid4().hex[:12]
    pg_server.createdb(name)
    url = pg_server.url(database=name)
    empty = one_error_line(invoke("report", "--history", url, "--html", tmp_path / "none"))
    assert empty.startswith(f"Error: the history at {redact(url)} holds no series yet")
    assert postgres.PASSWORD not in empty
    write_results(tmp_path / "results.json", make_doc(1))
    assert invoke("history", "add", tmp_path / "results.json", "--db", url).exit_code == 0
    assert invoke("report", "--history", url, "--html", tmp_path / "page").exit_code == 0
    page = (tmp_path / "page" / "index.html").read_text(encoding="utf-8")
    # The page is published: a server is named by its kind, never its user, host or port
    # (the user and port in their URL spelling: "epbench" is in the title, and the port's
    # digits could occur in an SVG coordinate).
    assert "Drawn from <code>a PostgreSQL server</code>." in page
    parts = urlsplit(url)
    for part in ("postgresql:", postgres.PASSWORD, f"{parts.username}:", parts.hostname,
                 f":{parts.port}", name):
        assert part not in page, part


@pytest.mark.parametrize(("db", "shown"), [
    ("postgresql://benchuser:pw@db.corp.internal:5432/epbench?sslmode=require",
     "a PostgreSQL server"),
    ("POSTGRES://db.corp.internal/epbench", "a PostgreSQL server"),
    ("postgresql://u:pw@host:notaport/db", "a history store"),
    ("sqlite:///srv/history.db", "history.db"),
    ("history.db", "history.db"),
    # A server's URL mistyped reads as a SQLite path: never shown as given.
    ("host=db.example user=u password=p dbname=h", "a history store"),
    (" postgresql://u:p@h/db", "a history store"),
])
def test_the_history_page_names_a_server_by_its_kind_and_a_file_by_its_name(db, shown):
    assert page_source(db) == shown


# --------------------------------------------------------------------------- driver errors


def _results_file(tmp_path: Path, case: str) -> Path:
    doc = make_doc(1)
    doc["cases"][case] = doc["cases"].pop("relu_d10_w8")
    write_results(tmp_path / "results.json", doc)
    return tmp_path / "results.json"


@pytest.mark.parametrize("bad", ["\x00", "\x1b[31m", "\n", "\udc80"])
def test_a_name_the_history_cannot_store_is_one_line_and_nothing_is_stored(
        bad, db_url, tmp_path):
    # Before, on PostgreSQL: NUL was a psycopg.DataError traceback, a lone surrogate a
    # UnicodeEncodeError one (on SQLite too); the other control characters were stored.
    path = _results_file(tmp_path, f"relu{bad}x")
    line = one_error_line(invoke("history", "add", path, "--db", db_url))
    code = f"U+{ord(bad[0]):04X}"
    assert line == (f"Error: {path}: the case name {ascii('relu' + bad + 'x')} holds the "
                    f"character {code}, which the history cannot store (no control "
                    "characters); correct it in the results file (or --commit/--branch/"
                    "--machine-class) and add the run again")
    with HistoryStore.open(db_url) as store:
        assert store.runs() == []
    branch = one_error_line(invoke("history", "add", _results_file(tmp_path, "ok"), "--db",
                                   db_url, "--branch", "main\x00"))
    assert "the branch 'main\\x00' holds the character U+0000" in branch


def test_the_driver_refusing_a_value_is_one_line(db_url):
    with HistoryStore.open(db_url) as store:
        with pytest.raises(HistoryError, match="refused a value") as err:
            store._db.execute("INSERT INTO schema_version VALUES (?, ?)", (9, "a\udc80"))
        assert "\n" not in err.value.message
        if store.kind == "postgresql":
            with pytest.raises(HistoryError, match="refused a value .*NUL"):
                store._db.execute("INSERT INTO schema_version VALUES (?, ?)", (9, "a\x00"))


def test_any_other_driver_error_is_one_line(db_url):
    # A store whose table went missing: psycopg's UndefinedTable was a traceback.
    with HistoryStore.open(db_url) as store:
        store._db.execute("DROP TABLE points")
    line = one_error_line(invoke("history", "list", "--db", db_url))
    assert "points" in line


@pytest.mark.parametrize("when", ["IMMEDIATE", "DEFERRED"])
def test_a_full_disk_on_the_server_is_named_and_nothing_is_stored(when, pg_server, tmp_path):
    # A trigger raises PostgreSQL's disk_full (53100) at the point insert, or at COMMIT
    # (a deferred constraint trigger): the server's own error, through the real driver.
    name = f"full_{when.lower()}_{os.getpid()}"
    pg_server.createdb(name)
    url = pg_server.url(database=name)
    with HistoryStore.open(url) as store:
        store._db.execute(
            "CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'could not extend file: No space left on device' "
            "USING ERRCODE = 'disk_full'; END $$")
        store._db.execute(
            f"CREATE CONSTRAINT TRIGGER disk_full AFTER INSERT ON points "
            f"DEFERRABLE INITIALLY {when} FOR EACH ROW EXECUTE FUNCTION disk_full()")
    write_results(tmp_path / "results.json", make_doc(1))
    line = one_error_line(invoke("history", "add", tmp_path / "results.json", "--db", url))
    assert line.startswith(f"Error: the PostgreSQL server at {redact(url)} is out of "
                           "disk space (could not extend file: No space left on device")
    assert line.endswith("free space on the server and run the command again")
    assert postgres.PASSWORD not in line
    with HistoryStore.open(url) as store:
        assert store.runs() == []


def test_a_full_sqlite_file_is_named_and_nothing_is_half_written(tmp_path):
    # SQLite's own limit on the file's pages returns SQLITE_FULL, the code it gives for
    # ENOSPC: the same path through the driver as a full disk, without root.
    db = tmp_path / "h.sqlite"
    records = [run_record(as_results(make_doc(seed)), source="test") for seed in range(40)]
    with HistoryStore.open(str(db)) as store:
        (pages,), = store._db.execute("PRAGMA page_count")
        store._db.execute(f"PRAGMA max_page_count = {pages + 2}")
        added = 0
        with pytest.raises(HistoryError) as err:
            for record in records:  # until the file may grow no more
                store.add(record)
                added += 1
        assert err.value.message == (
            f"the disk holding {db} is full (database or disk is full); nothing was stored: "
            "free space there, or pass another --db, and run the command again")
        assert 0 < added < len(records) and len(store.runs()) == added
        store._db.execute(f"PRAGMA max_page_count = {pages * 100}")
        assert store.add(records[added]).added


def _fill(folder: Path) -> None:
    """Write into `folder` until its file system is full."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 256 KiB tmpfs (root only: it mounts one; skips elsewhere)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "tiny"
    point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(point)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=False)


def test_history_add_on_a_full_disk_is_one_line(tiny_fs, tmp_path):
    # A real full disk. Before: two tracebacks, the last "cannot rollback - no
    # transaction is active".
    db = tiny_fs / "h.sqlite"
    with HistoryStore.open(str(db)):
        pass
    _fill(tiny_fs)
    write_results(tmp_path / "results.json", make_doc(1))
    line = one_error_line(invoke("history", "add", tmp_path / "results.json", "--db", db))
    assert line.startswith(f"Error: the disk holding {db} is full (")
    assert "rollback" not in line
    (tiny_fs / "filler").unlink()
    with HistoryStore.open(str(db)) as store:
        assert store.runs() == []
    assert invoke("history", "add", tmp_path / "results.json", "--db", db).exit_code == 0


def test_a_full_disk_when_the_sqlite_folder_is_made_is_named(tmp_path, monkeypatch):
    # Simulated at the OS boundary: a tmpfs gives a new folder room even when full.
    def full(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "mkdir", full)
    db = tmp_path / "new" / "h.sqlite"
    line = one_error_line(invoke("history", "list", "--db", db))
    assert line.startswith(f"Error: the disk holding {db} is full ([Errno 28] No space left")


def test_a_results_path_that_is_not_utf8_is_stored_escaped(db_url, tmp_path):
    # A folder name of undecodable bytes is a lone surrogate in Python: before, the
    # drivers could not encode the `source` column (a UnicodeEncodeError traceback).
    folder = tmp_path / os.fsdecode(b"run-\xff")
    folder.mkdir()
    write_results(folder / "results.json", make_doc(1))
    assert invoke("history", "add", folder / "results.json", "--db", db_url).exit_code == 0
    with HistoryStore.open(db_url) as store:
        (run,) = store.runs()
    assert run.source == str(folder / "results.json").replace("\udcff", "\\udcff")
