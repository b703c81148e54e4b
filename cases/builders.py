"""ONNX builders for the synthetic cases: unary chains, binary chains, MatMul.

Every model is opset 21, IR version 10, and has no initializers: all data
arrives at run time, so no EP can fold constants or prepack weights.
Node names (`relu_0`, `relu_1`, ...) are stable so that an assignment
failure can name the node that fell back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

OPSET = 21
IR_VERSION = 10
UNARY_OPS = ("Identity", "Relu", "Sigmoid")
BINARY_OPS = ("Add", "Mul")
BATCH_DIM = "batch"  # the symbolic leading dimension of every dynamic case


def _leading_dim(rows: int, dynamic: bool) -> int | str:
    return BATCH_DIM if dynamic else rows


def _check_positive(**sizes: int) -> None:
    for what, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{what} must be a positive integer, got {value!r}")


def _model(nodes: list, inputs: list, outputs: list, graph_name: str) -> onnx.ModelProto:
    from onnx import helper

    graph = helper.make_graph(nodes, graph_name, inputs, outputs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        # A fixed producer and no version string: the serialized bytes (and so a
        # case's definition hash) do not change when onnx is upgraded.
        producer_name="epbench",
    )
    return model


def _chain_tensor_names(depth: int) -> list[str]:
    """Names of the values flowing along a chain: x, t1, ..., t{depth-1}, out."""
    return ["x"] + [f"t{i}" for i in range(1, depth)] + ["out"]


def chain(op: str, depth: int, width: int, dynamic: bool) -> onnx.ModelProto:
    """A chain of `depth` unary `op` nodes over `x` of shape [1|batch, width]."""
    from onnx import TensorProto, helper

    if op not in UNARY_OPS:
        raise ValueError(f"unary chain op must be one of {UNARY_OPS}, got {op!r}")
    _check_positive(depth=depth, width=width)
    shape = [_leading_dim(1, dynamic), width]
    names = _chain_tensor_names(depth)
    nodes = [
        helper.make_node(op, [names[i]], [names[i + 1]], name=f"{op.lower()}_{i}")
        for i in range(depth)
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
        f"{op.lower()}_chain",
    )


def binary_chain(op: str, depth: int, width: int, dynamic: bool) -> onnx.ModelProto:
    """`depth` binary `op` nodes; node i computes op(previous, y) with `y` a runtime input."""
    from onnx import TensorProto, helper

    if op not in BINARY_OPS:
        raise ValueError(f"binary chain op must be one of {BINARY_OPS}, got {op!r}")
    _check_positive(depth=depth, width=width)
    shape = [_leading_dim(1, dynamic), width]
    names = _chain_tensor_names(depth)
    nodes = [
        helper.make_node(op, [names[i], "y"], [names[i + 1]], name=f"{op.lower()}_{i}")
        for i in range(depth)
    ]
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, shape),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
        f"{op.lower()}_chain",
    )


def matmul(m: int, k: int, n: int, dynamic: bool) -> onnx.ModelProto:
    """One MatMul of `a` [m|batch, k] by `b` [k, n], both fed at run time."""
    from onnx import TensorProto, helper

    _check_positive(m=m, k=k, n=n)
    rows = _leading_dim(m, dynamic)
    return _model(
        [helper.make_node("MatMul", ["a", "b"], ["out"], name="matmul_0")],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, k]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [rows, n])],
        "matmul",
    )
