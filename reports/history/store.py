"""The results history's store: every run in one database, its schema and migrations.

Backends: SQLite (stdlib `sqlite3`, the default, a file under the epbench cache
root: DEFAULT_DB_NAME in `epbench.core.paths.cache_dir()`) and PostgreSQL for a
team's runners (psycopg 3, `postgresql://user:password@host:port/db`). `--db URL`,
else $EPBENCH_DB, else the default file. Both run the same SQL; the URL's parsing,
its redaction and the backends' error lines live in `reports.history.db`.

Schema changelog (bump by appending to MIGRATIONS; a database is upgraded on first
use, under a lock, in one transaction; a newer database is refused):
  1 -- runs (commit, branch, created, machine key, epbench version, identity key)
       and points (per case and arm: ratio to the in-run control with its interval,
       p50, per-round medians, counters, instructions).
  2 -- runs.machine_class: machines grouped into one series (`--machine-class`).
  3 -- points.instructions_method: how the run counted its instructions (`method/rule`,
       e.g. `valgrind/2`; NULL before), so an instruction series never joins counts
       of two ways of counting.

A run's identity is a hash of its canonical content (the results document as
`epbench.core.results.dumps` writes it, which includes its created time and host):
adding the same run twice stores it once, whether from its results.json or, for a
finished run, its results.jsonl (whose end line carries the run's overhead; a stream
written before it did rebuilds the document without it, so it hashes differently).

The tracked series is the ratio of an arm to the in-run control (ORT's CPU EP) per
run; a series is per machine key unless runs were added with a machine class. A
commit measured more than once contributes one point, the median of its runs.
Points are in commit order, which the store knows as the order of the runs' created
times (the first run of a commit places it).
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from epbench.core.model import Results
from epbench.core.paths import cache_dir
from epbench.core.results import dumps, load_results
from epbench.core.version import epbench_version
from epbench.reports import stats
from epbench.reports.comparison import JsonValue
from epbench.reports.history.db import (
    DB_ENV,
    Backend,
    HistoryError,
    connect,
    parse_db_url,
)

if TYPE_CHECKING:
    import numpy as np

DEFAULT_DB_NAME = "history.sqlite"


class HistoryTooOld(HistoryError):
    """A store of an older schema, opened to read only: an `epbench history` command upgrades it."""


def default_db_path() -> Path:
    """Where the default SQLite history lives: <epbench cache root>/history.sqlite."""
    return cache_dir(DEFAULT_DB_NAME)


def resolve_db_url(url: str | None) -> str:
    """--db, else $EPBENCH_DB, else the default SQLite file (as a plain path)."""
    return url or os.environ.get(DB_ENV) or str(default_db_path())


# --------------------------------------------------------------------------- schema

# One SQL text per migration, with two placeholders the backends fill in: {id} (an
# auto-numbered key) and {float} (a double: PostgreSQL's REAL has only 24 bits).
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE runs (
            id {id},
            run_key TEXT NOT NULL UNIQUE,
            commit_sha TEXT NOT NULL,
            branch TEXT,
            created TEXT NOT NULL,
            added TEXT NOT NULL,
            machine TEXT NOT NULL,
            epbench_version TEXT,
            results_schema TEXT NOT NULL,
            source TEXT
        )""",
        """CREATE TABLE points (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            case_name TEXT NOT NULL,
            arm TEXT NOT NULL,
            status TEXT,
            ratio {float},
            ratio_lo {float},
            ratio_hi {float},
            p50_ns {float},
            rounds INTEGER NOT NULL,
            round_medians_ns TEXT NOT NULL,
            counters TEXT,
            instructions {float},
            PRIMARY KEY (run_id, case_name, arm)
        )""",
        "CREATE INDEX points_series ON points (case_name, arm)",
        "CREATE INDEX runs_commit ON runs (commit_sha)",
    ),
    (
        "ALTER TABLE runs ADD COLUMN machine_class TEXT",
    ),
    (
        "ALTER TABLE points ADD COLUMN instructions_method TEXT",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


# --------------------------------------------------------------------------- run records


@dataclass(frozen=True)
class PointRecord:
    """One case x arm of one run, as stored."""

    case: str
    arm: str
    status: str | None
    ratio: float | None
    ratio_lo: float | None
    ratio_hi: float | None
    p50_ns: float | None
    round_medians_ns: list[float | None]
    counters: dict[str, float] | None
    instructions: float | None
    instructions_method: str | None = None  # see instructions_method()


@dataclass(frozen=True)
class RunRecord:
    """One results file, as stored."""

    run_key: str
    commit: str
    branch: str | None
    created: str
    machine: str
    machine_class: str | None
    epbench_version: str | None
    results_schema: str
    points: list[PointRecord] = field(default_factory=list)


@dataclass(frozen=True)
class StoredRun:
    """One stored run as `HistoryStore.runs` reads it back, with its point count."""

    id: int
    commit: str
    branch: str | None
    created: str
    machine: str
    machine_class: str | None
    epbench_version: str | None
    source: str | None
    points: int

    def to_dict(self) -> dict[str, JsonValue]:
        """Its row of the `history list` document (history_list.schema.json)."""
        return asdict(self)


@dataclass(frozen=True)
class StoredPoint:
    """One stored run's point of a series (case x arm), as `HistoryStore.points` reads it."""

    commit: str
    branch: str | None
    created: str
    machine: str
    status: str | None
    ratio: float | None
    ratio_lo: float | None
    ratio_hi: float | None
    p50_ns: float | None
    round_medians_ns: list[float | None]
    counters: dict[str, float] | None
    instructions: float | None
    instructions_method: str | None
    run_id: int


def run_key(doc: Results) -> str:
    """The identity of a run: a hash of its canonical content (created time and host included).

    The document the model gives back is the file's, key for key, so the hash is the
    file's whatever this version of the model knows of it."""
    return hashlib.sha256(dumps(doc.to_dict()).encode("utf-8")).hexdigest()[:32]


def _epbench_version(doc: Results) -> str | None:
    # Results files record the epbench that wrote them (`epbench_version`, a key the model
    # keeps in `extra`); older ones do not, and then the store records the version of the
    # epbench that added the run (the closest known).
    recorded = doc.extra.get("epbench_version")
    if recorded:
        return str(recorded)
    return epbench_version()


def instructions_method(counted: object) -> str | None:
    """How a case's instructions were counted, from its results record (`instructions`:
    method, rule, error): `method/rule`, the rule 1 when the record names none (the
    way of counting before rules were numbered); None when nothing was counted."""
    if not isinstance(counted, dict) or counted.get("error") or not counted.get("method"):
        return None
    return f"{counted['method']}/{counted.get('rule') or 1}"


def run_record(doc: Results, *, source: str, commit: str | None = None,
               branch: str | None = None, machine_class: str | None = None,
               confidence: float = 0.95) -> RunRecord:
    """What the store keeps of a results document; refuses a run it cannot place."""
    import numpy as np

    commit = commit or doc.host.git_commit
    if not commit:
        raise HistoryError(
            f"{source} records no git commit (it ran outside a git checkout); "
            "pass --commit SHA (and --branch NAME)"
        )
    machine = doc.host.key
    if not machine:
        raise HistoryError(f"{source} has no host fingerprint key; re-run it with this epbench")
    created = doc.created
    if not created:
        raise HistoryError(f"{source} has no created time; is it an epbench results file?")
    control = doc.control
    jobs: list[tuple[str, str]] = []
    logs = []
    medians: dict[tuple[str, str], np.ndarray] = {}
    for name, case in doc.cases.items():
        ctrl = stats.round_medians(case, control) if control in case.arms else None
        for arm in case.arms:
            medians[name, arm] = stats.round_medians(case, arm)
            if arm != control and ctrl is not None:
                jobs.append((name, arm))
                logs.append(stats.log_ratios(medians[name, arm], ctrl))
    changes = dict(zip(jobs, stats.paired_changes(logs, confidence=confidence), strict=True))
    points = []
    for name, case in doc.cases.items():
        method = instructions_method(dict(case.instructions or {}))
        for arm, info in case.arms.items():
            values = medians[name, arm]
            good = values[np.isfinite(values)]
            if arm == control:
                ratio, lo, hi = (1.0, 1.0, 1.0) if len(good) else (None, None, None)
            elif (name, arm) in changes:
                ch = changes[name, arm]
                ratio, lo, hi = stats.finite(ch.ratio), stats.finite(ch.lo), stats.finite(ch.hi)
            else:
                ratio = lo = hi = None
            counters = info.counters_per_run
            instructions = (counters or {}).get("instructions")  # counter name -> value
            points.append(PointRecord(
                case=name, arm=arm, status=case.status,
                ratio=ratio, ratio_lo=lo, ratio_hi=hi,
                p50_ns=stats.finite(float(np.median(good))) if len(good) else None,
                round_medians_ns=[stats.finite(float(v)) for v in values],
                counters=dict(counters) if counters else None,
                instructions=stats.finite(float(instructions)) if isinstance(
                    instructions, (int, float)) else None,
                instructions_method=method if isinstance(instructions, (int, float)) else None,
            ))
    record = RunRecord(
        run_key=run_key(doc), commit=str(commit), branch=branch, created=str(created),
        machine=str(machine), machine_class=machine_class,
        epbench_version=_epbench_version(doc), results_schema=str(doc.schema),
        points=points,
    )
    _check_text(record, source)  # here too: `history import` checks every file before adding
    return record


@dataclass(frozen=True)
class AddResult:
    run_id: int
    added: bool  # False: the run was already stored
    commit: str
    branch: str | None
    points: int


# --------------------------------------------------------------------------- the store


class HistoryStore:
    """One history database; open with `HistoryStore.open(url)`, close when done."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend
        self.url = backend.shown  # never the password
        self.kind = backend.kind

    @classmethod
    def open(cls, url: str | None = None, *, migrate: bool = True) -> HistoryStore:
        """Connect and bring the schema up to date (refusing a newer one).

        `migrate=False` connects only; `open_for_reading` is the checked form of that.
        """
        backend = connect(parse_db_url(resolve_db_url(url)))
        store = cls(backend)
        try:
            if migrate:
                store._migrate()
        except BaseException:
            backend.close()
            raise
        return store

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    # ----------------------------------------------------------------- migrations

    def schema_version(self) -> int:
        """The database's schema version (0: empty)."""
        if not self._db.table_exists("schema_version"):
            return 0
        rows = self._db.execute("SELECT MAX(version) FROM schema_version")
        return int(rows[0][0] or 0)

    def migrate(self) -> tuple[int, int]:
        """Upgrade the schema in place to this epbench's, idempotently: (before, after).

        What `open` does on every command, as a step of its own (`epbench history
        migrate`), so a team's server is upgraded once, by its owner, not by whichever
        runner adds first. Refuses a newer schema (HistoryError), changing nothing.
        """
        before = self._migrate()
        return before, SCHEMA_VERSION

    def _migrate(self, target: int = SCHEMA_VERSION) -> int:
        """Apply the missing migrations up to `target`; the version found before."""
        with self._db.transaction():
            self._db.lock_for_migration()
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, "
                "applied TEXT NOT NULL)")
            current = self.schema_version()
            if current > SCHEMA_VERSION:
                raise self._newer(current)
            for version in range(current + 1, target + 1):
                for sql in MIGRATIONS[version - 1]:
                    self._db.execute(sql.format(id=self._db.id_type,
                                                float=self._db.float_type))
                self._db.execute("INSERT INTO schema_version (version, applied) VALUES (?, ?)",
                                 (version, _now()))
        return current

    def _newer(self, current: int) -> HistoryError:
        return HistoryError(
            f"the history database {self.url} has schema version {current}, newer "
            f"than this epbench understands ({SCHEMA_VERSION}); upgrade epbench"
        )

    @classmethod
    def open_for_reading(cls, url: str) -> HistoryStore:
        """Open a history to read it, never changing it: no migration, no schema table.

        A read-only check (compare-commits' base check) must not upgrade a store, least
        of all a team's shared PostgreSQL one, as a side effect. Refuses a newer schema
        and a file without one (HistoryError), and an older schema with HistoryTooOld,
        whose message says how to upgrade it: this epbench's queries read only its own
        schema.
        """
        store = cls.open(url, migrate=False)
        try:
            current = store.schema_version()
            if current == 0:
                raise HistoryError(
                    f"{store.url} holds no epbench history (no schema_version table); pass "
                    f"the store `epbench history add` wrote (--db or ${DB_ENV})")
            if current > SCHEMA_VERSION:
                raise store._newer(current)
            if current < SCHEMA_VERSION:
                raise HistoryTooOld(
                    f"the history database {store.url} has schema version {current}, older "
                    f"than this epbench's ({SCHEMA_VERSION}); run any `epbench history` "
                    "command on it (e.g. `epbench history list --db DB`) to upgrade it")
        except BaseException:
            store.close()
            raise
        return store

    # ----------------------------------------------------------------- writing

    def add(self, record: RunRecord, *, source: str | None = None) -> AddResult:
        """Store one run, all of it or nothing; a run already stored is not stored again."""
        _check_text(record, source)
        if source is not None:  # a path's undecodable bytes (lone surrogates), as escapes
            source = source.encode("utf-8", "backslashreplace").decode("utf-8")
        with self._db.transaction():
            rows = self._db.execute(
                "INSERT INTO runs (run_key, commit_sha, branch, created, added, machine, "
                "machine_class, epbench_version, results_schema, source) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_key) DO NOTHING "
                "RETURNING id",
                (record.run_key, record.commit, record.branch, record.created, _now(),
                 record.machine, record.machine_class, record.epbench_version,
                 record.results_schema, source))
            if not rows:
                (run_id, commit, branch), = self._db.execute(
                    "SELECT id, commit_sha, branch FROM runs WHERE run_key = ?",
                    (record.run_key,))
                return AddResult(int(run_id), False, commit, branch, 0)
            run_id = int(rows[0][0])
            for p in record.points:
                self._db.execute(
                    "INSERT INTO points (run_id, case_name, arm, status, ratio, ratio_lo, "
                    "ratio_hi, p50_ns, rounds, round_medians_ns, counters, instructions, "
                    "instructions_method) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, p.case, p.arm, p.status, p.ratio, p.ratio_lo, p.ratio_hi,
                     p.p50_ns, len(p.round_medians_ns), json.dumps(p.round_medians_ns),
                     json.dumps(p.counters, sort_keys=True) if p.counters else None,
                     p.instructions, p.instructions_method))
        return AddResult(run_id, True, record.commit, record.branch, len(record.points))

    # ----------------------------------------------------------------- reading

    def runs(self) -> list[StoredRun]:
        """Every stored run, oldest first, with its point count."""
        rows = self._db.execute(
            "SELECT r.id, r.commit_sha, r.branch, r.created, r.machine, r.machine_class, "
            "r.epbench_version, r.source, COUNT(p.run_id) FROM runs r "
            "LEFT JOIN points p ON p.run_id = r.id GROUP BY r.id, r.commit_sha, r.branch, "
            "r.created, r.machine, r.machine_class, r.epbench_version, r.source "
            "ORDER BY r.created, r.id")
        return [StoredRun(*row) for row in rows]  # the columns in field order

    def series_keys(self, *, control: str = "ort") -> list[tuple[str, str, str]]:
        """Every (case, arm, series machine) with at least one point, the control left out."""
        rows = self._db.execute(
            "SELECT DISTINCT p.case_name, p.arm, COALESCE(r.machine_class, r.machine) "
            "FROM points p JOIN runs r ON r.id = p.run_id WHERE p.arm <> ? "
            "ORDER BY 1, 2, 3", (control,))
        return [(str(c), str(a), str(m)) for c, a, m in rows]

    def commits(self) -> list[str]:
        """Every stored commit, in commit order (first run's created time)."""
        rows = self._db.execute(
            "SELECT commit_sha, MIN(created) FROM runs GROUP BY commit_sha ORDER BY 2, 1")
        return [str(r[0]) for r in rows]

    def points(self, case: str, arm: str, machine: str) -> list[StoredPoint]:
        """Every stored run's point of one series, in run order (not aggregated)."""
        rows = self._db.execute(
            "SELECT r.commit_sha, r.branch, r.created, r.machine, p.status, p.ratio, "
            "p.ratio_lo, p.ratio_hi, p.p50_ns, p.round_medians_ns, p.counters, p.instructions, "
            "r.id, p.instructions_method FROM points p JOIN runs r ON r.id = p.run_id "
            "WHERE p.case_name = ? AND p.arm = ? AND COALESCE(r.machine_class, r.machine) = ? "
            "ORDER BY r.created, r.id", (case, arm, machine))
        out = []
        for (commit, branch, created, host, status, ratio, lo, hi, p50, medians, counters,
             instructions, run_id, method) in rows:
            out.append(StoredPoint(
                commit=commit, branch=branch, created=created, machine=host,
                status=status, ratio=ratio, ratio_lo=lo, ratio_hi=hi,
                p50_ns=p50, round_medians_ns=json.loads(medians),
                counters=json.loads(counters) if counters else None,
                instructions=instructions, instructions_method=method,
                run_id=int(run_id),
            ))
        return out


# Characters no stored name may hold: control characters (PostgreSQL refuses NUL in
# text; a newline or an escape would break the one-line listings) and lone surrogates
# (neither driver can encode them).
_UNSTORABLE = ("Cc", "Cs")
# The most of a refused name a message quotes.
_QUOTE_CHARS = 60


def _check_text(record: RunRecord, source: str | None) -> None:
    """Refuse, in one line, a run whose names the history cannot store or show."""
    fields: list[tuple[str, str | None]] = [
        ("commit", record.commit), ("branch", record.branch), ("created", record.created),
        ("machine", record.machine), ("machine class", record.machine_class),
        ("epbench version", record.epbench_version), ("schema", record.results_schema)]
    for p in record.points:
        fields += [("case name", p.case), ("arm", p.arm), ("status", p.status)]
    for what, value in fields:
        bad = next((c for c in value or "" if unicodedata.category(c) in _UNSTORABLE), None)
        if bad is not None:
            shown = ascii(value[:_QUOTE_CHARS]) + ("..." if len(value) > _QUOTE_CHARS else "")
            raise HistoryError(
                f"{source or 'the run'}: the {what} {shown} holds the character U+{ord(bad):04X}, "
                "which the history cannot store (no control characters); correct it in the "
                "results file (or --commit/--branch/--machine-class) and add the run again"
            )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- files


def add_file(store: HistoryStore, path: str | Path, *, commit: str | None = None,
             branch: str | None = None, machine_class: str | None = None) -> AddResult:
    """Read one results file (migrated, newer schemas refused) and add it as one transaction."""
    doc = load_results(path)
    record = run_record(doc, source=str(path), commit=commit, branch=branch,
                        machine_class=machine_class)
    return store.add(record, source=str(path))


def results_files(directory: str | Path) -> list[Path]:
    """Every results file under `directory`: results.json, or results.jsonl without one."""
    root = Path(directory)
    if not root.is_dir():
        raise HistoryError(f"{root} is not a directory; pass a folder of runs to import")
    found = []
    for dirpath, _, names in sorted(os.walk(root)):
        if "results.json" in names:
            found.append(Path(dirpath, "results.json"))
        elif "results.jsonl" in names:
            found.append(Path(dirpath, "results.jsonl"))
    if not found:
        raise HistoryError(f"no results.json or results.jsonl under {root}; "
                           "pass the --out folder of one or more runs")
    return found


def import_dir(store: HistoryStore, directory: str | Path, *, branch: str | None = None,
               machine_class: str | None = None) -> list[tuple[Path, AddResult]]:
    """Add every results file under `directory`, oldest run first.

    Every file is read and checked before the first is added, so one bad file stops
    the import with nothing added; each run is then its own transaction.
    """
    records = []
    for path in results_files(directory):
        doc = load_results(path)
        records.append((path, run_record(doc, source=str(path), branch=branch,
                                         machine_class=machine_class)))
    records.sort(key=lambda item: (item[1].created, str(item[0])))
    return [(path, store.add(record, source=str(path))) for path, record in records]
