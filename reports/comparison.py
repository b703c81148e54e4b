"""The comparison as a typed, frozen model: what reports.compare builds and every reader
(render, html, the bot, the exit codes, the workflows) reads by attribute.

It becomes JSON only at the edge: `Comparison.to_json` writes compare.json (the form of
reports/comparison.schema.json) and `Comparison.from_json` is the one way back from
it. Also here: the verdicts in severity order and their headlines, the settings a
comparison is judged with, a side (a results document and its arm), and the error for
two runs that cannot be compared.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from epbench.core.errors import EpbenchError
from epbench.core.model import Case, Results
from epbench.core.results import parse_json
from epbench.reports import defaults, stats

if TYPE_CHECKING:
    import numpy as np

SCHEMA = "epbench.comparison/1"

# A JSON value as json.loads returns it: for the few parts of a comparison that are free
# form by design (the host fingerprint's values).
JsonValue = Union[  # noqa: UP007 (a recursive alias needs Union: "JsonValue" is a string)
    str, int, float, bool, None, list["JsonValue"], dict[str, "JsonValue"]
]
# A calibration profile (reports.calibrate) as the comparison reads it.
Profile = Mapping[str, JsonValue]

# verdict -> (emoji, words). The order is the severity order, worst first.
VERDICTS: dict[str, tuple[str, str]] = {
    "failed": ("❌", "failed"),
    "alert": ("🔴", "regressed (alert)"),
    "regression": ("⚠️", "regressed"),
    "inconclusive": ("❔", "inconclusive"),
    "not_comparable": ("➖", "not comparable"),
    "improvement": ("🟢", "improved"),
    "no_change": ("✅", "within noise"),
}
SEVERITY = {name: rank for rank, name in enumerate(VERDICTS)}
# `--fail-on` level -> the verdicts that make `compare` exit with EXIT_REGRESSION.
FAIL_ON: dict[str, frozenset[str]] = {
    "alert": frozenset({"failed", "alert"}),
    "regression": frozenset({"failed", "alert", "regression"}),
    "never": frozenset(),
}
HEADLINES = {
    "failed": "❌ Failed",
    "alert": "🔴 Regression",
    "regression": "⚠️ Change",
    "inconclusive": "❔ Inconclusive",
    "no_change": "✅ No regression",
}


class CompareError(EpbenchError):
    """Two results that cannot be compared honestly; the message says what to do."""


class RoundMedians:
    """Per-round medians for one comparison, each (case, arm) computed once."""

    def __init__(self) -> None:
        self._memo: dict[tuple[int, str], np.ndarray] = {}

    def __call__(self, case: Case, arm: str) -> np.ndarray:
        key = (id(case), arm)  # the documents outlive the comparison that holds this
        if key not in self._memo:
            self._memo[key] = stats.round_medians(case, arm)
        return self._memo[key]


@dataclass
class Side:
    """One side of a comparison: a results document and the arm measured in it."""

    label: str  # "base" or "pr"
    doc: Results
    arm: str
    path: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.doc, Results):
            raise TypeError("Side takes a Results (load_results, or Results.from_dict for a "
                            f"document in memory), not {type(self.doc).__name__}")

    @property
    def control(self) -> str:
        return self.doc.control

    @property
    def host_key(self) -> str | None:
        return self.doc.host.key


@dataclass(frozen=True)
class Settings:
    floor: float = defaults.FLOOR
    k: float = defaults.K
    alert: float | None = None  # absolute alert level; default ALERT_FACTOR x t per case
    confidence: float = defaults.CONFIDENCE
    fdr: float = defaults.FDR
    resamples: int = defaults.RESAMPLES
    seed: int = defaults.SEED
    force: bool = False
    instructions_threshold: float = defaults.INSTRUCTIONS_THRESHOLD
    # --target-mde: the detectable change every case should reach (a fraction); the
    # floor is then half of it (target_settings), and a case that misses it is named.
    target_mde: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.confidence < 1.0:
            raise CompareError("--confidence must be between 0 and 1, e.g. 0.95")
        if not 0.0 < self.fdr < 1.0:
            raise CompareError("--fdr must be between 0 and 1, e.g. 0.05")
        # `not` of the wanted comparison: NaN fails it too (and inf is no setting).
        if not (0.0 <= self.floor < math.inf and 0.0 < self.k < math.inf):
            raise CompareError("--floor must be >= 0 and --k > 0, e.g. --floor 0.01 --k 2")
        if self.alert is not None and not 0.0 < self.alert < math.inf:
            raise CompareError("--alert is a fractional change > 0, e.g. 0.10 for 10 %")
        if self.target_mde is not None and not 0.0 < self.target_mde < 1.0:
            raise CompareError("--target-mde is a percentage between 0 and 100, e.g. 1%")
        if self.resamples < defaults.MIN_RESAMPLES:
            raise CompareError(
                f"--resamples must be at least {defaults.MIN_RESAMPLES} for stable 95 % intervals"
            )


# A field that older files lack and that JSON leaves out when None (instead of null).
_OPTIONAL = {"omit_none": True}
Interval = tuple[float | None, float | None]


@dataclass(frozen=True)
class CaseRow:
    case: str
    verdict: str
    emoji: str
    reason: str
    base_ns: float | None
    pr_ns: float | None
    change: float | None
    ci: Interval
    threshold: float
    rounds: int
    unquiet: int
    control_drift: float | None
    drift_exceeds_threshold: bool = False
    p: float | None = None
    q: float | None = None
    significant: bool = False
    alert: float = math.nan
    noise: float = math.nan
    noise_source: str = "-"
    # The confidence of `ci`: the run's, or for a selected case (⚠️ 🔴 🟢) the
    # Benjamini-Yekutieli FCR-adjusted level 1 - R x fdr / m. `p` and `q` are for the
    # interval null "within +-threshold", not for "no change".
    ci_level: float | None = None
    # A ⚠️ that all rounds would make 🔴, held back by the idle gate; None: an older
    # file that did not say (findings.held_back_by_gate then judges from the change).
    held_back: bool | None = field(default=None, metadata=_OPTIONAL)
    # Two runs: how much longer the PR run's ORT control took a Run than the base run's
    # (negative: less); beyond CONTROL_SHIFT_LIMIT either way, see across_speed_change.
    control_shift: float | None = None
    family: str | None = None
    rerun_errors: tuple[str, ...] = ()  # re-runs that failed (compare-commits)
    # Exact change in instructions per Run (when both sides counted them), and whether it
    # reaches --instructions-threshold.
    instructions_change: float | None = None
    instructions_flag: bool = False
    # The smallest slowdown this run would have flagged (⚠️ or 🔴) with 95 % probability
    # (verdicts.detectable_change); None for a case not judged.
    detectable: float | None = None
    extra: dict[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True)
class TwinCase:
    change: float | None
    ci: Interval
    se: float | None = None


@dataclass(frozen=True)
class TwinInfo:
    """The run's A/A twin on one side: arm `key` is a second copy of arm `of`."""

    side: str
    of: str
    key: str
    cases: dict[str, TwinCase]
    unmodelled_sd: float | None = None
    # The twin also stood as a second copy of base: each round's PR was compared with
    # the geometric mean of the two (compare.second_replicate).
    replicate: bool = False
    # True: registered from base's library file itself, which every arm of its run loads
    # (not a copy), so its noise leaves out what two libraries' files differ by. Absent
    # for a copy (compare-commits' twin always is), so a comment job older than the key
    # still reads compare.json.
    shared_library: bool | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class BetweenRuns:
    """Two runs: the sd (log scale) of what the runs differ by beyond their processes."""

    sd: float | None = None
    source: str = ""


@dataclass(frozen=True)
class SideInfo:
    arm: str
    control: str
    rounds: int | None
    path: str | None = None
    spec: str | None = None
    sha256: str | None = None
    ep_name: str | None = None
    arms: tuple[str, ...] = ()
    created: str | None = None
    git_commit: str | None = None
    host_key: str | None = None
    interrupted: bool = False


@dataclass(frozen=True)
class ProfileInfo:
    path: str | None = None
    host_key: str | None = None
    created: str | None = None
    arm: str | None = None
    rounds: int | None = None
    repeats: int | None = None


@dataclass(frozen=True)
class Overall:
    key: str
    headline: str


@dataclass(frozen=True)
class CounterChange:
    case: str
    counter: str
    base: int | float | None  # an integer count stays one in JSON
    pr: int | float | None
    change: float | None


@dataclass(frozen=True)
class Fit:
    slope_ns: float | None
    intercept_ns: float | None
    slope_ci95: Interval = (None, None)
    intercept_ci95: Interval = (None, None)


@dataclass(frozen=True)
class FitChange:
    change: float | None
    lo: float | None = None
    hi: float | None = None


@dataclass(frozen=True)
class FamilyChange:
    family: str
    depths: tuple[int, ...]
    base: Fit
    pr: Fit
    per_node: FitChange
    per_run: FitChange
    finding: str
    cases: tuple[str, ...] = ()
    threshold: float | None = None


@dataclass(frozen=True)
class Gate:
    """What the idle gate saw over one run (summary.gate_summary)."""

    policy: str | None
    threshold: float | None
    rounds: int
    quiet: int
    unquiet: int
    max_steal: float
    waited_s: float = 0.0
    processes: int = 0
    # Processes that got no pause budget: the run had stopped waiting (sustained load).
    processes_not_waiting: int = 0
    stops_waiting_after_rounds: int | None = None


@dataclass(frozen=True)
class HistoryFinding:
    kind: str  # "inside" or "after"
    case: str
    arm: str
    before: str
    after: str
    direction: str  # "regression" or "improvement"
    change: float | None
    lo: float | None
    hi: float | None
    p: float | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class BaseHistory:
    """compare-commits --history: whether the base commit sits in a change point."""

    commit: str
    machine: str
    measured: bool
    placed_by_git: bool
    series: int
    tested: int
    too_short: int
    min_points: int
    findings: tuple[HistoryFinding, ...]
    change_points: int | None = field(default=None, metadata=_OPTIONAL)
    unplaced: int | None = field(default=None, metadata=_OPTIONAL)
    error: str | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class Rerun:
    rounds: int
    reruns: int | None = field(default=None, metadata=_OPTIONAL)
    # The detectable change of the pass whose ❔ had the case re-run, which its row states
    # at least (verdicts.kept_detectable); None when no ❔ re-ran it, or in a comparison
    # that judged the merged run afresh (`compare`, the action's merge).
    kept: float | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class Comparison:
    """Base vs PR, judged: a row per case and everything said about the run."""

    mode: str  # "same-run" or "separate-runs"
    base: SideInfo
    pr: SideInfo
    settings: Settings
    profile: ProfileInfo | None
    warnings: tuple[str, ...]
    overall: Overall
    counts: dict[str, int]
    cases: tuple[CaseRow, ...]
    only_base: tuple[str, ...]
    only_pr: tuple[str, ...]
    counters: tuple[CounterChange, ...]
    families: tuple[FamilyChange, ...]
    # "run" for one run; "base" and "pr" for two.
    gate: dict[str, Gate]
    # The PR run's host fingerprint (harness/host.py), free form.
    host: dict[str, JsonValue]
    cannot_catch: tuple[str, ...]
    twin: tuple[TwinInfo, ...] = ()
    between_runs: BetweenRuns | None = field(default=None, metadata=_OPTIONAL)
    threads: int | None = None
    base_history: BaseHistory | None = field(default=None, metadata=_OPTIONAL)
    reruns: dict[str, Rerun] | None = field(default=None, metadata=_OPTIONAL)
    schema: str = SCHEMA

    @property
    def same_run(self) -> bool:
        return self.mode == "same-run"

    def row(self, case: str) -> CaseRow:
        """The row of `case` (KeyError if the comparison has none)."""
        for r in self.cases:
            if r.case == case:
                return r
        raise KeyError(case)

    def to_dict(self) -> dict[str, JsonValue]:
        """The JSON document (comparison.schema.json) as Python values; NaN becomes None."""
        out = _encode(self)
        assert isinstance(out, dict)
        return out

    def to_json(self) -> str:
        """compare.json's text: sorted keys, two-space indent, NaN as null."""
        return json_text(self.to_dict())

    @classmethod
    def from_json(cls, doc: Mapping[str, JsonValue] | str, source: str = "comparison"
                  ) -> Comparison:
        """The one way back from compare.json (text, or a document already parsed and,
        for an untrusted one, checked against the schema by reports.bot.artifact).
        Raises CompareError naming the first key that does not fit."""
        if isinstance(doc, str):
            doc = parse_json(doc, source)  # the results' strict parser: no NaN, bounded depth
        if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
            got = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
            raise CompareError(f"{source} is not a comparison of schema {SCHEMA} (it has "
                               f"{got!r}); write it again with this epbench's compare")
        value = _decode(cls, doc, source)
        assert isinstance(value, Comparison)
        return value


def json_text(doc: JsonValue) -> str:
    """Stable JSON for machines: sorted keys, two-space indent, the text as it is."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- JSON codec


def _encode(value: object) -> JsonValue:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, JsonValue] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = _encode(item)
        return out
    if isinstance(value, float):
        return stats.finite(value)
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    raise TypeError(f"{type(value).__name__} has no JSON form")  # a bug here, not input


_HINTS: dict[type, dict[str, object]] = {}


def _hints(cls: type) -> dict[str, object]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _decode(tp: object, value: object, where: str) -> object:
    """`value` (parsed JSON) as type `tp`, recursively; CompareError if it does not fit."""
    if tp is JsonValue or tp is object:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) > 2:
            return value  # JsonValue's own union: taken as it is
        for kind in kinds[:-1]:  # int | float: an int stays one
            try:
                return _decode(kind, value, where)
            except CompareError:
                pass
        return _decode(kinds[-1], value, where)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise _misfit(where, "an object", value)
        hints = _hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise CompareError(f"{where} has the unknown key {unknown[0]!r}; write it again "
                               "with this epbench's compare")
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _decode(hints[f.name], value[f.name], f"{where}.{f.name}")
            elif (f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING):
                raise CompareError(f"{where} lacks {f.name!r}; write it again with this "
                                   "epbench's compare")
        return tp(**kwargs)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise _misfit(where, "a list", value)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise _misfit(where, f"a list of {len(args)}", value)
            return tuple(_decode(a, v, f"{where}[{i}]")
                         for i, (a, v) in enumerate(zip(args, value, strict=True)))
        items = [_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _misfit(where, "an object", value)
        return {str(k): _decode(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if value is None:
            return math.nan  # NaN is written as null
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer of 309 digits or more
                raise _misfit(where, "a number a float can hold", value) from None
        raise _misfit(where, "a number", value)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _misfit(where, "an integer", value)
    if tp is bool or tp is str:
        if isinstance(value, tp):  # type: ignore[arg-type]
            return value
        raise _misfit(where, "a boolean" if tp is bool else "a string", value)
    raise TypeError(f"no JSON reading for {tp!r}")  # a bug in the types above


def _misfit(where: str, expected: str, value: object) -> CompareError:
    return CompareError(f"{where} is {type(value).__name__}, not {expected}; write it again "
                        "with this epbench's compare")
