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

Two files are written during a run: ``results.jsonl`` gets a header line, one
line per process of a case as the process ends (so a killed harness loses nothing
measured), one ``instructions`` line per counted case, and an ``end`` line, which
also carries the run's ``overhead`` (measured after the header was written; streams
written before it had it leave ``overhead`` null); ``results.json`` is the whole
document, replaced atomically after every process and at the end. Both say
``"interrupted": true`` until the run has finished: a stream without its ``end``
line was cut short. A finished run's stream rebuilds its results.json key for key.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from epbench.core.errors import EpbenchError, ResultsError
from epbench.core.model import Results
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


class JsonlWriter:
    """Appends one JSON line per event and flushes it to disk at once."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 -- closed in close()

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(dumps(record) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def doc_from_jsonl(path: Path) -> dict[str, Any]:
    """Rebuild a results document from the JSON-lines stream (e.g. after a crash)."""
    doc: dict[str, Any] | None = None
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                # A line cut by a kill mid-write: everything before it is whole.
                break
            if record.get("type") == "header":
                doc = {k: v for k, v in record.items() if k != "type"}
                doc.setdefault("cases", {})
                doc.setdefault("interrupted", True)
            elif record.get("type") == "case" and doc is not None:  # version 1
                doc["cases"][record["name"]] = record["result"]
            elif record.get("type") == "process" and doc is not None:
                result = record["result"]
                case = doc["cases"].setdefault(record["name"], {
                    **{k: v for k, v in result.items() if k != "rounds"},
                    "rounds": [], "processes": [], "arms": {}, "core": None, "overhead": None,
                })
                merge_process(case, record["process"], result, record["planned"],
                              record.get("gate_budget_s"))
            elif record.get("type") == "instructions" and doc is not None:
                case = doc["cases"].get(record["name"])
                if case is not None:
                    case["instructions"] = record["instructions"]
                    case["arms"] = record["arms"]
            elif record.get("type") == "end" and doc is not None:
                doc["interrupted"] = bool(record["interrupted"])
                if "overhead" in record:  # older streams: the header's null stays
                    doc["overhead"] = record["overhead"]
            elif doc is None:
                raise ResultsError(f"{path}:{lineno}: no header line before the cases")
    if doc is None:
        raise ResultsError(f"{path} holds no results header; is it an epbench results.jsonl?")
    return doc


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


def migrate(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """Bring an older document up to SCHEMA_VERSION, step by step; refuse newer ones."""
    version = schema_version(doc.get("schema"), SCHEMA_NAME, SCHEMA_VERSION, path,
                             "results file", remedy=" to read it")
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
    if path.suffix == ".jsonl":
        doc = doc_from_jsonl(path)
    else:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ResultsError(
                f"{path} is not valid JSON ({exc}); is the run still writing it?"
            ) from None
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
