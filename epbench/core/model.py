"""The results document as typed records, read once and checked when built.

`Results.from_dict` turns a (migrated) results document into these records and refuses
one that lacks a key the readers need, or holds a null where they need a value (a key
declared `null=False`), naming the key, where it was and the file, so a renamed or
damaged key fails when the file is loaded, not when a report is half rendered.

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

The writers (the runner, the worker) still build plain dicts; readers go through
`epbench.core.results.load_results`, or `Results.from_dict` for a document held in
memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from epbench.core.errors import ResultsError

T = TypeVar("T", bound="Record")


def _key(name: str, *, required: bool = False, null: bool = True,
         load: Callable[..., Any] | None = None, dump: Callable[[Any], Any] | None = None,
         default: Any = None, default_factory: Callable[[], Any] | None = None) -> Any:
    """A field read from key `name` of the document (loaded/dumped through `load`/`dump`).

    `null=False`: the key, when present, must not be null (readers dereference it, and no
    writer puts a null there), so a damaged file is refused at load, not mid-render."""
    meta = {"key": name, "required": required, "null": null, "load": load, "dump": dump}
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
    def from_dict(cls: type[T], data: Any, where: str = "", source: str = "results") -> T:
        """Build the record; `where` says where it sits in the document (e.g. "case 'x'
        round 3"), `source` which file, both for the one-line error a missing key raises."""
        if not isinstance(data, Mapping):
            raise ResultsError(f"{source}: {where or 'the document'} is "
                               f"{type(data).__name__}, not an object; the file is damaged "
                               "or not an epbench results file")
        values: dict[str, Any] = {}
        absent = []
        known = set()
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            key = f.metadata.get("key")
            if key is None:
                continue
            known.add(key)
            if key not in data:
                if f.metadata["required"]:
                    raise ResultsError(
                        f"{source}: {where or 'the document'} has no {key!r} key; the file is "
                        "damaged or was written by another program (re-run it with `epbench run`)"
                    )
                absent.append(key)
                continue
            load = f.metadata["load"]
            value = data[key]
            if value is None and not f.metadata["null"]:
                raise ResultsError(
                    f"{source}: {where or 'the document'} has {key!r}: null; the file is "
                    "damaged or was written by another program (re-run it with `epbench run`)"
                )
            values[f.name] = (load(value, where, source)
                              if load is not None and value is not None else value)
        values["extra"] = {k: v for k, v in data.items() if k not in known}
        values["absent"] = frozenset(absent)
        return cls(**values)

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


def _within(where: str, what: str) -> str:
    return f"{where} {what}".strip()


def _mapping_of(cls: type[Record], what: str) -> Callable[[Any, str, str], dict[str, Any]]:
    def load(data: Any, where: str, source: str) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise ResultsError(f"{source}: {_within(where, what + 's')} are not an object")
        return {k: cls.from_dict(v, _within(where, f"{what} {k!r}"), source)
                for k, v in data.items()}
    return load


def _list_of(cls: type[Record], what: str) -> Callable[[Any, str, str], list[Any]]:
    def load(data: Any, where: str, source: str) -> list[Any]:
        if not isinstance(data, list):
            raise ResultsError(f"{source}: {_within(where, what + 's')} are not a list")
        return [cls.from_dict(v, _within(where, f"{what} {i}"), source)
                for i, v in enumerate(data)]
    return load


def _one(cls: type[Record], what: str) -> Callable[[Any, str, str], Any]:
    def load(data: Any, where: str, source: str) -> Any:
        return cls.from_dict(data, _within(where, what), source)
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

    n: int | None = _key("n")
    median: float | None = _key("median")
    min: float | None = _key("min")
    q1: float | None = _key("q1")
    q3: float | None = _key("q3")
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Round(Record):
    """One round: every arm's block once, after the idle gate."""

    index: int = _key("index", required=True)
    quiet: bool = _key("quiet", required=True)
    summary_ns: dict[str, Block] = _key("summary_ns", required=True, null=False,
                                        load=_mapping_of(Block, "block of arm"),
                                        dump=_dump_mapping)
    process: int = _key("process", default=0)
    session: int = _key("session", default=0)
    order: list[str] = _key("order", null=False, default_factory=list)
    # readings before the round, and during it
    gate: Mapping[str, Any] = _key("gate", null=False, default_factory=dict)
    interference: Mapping[str, Any] = _key("interference", null=False, default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()

    def block_value(self, arm: str, what: str) -> float | None:
        """`what` ("median", "min", ...) of `arm`'s block, None if the arm has none."""
        block = self.summary_ns.get(arm)
        return getattr(block, what) if block is not None else None


@dataclass(frozen=True)
class CaseArm(Record):
    """What one arm did on one case: its nodes, its verification, its counters."""

    verified: bool = _key("verified", required=True)
    nodes_executed: int | None = _key("nodes_executed", required=True)
    nodes_by_ep: Mapping[str, int] | None = _key("nodes_by_ep", required=True)
    counters_per_run: Mapping[str, float] | None = _key("counters_per_run", required=True)
    max_abs_error: float | None = _key("max_abs_error")
    block_iters: int | None = _key("block_iters")
    block_ms: float | None = _key("block_ms")
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Process(Record):
    """One worker process of a case: how it ended and how many rounds it ran."""

    index: int = _key("index", required=True)
    status: str | None = _key("status", required=True)
    rounds: int = _key("rounds", required=True)
    planned: int = _key("planned", required=True)
    error: str | None = _key("error")
    error_kind: str | None = _key("error_kind")
    signal: int | None = _key("signal")
    core: int | None = _key("core")
    block_iters: Mapping[str, int | None] | None = _key("block_iters")
    # The idle gate's pause budget it had; 0 once the run had stopped waiting.
    gate_budget_s: float | None = _key("gate_budget_s")
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Case(Record):
    """One case of a run: its spec, how it ended, per arm its facts, and its rounds."""

    # cases.spec.CaseSpec as a dict
    spec: Mapping[str, Any] = _key("spec", required=True, null=False)
    status: str = _key("status", required=True)
    arms: dict[str, CaseArm] = _key("arms", required=True, null=False,
                                    load=_mapping_of(CaseArm, "arm"), dump=_dump_mapping)
    rounds: list[Round] = _key("rounds", required=True, null=False,
                               load=_list_of(Round, "round"), dump=_dump_list)
    definition_sha256: str | None = _key("definition_sha256")
    error: str | None = _key("error")
    error_kind: str | None = _key("error_kind")
    signal: int | None = _key("signal")
    core: int | None = _key("core")
    processes: list[Process] = _key("processes", null=False, default_factory=list,
                                    load=_list_of(Process, "process"), dump=_dump_list)
    lost_rounds: int = _key("lost_rounds", default=0)
    overhead: Mapping[str, Any] | None = _key("overhead")
    instructions: Mapping[str, Any] | None = _key("instructions")
    # compare-commits: how many times a case was re-run, and the re-runs that failed
    reruns: int = _key("reruns", default=0)
    rerun_errors: list[str] = _key("rerun_errors", default_factory=list)
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

    key: str = _key("key", required=True)
    kind: str = _key("kind", required=True)
    spec: str = _key("spec", required=True)
    library: str | None = _key("library")
    sha256: str | None = _key("sha256")
    ep_name: str | None = _key("ep_name")
    ep_version: str | None = _key("ep_version")
    registration_name: str | None = _key("registration_name")
    options: Mapping[str, str] = _key("options", default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class GateConfig(Record):
    policy: str | None = _key("policy")
    threshold: float | None = _key("threshold")
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Config(Record):
    """The run's settings (the rest of them in `extra`)."""

    rounds: int = _key("rounds", required=True)
    threads: int | None = _key("threads")
    gate: GateConfig = _key("gate", null=False, default=GateConfig(),
                            load=_one(GateConfig, "gate"), dump=_dump_one)
    case_names: list[str] | None = _key("case_names")
    processes: int = _key("processes", default=1)
    sessions: int = _key("sessions", default=1)
    keep_samples: bool = _key("keep_samples", default=False)
    # Slices requested per block (older files timed whole blocks: 1); each round's own
    # `slices` says how many its blocks got.
    block_slices: int = _key("block_slices", null=False, default=1)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Host(Record):
    """The host fingerprint: `key` identifies the machine; the rest in `extra`."""

    key: str | None = _key("key", required=True)
    git_commit: str | None = _key("git_commit")
    cpu_model: str | None = _key("cpu_model")
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Twin(Record):
    """The run's A/A twin: arm `key` is a second copy of arm `of`."""

    of: str = _key("of", required=True)
    key: str = _key("key", required=True)
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

    schema: str = _key("schema", required=True)
    host: Host = _key("host", required=True, null=False, load=_one(Host, "host"),
                      dump=_dump_one)
    config: Config = _key("config", required=True, null=False, load=_one(Config, "config"),
                          dump=_dump_one)
    arms: dict[str, Arm] = _key("arms", required=True, null=False,
                                load=_mapping_of(Arm, "arm"), dump=_dump_mapping)
    cases: dict[str, Case] = _key("cases", required=True, null=False,
                                  load=_mapping_of(Case, "case"), dump=_dump_mapping)
    control: str = _key("control", default="ort")
    created: str | None = _key("created")
    interrupted: bool = _key("interrupted", default=False)
    overhead: Mapping[str, Any] | None = _key("overhead")
    twin: Twin | None = _key("twin", load=_one(Twin, "twin"), dump=_dump_one)
    extra: Mapping[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()
