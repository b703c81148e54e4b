"""The engine computes what ORT's CPU EP computes, and runs every node itself.

Grid cases, batched MatMul broadcasts, and hypothesis-generated DAGs of the supported ops
(random widths, depths, fan-out, broadcasts, static and symbolic shapes), each compared
with ORT's CPU EP on the same inputs. With ORT's optimizer off, every node of the model
must be assigned to the engine; a DAG with unsupported ops in it must still partition
without a cycle (the fused groups are convex) and give ORT's answer.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epbench import engine
from tests.support.engine_sessions import (
    CPU_EP,
    assert_same_bits,
    cpu_session,
    engine_session,
    nodes_by_ep,
    partitions_by_ep,
)

EP_NAME = "ebe_diff"



def _library() -> str:
    # tests/test_engine_memory.py reruns this module against a sanitizer build.
    return os.environ.get("EBE_TEST_LIBRARY") or engine.library_path()

# Differential tolerance for generated graphs (values stay O(1..1e3) through Mul chains).
RTOL, ATOL = 1e-4, 1e-5
# One IEEE operation per element, as in ORT's CPU EP: the result must be the same bits.
EXACT_OPS = ("Identity", "Relu", "Add", "Mul")
SMOKE_CASES = ["relu_d1_w8", "relu_d100_w8", "relu_d10_w4096_dyn", "identity_d10_w4096",
               "add_d10_w8", "sigmoid_d10_w4096", "matmul_128x128", "matmul_128x128_dyn",
               "matmul_512x512"]


def _run_both(model: bytes, feeds: dict, *, options: dict | None = None,
              opt_level: str = "all", allow_fallback: bool = False):
    engine = engine_session(model, _library(), EP_NAME, options, opt_level,
                            allow_fallback=allow_fallback)
    cpu = cpu_session(model, opt_level)
    return engine, engine.run(None, feeds), cpu.run(None, feeds)


def _grid_cases() -> list[str]:
    try:
        from epbench.cases.grids import load_grid
    except ImportError:  # cases/ not there yet: a fixed smoke list still runs
        return SMOKE_CASES
    return [spec.name for spec in load_grid("default")]


@pytest.mark.parametrize("partition", ["fused", "per_node", "kernel"])
@pytest.mark.parametrize("case_name", _grid_cases())
def test_grid_case_matches_ort_and_runs_every_node(case_name: str, partition: str) -> None:
    from epbench.cases.grids import case_by_name

    spec = case_by_name(case_name)
    built = spec.build()
    session, got, want = _run_both(built.model_bytes, built.inputs,
                                   options={"partition": partition}, opt_level=spec.opt_level)
    assigned = nodes_by_ep(session)
    assert assigned == {EP_NAME: built.n_nodes}
    partitions = partitions_by_ep(session)[EP_NAME]
    assert partitions == (1 if partition == "fused" else built.n_nodes)
    for g, w in zip(got, want, strict=True):
        if spec.op in EXACT_OPS:
            assert_same_bits(g, w)
        assert g.shape == w.shape
        assert float(np.max(np.abs(g - w), initial=0.0)) <= spec.tolerance


def _matmul_model(a_shape: list, b_shape: list) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")], "mm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape)],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return model.SerializeToString()


@pytest.mark.parametrize(("a_shape", "b_shape", "a_feed", "b_feed"), [
    ([3, 4], [4, 5], None, None),
    ([2, 3, 4], [4, 5], None, None),              # batched A, one B: one big GEMM
    ([2, 3, 4], [2, 4, 5], None, None),           # batch against batch
    ([1, 3, 4], [2, 4, 5], None, None),           # A broadcast over B's batch
    ([2, 1, 3, 4], [1, 5, 4, 2], None, None),     # both broadcast
    ([3, 4], [2, 4, 5], None, None),              # rank-2 A against batched B
    (["m", 4], [4, "n"], [6, 4], [4, 7]),         # symbolic m, n
    ([2, "m", 70], [70, 300], [2, 5, 70], None),  # blocks over n and a k tail
    ([1, 300], [300, 600], None, None),           # GEMV over k and n blocks
    ([1, 259], [259, 520], None, None),           # GEMV with B past L2: 4 rows a pass, k tail 3
    ([3], [3], None, None),                       # 1-D x 1-D: a rank-0 dot product
    ([4], [2, 4, 1], None, None),                 # 1-D A: one row, the 1 dropped
    ([1, 2, 4, 3], [3], None, None),              # 1-D B: one column, the 1 dropped
    ([4], [4, 6], None, None),                    # vector x matrix
    ([5, 4], [4], None, None),                    # matrix x vector
    (["k"], ["k"], [0], [0]),                     # empty dot product: 0
    ([2, 0, 4], [4, 3], None, None),              # zero rows
    ([0, 3, 4], [1, 4, 2], None, None),           # a zero batch dim against a broadcast one
])
def test_matmul_shapes_match_ort(a_shape, b_shape, a_feed, b_feed) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal(a_feed or a_shape).astype(np.float32)
    b = rng.standard_normal(b_feed or b_shape).astype(np.float32)
    session, got, want = _run_both(_matmul_model(a_shape, b_shape), {"a": a, "b": b})
    assert nodes_by_ep(session) == {EP_NAME: 1}
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=1e-4)


_SHAPE_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                           suppress_health_check=[HealthCheck.too_slow])


# ---- numpy shapes: every broadcast, 1-D MatMul operands, rank 0 and zero-sized dims -------

DIMS = st.sampled_from([1, 1, 2, 3, 5, 0])


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast by numpy's rules (ranks 0-5, dims 0-5, 1s anywhere)."""
    out = draw(st.lists(DIMS, min_size=0, max_size=5))

    def operand() -> list[int]:
        rank = draw(st.integers(0, len(out)))
        tail = out[len(out) - rank:]
        return [1 if draw(st.booleans()) and d != 0 else d for d in tail]

    return operand(), operand()


@st.composite
def matmul_pair(draw):
    """Two shapes numpy.matmul accepts: 1-D operands, broadcast batch dims, zero dims."""
    m, k, n = draw(DIMS), draw(DIMS), draw(DIMS)
    batch = draw(st.lists(DIMS, min_size=0, max_size=3))

    def batch_of() -> list[int]:
        rank = draw(st.integers(0, len(batch)))
        return [1 if draw(st.booleans()) else d for d in batch[len(batch) - rank:]]

    a = [k] if draw(st.booleans()) else [*batch_of(), m, k]
    b = [k] if draw(st.booleans()) else [*batch_of(), k, n]
    return a, b


def _binary_model(op: str, a_shape: list, b_shape: list, symbolic: bool) -> bytes:
    """op(a, b) with static dims, or every dim symbolic (decided per Run, not at compile)."""
    def declared(shape: list, name: str) -> list:
        return [f"{name}{i}" for i in range(len(shape))] if symbolic else shape

    return _graph([(op, ["a", "b"], "c")],
                  [("a", declared(a_shape, "a")), ("b", declared(b_shape, "b"))], ["c"])


@_SHAPE_SETTINGS
@given(shapes=broadcast_pair(), op=st.sampled_from(["Add", "Mul"]), symbolic=st.booleans(),
       partition=st.sampled_from(["fused", "per_node", "kernel"]), seed=st.integers(0, 2**16))
def test_every_numpy_broadcast_gives_orts_bits(shapes, op, symbolic, partition, seed) -> None:
    a_shape, b_shape = shapes
    rng = np.random.default_rng(seed)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32),
             "b": rng.standard_normal(b_shape).astype(np.float32)}
    model = _binary_model(op, a_shape, b_shape, symbolic)
    session, got, want = _run_both(model, feeds, options={"partition": partition},
                                   opt_level="disabled")
    assert nodes_by_ep(session) == {EP_NAME: 1}
    numpy_op = np.add if op == "Add" else np.multiply
    assert got[0].shape == numpy_op(feeds["a"], feeds["b"]).shape
    assert_same_bits(got[0], want[0])


@_SHAPE_SETTINGS
@given(shapes=matmul_pair(), symbolic=st.booleans(),
       partition=st.sampled_from(["fused", "per_node", "kernel"]), seed=st.integers(0, 2**16))
def test_matmul_is_numpy_matmul(shapes, symbolic, partition, seed) -> None:
    a_shape, b_shape = shapes
    rng = np.random.default_rng(seed)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32),
             "b": rng.standard_normal(b_shape).astype(np.float32)}
    model = _binary_model("MatMul", a_shape, b_shape, symbolic)
    session, got, want = _run_both(model, feeds, options={"partition": partition},
                                   opt_level="disabled")
    assert nodes_by_ep(session) == {EP_NAME: 1}
    reference = np.matmul(feeds["a"].astype(np.float64), feeds["b"].astype(np.float64))
    assert got[0].shape == reference.shape == want[0].shape
    np.testing.assert_allclose(got[0], reference, rtol=RTOL, atol=1e-5)


def test_unsupported_node_between_two_supported_splits_the_partition() -> None:
    """Relu -> Tanh -> Add(relu, tanh): fusing Relu with Add would make a cycle."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="r"),
         helper.make_node("Tanh", ["r"], ["t"], name="t"),
         helper.make_node("Add", ["r", "t"], ["y"], name="a")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    feeds = {"x": np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)}
    session, got, want = _run_both(model.SerializeToString(), feeds, opt_level="disabled",
                                   allow_fallback=True)
    assert nodes_by_ep(session) == {EP_NAME: 2, CPU_EP: 1}
    assert partitions_by_ep(session)[EP_NAME] == 2
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


# ---- generated DAGs ------------------------------------------------------------------------

SUPPORTED = ("Identity", "Relu", "Sigmoid", "Add", "Mul", "MatMul")


@st.composite
def dags(draw, ops: tuple[str, ...] = SUPPORTED):
    """A random DAG over [lead, width] values plus the graph inputs its broadcasts need.

    Returns (model bytes, feeds, number of nodes, number of supported nodes).
    """
    from onnx import TensorProto, helper

    dynamic = draw(st.booleans())
    rows = draw(st.integers(1, 3))
    lead = "batch" if dynamic else rows
    width0 = draw(st.sampled_from([1, 3, 8, 17]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs = [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [lead, width0])]
    feeds = {"x0": rng.uniform(-2, 2, (rows, width0)).astype(np.float32)}
    values: list[tuple[str, int]] = [("x0", width0)]  # (name, width) of [lead, width] values
    values_width = {"x0": width0}
    first_input: dict[str, str] = {}  # value -> first input of the node that produced it
    consumed: set[str] = set()
    nodes = []
    n_supported = 0
    pressure = False
    for i in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(ops))
        out = f"v{i}"
        # Mostly recent values: deep chains with short skip connections, the shape that
        # makes a cycle when a fused group wrongly spans an unsupported node. Reading old
        # values keeps many alive at once (scratch pressure on the slot assignment).
        a_name, a_width = draw(st.sampled_from(values[-3:] if draw(st.booleans()) else values))
        args = [a_name]
        out_width = a_width
        if op in ("Add", "Mul"):
            kind = draw(st.sampled_from(["same", "skip", "row", "row1", "column", "scalar",
                                         "rank0", "self", "self"]))
            same = [v for v in values if v[1] == a_width][-3:]
            last, last_width = values[-1]
            if kind == "skip" and values_width.get(first_input.get(last, "")) == last_width:
                # Join the last value with its producer's input: y = op(f(v), v), the
                # pattern that cycles if f is unsupported and both ends get fused.
                a_name, out_width = last, last_width
                args = [last, first_input[last]]
            elif kind == "self":
                # op(t, t) with t = Relu(a) read by nothing else: t's slot dies at this node
                # and must be given back once; twice, and the two fresh values made next
                # (pressure below) would share it, the second overwriting the first.
                fresh = f"t{i}"
                nodes.append(helper.make_node("Relu", [a_name], [fresh], name=f"n{i}_t"))
                n_supported += 1
                consumed.add(a_name)
                args = [fresh, fresh]
                pressure = True
            elif kind in ("same", "skip"):
                args.append(draw(st.sampled_from(same))[0])
            else:
                extra = f"i{i}"
                # row1: [1, w] (leading 1 before the row); column: [lead, 1] (the strided
                # broadcast, when the values' width is not 1).
                declared = {"row": [a_width], "row1": [1, a_width], "column": [lead, 1],
                            "scalar": [1], "rank0": []}[kind]
                shape = [rows if d == lead else d for d in declared]
                inputs.append(helper.make_tensor_value_info(extra, TensorProto.FLOAT,
                                                            declared))
                feeds[extra] = rng.uniform(-2, 2, shape).astype(np.float32)
                args.append(extra)
            if draw(st.booleans()):
                args.reverse()
        elif op == "Detour":
            # a -> Tanh -> u, and op(a or Relu(a), u): two supported ends joined both
            # directly and through an unsupported node; fusing both ends makes a cycle.
            detour = f"u{i}"
            nodes.append(helper.make_node("Tanh", [a_name], [detour], name=f"n{i}_Tanh"))
            consumed.add(a_name)
            near = a_name
            if draw(st.booleans()):
                near = f"s{i}"
                nodes.append(helper.make_node("Relu", [a_name], [near], name=f"n{i}_Relu"))
                n_supported += 1
                consumed.add(a_name)
            op = draw(st.sampled_from(["Add", "Mul"]))
            args = [near, detour] if draw(st.booleans()) else [detour, near]
        elif op == "MatMul":
            out_width = draw(st.sampled_from([1, 5, 8]))
            extra = f"w{i}"
            inputs.append(helper.make_tensor_value_info(extra, TensorProto.FLOAT,
                                                        [a_width, out_width]))
            feeds[extra] = rng.uniform(-1, 1, (a_width, out_width)).astype(np.float32)
            args.append(extra)
        consumed.update(args)
        nodes.append(helper.make_node(op, args, [out], name=f"n{i}_{op}"))
        n_supported += op in SUPPORTED
        values.append((out, out_width))
        values_width[out] = out_width
        first_input[out] = args[0]
        if pressure:
            # Two fresh values alive at once right after op(t, t) (they read its output, so
            # ORT cannot schedule them before it), then joined.
            pressure = False
            nodes += [helper.make_node("Add", [out, out], [f"p{i}a"], name=f"n{i}_pa"),
                      helper.make_node("Mul", [out, out], [f"p{i}b"], name=f"n{i}_pb"),
                      helper.make_node("Add", [f"p{i}a", f"p{i}b"], [f"p{i}"], name=f"n{i}_p")]
            n_supported += 3
            consumed.update([out, f"p{i}a", f"p{i}b"])
            values.append((f"p{i}", out_width))
            values_width[f"p{i}"] = out_width
    produced = [name for name, _ in values[1:]]
    outputs = [name for name in produced if name not in consumed]
    # Sometimes also expose an intermediate that other nodes read.
    extra_out = draw(st.sampled_from(produced))
    if extra_out not in outputs:
        outputs.append(extra_out)
    graph = helper.make_graph(
        nodes, "dag", inputs,
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return model.SerializeToString(), feeds, len(nodes), n_supported


_DAG_SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                         suppress_health_check=[HealthCheck.too_slow])


@_DAG_SETTINGS
@given(case=dags(), partition=st.sampled_from(["fused", "per_node", "kernel"]))
def test_random_dag_matches_ort_with_every_node_on_the_engine(case, partition) -> None:
    model, feeds, n_nodes, _ = case
    session, got, want = _run_both(model, feeds, options={"partition": partition},
                                   opt_level="disabled")
    assert nodes_by_ep(session) == {EP_NAME: n_nodes}
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@_DAG_SETTINGS
@given(case=dags(ops=EXACT_OPS), partition=st.sampled_from(["fused", "per_node", "kernel"]))
def test_random_dag_of_exact_ops_gives_orts_bits(case, partition) -> None:
    model, feeds, n_nodes, _ = case
    session, got, want = _run_both(model, feeds, options={"partition": partition},
                                   opt_level="disabled")
    assert nodes_by_ep(session) == {EP_NAME: n_nodes}
    for g, w in zip(got, want, strict=True):
        assert_same_bits(g, w)


@_DAG_SETTINGS
@given(case=dags())
def test_random_dag_matches_ort_with_the_optimizer_on(case) -> None:
    model, feeds, _, _ = case
    session, got, want = _run_both(model, feeds, opt_level="all")
    assert set(nodes_by_ep(session)) <= {EP_NAME}
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@_DAG_SETTINGS
@given(case=dags(ops=(*SUPPORTED, "Tanh", "Detour", "Detour")))
def test_random_dag_with_unsupported_ops_partitions_without_cycles(case) -> None:
    model, feeds, n_nodes, n_supported = case
    session, got, want = _run_both(model, feeds, opt_level="disabled", allow_fallback=True)
    assigned = nodes_by_ep(session)
    assert assigned[EP_NAME] == n_supported
    assert assigned[CPU_EP] == n_nodes - n_supported
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_constant_initializers_arrive_as_fused_inputs() -> None:
    """Weights stored in the model (MatMul weight, Add bias) are ordinary fused inputs."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "B"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    feeds = {"x": rng.standard_normal((3, 16)).astype(np.float32)}
    # Optimizer off: ORT would otherwise fold MatMul+Add into a Gemm, which is not claimed.
    session, got, want = _run_both(model.SerializeToString(), feeds, opt_level="disabled")
    assert nodes_by_ep(session) == {EP_NAME: 3}
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=1e-5)


def _graph(nodes: list, inputs: list, outputs: list) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(op, args, [out], name=out) for op, args, out in nodes], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return model.SerializeToString()


def test_a_value_read_twice_by_one_node_frees_its_slot_once() -> None:
    """Mul(y, y) is y's last use; if y's slot went back to the free list twice, p and s
    below would be given the same slot and p would be overwritten before its last read."""
    model = _graph([("Relu", ["x"], "y"), ("Mul", ["y", "y"], "z"), ("Add", ["z", "x"], "p"),
                    ("Add", ["p", "x"], "q"), ("Add", ["q", "x"], "s"), ("Add", ["p", "s"], "t")],
                   [("x", [2, 3])], ["t"])
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    session, got, want = _run_both(model, feeds, opt_level="disabled")
    assert partitions_by_ep(session) == {EP_NAME: 1}
    assert_same_bits(got[0], want[0])


@pytest.mark.parametrize(("outputs", "label"), [
    (["b", "c", "c"], "one tensor named as two graph outputs"),
    (["x", "b", "c"], "a graph input that is also a graph output"),
])
def test_repeated_and_pass_through_graph_outputs(outputs: list, label: str) -> None:
    """ORT 1.32 hands the fused node distinct outputs in both cases (the engine refuses a
    repeated or pass-through fused output rather than copying it)."""
    model = _graph([("Relu", ["x"], "b"), ("Sigmoid", ["b"], "c")], [("x", [3, 4])], outputs)
    feeds = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}
    session, got, want = _run_both(model, feeds, opt_level="disabled")
    assert nodes_by_ep(session) == {EP_NAME: 2}, label
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


# ---- loop fusion ----------------------------------------------------------------------------
# A run of elementwise nodes (MatMul ends one) runs as one loop: each block of elements goes
# through the whole run in registers, and only tensors read after the run (or fused outputs)
# are written. The probe counts, per Run, the loops, the nodes in them and the tensors they
# wrote, so each test below shows the path it meant to take.


def _fused_counts(model: bytes, feeds: dict, name: str) -> tuple[dict, list, list]:
    from epbench.engine.probe import read_counters, reset_counters

    session = engine_session(model, _library(), name, opt_level="disabled")
    session.run(None, feeds)
    reset_counters(_library())
    got = session.run(None, feeds)
    want = cpu_session(model, "disabled").run(None, feeds)
    counters = read_counters(_library(), name)
    assert counters is not None
    return counters, got, want


def _loops(counters: dict) -> tuple[int, int, int]:
    return (counters["fused_loops"], counters["fused_loop_nodes"], counters["fused_loop_stores"])


@pytest.mark.parametrize("rows", [1, 5, 33])
@pytest.mark.parametrize("width", [1, 3, 8, 13, 64, 100])
def test_a_fused_loop_broadcasts_rows_and_scalars_with_orts_bits(rows: int, width: int) -> None:
    """Every way a block reads an operand: whole (with a partial last vector), a row repeated
    with a period that is or is not a multiple of 8, a scalar, and an operand from memory
    ahead of the accumulator (Add(y, r): loading y must not clobber r)."""
    model = _graph([("Relu", ["x"], "r"), ("Add", ["row", "r"], "a"), ("Mul", ["a", "k"], "m"),
                    ("Identity", ["m"], "i"), ("Add", ["i", "z"], "out")],
                   [("x", [rows, width]), ("row", [width]), ("k", []), ("z", [rows, width])],
                   ["out"])
    rng = np.random.default_rng(rows * 1000 + width)
    feeds = {"x": rng.standard_normal((rows, width)).astype(np.float32),
             "row": rng.standard_normal(width).astype(np.float32),
             "k": np.array(1.7, np.float32),
             "z": rng.standard_normal((rows, width)).astype(np.float32)}
    counters, got, want = _fused_counts(model, feeds, "ebe_fuse_bcast")
    assert _loops(counters) == (1, 5, 1)  # one loop, and only the output reaches memory
    assert_same_bits(got[0], want[0])


@pytest.mark.parametrize(("rows", "k"), [(1, 5), (3, 5), (4, 16)])  # a partial vector, a
def test_matmul_ends_a_fused_loop_and_what_it_reads_is_written(rows, k) -> None:  # tail, tiles
    model = _graph([("Relu", ["x"], "r"), ("Mul", ["r", "x"], "p"), ("MatMul", ["p", "w"], "m"),
                    ("Add", ["m", "b"], "a"), ("Relu", ["a"], "out")],
                   [("x", [rows, k]), ("w", [k, 8]), ("b", [8])], ["out"])
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32),
             "w": rng.standard_normal((k, 8)).astype(np.float32),
             "b": rng.standard_normal(8).astype(np.float32)}
    counters, got, want = _fused_counts(model, feeds, "ebe_fuse_mm")
    assert _loops(counters) == (2, 4, 2)  # p (MatMul reads it) and out
    assert counters["nodes_executed"] == 5
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", [[1, 5], [3, 40]])  # one partial vector; tiles and a tail
def test_a_value_read_again_later_in_the_loop_stays_in_a_register(shape) -> None:
    """r is read by the next node (the accumulator) and two nodes on (a block register):
    neither is a store."""
    model = _graph([("Relu", ["x"], "r"), ("Mul", ["r", "y"], "p"), ("Add", ["p", "y"], "q"),
                    ("Add", ["q", "r"], "out")], [("x", shape), ("y", shape)], ["out"])
    rng = np.random.default_rng(6)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in ("x", "y")}
    counters, got, want = _fused_counts(model, feeds, "ebe_fuse_reg")
    assert _loops(counters) == (1, 4, 1)
    assert_same_bits(got[0], want[0])


@pytest.mark.parametrize("shape", [[1, 7], [2, 300]])  # one partial vector; tiles and a tail
def test_more_live_values_than_block_registers_go_through_their_slots(shape) -> None:
    """v0..v8 are all read at the end: nine live values, eight block registers, so one is
    stored to its slot and read back, and the sum is still ORT's."""
    nodes = [("Relu", ["x"], "v0")] + [("Add", [f"v{k - 1}", "y"], f"v{k}") for k in range(1, 10)]
    nodes += [("Add", ["v9", "v0"], "t0")] + [("Add", [f"t{k - 1}", f"v{k}"], f"t{k}")
                                               for k in range(1, 9)]
    model = _graph(nodes, [("x", shape), ("y", shape)], ["t8"])
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in ("x", "y")}
    counters, got, want = _fused_counts(model, feeds, "ebe_fuse_spill")
    assert _loops(counters) == (1, 19, 2)
    assert_same_bits(got[0], want[0])


def test_a_broadcast_operand_made_before_the_loop_outlives_it() -> None:
    """s comes from a MatMul (a slot) and is a repeated row inside the loop; q, which the
    last MatMul reads, is stored. Had s's slot been handed to q when s's last reader in the
    loop was planned, the first tile would overwrite s before the second tile read it."""
    model = _graph([("MatMul", ["a", "b"], "s"), ("Add", ["x", "s"], "p"),
                    ("Mul", ["p", "z"], "q"), ("MatMul", ["q", "w"], "out")],
                   [("a", [1, 4]), ("b", [4, 8]), ("x", [64, 8]), ("z", [64, 8]), ("w", [8, 2])],
                   ["out"])
    rng = np.random.default_rng(8)
    feeds = {"a": rng.standard_normal((1, 4)).astype(np.float32),
             "b": rng.standard_normal((4, 8)).astype(np.float32),
             "x": rng.standard_normal((64, 8)).astype(np.float32),
             "z": rng.standard_normal((64, 8)).astype(np.float32),
             "w": rng.standard_normal((8, 2)).astype(np.float32)}
    counters, got, want = _fused_counts(model, feeds, "ebe_fuse_outlive")
    assert _loops(counters) == (1, 2, 1)
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(("x_shape", "y_shape", "why"), [
    ([1, 8], [4, 8], "the Add makes the run's element count grow from 8 to 32"),
    ([4, 8], [4, 1], "a column needs the general strided broadcast (same count, 32)"),
])
def test_a_run_the_shapes_do_not_let_fuse_runs_node_by_node(x_shape, y_shape, why) -> None:
    model = _graph([("Relu", ["x"], "r"), ("Add", ["r", "y"], "a"), ("Sigmoid", ["a"], "out")],
                   [("x", x_shape), ("y", y_shape)], ["out"])
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "y": rng.standard_normal(y_shape).astype(np.float32)}
    counters, got, want = _fused_counts(model, feeds, "ebe_fuse_no")
    assert _loops(counters) == (0, 0, 0), why
    assert counters["nodes_executed"] == 3
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", ["Relu", "Identity", "Add", "Mul"])
def test_a_fused_loop_keeps_orts_bits_for_signed_zeros_nan_and_infinities(op: str) -> None:
    """Relu in the loop is a max against an opaque zero: -0 must stay -0, NaN stay NaN."""
    special = np.array([-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45, -1.5, 2.5,
                        3.4e38, -3.4e38], np.float32)
    x = np.tile(special, 6)[None, :]  # 72 elements: a tile, a vector and a partial one
    second = ["r", "x"] if op in ("Add", "Mul") else ["r"]
    model = _graph([("Relu", ["x"], "r"), (op, second, "s"), ("Relu", ["s"], "out")],
                   [("x", list(x.shape))], ["out"])
    counters, got, want = _fused_counts(model, {"x": x}, "ebe_fuse_special")
    assert _loops(counters) == (1, 3, 1)
    assert_same_bits(got[0], want[0])
