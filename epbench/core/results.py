"""The results file: schema-versioned, self-describing, written atomically.

Format history (bump SCHEMA_VERSION and add a migrate_to_N for every change):
  1 -- first version: host, config, arms, and per case its spec, verification,
       nodes per EP per arm, counters, and every round's order, gate readings
       and raw per-iteration samples in ns.
  2 -- processes and sessions are replication units: every round records its
       ``process`` and ``session``, a case lists its ``processes`` (status, core,
       rounds, planned rounds) and ``lost_rounds``; ``config`` gains ``processes``,
       ``sessions``, ``rounds_per_process`` and ``keep_samples``; a run may carry an
       A/A ``twin`` ({"of": arm, "key": twin}). A round keeps a per-block
       ``summary_ns`` (n, median, min, q1, q3) instead of ``samples_ns``, whose raw
       samples go to results.samples.jsonl.gz only with --keep-samples. ``floor`` (the
       harness's own cost) is renamed ``overhead``, at the top and per case.
       Later, without a new version (an optional key whose absence means what older
       files did): ``config.block_slices``, the slices requested per block (absent: 1,
       whole blocks), and a round's ``slices``, those its blocks were cut into (fewer
       than requested for a case with short blocks); a round's ``gate`` may say
       ``carried`` (no look of its own: the previous round's meter found it quiet);
       ``config.gate.budget_s``, a process's share of a case's pause budget while the
       run waits, ``config.gate.stops_waiting_after_rounds`` and a process's
       ``gate_budget_s`` (0: the run had stopped waiting; absent: every process had
       the share).
       Readers refuse, in one line naming the file and the key (no writer wrote any of
       them, so without a new version): a time that is not positive and finite, a NaN,
       Infinity or 1e400 anywhere, a value of the wrong type, nesting deeper than
       MAX_DEPTH.

Two files are written during a run: ``results.jsonl`` gets a header line, one
line per process of a case as the process ends (so a killed harness loses nothing
measured), one ``instructions`` line per counted case, and an ``end`` line, which
also carries the run's ``overhead`` (measured after the header was written; streams
written before it had it leave ``overhead`` null); ``results.json`` is the whole
document, replaced atomically after every process and at the end. Both say
``"interrupted": true`` until the run has finished: a stream without its ``end``
line was cut short. A finished run's stream rebuilds its results.json key for key.
No output file is written through a symbolic link: `prepare_out_dir` refuses one at
any name in OUTPUT_FILES, and the stream and raw-samples file are opened O_NOFOLLOW.
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from collections.abc import Iterator
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from epbench.core.errors import EpbenchError, ResultsError
from epbench.core.model import (
    BOOLEAN,
    COUNT,
    NON_NEGATIVE,
    OBJECT,
    REMEDY,
    STRING,
    TIME,
    Kind,
    Results,
    Where,
    array_of,
    check,
    object_of,
    refusal,
    shown,
)
from epbench.core.numbers import block_summary

SCHEMA_NAME = "epbench.results"
SCHEMA_VERSION = 2
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"
SCHEMA_FILE = Path(__file__).with_name("results.schema.json")
# What a run writes into its --out directory (never silently replaced).
OUTPUT_FILES = ("results.json", "results.jsonl", "results.samples.jsonl.gz", "report.md",
                "report.html")


def dumps(doc: Any) -> str:
    """The one serializer, for the worker pipe, the JSON-lines file and results.json."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)


# Nesting the schema allows: its deepest value (a round's gate reading of one core,
# cases.X.rounds[i].gate.idle.cpu1) sits in the 7th container down; keys it does not list get
# room to 16. Checked before parsing: json.loads recurses once per level.
MAX_DEPTH = 16
# Every byte but quotes and brackets, and the step each bracket takes the depth.
_NOT_MARK = bytes(c for c in range(256) if c not in b'[]{}"')
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _nesting(text: str) -> int:
    """How deep the brackets of JSON text nest, brackets inside strings not counted.

    Once escaped backslashes and escaped quotes are dropped, every quote opens or closes
    a string in turn, so between quotes, every other piece lies outside strings; bytes'
    translate and split keep this to milliseconds for megabytes of text."""
    data = text.encode("utf-8", "surrogatepass")
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = b"".join(data.translate(None, _NOT_MARK).split(b'"')[::2])
    return max(accumulate(map(_STEP.__getitem__, marks)), default=0)


class _NonFinite(Exception):
    """A NaN, Infinity or out-of-range number in JSON text (no writer puts one there)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # inf or nan (1e400 parses to inf)
        raise _NonFinite(text)
    return value


def _no_constant(text: str) -> float:
    raise _NonFinite(text)


class _Marker:
    """Where a non-finite number was, when the text is parsed again to name its key."""

    def __init__(self, text: str) -> None:
        self.text = text


def parse_json(text: str, source: str) -> Any:
    """JSON text of a results file, refused in one line naming ``source`` and the key when
    it nests deeper than MAX_DEPTH or holds NaN, Infinity or a number beyond a double."""
    try:
        return _loads(text, source)
    except ValueError as exc:  # JSONDecodeError, an integer of more than 4300 digits
        raise ResultsError(f"{source} is not valid JSON ({_one_line(exc)}); is the run still "
                           "writing it?") from None


def _loads(text: str, source: str) -> Any:
    """`parse_json` without its last step: invalid JSON raises ValueError."""
    if _nesting(text) > MAX_DEPTH:
        raise refusal(source, _deep_path(text), f"nested deeper than the {MAX_DEPTH} levels "
                      "a results file has")
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except _NonFinite:
        # Rare: parse again, marking the number, to say where it was.
        doc = json.loads(text, parse_constant=_Marker,
                         parse_float=lambda t: _Marker(t) if _finite_float_or_none(t) is None
                         else float(t))
        where, token = next(_markers(doc, ()), ((), "?"))
        raise refusal(source, where, f"{token} is not a finite number") from None


def _finite_float_or_none(text: str) -> float | None:
    try:
        return _finite_float(text)
    except _NonFinite:
        return None


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def _markers(value: Any, where: Where) -> Iterator[tuple[Where, str]]:
    if isinstance(value, _Marker):
        yield where, value.text
    elif isinstance(value, dict):
        for key, member in value.items():
            yield from _markers(member, (*where, key))
    elif isinstance(value, list):
        for i, member in enumerate(value):
            yield from _markers(member, (*where, i))


_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


def _deep_path(text: str) -> Where:
    """The path to the first container nested deeper than MAX_DEPTH (only for the error)."""
    stack: list[list[Any]] = []  # per open container: [key or index, expecting a key]
    for token in _TOKEN.finditer(text):
        t = token.group()
        if t in "[{":
            if len(stack) == MAX_DEPTH:
                break
            stack.append([None if t == "{" else 0, t == "{"])
        elif t in "]}":
            if stack:
                stack.pop()
        elif not stack:
            continue
        elif t == ",":
            top = stack[-1]
            if isinstance(top[0], int):
                top[0] += 1
            else:
                top[1] = True
        elif t != ":" and stack[-1][1]:
            try:
                stack[-1][0] = json.loads(t)
            except ValueError:
                stack[-1][0] = t.strip('"')
            stack[-1][1] = False
    return tuple(key if key is not None else "" for key, _ in stack)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, whole."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would hide results from other users
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(path: Path, doc: dict[str, Any]) -> None:
    # Compact: raw samples make results large, and indentation would more than double them.
    atomic_write_text(Path(path), dumps(doc))


def check_out_dir(out_dir: Path, overwrite: bool = False) -> None:
    """Refuse an output directory that `prepare_out_dir` would refuse, touching nothing:
    so a run can say so before its slow set-up, and leave the directory as it was."""
    out_dir = Path(out_dir)
    if not out_dir.exists():
        parent = next((p for p in out_dir.absolute().parents if p.exists()), None)
        if parent is not None and parent.is_dir() and not os.access(parent, os.W_OK):
            raise ResultsError(f"cannot create output directory {str(out_dir)!r} in "
                               f"{str(parent)!r}, which is not writable; choose another --out")
        return
    _refuse_existing(out_dir, overwrite)


def _refuse_existing(out_dir: Path, overwrite: bool) -> list[str]:
    """The earlier run's files in ``out_dir``, or the error that refuses it."""
    if not os.access(out_dir, os.W_OK):
        raise ResultsError(
            f"output directory {str(out_dir)!r} is not writable; choose another --out"
        )
    for name in OUTPUT_FILES:
        if (out_dir / name).is_symlink():  # --overwrite too: a run never makes one
            raise ResultsError(_symlink_refusal(out_dir / name))
    existing = [n for n in OUTPUT_FILES if (out_dir / n).exists()]
    if existing and not overwrite:
        raise ResultsError(
            f"{out_dir / existing[0]} already exists; choose another --out or pass --overwrite"
        )
    return existing


def prepare_out_dir(out_dir: Path, overwrite: bool = False) -> None:
    """Create the output directory, refusing to clobber an earlier run's results."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(
            f"cannot create output directory {str(out_dir)!r}: {exc.strerror}; choose another --out"
        ) from None
    for name in _refuse_existing(out_dir, overwrite):
        (out_dir / name).unlink()


def _symlink_refusal(path: Path) -> str:
    return (f"{path} is a symbolic link, which epbench did not make (it writes only files "
            "of its own into --out); remove it or choose another --out")


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)


def open_output(path: Path, mode: str, **kwargs: Any) -> IO[Any]:
    """`open` for a file a run writes into its --out directory, never through a symbolic
    link (one planted after `prepare_out_dir` looked is refused as one found before)."""
    try:
        return open(path, mode, opener=_no_follow, **kwargs)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise ResultsError(_symlink_refusal(Path(path))) from None
        raise


class JsonlWriter:
    """Appends one JSON line per event and flushes it to disk at once."""

    def __init__(self, path: Path) -> None:
        self._fh = open_output(path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(dumps(record) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def doc_from_jsonl(path: Path) -> dict[str, Any]:
    """Rebuild a results document from the JSON-lines stream (e.g. after a crash).

    Each line is checked for what this function itself reads of it (the model checks the
    rebuilt document); a bad one is refused as ``FILE:LINE: key: problem``."""
    doc: dict[str, Any] | None = None
    merged: set[str] = set()  # the cases built from `process` lines
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = _loads(line, where)
            except json.JSONDecodeError:
                # A line cut by a kill mid-write: everything before it is whole.
                break
            except ValueError as exc:
                raise ResultsError(f"{where}: not a JSON line ({_one_line(exc)}); {REMEDY}"
                                   ) from None
            check(record, OBJECT, (), where)
            kind = record.get("type")
            if kind == "header":
                if "cases" in record:
                    check(record["cases"], object_of(OBJECT), ("cases",), where)
                doc = {k: v for k, v in record.items() if k != "type"}
                doc.setdefault("cases", {})
                doc.setdefault("interrupted", True)
            elif doc is None:
                raise ResultsError(f"{where}: no header line before the cases")
            elif kind == "case":  # version 1
                _require(record, {"name": STRING, "result": OBJECT}, where)
                doc["cases"][record["name"]] = record["result"]
                merged.discard(record["name"])
            elif kind == "process":
                _require(record, _PROCESS_LINE, where)
                _require(record["result"], _PROCESS_RESULT, where, ("result",))
                if record.get("gate_budget_s") is not None:
                    check(record["gate_budget_s"], NON_NEGATIVE, ("gate_budget_s",), where)
                if record["name"] in doc["cases"] and record["name"] not in merged:
                    raise refusal(where, ("name",), f"case {shown(record['name'])} came "
                                  "before from a line that was not a `process` line")
                merged.add(record["name"])
                result = record["result"]
                case = doc["cases"].setdefault(record["name"], {
                    **{k: v for k, v in result.items() if k != "rounds"},
                    "rounds": [], "processes": [], "arms": {}, "core": None, "overhead": None,
                })
                merge_process(case, record["process"], result, record["planned"],
                              record.get("gate_budget_s"))
            elif kind == "instructions":
                _require(record, {"name": STRING, "instructions": None,
                                  "arms": object_of(OBJECT)}, where)
                case = doc["cases"].get(record["name"])
                if case is not None:
                    case["instructions"] = record["instructions"]
                    case["arms"] = record["arms"]
            elif kind == "end":
                _require(record, {"interrupted": BOOLEAN}, where)
                doc["interrupted"] = record["interrupted"]
                if "overhead" in record:  # older streams: the header's null stays
                    doc["overhead"] = record["overhead"]
    if doc is None:
        raise ResultsError(f"{path} holds no results header; is it an epbench results.jsonl?")
    return doc


# What doc_from_jsonl and merge_process read of a `process` line (None: any value).
_PROCESS_LINE: dict[str, Kind | None] = {"name": STRING, "process": COUNT, "planned": COUNT,
                                         "result": OBJECT}
_PROCESS_RESULT: dict[str, Kind | None] = {
    "rounds": array_of(OBJECT), "arms": object_of(OBJECT), "status": STRING,
    "error": None, "error_kind": None, "signal": None, "core": None, "overhead": None}


def _require(record: dict[str, Any], kinds: dict[str, Kind | None], source: str,
             where: Where = ()) -> None:
    """Refuse ``record`` (at ``where`` in ``source``) unless it has every key of ``kinds``,
    each of its kind."""
    for key, kind in kinds.items():
        if key not in record:
            raise refusal(source, (*where, key), "missing")
        if kind is not None:
            check(record[key], kind, (*where, key), source)


def schema_version(schema: Any, name: str, current: int, path: Path, what: str,
                   error: type[EpbenchError] = ResultsError, remedy: str = "") -> int:
    """The version N of a ``"NAME/N"`` schema string; refuses other kinds and newer versions.

    Shared by every versioned file epbench reads (results, noise profiles).
    """
    if not isinstance(schema, str) or not schema.startswith(name + "/"):
        raise error(f"{path} is not an epbench {what} (schema {schema!r})")
    try:
        version = int(schema.split("/", 1)[1])
    except ValueError:
        raise error(f"{path}: unreadable {what} version {schema!r}") from None
    if version > current:
        raise error(
            f"{path} uses {schema}, newer than this epbench understands ({name}/{current}); "
            f"upgrade epbench{remedy}"
        )
    return version


def merge_process(case: dict[str, Any], process: int, record: dict[str, Any],
                  planned: int, gate_budget_s: float | None = None) -> None:
    """Add one process's record to its case: rounds appended (labelled with the process),
    the first process's facts kept, and the case's status decided.

    A process that failed (verification, the idle gate in strict mode) fails the case,
    since every process would; one that crashed costs only its own rounds: the case
    stays usable while another process finished, and says how many rounds it lost.
    """
    for rnd in record["rounds"]:
        rnd["process"] = process
        rnd["index"] = len(case["rounds"])
        case["rounds"].append(rnd)
    case["processes"].append({
        "index": process, "status": record["status"], "error": record["error"],
        "error_kind": record["error_kind"], "signal": record["signal"], "core": record["core"],
        "rounds": len(record["rounds"]), "planned": planned,
        "block_iters": {k: a.get("block_iters") for k, a in record["arms"].items()},
    })
    if gate_budget_s is not None:  # the gate's pause budget (0: the run stopped waiting)
        case["processes"][-1]["gate_budget_s"] = gate_budget_s
    if case["core"] is None:
        case["core"] = record["core"]
    if case["overhead"] is None:
        case["overhead"] = record["overhead"]
    if not case["arms"] or (record["status"] == "ok" and not _verified(case["arms"])):
        case["arms"] = record["arms"]
    finished = [p for p in case["processes"] if p["status"] == "ok"]
    failed = next((p for p in case["processes"] if p["status"] in ("failed", "interrupted")),
                  None)
    lost = [p for p in case["processes"] if p["status"] == "crashed"]
    if failed is not None:
        status, source = failed["status"], failed
    elif lost and not finished:
        status, source = "crashed", lost[0]
    else:
        status, source = "ok", None
    case["status"] = status
    for key in ("error", "error_kind", "signal"):
        case[key] = source[key] if source is not None else None
    case["lost_rounds"] = sum(p["planned"] - p["rounds"] for p in lost)
    if lost and status == "ok":
        case["error"] = (f"{len(lost)} of {len(case['processes'])} process(es) crashed, "
                         f"{case['lost_rounds']} round(s) lost, the other processes' rounds "
                         f"kept: {lost[0]['error']}")
        case["error_kind"] = "crash"


def _verified(arms: dict[str, Any]) -> bool:
    return bool(arms) and all(a.get("verified") for a in arms.values())


def migrate_to_2(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: one process, one session; samples become per-block summaries."""
    doc["overhead"] = doc.pop("floor", None)
    config = doc.setdefault("config", {})
    rounds = config.get("rounds", 0)
    config.setdefault("processes", 1)
    config.setdefault("sessions", 1)
    config.setdefault("rounds_per_process", rounds)
    config.setdefault("keep_samples", False)
    doc.setdefault("twin", None)
    for case in doc.get("cases", {}).values():
        case["overhead"] = case.pop("floor", None)
        for rnd in case.get("rounds", []):
            rnd.setdefault("process", 0)
            rnd.setdefault("session", 0)
            samples = rnd.pop("samples_ns", None) or {}
            rnd.setdefault("summary_ns", {k: block_summary(v) for k, v in samples.items()})
        case.setdefault("processes", [{
            "index": 0, "status": case.get("status"), "error": case.get("error"),
            "error_kind": case.get("error_kind"), "signal": case.get("signal"),
            "core": case.get("core"), "rounds": len(case.get("rounds", [])),
            "planned": rounds,
        }])
        case.setdefault("lost_rounds", 0)
    doc["schema"] = f"{SCHEMA_NAME}/2"
    return doc


MIGRATIONS = {2: migrate_to_2}  # version N: the step from N - 1

_SAMPLES = object_of(array_of(TIME))  # version 1: per arm, a block's raw samples in ns


def _check_version_1(doc: dict[str, Any], source: str) -> None:
    """Refuse what `migrate_to_2` could not read: the model checks what it writes."""
    for key in ("config", "cases"):
        if key in doc:
            check(doc[key], OBJECT, (key,), source)
    if doc.get("config", {}).get("rounds") is not None:
        check(doc["config"]["rounds"], COUNT, ("config", "rounds"), source)
    for name, case in doc.get("cases", {}).items():
        check(case, OBJECT, ("cases", name), source)
        if "rounds" not in case:
            continue
        check(case["rounds"], array_of(OBJECT), ("cases", name, "rounds"), source)
        for i, rnd in enumerate(case["rounds"]):
            if rnd.get("samples_ns") is not None:
                check(rnd["samples_ns"], _SAMPLES, ("cases", name, "rounds", i, "samples_ns"),
                      source)


def migrate(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """Bring an older document up to SCHEMA_VERSION, step by step; refuse newer ones."""
    version = schema_version(doc.get("schema"), SCHEMA_NAME, SCHEMA_VERSION, path,
                             "results file", remedy=" to read it")
    if version < 2:
        _check_version_1(doc, str(path))
    for step in range(version + 1, SCHEMA_VERSION + 1):
        doc = MIGRATIONS[step](doc)
    return doc


def read_document(path: str | Path) -> tuple[dict[str, Any], Path]:
    """The migrated document of results.json or a results.jsonl stream (or the run
    directory holding one), as a plain dict, with the file it came from.

    `load_results` builds the model from it; outside it, only tests use the raw document
    (to check a migration or a round trip). Every reader takes the typed model
    `load_results` returns.
    """
    path = Path(path)
    if path.is_dir():
        for name in ("results.json", "results.jsonl"):
            if (path / name).is_file():
                path = path / name
                break
    if not path.is_file():
        raise ResultsError(f"no results file at {str(path)!r}; pass the results.json of a run")
    try:
        doc = (doc_from_jsonl(path) if path.suffix == ".jsonl"
               else parse_json(path.read_text(encoding="utf-8"), str(path)))
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path} is not UTF-8 text ({_one_line(exc)}); pass the "
                           "results.json of a run") from None
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror}; pass a results file you "
                           "can read") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{path} is not an epbench results file")
    return migrate(doc, path), path


def load_results(path: str | Path) -> Results:
    """The one reader of results files: results.json, a results.jsonl stream, or a run's
    directory; a newer schema refused, an older one migrated, then built into the typed
    model, which refuses (in one line naming the key and the file) a document that lacks
    a key the readers need."""
    doc, found = read_document(path)
    return Results.from_dict(doc, source=str(found))


def validate_schema(doc: dict[str, Any]) -> None:
    """Check a document against results.schema.json (needs the jsonschema package)."""
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema)
