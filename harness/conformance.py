"""Conformance: ONNX's own node test cases, run through ORT with an arm's EP.

``onnx.backend.test.case.node.collect_testcases()`` gives, for every operator, models
with inputs, expected outputs and tolerances. Each selected case is run in a worker
process (the run's worker, mode ``conformance``) with the arm's EP registered and ORT's
CPU EP allowed to take what the EP declines; ORT's record of which EP ran which node
says whether the EP claimed the case. Each case ends as one of:

- ``passed``: the EP ran at least one of its nodes and every data set matched;
- ``failed``: a data set's outputs differ beyond the case's tolerance (the largest
  error is kept), or ORT or the EP raised (the message is kept);
- ``not_claimed``: the EP took none of its nodes (ORT ran it, not judged);
- ``crashed``: the worker died or hung on it (the case costs itself only: a new worker
  carries on with the next case);
- ``skipped``: ORT cannot run or pass it even without the EP (too new an opset, a type
  its Python API cannot feed, a result of its own CPU EP out of tolerance): not the EP's.

This module is the worker's side (select, run and judge cases) and the result with its
renderings; epbench.workflows.conformance runs the workers (the parent never loads the EP
library: harness.runner's rule). Library code only: it returns a ConformanceResult; the
command prints it.
"""

from __future__ import annotations

import functools
import math
import pickle
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from epbench.core.errors import EXIT_CASE_FAILED, EXIT_OK, EpbenchError
from epbench.harness.sessions import CPU_EP, nodes_by_ep, session_options

STATUSES = ("passed", "failed", "not_claimed", "crashed", "skipped")
# The EP sees the nodes as the test wrote them: no fusion, no constant folding.
OPT_LEVEL = "disabled"
# Seconds a case may run silent (a worker's start-up gets at least
# worker_process.STARTUP_TIMEOUT_S).
DEFAULT_CASE_TIMEOUT_S = 60.0
# Suffixes of the function-expanded variants: their op is the un-expanded twin's.
_EXPANDED = ("_expanded_ver18", "_expanded")


@dataclass(frozen=True)
class NodeCase:
    """One ONNX node test case in a form that pickles (for the worker)."""

    name: str
    op: str
    model: bytes
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float
    atol: float


@dataclass(frozen=True)
class DataSetResult:
    index: int
    status: str  # passed | failed
    max_abs_error: float | None = None  # None when it raised, inf on a shape/NaN mismatch
    message: str | None = None


@dataclass(frozen=True)
class CaseResult:
    name: str
    op: str
    status: str
    nodes: int = 0
    nodes_on_ep: int = 0
    data_sets: tuple[DataSetResult, ...] = ()
    message: str | None = None
    # For a failed case: does ORT's CPU EP alone pass it? (None when not checked.)
    cpu_passes: bool | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


@dataclass(frozen=True)
class ConformanceResult:
    arm: str
    ep_name: str | None
    ep_version: str | None
    ops: tuple[str, ...]  # as asked (empty: every op)
    versions: dict[str, str]
    cases: tuple[CaseResult, ...] = field(default_factory=tuple)

    def counts(self) -> Counter:
        return Counter(c.status for c in self.cases)

    def by_op(self) -> dict[str, Counter]:
        """Per op, how many cases ended in each status (ops sorted)."""
        table: dict[str, Counter] = {}
        for case in self.cases:
            table.setdefault(case.op, Counter())[case.status] += 1
        return dict(sorted(table.items()))

    @property
    def exit_code(self) -> int:
        counts = self.counts()
        return EXIT_CASE_FAILED if counts["failed"] or counts["crashed"] else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["summary"] = {s: self.counts()[s] for s in STATUSES}
        doc["by_op"] = {op: {s: c[s] for s in STATUSES} for op, c in self.by_op().items()}
        return doc


# ---- selecting cases (parent) ---------------------------------------------------------------


def case_op(name: str, op_types: list[str], single_op: dict[str, str]) -> str:
    """The op a case tests: an expanded variant's un-expanded twin's, else its one node's."""
    for suffix in _EXPANDED:
        if name.endswith(suffix) and name[: -len(suffix)] in single_op:
            return single_op[name[: -len(suffix)]]
    if len(op_types) == 1:
        return op_types[0]
    return "+".join(sorted(set(op_types))) or "(no node)"


@functools.lru_cache(maxsize=1)
def _all_cases() -> tuple[NodeCase, ...]:
    """Every node test case (collecting them runs ONNX's reference code: ~10 s, once)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference implementations warn on inf/NaN
        from onnx.backend.test.case.node import collect_testcases

        found = [c for c in collect_testcases() if c.kind == "node"]
    single_op = {c.name: c.model.graph.node[0].op_type for c in found
                 if len(c.model.graph.node) == 1}
    return tuple(
        NodeCase(c.name, case_op(c.name, [n.op_type for n in c.model.graph.node], single_op),
                 c.model.SerializeToString(), [(list(i), list(o)) for i, o in c.data_sets],
                 c.rtol, c.atol)
        for c in found)


def _suggest_op(op: str, known: list[str]) -> str:
    """The remedy for an unknown --op: the op it most likely means, not all ~150 of them."""
    import difflib

    same_case = [k for k in known if k.lower() == op.lower()]
    close = same_case or difflib.get_close_matches(op, known, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(f"--op {c}" for c in close) + "?"
    return ("op names are ONNX's, case-sensitive (Relu, MatMul); `epbench conformance "
            "--arm ARM` with no --op runs every op that has cases")


def load_cases(ops: tuple[str, ...] = ()) -> list[NodeCase]:
    """ONNX's node test cases, those testing one of ``ops`` (all when empty).

    An op with no case is the user's mistake: EpbenchError suggests the op meant.
    """
    cases = _all_cases()
    known = sorted({c.op for c in cases if "+" not in c.op})
    unknown = [op for op in ops if op not in known]
    if unknown:
        raise EpbenchError(f"--op {unknown[0]}: no ONNX node test case tests it; "
                           + _suggest_op(unknown[0], known))
    return [c for c in cases if not ops or c.op in ops]


# ---- running cases (worker) -----------------------------------------------------------------


def compare(got: Any, want: Any, rtol: float, atol: float) -> tuple[bool, float]:
    """(within tolerance, largest absolute error) of one output, numpy.isclose's rule.

    NaN must meet NaN and an infinity the same infinity; a shape or type mismatch is an
    infinite error. Sequences compare element by element.
    """
    if want is None or got is None:
        return (got is None and want is None), (0.0 if got is None and want is None else math.inf)
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return False, math.inf
        worst, ok = 0.0, True
        for g, w in zip(got, want, strict=True):
            item_ok, error = compare(g, w, rtol, atol)
            ok, worst = ok and item_ok, max(worst, error)
        return ok, worst
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False, math.inf
    if want.dtype.kind not in "fc" or got.dtype.kind not in "fc":
        same = bool(np.array_equal(got, want))
        return same, 0.0 if same else math.inf
    with np.errstate(all="ignore"):
        g, w = got.astype(np.float64), want.astype(np.float64)
        close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        finite = np.isfinite(g) & np.isfinite(w)
        error = float(np.max(np.abs(g - w), where=finite, initial=0.0))
        if not np.all(close | finite):  # NaN or an infinity against anything else
            error = math.inf
    return bool(np.all(close)), error


def _message(exc: BaseException) -> str:
    text = str(exc).split(" : ", 1)[-1].strip()
    return " ".join(text.split())[:500] or type(exc).__name__


def _feeds(model: Any, inputs: list[Any]) -> dict[str, Any]:
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    # A numpy scalar (np.int32(3)) is a rank-0 tensor to ONNX; ORT's Python API wants it as
    # an array.
    return {n: np.asarray(v) if isinstance(v, np.generic) else v
            for n, v in zip(names, inputs, strict=False) if v is not None}


def _run_data_sets(session: Any, model: Any, case: NodeCase) -> list[DataSetResult]:
    results = []
    for index, (inputs, outputs) in enumerate(case.data_sets):
        try:
            got = session.run(None, _feeds(model, inputs))
        except Exception as exc:  # ORT's or the EP's error is this data set's result
            results.append(DataSetResult(index, "failed", None, _message(exc)))
            continue
        ok, worst = True, 0.0
        for g, w in zip(got, outputs, strict=False):
            item_ok, error = compare(g, w, case.rtol, case.atol)
            ok, worst = ok and item_ok, max(worst, error)
        if len(got) != len(outputs):
            ok, worst = False, math.inf
        if math.isinf(worst):  # JSON has no infinity: None and a message say it instead
            results.append(DataSetResult(index, "failed", None, "wrong shape, NaN or infinity"))
        else:
            results.append(DataSetResult(index, "passed" if ok else "failed", worst))
    return results


def run_case(case: NodeCase, registration: Any, ep_name: str,
             ep_options: dict[str, str]) -> CaseResult:
    """Run one case with the EP (CPU fallback allowed); inside a worker only."""
    # Imported here, not with the module: the timed workers import this module too, and
    # onnx's import was most of a worker's start-up (cases.built).
    import onnx

    model = onnx.load_from_string(case.model)

    def cpu_session() -> Any:
        return ort.InferenceSession(case.model, session_options(OPT_LEVEL, 1, None, {}, True),
                                    providers=[CPU_EP])

    try:
        so = session_options(OPT_LEVEL, 1, registration, ep_options, True)
        session = ort.InferenceSession(case.model, so, providers=None if registration
                                       else [CPU_EP])
    except Exception as exc:
        try:
            cpu_session()
        except Exception as cpu_exc:
            return CaseResult(case.name, case.op, "skipped",
                              message=f"ORT cannot run it: {_message(cpu_exc)}")
        return CaseResult(case.name, case.op, "failed", cpu_passes=True,
                          message=f"session creation failed: {_message(exc)}")
    by_ep = nodes_by_ep(session)
    nodes, on_ep = sum(by_ep.values()), by_ep.get(ep_name, 0)
    if on_ep == 0:
        return CaseResult(case.name, case.op, "not_claimed", nodes, 0)
    data_sets = _run_data_sets(session, model, case)
    if all(d.status == "passed" for d in data_sets):
        return CaseResult(case.name, case.op, "passed", nodes, on_ep, tuple(data_sets))
    try:
        cpu_results = _run_data_sets(cpu_session(), model, case)
    except Exception as exc:
        cpu_results = [DataSetResult(0, "failed", None, _message(exc))]
    cpu_failed = [d for d in cpu_results if d.status != "passed"]
    if cpu_failed:
        return CaseResult(case.name, case.op, "skipped", nodes, on_ep, tuple(data_sets),
                          message="ORT's CPU EP alone fails it too: "
                                  + _error_text(cpu_failed[0]), cpu_passes=False)
    return CaseResult(case.name, case.op, "failed", nodes, on_ep, tuple(data_sets),
                      cpu_passes=True)


def run_in_worker(worker: Any) -> None:
    """The worker's ``conformance`` mode: one event before and one after each case."""
    arms = worker.setup_arms()
    state = arms[0]
    with open(worker.request["cases_file"], "rb") as fh:
        cases = {c.name: c for c in pickle.load(fh)}
    for name in worker.request["names"]:
        worker.emit({"event": "case_start", "name": name})
        result = run_case(cases[name], state.registration, state.ep_name, state.arm.ep_options)
        worker.emit({"event": "case_result", "result": asdict(result)})


def case_from_dict(data: dict[str, Any]) -> CaseResult:
    """A CaseResult from its asdict() form (the worker's event)."""
    data = dict(data)
    data["data_sets"] = tuple(DataSetResult(**d) for d in data["data_sets"])
    return CaseResult(**data)


# ---- rendering (strings; the command prints them) -------------------------------------------


def _error_text(d: DataSetResult) -> str:
    if d.message is not None:
        return d.message
    if d.max_abs_error is None:
        return "wrong shape, NaN or infinity"
    return f"largest error {d.max_abs_error:.3g}"


def _details(case: CaseResult) -> list[str]:
    """One line per failing data set (or the case's message)."""
    lines = []
    note = "" if case.cpu_passes is not True else " (ORT's CPU EP alone passes)"
    if case.cpu_passes is False:
        note = " (ORT's CPU EP alone fails it too)"
    if case.message:
        lines.append(f"{case.name} [{case.op}]: {case.message}{note}")
    for d in case.data_sets:
        if d.status != "passed":
            lines.append(f"{case.name} [{case.op}] data set {d.index}: {_error_text(d)}{note}")
    return lines


def _rows(result: ConformanceResult) -> list[tuple[str, Counter]]:
    """Ops to show: every op asked for, else every op the EP claimed a case of."""
    table = result.by_op()
    if result.ops:
        return list(table.items())
    return [(op, c) for op, c in table.items() if c["passed"] or c["failed"] or c["crashed"]]


def _verdict(result: ConformanceResult) -> str:
    counts = result.counts()
    claimed = counts["passed"] + counts["failed"] + counts["crashed"]
    return (f"{len(result.cases)} case(s): {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['not_claimed']} not claimed, {counts['crashed']} crashed, "
            f"{counts['skipped']} skipped; the EP claimed {claimed}")


def render_text(result: ConformanceResult) -> str:
    head = (f"conformance of {result.arm} (EP {result.ep_name}"
            f"{' ' + result.ep_version if result.ep_version else ''}) on ONNX node test cases "
            f"(onnx {result.versions['onnx']}, onnxruntime {result.versions['onnxruntime']})")
    lines = [head, ""]
    rows = _rows(result)
    width = max([len("op"), *(len(op) for op, _ in rows)])
    lines.append(f"{'op':<{width}}  cases  passed  failed  not claimed  crashed  skipped")
    for op, c in rows:
        lines.append(f"{op:<{width}}  {sum(c.values()):>5}  {c['passed']:>6}  {c['failed']:>6}  "
                     f"{c['not_claimed']:>11}  {c['crashed']:>7}  {c['skipped']:>7}")
    hidden = len(result.by_op()) - len(rows)
    if hidden:
        lines.append(f"({hidden} other op(s): no case claimed by the EP; ORT ran them)")
    for status in ("failed", "crashed"):
        bad = [line for c in result.cases if c.status == status for line in _details(c)]
        if bad:
            lines += ["", f"{status}:", *(f"  {line}" for line in bad)]
    lines += ["", _verdict(result)]
    return "\n".join(lines) + "\n"


def render_markdown(result: ConformanceResult) -> str:
    lines = [f"### Conformance of `{result.arm}` (EP `{result.ep_name}`"
             f"{' ' + result.ep_version if result.ep_version else ''})", "",
             f"ONNX node test cases, onnx {result.versions['onnx']}, onnxruntime "
             f"{result.versions['onnxruntime']}.", "",
             "| op | cases | passed | failed | not claimed | crashed | skipped |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    rows = _rows(result)
    for op, c in rows:
        lines.append(f"| {op} | {sum(c.values())} | {c['passed']} | {c['failed']} | "
                     f"{c['not_claimed']} | {c['crashed']} | {c['skipped']} |")
    hidden = len(result.by_op()) - len(rows)
    if hidden:
        lines += ["", f"{hidden} other op(s): no case claimed by the EP (ORT ran them)."]
    bad = [line for c in result.cases if c.status in ("failed", "crashed")
           for line in _details(c)]
    if bad:
        lines += ["", "Failed or crashed:", "", *(f"- {line}" for line in bad)]
    lines += ["", _verdict(result) + "."]
    return "\n".join(lines) + "\n"
