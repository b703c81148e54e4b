"""Where the history lives: the URL the user gave, parsed, and the two backends behind it.

A history URL (`--db`, `--history`, $EPBENCH_DB) is parsed, never guessed from a prefix:
`postgres://`, `postgresql://` and `postgresql+psycopg://` (any case) name a PostgreSQL
server; `sqlite:///PATH`, `sqlite:PATH` or a plain path a SQLite file; any other
`scheme://` is refused, never taken as a file name. The password (in the user info or
a `password=` / `sslpassword=` query parameter) is taken out of the URL before psycopg
sees it and handed over as a keyword, so what is shown (`DbUrl.shown`) and the driver's
own error text (`DbUrl.scrub`) never carry it. Every driver error leaves here as one
HistoryError line; a full disk is named as such.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote, unquote

from epbench.core.errors import EpbenchError, disk_full
from epbench.core.paths import DB_ENV

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
# Every spelling of the PostgreSQL scheme accepted, lower case (the match ignores case):
# libpq's two and SQLAlchemy's name for psycopg 3.
POSTGRES_SCHEMES = ("postgres", "postgresql", "postgresql+psycopg")
# Seconds to wait for a PostgreSQL server before calling it unreachable.
CONNECT_TIMEOUT_S = 5
# Seconds a SQLite writer waits for another one to finish.
SQLITE_BUSY_S = 30
# Any constant: the advisory lock that serializes migrations between runners.
MIGRATION_LOCK = 7_300_511
# A parameter or a column value, in both drivers: the tables hold only TEXT, INTEGER and
# floats (store.MIGRATIONS), or NULL.
SqlValue = str | int | float | None
Row = tuple[SqlValue, ...]
# What stands in for a secret in anything shown.
HIDDEN = "***"
# PostgreSQL's SQLSTATE for "disk full" (class 53, insufficient resources).
_PG_DISK_FULL = "53100"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_FORMS = "postgresql://USER:PASSWORD@HOST:PORT/DB, sqlite:///PATH or a file path"


class HistoryError(EpbenchError):
    """The history store cannot be opened, read or written as asked."""


def one_line(exc: BaseException) -> str:
    """A driver's message on one line (psycopg adds hint lines)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# --------------------------------------------------------------------------- URLs


@dataclass(frozen=True)
class DbUrl:
    """A parsed history URL: a SQLite `path`, or a PostgreSQL `conninfo` plus `secrets`.

    `conninfo` is the URL without any secret (libpq parses hosts, ports, database and
    options from it); `secrets` are the conninfo keywords taken out of it (`password`,
    `sslpassword`), passed to psycopg apart. `shown` is the URL for messages.
    """

    kind: str
    shown: str
    path: Path | None = None
    conninfo: str = ""
    secrets: dict[str, str] = field(default_factory=dict, repr=False)

    def scrub(self, text: str) -> str:
        """`text` (a driver's message) with every spelling of every secret hidden."""
        forms = {f for value in self.secrets.values()
                 for f in (value, quote(value, safe=""), quote(value)) if f}
        for form in sorted(forms, key=len, reverse=True):  # longest first: no partial leftovers
            text = text.replace(form, HIDDEN)
        return text


def parse_db_url(url: str) -> DbUrl:
    """Parse a history URL; HistoryError (the URL shown redacted) when it names no history."""
    m = _SCHEME.match(url)
    if m is None:
        if url[:7].lower() == "sqlite:":
            return _sqlite(url, url[7:])
        return _sqlite(url, url)
    scheme, rest = m.group(1), url[m.end():]
    if scheme.lower() == SQLITE:
        return _sqlite(url, rest)
    if scheme.lower() in POSTGRES_SCHEMES:
        return _postgres(scheme, rest)
    raise HistoryError(
        f"the history URL {scheme}://{HIDDEN} names no known scheme ({scheme!r}); "
        f"use {_FORMS}"
    )


def redact(url: str) -> str:
    """`url` fit to print: its password hidden, and all after `scheme://` hidden when the
    URL cannot be parsed (a password could be anywhere in it)."""
    try:
        return parse_db_url(url).shown
    except HistoryError:
        m = _SCHEME.match(url)
        return f"{m.group(1)}://{HIDDEN}" if m else HIDDEN


def _sqlite(url: str, path: str) -> DbUrl:
    if not path:
        raise HistoryError(f"the history URL {url!r} names no file; use {_FORMS}")
    return DbUrl(SQLITE, path, path=Path(path))


def _postgres(scheme: str, rest: str) -> DbUrl:
    hidden = f"{scheme}://{HIDDEN}"
    # RFC 3986: the authority ends at the first / ? or #, and its user info at its last @.
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    creds, at, hosts = authority.rpartition("@")
    path, qmark, query = tail.partition("?")
    pairs = query.split("&") if query else []
    # An @ past the authority is taken for a password with an unescaped / ? or #, whose
    # start the split above would show or send as a host, a port or a path (an @ in a
    # query value must be written %40).
    if "@" in tail:
        raise HistoryError(
            f"the history URL {hidden} has an @ after its host; percent-encode / ? # @ in "
            "the password (%2F %3F %23 %40)"
        )
    for host in hosts.split(","):
        port = host.rpartition("]")[2] if host.startswith("[") else host
        port = port.rpartition(":")[2] if ":" in port else ""
        if not port.isdigit() and port:
            # Never echoed: `user:password/db` (the host forgotten) puts the password here.
            raise HistoryError(
                f"the history URL {hidden} has a port that is not a number; "
                f"use {_FORMS}"
            )
    secrets: dict[str, str] = {}
    user, colon, password = creds.partition(":")
    if colon:
        secrets["password"] = unquote(password)
    kept, shown_pairs = [], []
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if unquote(key).lower().endswith("password"):  # password, sslpassword
            secrets[unquote(key)] = unquote(value)  # libpq's rule: a later one wins
            shown_pairs.append(f"{key}={HIDDEN}")
        else:
            kept.append(pair)
            shown_pairs.append(pair)
    user_info = f"{quote(unquote(user), safe='')}@" if at and user else ""
    conninfo = f"postgresql://{user_info}{hosts}{path}" + (f"?{'&'.join(kept)}" if kept else "")
    shown_user = f"{user}{':' + HIDDEN if colon else ''}@" if at else ""
    shown = (f"{scheme}://{shown_user}{hosts}{path}"
             + (f"?{'&'.join(shown_pairs)}" if qmark else ""))
    parsed = DbUrl(POSTGRESQL, shown, conninfo=conninfo, secrets=secrets)
    # A secret may also stand elsewhere in the URL (a database named like the password).
    return replace(parsed, shown=parsed.scrub(shown))


# --------------------------------------------------------------------------- backends


class Backend:
    """A connection plus what differs between SQLite and PostgreSQL."""

    kind = ""
    id_type = ""
    float_type = ""
    shown = ""  # the database, fit to print

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        raise NotImplementedError

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def lock_for_migration(self) -> None:
        """Called first inside the migration transaction."""

    def table_exists(self, name: str) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def connect(url: DbUrl) -> Backend:
    """Open the database `url` names; HistoryError (one line, no secret) when it cannot."""
    return PostgresBackend(url) if url.kind == POSTGRESQL else SqliteBackend(url)


def _sqlite_full(exc: sqlite3.Error) -> bool:
    # SQLite reports ENOSPC on a write as SQLITE_FULL (the name exists from Python 3.11).
    return (getattr(exc, "sqlite_errorname", None) == "SQLITE_FULL"
            or "database or disk is full" in str(exc))


class SqliteBackend(Backend):
    kind = SQLITE
    id_type = "INTEGER PRIMARY KEY AUTOINCREMENT"
    float_type = "REAL"

    def __init__(self, url: DbUrl) -> None:
        assert url.path is not None
        self.path = url.path
        self.shown = str(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Autocommit mode: transactions are explicit (BEGIN IMMEDIATE), so a
            # second writer waits for the first instead of failing at COMMIT.
            self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=SQLITE_BUSY_S)
            self.conn.execute("PRAGMA foreign_keys = ON")
        except OSError as exc:
            if disk_full(exc):
                raise self._full(exc) from None
            raise HistoryError(
                f"cannot open the history database {self.path}: {exc.strerror or exc}; "
                f"pass another --db or set {DB_ENV}"
            ) from None
        except sqlite3.Error as exc:
            raise HistoryError(
                f"cannot open the history database {self.path}: {one_line(exc)}; "
                f"pass another --db or set {DB_ENV}"
            ) from None

    def _full(self, exc: BaseException) -> HistoryError:
        return HistoryError(
            f"the disk holding {self.path} is full ({one_line(exc)}); nothing was stored: "
            "free space there, or pass another --db, and run the command again"
        )

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        try:
            return self.conn.execute(sql, tuple(params)).fetchall()
        except sqlite3.IntegrityError as exc:
            raise HistoryError(
                f"{self.path} refused a write ({one_line(exc)}); nothing was stored"
            ) from None
        except sqlite3.Error as exc:
            if _sqlite_full(exc):
                raise self._full(exc) from None
            if "locked" in str(exc):
                raise HistoryError(
                    f"{self.path} stayed locked by another writer for {SQLITE_BUSY_S} s; "
                    "run the command again when it is done"
                ) from None
            raise HistoryError(
                f"{self.path} is not a usable history database ({one_line(exc)}); "
                f"pass another --db or move the file away"
            ) from None
        except (UnicodeError, OverflowError) as exc:  # a value sqlite3 cannot bind
            raise HistoryError(
                f"{self.path} refused a value ({one_line(exc)}); nothing was written"
            ) from None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.execute("COMMIT")
        except BaseException:
            # SQLite has already rolled back after some errors (a full disk among them);
            # the first error is the one to report, not "cannot rollback".
            if self.conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
            raise

    def table_exists(self, name: str) -> bool:
        return bool(self.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def close(self) -> None:
        self.conn.close()


class PostgresBackend(Backend):
    kind = POSTGRESQL
    id_type = "BIGSERIAL PRIMARY KEY"
    float_type = "DOUBLE PRECISION"

    def __init__(self, url: DbUrl) -> None:
        try:
            import psycopg
        except ImportError:
            raise HistoryError(
                "a postgresql:// history needs psycopg 3; install it with "
                "`pip install 'epbench[postgres]'`"
            ) from None
        self._psycopg = psycopg
        self._url = url
        self.shown = shown = url.shown
        try:
            # The secrets go as keywords, never inside the conninfo libpq may echo.
            self.conn = psycopg.connect(url.conninfo, autocommit=True,
                                        connect_timeout=CONNECT_TIMEOUT_S, **url.secrets)
        except psycopg.OperationalError as exc:
            text = self._line(exc)
            if "password authentication failed" in text or "no password supplied" in text:
                raise HistoryError(
                    f"PostgreSQL at {shown} refused the password: {text}; "
                    "check the user and password in --db or $EPBENCH_DB"
                ) from None
            if re.search(r'database "[^"]+" does not exist', text):
                raise HistoryError(
                    f"PostgreSQL at {shown}: {text}; create it with `createdb`"
                ) from None
            raise HistoryError(
                f"cannot reach the PostgreSQL server at {shown}: {text}; "
                "check that it is running and that host and port in --db are right"
            ) from None
        except psycopg.Error as exc:
            raise HistoryError(
                f"cannot connect to {shown}: {self._line(exc)}; check --db or ${DB_ENV}"
            ) from None

    def _line(self, exc: BaseException) -> str:
        return self._url.scrub(one_line(exc))

    def _error(self, exc: BaseException) -> HistoryError:
        """One line for any driver error met after connecting."""
        pg = self._psycopg
        if getattr(exc, "sqlstate", None) == _PG_DISK_FULL:
            return HistoryError(
                f"the PostgreSQL server at {self.shown} is out of disk space "
                f"({self._line(exc)}); nothing was stored: free space on the server "
                "and run the command again"
            )
        if isinstance(exc, pg.IntegrityError):
            return HistoryError(
                f"{self.shown} refused a write ({self._line(exc)}); nothing was stored")
        if isinstance(exc, (pg.DataError, UnicodeError)):
            return HistoryError(
                f"{self.shown} refused a value ({self._line(exc)}); nothing was written")
        if isinstance(exc, pg.OperationalError):
            return HistoryError(
                f"lost the PostgreSQL server at {self.shown}: {self._line(exc)}; "
                "check the server and run the command again (nothing half-written is kept)"
            )
        return HistoryError(
            f"PostgreSQL at {self.shown} failed: {self._line(exc)}; nothing was stored"
        )

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        try:
            cur = self.conn.execute(sql.replace("?", "%s"), tuple(params))
            return cur.fetchall() if cur.description is not None else []
        except (self._psycopg.Error, UnicodeError) as exc:
            raise self._error(exc) from None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        try:
            with self.conn.transaction():
                yield
        except self._psycopg.Error as exc:  # raised by COMMIT (a rollback's error is ignored)
            raise self._error(exc) from None

    def lock_for_migration(self) -> None:
        # Two runners opening a new database at once: one migrates, the other waits
        # and then finds the tables made.
        self.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def table_exists(self, name: str) -> bool:
        return self.execute("SELECT to_regclass(?)", (name,))[0][0] is not None

    def close(self) -> None:
        self.conn.close()
