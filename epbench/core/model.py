"""The results document as typed records, read once and checked when built.

`Results.from_dict` turns a (migrated) results document into these records and refuses
one that lacks a key the readers need, holds a null where they need a value (a key
declared `null=False`), or a value of the wrong type or range (every key declares its
`kind`: a time is a positive finite number, a count a non-negative integer), in one line
naming the file and the key's path (`cases.relu_d10_w8.rounds[3].summary_ns.ort.median`),
so a renamed or damaged key fails when the file is loaded, not when a report is half
rendered. The check is a type test per key, cheap beside building the records.

`to_dict` gives the document back exactly: keys this version does not know are kept
in each record's `extra`, and an optional key that was absent stays absent, so the
JSON format (`results.schema.json`) remains the contract and the model only reads it.

The records are frozen dataclasses, frozen at the top level only: the dicts and lists
of records the loader builds (`cases`, `arms`, `rounds`, ...) are plain ones, and the
nested mappings and lists a field holds without a record of its own (a case's `spec`,
a round's `gate` readings, `order`, `extra`, ...) are the source document's own objects,
shared with it: they are not to be modified. (A deep freeze would copy every round
of every case on load.) `to_dict` hands the same nested objects back: copy its result
before editing it.

The runner returns its run as `Results` (built once from the document it wrote);
readers of a file go through `epbench.core.results.load_results`, or
`Results.from_dict` for a document held in memory. `Record.replaced` makes a changed
copy (compare-commits adds re-run rounds so).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from epbench.core.errors import ResultsError

T = TypeVar("T", bound="Record")

# The end of every refusal of a damaged results file.
REMEDY = "the file is damaged or was written by another program (re-run it with `epbench run`)"

# A key printed bare in a path; any other is quoted (JSON escapes: the message stays one line).
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_:@+-]{1,64}")
_SHOWN_CHARS = 40


# Where a value sits in a document: its keys and indices from the top, made text only
# for a refusal (the loader passes one down to every record).
Where = tuple[Any, ...]


def json_path(where: Where) -> str:
    """The keys and indices of `where` as text: `cases.relu_d1_w8.rounds[3]`."""
    out = ""
    for key in where:
        if isinstance(key, int):
            out += f"[{key}]"
        elif isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
            out += f".{key}" if out else key
        else:
            out += f"[{shown(key)}]"
    return out


def shown(value: Any) -> str:
    """A value as its JSON text, cut short: for one-line messages."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 1] + "…"


def refusal(source: str, where: Where, problem: str) -> ResultsError:
    """The one-line error for a damaged value: file, the key's path, what is wrong, remedy."""
    return ResultsError(f"{source}: {json_path(where) or 'the top level'}: {problem}; {REMEDY}")


def _is_int(v: Any) -> bool:
    if type(v) is int:  # the common case first: the check runs for every count
        return True
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


_LARGEST = 2.0 ** 63  # beyond it an integer is no count or time a run can write


def _is_number(v: Any) -> bool:
    if type(v) is float or type(v) is int:
        # NaN fails both comparisons; a 400-digit integer, which float() cannot take, too.
        return -_LARGEST < v < _LARGEST
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    try:
        return math.isfinite(v) and abs(v) < _LARGEST
    except OverflowError:
        return False


def _is_time(v: Any) -> bool:
    if type(v) is float or type(v) is int:
        return 0 < v < _LARGEST
    return _is_number(v) and v > 0


_PLAIN_NUMBERS = frozenset((int, float))


def _numbers_above(low: float, strict: bool) -> Callable[[Any], bool]:
    """A test of many values at once, without a Python call per value (a v1 file holds
    every raw sample): plain numbers, finite, within (low, 2**63)."""
    def test(values: Any) -> bool:
        values = list(values)
        if not values:
            return True
        types = set(map(type, values))
        if not types <= _PLAIN_NUMBERS:
            return False
        # Only a float can be NaN or infinite, and either makes the sum so or fsum raise
        # (as can a sum that overflows: a false alarm, which only sends the caller to test
        # each value).
        try:
            if float in types and not math.isfinite(math.fsum(values)):
                return False
        except (OverflowError, ValueError):
            return False
        least = min(values)
        return (least > low if strict else least >= low) and max(values) < _LARGEST
    return test


@dataclass(frozen=True)
class Kind:
    """What a key must hold: `what` names it in the refusal, `test` checks a value."""

    what: str
    test: Callable[[Any], bool]
    # Each member (object value or array element) must be of this kind; None: unchecked.
    items: Kind | None = None
    null_items: bool = False
    # Many values at once, the same verdict as `test` on each (None: `test` on each).
    test_all: Callable[[Any], bool] | None = None


def _is_object(v: Any) -> bool:
    return type(v) is dict or isinstance(v, Mapping)  # dict first: the ABC check is slow


STRING = Kind("a string", lambda v: isinstance(v, str))
INTEGER = Kind("an integer", _is_int)
# Below 2**63 as a time is: a larger count is none a run can write, and numpy's int64
# (reports.stats.round_labels) cannot take it.
COUNT = Kind("a non-negative integer", lambda v: _is_int(v) and 0 <= v < _LARGEST)
BOOLEAN = Kind("true or false", lambda v: isinstance(v, bool))
NUMBER = Kind("a finite number", _is_number, test_all=_numbers_above(-_LARGEST, True))
NON_NEGATIVE = Kind("a non-negative finite number", lambda v: _is_number(v) and v >= 0,
                    test_all=_numbers_above(0, False))
TIME = Kind("a positive finite number", _is_time, test_all=_numbers_above(0, True))
OBJECT = Kind("an object", _is_object)
ARRAY = Kind("an array", lambda v: type(v) is list or isinstance(v, (list, tuple)))


def object_of(items: Kind, null_items: bool = False) -> Kind:
    return Kind("an object", OBJECT.test, items, null_items)


def array_of(items: Kind) -> Kind:
    return Kind("an array", ARRAY.test, items)


_FEW = 16  # members below which testing each is quicker than `test_all`


def check(value: Any, kind: Kind, where: Where, source: str) -> None:
    """Refuse `value` (at `where` in file `source`) unless it is of `kind`, members too."""
    if not kind.test(value):
        raise refusal(source, where, f"{shown(value)} is not {kind.what}")
    items = kind.items
    if items is None:
        return
    deep = items.items is not None
    mapping = _is_object(value)
    if not deep and not kind.null_items:
        values = value.values() if mapping else value
        if (items.test_all(values) if items.test_all is not None and len(values) > _FEW
                else all(map(items.test, values))):
            return  # the common case, without a loop in Python
    members = value.items() if mapping else enumerate(value)
    for key, member in members:
        if member is None and kind.null_items:
            continue
        if deep or not items.test(member):
            check(member, items, (*where, key), source)


def _check_keys(kinds: Mapping[str, Kind]) -> Callable[[Any, Where, str], None]:
    """A check of the named keys of a free-form object (each may be absent or null)."""
    def check_keys(value: Mapping[str, Any], where: Where, source: str) -> None:
        for key, kind in kinds.items():
            member = value.get(key)
            if member is not None:
                check(member, kind, (*where, key), source)
    return check_keys


# What readers take from an object the model keeps free-form.
_READINGS = _check_keys({"idle": object_of(NUMBER), "steal": object_of(NUMBER),
                         "waited_s": NON_NEGATIVE, "own_steal": NUMBER})  # harness.gate
_OVERHEAD = _check_keys({"timer_ns": NON_NEGATIVE, "noop_call_ns": NON_NEGATIVE,
                         "ort_trivial_run_ns": NON_NEGATIVE})  # harness.overhead
_SPEC = _check_keys({"name": STRING, "kind": STRING, "depth": COUNT, "width": COUNT})


def _key(name: str, kind: Kind, *, required: bool = False, null: bool = True,
         load: Callable[..., Any] | None = None, dump: Callable[[Any], Any] | None = None,
         check: Callable[[Any, Where, str], None] | None = None,
         default: Any = None, default_factory: Callable[[], Any] | None = None) -> Any:
    """A field read from key `name` of the document (loaded/dumped through `load`/`dump`).

    Its value, when not null, must be of `kind` (then pass `check`, for a free-form
    object whose members readers use). `null=False`: the key, when present, must not be
    null (readers dereference it, and no writer puts a null there), so a damaged file is
    refused at load, not mid-render."""
    meta = {"key": name, "kind": kind, "required": required, "null": null, "load": load,
            "dump": dump, "check": check}
    if required:
        return field(metadata=meta)
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


class Record:
    """Shared reading and writing of the records below (each a frozen dataclass; the
    nested mappings and lists it holds are the document's own, not to be modified).

    A field declared with `_key` maps to one key of the document. `absent` lists the
    optional keys the document did not have, `extra` every key no field maps to.
    """

    extra: Mapping[str, Any]
    absent: frozenset[str]

    @classmethod
    def from_dict(cls: type[T], data: Any, where: Where = (), source: str = "results") -> T:
        """Build the record; `where` is its place in the document (("cases", "x",
        "rounds", 3)), `source` the file, both for the one-line error a missing, null or
        mistyped key raises."""
        if not _is_object(data):
            raise refusal(source, where, f"{shown(data)} is not an object")
        values: dict[str, Any] = {}
        absent = []
        fields, known = _fields_of(cls)
        for name, key, required, null, kind, members_too, check_more, load in fields:
            if key not in data:
                if required:
                    raise refusal(source, (*where, key), "missing")
                absent.append(key)
                continue
            value = data[key]
            if value is None:
                if not null:
                    raise refusal(source, (*where, key), f"null is not {kind.what}")
                values[name] = None
                continue
            if members_too or not kind.test(value):
                check(value, kind, (*where, key), source)
                if check_more is not None:
                    check_more(value, (*where, key), source)
            values[name] = load(value, (*where, key), source) if load is not None else value
        values["extra"] = {k: v for k, v in data.items() if k not in known}
        values["absent"] = frozenset(absent)
        return cls(**values)

    def replaced(self: T, **changes: Any) -> T:
        """A copy with ``changes`` (by attribute), each key then present in the document
        (`dataclasses.replace` alone would leave a key absent that the record lacked)."""
        keys = {f[1] for f in _fields_of(type(self))[0] if f[0] in changes}
        return dataclasses.replace(self, **changes,  # type: ignore[type-var]
                                   absent=self.absent - keys)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            key = f.metadata.get("key")
            if key is None or key in self.absent:
                continue
            value = getattr(self, f.name)
            dump = f.metadata["dump"]
            out[key] = dump(value) if dump is not None and value is not None else value
        out.update(self.extra)
        return out


# Per key of a record type: attribute, key, required, null allowed, kind, whether its
# members need a check too, the extra check, the loader.
_Field = tuple[str, str, bool, bool, "Kind", bool, Any, Any]
_FIELDS: dict[type, tuple[tuple[_Field, ...], frozenset[str]]] = {}


def _fields_of(cls: type) -> tuple[tuple[_Field, ...], frozenset[str]]:
    """Each key of the record type as a _Field, and the keys; worked out once per type
    (dataclasses.fields and its metadata mappings are slow beside the rest of a load)."""
    found = _FIELDS.get(cls)
    if found is None:
        fields = tuple(
            (f.name, m["key"], m["required"], m["null"], m["kind"],
             m["kind"].items is not None or m["check"] is not None, m["check"], m["load"])
            for f in dataclasses.fields(cls) if "key" in (m := f.metadata))
        found = _FIELDS[cls] = (fields, frozenset(f[1] for f in fields))
    return found


# Loaders of nested records: `where` is where the key's value sits (its kind checked).
def _mapping_of(cls: type[Record]) -> Callable[[Any, Where, str], dict[str, Any]]:
    def load(data: Any, where: Where, source: str) -> dict[str, Any]:
        return {k: cls.from_dict(v, (*where, k), source) for k, v in data.items()}
    return load


def _list_of(cls: type[Record]) -> Callable[[Any, Where, str], list[Any]]:
    def load(data: Any, where: Where, source: str) -> list[Any]:
        return [cls.from_dict(v, (*where, i), source) for i, v in enumerate(data)]
    return load


def _one(cls: type[Record]) -> Callable[[Any, Where, str], Any]:
    def load(data: Any, where: Where, source: str) -> Any:
        return cls.from_dict(data, where, source)
    return load


def _dump_mapping(value: Mapping[str, Record]) -> dict[str, Any]:
    return {k: v.to_dict() for k, v in value.items()}


def _dump_list(value: list[Record]) -> list[Any]:
    return [v.to_dict() for v in value]


def _dump_one(value: Record) -> dict[str, Any]:
    return value.to_dict()


@dataclass(frozen=True)
class Block(Record):
    """One arm's block in one round, summarized: n calls, median, min, quartiles (ns)."""

    n: int | None = _key("n", COUNT)
    median: float | None = _key("median", TIME)
    min: float | None = _key("min", TIME)
    q1: float | None = _key("q1", TIME)
    q3: float | None = _key("q3", TIME)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Round(Record):
    """One round: every arm's block once, after the idle gate."""

    index: int = _key("index", COUNT, required=True)
    quiet: bool = _key("quiet", BOOLEAN, required=True)
    summary_ns: dict[str, Block] = _key("summary_ns", OBJECT, required=True, null=False,
                                        load=_mapping_of(Block),
                                        dump=_dump_mapping)
    # Absent in files that predate them (0), never null: readers label rounds by them.
    process: int = _key("process", COUNT, null=False, default=0)
    session: int = _key("session", COUNT, null=False, default=0)
    order: list[str] = _key("order", array_of(STRING), null=False, default_factory=list)
    # readings before the round, and during it
    gate: Mapping[str, Any] = _key("gate", OBJECT, null=False, check=_READINGS,
                                    default_factory=dict)
    interference: Mapping[str, Any] = _key("interference", OBJECT, null=False,
                                            check=_READINGS, default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()

    def block_value(self, arm: str, what: str) -> float | None:
        """`what` ("median", "min", ...) of `arm`'s block, None if the arm has none."""
        block = self.summary_ns.get(arm)
        return getattr(block, what) if block is not None else None


@dataclass(frozen=True)
class CaseArm(Record):
    """What one arm did on one case: its nodes, its verification, its counters."""

    verified: bool = _key("verified", BOOLEAN, required=True)
    nodes_executed: int | None = _key("nodes_executed", COUNT, required=True)
    nodes_by_ep: Mapping[str, int] | None = _key("nodes_by_ep", object_of(COUNT), required=True)
    counters_per_run: Mapping[str, float] | None = _key("counters_per_run", object_of(NUMBER),
                                                        required=True)
    max_abs_error: float | None = _key("max_abs_error", NON_NEGATIVE)
    block_iters: int | None = _key("block_iters", COUNT)
    block_ms: float | None = _key("block_ms", NON_NEGATIVE)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Process(Record):
    """One worker process of a case: how it ended and how many rounds it ran."""

    index: int = _key("index", COUNT, required=True)
    status: str | None = _key("status", STRING, required=True)
    rounds: int = _key("rounds", COUNT, required=True)
    planned: int = _key("planned", COUNT, required=True)
    error: str | None = _key("error", STRING)
    error_kind: str | None = _key("error_kind", STRING)
    signal: int | None = _key("signal", INTEGER)
    core: int | None = _key("core", INTEGER)
    block_iters: Mapping[str, int | None] | None = _key("block_iters",
                                                        object_of(COUNT, null_items=True))
    # The idle gate's pause budget it had; 0 once the run had stopped waiting.
    gate_budget_s: float | None = _key("gate_budget_s", NON_NEGATIVE)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Case(Record):
    """One case of a run: its spec, how it ended, per arm its facts, and its rounds."""

    # cases.spec.CaseSpec as a dict
    spec: Mapping[str, Any] = _key("spec", OBJECT, required=True, null=False,
                                      check=_SPEC)
    status: str = _key("status", STRING, required=True)
    arms: dict[str, CaseArm] = _key("arms", OBJECT, required=True, null=False,
                                    load=_mapping_of(CaseArm), dump=_dump_mapping)
    rounds: list[Round] = _key("rounds", ARRAY, required=True, null=False,
                               load=_list_of(Round), dump=_dump_list)
    definition_sha256: str | None = _key("definition_sha256", STRING)
    error: str | None = _key("error", STRING)
    error_kind: str | None = _key("error_kind", STRING)
    signal: int | None = _key("signal", INTEGER)
    core: int | None = _key("core", INTEGER)
    processes: list[Process] = _key("processes", ARRAY, null=False, default_factory=list,
                                    load=_list_of(Process), dump=_dump_list)
    lost_rounds: int = _key("lost_rounds", COUNT, default=0)
    overhead: Mapping[str, Any] | None = _key("overhead", OBJECT, check=_OVERHEAD)
    instructions: Mapping[str, Any] | None = _key("instructions", OBJECT)
    # compare-commits: how many times a case was re-run, and the re-runs that failed
    reruns: int = _key("reruns", COUNT, default=0)
    rerun_errors: list[str] = _key("rerun_errors", array_of(STRING), default_factory=list)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def verified(self) -> bool:
        """The case ran and every arm's outputs matched ORT's."""
        return self.ok and bool(self.arms) and all(a.verified for a in self.arms.values())


@dataclass(frozen=True)
class Arm(Record):
    """One arm of the run: its key, kind, spec, library and EP."""

    key: str = _key("key", STRING, required=True)
    kind: str = _key("kind", STRING, required=True)
    spec: str = _key("spec", STRING, required=True)
    library: str | None = _key("library", STRING)
    sha256: str | None = _key("sha256", STRING)
    ep_name: str | None = _key("ep_name", STRING)
    ep_version: str | None = _key("ep_version", STRING)
    registration_name: str | None = _key("registration_name", STRING)
    options: Mapping[str, str] = _key("options", object_of(STRING), default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class GateConfig(Record):
    policy: str | None = _key("policy", STRING)
    threshold: float | None = _key("threshold", NUMBER)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Config(Record):
    """The run's settings (the rest of them in `extra`)."""

    rounds: int = _key("rounds", COUNT, required=True)
    threads: int | None = _key("threads", COUNT)
    gate: GateConfig = _key("gate", OBJECT, null=False, default=GateConfig(),
                            load=_one(GateConfig), dump=_dump_one)
    case_names: list[str] | None = _key("case_names", array_of(STRING))
    processes: int = _key("processes", COUNT, default=1)
    sessions: int = _key("sessions", COUNT, default=1)
    keep_samples: bool = _key("keep_samples", BOOLEAN, default=False)
    # Slices requested per block (older files timed whole blocks: 1); each round's own
    # `slices` says how many its blocks got.
    block_slices: int = _key("block_slices", COUNT, null=False, default=1)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Host(Record):
    """The host fingerprint: `key` identifies the machine; the rest in `extra`."""

    key: str | None = _key("key", STRING, required=True)
    git_commit: str | None = _key("git_commit", STRING)
    cpu_model: str | None = _key("cpu_model", STRING)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Twin(Record):
    """The run's A/A twin: arm `key` is a second copy of arm `of`, registered from a copy of
    its library, or from the file itself when every arm loads that one file
    (`shared_library`)."""

    of: str = _key("of", STRING, required=True)
    key: str = _key("key", STRING, required=True)
    shared_library: bool = _key("shared_library", BOOLEAN, default=False)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


# Every build of the engine's probe reports this counter; a side without it has no probe
# (any other plugin EP, or ORT's CPU EP, whose only counter may be `instructions`).
PROBE_COUNTER = "runs"


def changed_counters(before: Mapping[str, Any] | None,
                     after: Mapping[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """The deterministic counters that differ, name -> (before, after).

    A counter that `before` lacks although it has the engine's probe, and that `after`
    reports as 0, is no change: a build older than a counter does not report it. Every
    other difference is one, a counter that `after` stopped reporting included.
    """
    before, after = before or {}, after or {}
    was_added = PROBE_COUNTER in before
    return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after))
            if not (was_added and k not in before and after[k] == 0)
            and before.get(k) != after.get(k)}


@dataclass(frozen=True)
class Results(Record):
    """A results document (schema epbench.results/2)."""

    schema: str = _key("schema", STRING, required=True)
    host: Host = _key("host", OBJECT, required=True, null=False, load=_one(Host),
                      dump=_dump_one)
    config: Config = _key("config", OBJECT, required=True, null=False, load=_one(Config),
                          dump=_dump_one)
    arms: dict[str, Arm] = _key("arms", OBJECT, required=True, null=False,
                                load=_mapping_of(Arm), dump=_dump_mapping)
    cases: dict[str, Case] = _key("cases", OBJECT, required=True, null=False,
                                  load=_mapping_of(Case), dump=_dump_mapping)
    control: str = _key("control", STRING, default="ort", null=False)
    created: str | None = _key("created", STRING)
    interrupted: bool = _key("interrupted", BOOLEAN, default=False)
    overhead: Mapping[str, Any] | None = _key("overhead", OBJECT, check=_OVERHEAD)
    twin: Twin | None = _key("twin", OBJECT, load=_one(Twin), dump=_dump_one)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()
