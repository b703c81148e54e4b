"""CaseSpec: validation, tolerances, opt levels, inputs, serialization, hashes."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnxruntime as ort
import pytest

from epbench.cases.spec import (
    FLOAT32_EPS,
    MAX_DEPTH,
    SIGMOID_TOLERANCE,
    CaseSpec,
    binary_case,
    chain_case,
    graph_optimization_level,
    matmul_case,
    matmul_tolerance,
)
from epbench.core.errors import CaseError


def _run(built, opt_level: str) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = graph_optimization_level(opt_level)
    session = ort.InferenceSession(
        built.model_bytes, options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, built.inputs)[0]


def test_tolerances_are_exact_for_exact_ops_and_derived_for_the_rest() -> None:
    for op in ("Identity", "Relu"):
        assert chain_case(op, 3, 8).tolerance == 0.0
    for op in ("Add", "Mul"):
        assert binary_case(op, 3, 8).tolerance == 0.0
    assert chain_case("Sigmoid", 3, 8).tolerance == SIGMOID_TOLERANCE
    assert matmul_tolerance(512) == 2 * 512 * 2.0**-23
    assert matmul_case(1, 512, 64).tolerance == matmul_tolerance(512)
    # The bound grows with k only.
    assert matmul_case(1, 1024, 8).tolerance == 2 * matmul_case(1, 512, 8).tolerance
    assert float(np.finfo(np.float32).eps) == FLOAT32_EPS


def test_matmul_tolerance_covers_a_naive_float32_loop() -> None:
    # The worst realistic EP: one float32 accumulator, summed in order.
    spec = matmul_case(2, 1024, 16)
    built = spec.build()
    a, b = built.inputs["a"], built.inputs["b"]
    naive = np.zeros((2, 16), np.float32)
    for i in range(a.shape[1]):
        naive = naive + a[:, i : i + 1] * b[i : i + 1, :]
    error = np.abs(naive - _run(built, spec.opt_level)).max()
    assert 0 < error <= spec.tolerance


def test_identity_runs_unoptimized_and_the_rest_optimized() -> None:
    assert chain_case("Identity", 10, 8).opt_level == "disabled"
    assert chain_case("Relu", 10, 8).opt_level == "all"
    assert binary_case("Add", 10, 8).opt_level == "all"
    assert matmul_case(1, 8, 8).opt_level == "all"
    assert graph_optimization_level("disabled") == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert graph_optimization_level("all") == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    with pytest.raises(ValueError):
        graph_optimization_level("basic")


@pytest.mark.parametrize(
    ("spec", "family"),
    [
        (chain_case("Relu", 10, 8), "relu_w8"),
        (chain_case("Relu", 100, 8, True), "relu_w8_dyn"),
        (chain_case("Relu", 100, 8, True, batch=4), "relu_w8_dyn_b4"),
        (binary_case("Add", 10, 8), "add_w8"),
        (matmul_case(1, 8, 8), None),
    ],
)
def test_family_groups_cases_that_differ_only_in_depth(spec: CaseSpec, family) -> None:
    assert spec.family == family


def test_inputs_are_seeded_and_reproducible() -> None:
    spec = chain_case("Relu", 2, 64)
    first, second = spec.build(), spec.build()
    np.testing.assert_array_equal(first.inputs["x"], second.inputs["x"])
    assert first.inputs["x"].dtype == np.float32
    other_seed = dataclasses.replace(spec, seed=1).build()
    assert not np.array_equal(first.inputs["x"], other_seed.inputs["x"])
    # Relu must have something to clamp.
    assert (first.inputs["x"] < 0).any() and (first.inputs["x"] > 0).any()


def test_dynamic_cases_feed_batch_rows() -> None:
    assert chain_case("Relu", 1, 8, True, batch=3).build().inputs["x"].shape == (3, 8)
    assert chain_case("Relu", 1, 8, True).build().inputs["x"].shape == (1, 8)
    built = matmul_case(4, 16, 8, True).build()
    assert built.inputs["a"].shape == (4, 16) and built.inputs["b"].shape == (16, 8)


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("depth", [7, 200])
def test_binary_inputs_make_the_chain_exact_in_any_order(op: str, depth: int) -> None:
    spec = binary_case(op, depth, 256)
    built = spec.build()
    x = built.inputs["x"].astype(np.float64)
    y = built.inputs["y"].astype(np.float64)
    # The exact real-number result, computed in float64 in closed form: it must be
    # what ORT's float32 node-by-node evaluation produced, bit for bit.
    exact = x + depth * y if op == "Add" else x * y**depth
    got = _run(built, spec.opt_level)
    np.testing.assert_array_equal(got, exact.astype(np.float32))
    assert np.abs(exact).max() > 0
    # No overflow, no underflow into subnormals (where FTZ-mode EPs would differ).
    nonzero = got[built.inputs["x"] != 0]
    assert np.isfinite(got).all() and np.abs(nonzero).min() >= np.finfo(np.float32).tiny
    if op == "Mul":
        # Negative factors make the chain's sign depend on every node.
        assert (built.inputs["y"] < 0).any()


def test_round_trips_through_json() -> None:
    for spec in (
        chain_case("Sigmoid", 3, 8, True, batch=2, seed=5),
        binary_case("Mul", 3, 8),
        matmul_case(8, 16, 4, True),
        CaseSpec(name="model:net", kind="model", path="/x/net.onnx",
                 dims=(("batch", 2), ("seq", 7)), tolerance=1e-4),
    ):
        data = json.loads(json.dumps(spec.to_dict()))
        assert list(data) == sorted(data)
        assert CaseSpec.from_dict(data) == spec


def test_to_dict_is_complete() -> None:
    assert set(chain_case("Relu", 1, 8).to_dict()) == {
        f.name for f in dataclasses.fields(CaseSpec)
    }


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(kind="conv"),
        lambda d: d.update(depth=0),
        lambda d: d.update(name="relu_d2_w8"),  # does not describe the fields
        lambda d: d.update(extra=1),
        lambda d: d.update(tolerance=-1.0),
        lambda d: d.update(tolerance=float("nan")),
        lambda d: d.update(opt_level="basic"),
        lambda d: d.update(op="Add"),  # a chain is unary
        lambda d: d.update(k=4),  # a chain has no k
        lambda d: d.update(dims=[["batch", 1]]),
        lambda d: d.update(batch=2),  # static cases feed one row
        lambda d: d.update(depth=MAX_DEPTH + 1, name=f"relu_d{MAX_DEPTH + 1}_w8"),
        lambda d: d.pop("name"),
    ],
)
def test_from_dict_refuses_damaged_specs(mutate) -> None:
    data = chain_case("Relu", 1, 8).to_dict()
    mutate(data)
    with pytest.raises(CaseError, match="cannot read case spec"):
        CaseSpec.from_dict(data)


def test_dynamic_matmul_feeds_m_rows() -> None:
    with pytest.raises(ValueError, match="batch must equal m"):
        CaseSpec(name="matmul_4x8x8_dyn", kind="matmul", op="MatMul", m=4, k=8, n=8,
                 dynamic=True, batch=1)


def test_definition_hash_tracks_model_and_inputs() -> None:
    spec = chain_case("Relu", 3, 8)
    assert spec.definition_sha256 == spec.build().definition_sha256
    assert spec.definition_sha256 == chain_case("Relu", 3, 8).definition_sha256
    different = {
        chain_case("Relu", 4, 8).definition_sha256,  # model differs
        dataclasses.replace(spec, seed=1).definition_sha256,  # inputs differ
        chain_case("Identity", 3, 8).definition_sha256,
        spec.definition_sha256,
    }
    assert len(different) == 4
    # Tolerance is a judgement about the case, not part of what was measured.
    assert dataclasses.replace(spec, tolerance=1.0).definition_sha256 == spec.definition_sha256


def test_definition_hash_covers_input_shape_not_just_bytes() -> None:
    # Same bytes, different shape: [1, 8] vs [2, 4] must not hash alike.
    built = chain_case("Relu", 1, 8).build()
    reshaped = dataclasses.replace(built, inputs={"x": built.inputs["x"].reshape(2, 4)})
    assert reshaped.definition_sha256 != built.definition_sha256


def test_n_nodes_matches_the_model() -> None:
    for spec in (chain_case("Relu", 7, 8), binary_case("Add", 5, 8), matmul_case(1, 4, 4)):
        import onnx

        model = onnx.load_from_string(spec.build().model_bytes)
        assert spec.n_nodes == spec.build().n_nodes == len(model.graph.node)
