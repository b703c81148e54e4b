"""`epbench conformance`: ONNX's node test cases through ORT with an arm's EP.

The engine must claim and pass every float32 single-node case of its six ops in every
partition mode; a crash or hang costs its case only; wrong output is a failure with its
largest error; an unknown --op is one line listing the ops that have cases.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.errors import EXIT_CASE_FAILED, EpbenchError
from epbench.harness.conformance import (
    CPU_EP,
    CaseResult,
    ConformanceResult,
    DataSetResult,
    compare,
    load_cases,
    render_markdown,
    render_text,
    run_case,
)
from epbench.workflows.conformance import run_conformance

pytestmark = pytest.mark.slow

ENGINE_OPS = ("Identity", "Relu", "Sigmoid", "Add", "Mul", "MatMul")


def _float32_single_node(case) -> bool:
    import onnx

    model = onnx.load_from_string(case.model)
    return len(model.graph.node) == 1 and model.graph.node[0].op_type == case.op and all(
        isinstance(x, np.ndarray) and x.dtype == np.float32
        for inputs, _ in case.data_sets for x in inputs)


# ---- compare ----------------------------------------------------------------------------------

def test_compare_is_numpy_isclose_with_the_largest_error() -> None:
    want = np.array([1.0, 2.0, 3.0], np.float32)
    near = compare(want + np.float32(1e-4), want, 1e-3, 1e-7)
    assert near == (True, pytest.approx(1e-4, rel=1e-3))
    ok, error = compare(want + np.array([0, 0, 0.5], np.float32), want, 1e-3, 1e-7)
    assert (ok, error) == (False, pytest.approx(0.5))


@pytest.mark.parametrize(("got", "want", "ok"), [
    ([np.nan, 1.0], [np.nan, 1.0], True),      # NaN meets NaN
    ([np.nan, 1.0], [0.0, 1.0], False),        # NaN where a number is expected
    ([np.inf, 1.0], [np.inf, 1.0], True),
    ([-np.inf, 1.0], [np.inf, 1.0], False),    # the wrong infinity
    ([1e30, 1.0], [np.inf, 1.0], False),       # a finite value for an infinity
])
def test_compare_special_values(got, want, ok) -> None:
    result, error = compare(np.array(got, np.float32), np.array(want, np.float32), 1e-3, 1e-7)
    assert result is ok
    assert (error == 0.0) if ok else math.isinf(error)


def test_compare_shape_type_and_sequences() -> None:
    assert compare(np.zeros((2, 3)), np.zeros((3, 2)), 1e-3, 0) == (False, math.inf)
    assert compare(np.array([1, 2]), np.array([1, 2]), 0, 0) == (True, 0.0)
    assert compare(np.array([1, 3]), np.array([1, 2]), 0, 0) == (False, math.inf)
    assert compare([np.ones(2), np.ones(3)], [np.ones(2), np.ones(3)], 0, 0)[0]
    assert not compare([np.ones(2)], [np.ones(2), np.ones(3)], 0, 0)[0]
    assert compare(None, None, 0, 0) == (True, 0.0)


# ---- selecting cases --------------------------------------------------------------------------

def test_cases_are_selected_by_the_op_they_test() -> None:
    names = {c.name: c.op for c in load_cases(("MatMul", "Relu", "Identity", "Clip"))}
    assert {"test_matmul_1d_1d", "test_matmul_bcast", "test_relu", "test_identity"} <= set(names)
    assert names["test_relu_expanded_ver18"] == "Relu"  # the function body tests Relu too
    # An expanded Clip whose body is one Identity node still tests Clip.
    assert names["test_clip_default_inbounds_expanded"] == "Clip"
    assert names["test_identity"] == "Identity"


@pytest.mark.parametrize(("op", "suggestion"), [
    ("relu", "did you mean --op Relu?"),
    ("Reluu", "did you mean --op Relu"),
    ("matmul", "did you mean --op MatMul?"),
    ("Xyzzy", "op names are ONNX's, case-sensitive (Relu, MatMul)"),
])
def test_unknown_op_is_one_line_suggesting_the_op_meant(op: str, suggestion: str) -> None:
    result = CliRunner().invoke(cli, ["conformance", "--arm", "engine", "--op", op])
    assert result.exit_code == 1
    message = result.output.strip()
    assert "\n" not in message
    assert f"--op {op}: no ONNX node test case tests it; {suggestion}" in message
    assert " Abs, " not in message  # no list of every op


# ---- the engine passes all of it --------------------------------------------------------------

def _engine() -> str:
    import os

    # `make asan` points EBE_TEST_LIBRARY at the sanitizer build (the workers inherit the
    # preloaded libasan with the environment).
    library = os.environ.get("EBE_TEST_LIBRARY")
    return f"engine@{library}" if library else "engine"


@pytest.mark.parametrize("partition", ["fused", "per_node", "kernel"])
def test_engine_claims_and_passes_every_float32_case_of_its_ops(partition: str) -> None:
    result = run_conformance(f"{_engine()}:partition={partition},name=ebe_conf_{partition}",
                             ENGINE_OPS)
    by_name = {c.name: c for c in result.cases}
    float32 = [c for c in load_cases(ENGINE_OPS) if _float32_single_node(c)]
    assert len(float32) >= 16  # every op, the broadcasts, the 1-D MatMuls:
    assert {"test_matmul_1d_1d", "test_matmul_1d_3d", "test_matmul_4d_1d", "test_add_bcast",
            "test_mul_bcast", "test_identity", "test_sigmoid", "test_relu"} <= {
        c.name for c in float32}
    assert {c.name: by_name[c.name].status for c in float32} == {
        c.name: "passed" for c in float32}
    assert all(by_name[c.name].nodes_on_ep == 1 for c in float32)
    # The rest are other types (int Add/Mul, sequences, optionals), or function bodies
    # made of other ops: ORT runs them; nothing fails or crashes.
    assert result.counts()["failed"] == result.counts()["crashed"] == 0
    assert result.exit_code == 0


@pytest.mark.parametrize("partition", ["fused", "per_node"])
def test_engine_nodes_inside_subgraphs_keep_the_model_valid(partition: str) -> None:
    """ORT inlines SequenceMap's function body into a Loop whose body does not import the
    EP's domain: a compiled partition there made session creation fail. Inside a subgraph
    the engine claims registered kernels, in every mode, and the cases pass on it."""
    result = run_conformance(
        f"{_engine()}:partition={partition},name=ebe_conf_sub_{partition}", ("SequenceMap",))
    status = {c.name: c.status for c in result.cases}
    # Every case claims an Identity or Add in the Loop body, except the two that only take
    # shapes (Shape is no op of the engine's).
    unclaimed = {"test_sequence_map_extract_shapes", "test_sequence_map_extract_shapes_expanded"}
    assert len(status) == 12
    assert status == {name: "not_claimed" if name in unclaimed else "passed" for name in status}
    assert result.exit_code == 0


# ---- failures and crashes ---------------------------------------------------------------------

def _faulty(monkeypatch, fault: str) -> None:
    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",
                        "tests.support.conformance_faults")
    monkeypatch.setenv("EPBENCH_CONFORMANCE_FAULT", fault)


@pytest.mark.parametrize("signame", ["SIGSEGV", "SIGABRT"])
def test_a_crash_costs_its_case_only(monkeypatch, signame: str) -> None:
    _faulty(monkeypatch, f"crash:test_sigmoid_example:{signame}")
    result = run_conformance("engine:name=ebe_conf_crash", ("Sigmoid", "Relu"))
    status = {c.name: c.status for c in result.cases}
    assert status["test_sigmoid_example"] == "crashed"
    assert signame in next(c.message for c in result.cases if c.status == "crashed")
    # Cases before and after it ran in their workers and passed.
    assert status["test_sigmoid"] == status["test_relu"] == "passed"
    assert result.exit_code == EXIT_CASE_FAILED


def test_a_hung_case_is_killed_and_reported_crashed(monkeypatch) -> None:
    _faulty(monkeypatch, "hang:test_relu")
    # A worker's start-up has its own allowance (STARTUP_TIMEOUT_S); a case of these ops
    # took 1 ms, a worker's first one (its import of onnx) 0.05 s, 0.16 s with both cores
    # busy.
    result = run_conformance("engine:name=ebe_conf_hang", ("Relu", "Sigmoid"),
                             case_timeout_s=3)
    status = {c.name: c.status for c in result.cases}
    assert status["test_relu"] == "crashed"
    assert "no result within 3 s" in next(c.message for c in result.cases
                                         if c.name == "test_relu")
    assert status["test_sigmoid"] == "passed"


def test_wrong_output_fails_with_its_largest_error_and_exit_4(monkeypatch) -> None:
    _faulty(monkeypatch, "skew:test_mul_bcast:0.25")
    result = CliRunner().invoke(cli, ["conformance", "--arm", "engine:name=ebe_conf_skew",
                                      "--op", "Mul", "--format", "json"])
    assert result.exit_code == EXIT_CASE_FAILED
    doc = json.loads(result.output)
    case = next(c for c in doc["cases"] if c["name"] == "test_mul_bcast")
    assert case["status"] == "failed"
    assert case["data_sets"][0]["max_abs_error"] == pytest.approx(0.25)
    assert case["cpu_passes"] is True  # ORT alone gets it right: the EP is wrong
    assert doc["summary"]["failed"] == 1
    assert (doc["by_op"]["Mul"]["passed"], doc["by_op"]["Mul"]["failed"]) == (2, 1)


def test_an_infinite_error_is_reported_not_a_crash(monkeypatch) -> None:
    """JSON has no infinity: an output off by inf is a failed data set with a message."""
    _faulty(monkeypatch, "skew:test_relu:inf")
    result = run_conformance("engine:name=ebe_conf_inf", ("Relu",))
    case = next(c for c in result.cases if c.name == "test_relu")
    assert case.status == "failed"
    assert case.data_sets[0].max_abs_error is None
    assert case.data_sets[0].message == "wrong shape, NaN or infinity"


def test_numpy_scalar_inputs_are_fed_as_rank_0_tensors() -> None:
    """CumSum's axis arrives as np.int32(0): ORT's Python API takes only arrays."""
    (case,) = [c for c in load_cases(("CumSum",)) if c.name == "test_cumsum_1d"]
    assert isinstance(case.data_sets[0][0][1], np.generic)
    result = run_case(case, None, CPU_EP, {})
    assert result.status == "passed", result


def test_a_bad_arm_is_the_users_error() -> None:
    with pytest.raises(EpbenchError, match="no option 'partiton'"):
        run_conformance("engine:partiton=kernel", ("Relu",))


# ---- rendering --------------------------------------------------------------------------------

def _result() -> ConformanceResult:
    return ConformanceResult(
        arm="plugin:x", ep_name="X", ep_version="1.0", ops=(),
        versions={"onnx": "1", "onnxruntime": "2"},
        cases=(CaseResult("test_a", "Add", "passed", 1, 1, (DataSetResult(0, "passed", 0.0),)),
               CaseResult("test_b", "Add", "failed", 1, 1,
                          (DataSetResult(0, "passed", 0.0), DataSetResult(1, "failed", 0.5)),
                          cpu_passes=True),
               CaseResult("test_c", "Mul", "failed", 1, 1,
                          (DataSetResult(0, "failed", None, "EP said no"),)),
               CaseResult("test_d", "Relu", "crashed", message="worker killed by SIGSEGV"),
               CaseResult("test_e", "Tanh", "not_claimed", 1, 0)))


def test_text_and_markdown_name_every_failure_per_data_set() -> None:
    for text in (render_text(_result()), render_markdown(_result())):
        assert "test_b [Add] data set 1: largest error 0.5 (ORT's CPU EP alone passes)" in text
        assert "test_c [Mul] data set 0: EP said no" in text
        assert "test_d [Relu]: worker killed by SIGSEGV" in text
        assert "5 case(s): 1 passed, 2 failed, 1 not claimed, 1 crashed, 0 skipped" in text
        assert "1 other op(s)" in text  # Tanh: nothing claimed, not a row of its own
    assert _result().exit_code == EXIT_CASE_FAILED
    assert _result().to_dict()["by_op"]["Add"] == {
        "passed": 1, "failed": 1, "not_claimed": 0, "crashed": 0, "skipped": 0}


def test_the_result_goes_to_out_in_the_format_asked(tmp_path) -> None:
    out = tmp_path / "new" / "relu.json"
    result = CliRunner().invoke(cli, ["conformance", "--arm", "engine", "--op", "Relu",
                                      "--format", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["cases"] and {c["op"] for c in doc["cases"]} == {"Relu"}
    assert f"wrote {out}" in result.output
