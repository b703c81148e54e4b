"""Each builder against numpy, run through ORT's CPU EP at small sizes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from epbench.cases import builders


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    # No optimizer: the graph runs as built, so numpy is compared with what we wrote.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)[0]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


UNARY_REFERENCE = {
    "Identity": lambda x, depth: x,
    "Relu": lambda x, depth: np.maximum(x, 0),
}


@pytest.mark.parametrize("op", ["Identity", "Relu", "Sigmoid"])
@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("dynamic", [False, True])
def test_unary_chain_matches_numpy(op: str, depth: int, dynamic: bool) -> None:
    model = builders.chain(op, depth, 16, dynamic)
    onnx.checker.check_model(model, full_check=True)
    assert [node.op_type for node in model.graph.node] == [op] * depth
    rows = 3 if dynamic else 1
    x = np.random.default_rng(1).standard_normal((rows, 16), dtype=np.float32)
    got = _run(model, {"x": x})
    if op == "Sigmoid":
        expected = x.astype(np.float64)
        for _ in range(depth):
            expected = _sigmoid(expected)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, UNARY_REFERENCE[op](x, depth))


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_binary_chain_applies_y_at_every_node(op: str, dynamic: bool) -> None:
    depth = 4
    model = builders.binary_chain(op, depth, 8, dynamic)
    onnx.checker.check_model(model, full_check=True)
    assert [list(node.input)[1] for node in model.graph.node] == ["y"] * depth
    rows = 2 if dynamic else 1
    rng = np.random.default_rng(2)
    x = rng.integers(-8, 9, (rows, 8)).astype(np.float32)
    y = rng.choice(np.array([-2.0, -1.0, 1.0, 2.0], np.float32), (rows, 8))
    got = _run(model, {"x": x, "y": y})
    expected = x + depth * y if op == "Add" else x * y**depth
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 5, 3), (4, 7, 2)])
def test_matmul_matches_numpy(m: int, k: int, n: int) -> None:
    model = builders.matmul(m, k, n, dynamic=False)
    onnx.checker.check_model(model, full_check=True)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    got = _run(model, {"a": a, "b": b})
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=0, atol=1e-5)


def test_dynamic_matmul_accepts_any_batch() -> None:
    model = builders.matmul(1, 6, 4, dynamic=True)
    onnx.checker.check_model(model, full_check=True)
    a_dims = model.graph.input[0].type.tensor_type.shape.dim
    assert a_dims[0].dim_param == "batch"
    rng = np.random.default_rng(4)
    for rows in (1, 5):
        a = rng.uniform(-1, 1, (rows, 6)).astype(np.float32)
        b = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
        assert _run(model, {"a": a, "b": b}).shape == (rows, 4)


def test_models_are_opset21_ir10_and_feed_everything_at_run_time() -> None:
    models = [
        builders.chain("Relu", 2, 4, True),
        builders.binary_chain("Add", 2, 4, False),
        builders.matmul(2, 3, 4, False),
    ]
    for model in models:
        assert model.ir_version == 10
        assert [(o.domain, o.version) for o in model.opset_import] == [("", 21)]
        # Nothing to constant-fold or prepack: all data are graph inputs.
        assert len(model.graph.initializer) == 0
        assert all(node.op_type != "Constant" for node in model.graph.node)


def test_dynamic_chain_declares_symbolic_batch() -> None:
    model = builders.chain("Relu", 1, 4, dynamic=True)
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        assert (dims[0].dim_param, dims[1].dim_value) == ("batch", 4)
    static = builders.chain("Relu", 1, 4, dynamic=False)
    assert [d.dim_value for d in static.graph.input[0].type.tensor_type.shape.dim] == [1, 4]


def test_node_names_are_stable_and_unique() -> None:
    model = builders.chain("Relu", 3, 4, False)
    assert [node.name for node in model.graph.node] == ["relu_0", "relu_1", "relu_2"]


@pytest.mark.parametrize(
    "call",
    [
        lambda: builders.chain("Add", 1, 4, False),
        lambda: builders.chain("Relu", 0, 4, False),
        lambda: builders.binary_chain("Relu", 1, 4, False),
        lambda: builders.binary_chain("Add", 2, -1, False),
        lambda: builders.matmul(1, 0, 4, False),
        lambda: builders.matmul(True, 2, 4, False),
    ],
)
def test_builders_refuse_bad_arguments(call) -> None:
    with pytest.raises(ValueError):
        call()
