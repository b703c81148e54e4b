"""Proof of what was measured: assignment to the EP under test, and outputs equal to ORT's."""

from __future__ import annotations

import pytest

from epbench.cases.grids import case_by_name
from epbench.harness.arms import parse_arm
from epbench.harness.run_config import RunConfig
from epbench.harness.runner import run

pytestmark = pytest.mark.slow
nxrt = pytest.importorskip("nxrt_ep_cpu")


def _shrink_model(path) -> str:
    """Relu then Shrink: nxrt-ep-cpu takes the Relu but not the Shrink (checked)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
         helper.make_node("Shrink", ["r"], ["y"], name="shrink0")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)
    return str(path)


def _config(specs, tmp_path, **kw) -> RunConfig:
    return RunConfig(cases=tuple(specs), arms=(parse_arm("plugin:nxrt_ep_cpu"),), rounds=2,
                     block_target_ms=0.2, max_block_iters=10, warmup_ms=1.0,
                     gate_policy="off", out_dir=tmp_path, **{"processes": 1, **kw})


def test_partial_assignment_fails_the_case_naming_the_node(tmp_path):
    from epbench.cases.spec import model_case

    spec = model_case(_shrink_model(tmp_path / "shrink.onnx"), {"batch": 2})
    doc = run(_config([spec], tmp_path / "out")).to_dict()
    case = doc["cases"]["model:shrink"]
    assert case["status"] == "failed"
    assert "1 node(s) did not run on cpu_ep: shrink0 (Shrink) on CPUExecutionProvider" in (
        case["error"])
    assert "--allow-fallback" in case["error"]
    assert case["rounds"] == []  # nothing unproven was timed
    # The control's facts were found before the failure and are kept.
    assert case["arms"]["ort"]["nodes_by_ep"] == {"CPUExecutionProvider": 2}


def test_allow_fallback_records_the_split(tmp_path):
    from epbench.cases.spec import model_case

    spec = model_case(_shrink_model(tmp_path / "shrink.onnx"), {"batch": 2})
    doc = run(_config([spec], tmp_path / "out", allow_fallback=True)).to_dict()
    case = doc["cases"]["model:shrink"]
    assert case["status"] == "ok", case["error"]
    assert case["arms"]["plugin:nxrt_ep_cpu"]["nodes_by_ep"] == {
        "cpu_ep": 1, "CPUExecutionProvider": 1}
    assert case["arms"]["ort"]["nodes_by_ep"] == {"CPUExecutionProvider": 2}
    assert len(case["rounds"]) == 2


def test_output_mismatch_fails_the_case_with_the_largest_error(tmp_path, monkeypatch):
    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",
                        "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "wrong:plugin:nxrt_ep_cpu:0.25")
    doc = run(_config([case_by_name("relu_d10_w8")], tmp_path / "out")).to_dict()
    case = doc["cases"]["relu_d10_w8"]
    assert case["status"] == "failed"
    assert "arm 'plugin:nxrt_ep_cpu': outputs differ" in case["error"]
    assert "largest error 0.25 > tolerance 0" in case["error"]
    assert case["rounds"] == []
    assert case["arms"]["plugin:nxrt_ep_cpu"]["max_abs_error"] == 0.25
    assert case["arms"]["plugin:nxrt_ep_cpu"]["verified"] is False


def test_outputs_are_judged_against_the_control_whatever_the_arm_order(tmp_path, monkeypatch):
    # The plugin arm is named first; the reference must still be ORT's outputs.
    monkeypatch.setattr("epbench.harness.worker_process.WORKER_MODULE",
                        "tests.support.faulty_worker")
    monkeypatch.setenv("EPBENCH_TEST_FAULT", "wrong:plugin:nxrt_ep_cpu:0.5")
    config = RunConfig(cases=(case_by_name("relu_d1_w8"),),
                       arms=(parse_arm("plugin:nxrt_ep_cpu"), parse_arm("ort")), rounds=2,
                       block_target_ms=0.2, max_block_iters=10, warmup_ms=1.0,
                       gate_policy="off", out_dir=tmp_path / "out")
    case = run(config).to_dict()["cases"]["relu_d1_w8"]
    assert "arm 'plugin:nxrt_ep_cpu': outputs differ" in case["error"]
    assert case["arms"]["ort"]["verified"] is True


def test_identity_chain_executes_every_node_on_every_arm(tmp_path):
    doc = run(_config([case_by_name("identity_d10_w4096")], tmp_path / "out")).to_dict()
    arms = doc["cases"]["identity_d10_w4096"]["arms"]
    assert {k: a["nodes_executed"] for k, a in arms.items()} == {
        "ort": 10, "plugin:nxrt_ep_cpu": 10}
