"""The engine at run time: concurrent Runs on one session, and bad or odd input.

Bad input (a symbolic dim that conflicts, NaN and infinities, an empty tensor with a zero
dim) must give ORT's error or ORT's result, never a crash, and an engine error must say
what was wrong.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from epbench import engine
from epbench.engine.probe import read_counters, reset_counters
from tests.support.engine_sessions import cpu_session, engine_session

EP_NAME = "ebe_runtime"



def _library() -> str:
    # tests/test_engine_memory.py reruns this module against a sanitizer build.
    return os.environ.get("EBE_TEST_LIBRARY") or engine.library_path()

RUNS_PER_THREAD = 200  # enough overlap on 2 cores that a shared scratch shows up


def _model(nodes: list[tuple[str, list[str], str]], inputs: dict[str, list],
           outputs: list[str]) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(op, args, [out], name=out) for op, args, out in nodes], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return model.SerializeToString()


# Relu -> Add(y) -> MatMul(w) -> Sigmoid over a symbolic batch: several slots, a binary op,
# a GEMM whose m follows the batch.
MIXED = _model([("Relu", ["x"], "r"), ("Add", ["r", "y"], "s"), ("MatMul", ["s", "w"], "m"),
                ("Sigmoid", ["m"], "out")],
               {"x": ["batch", 64], "y": ["batch", 64], "w": [64, 32]}, ["out"])


def _reference(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    m = (np.maximum(x, 0) + y).astype(np.float64) @ w.astype(np.float64)
    return 1.0 / (1.0 + np.exp(-m))


@pytest.mark.parametrize("threads", [4, 9])  # 9 > the scratch pool: the heap fallback runs too
def test_concurrent_runs_on_one_session_are_correct(threads: int) -> None:
    session = engine_session(MIXED, _library(), EP_NAME)
    rng = np.random.default_rng(threads)
    w = rng.standard_normal((64, 32)).astype(np.float32) / 8
    failures: list[str] = []
    start = threading.Barrier(threads)

    def worker(index: int) -> None:
        local = np.random.default_rng(index)
        start.wait()
        for i in range(RUNS_PER_THREAD):
            batch = 1 + 7 * ((index + i) % 5)  # shapes change under each other's feet
            x = local.standard_normal((batch, 64)).astype(np.float32)
            y = local.standard_normal((batch, 64)).astype(np.float32)
            got = session.run(None, {"x": x, "y": y, "w": w})[0]
            if got.shape != (batch, 32) or not np.allclose(got, _reference(x, y, w), atol=1e-5):
                failures.append(f"thread {index} run {i}")

    reset_counters(_library())
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert failures == []
    counters = read_counters(_library(), EP_NAME)
    assert counters["compute_calls"] == threads * RUNS_PER_THREAD
    assert counters["compute_errors"] == 0
    if threads <= 4:  # the scratch pool holds 4: this many Runs never fall back to the heap
        assert counters["scratch_overflows"] == 0


@pytest.mark.parametrize("partition", ["fused", "per_node", "kernel"])
def test_conflicting_symbolic_dim_is_an_error_that_names_the_shapes(partition: str) -> None:
    model = _model([("Add", ["x", "y"], "out")], {"x": ["batch", 8], "y": ["batch", 8]}, ["out"])
    feeds = {"x": np.ones((2, 8), np.float32), "y": np.ones((3, 8), np.float32)}
    with pytest.raises(Exception):  # noqa: B017 -- ORT's own error type, whatever it is
        cpu_session(model).run(None, feeds)
    session = engine_session(model, _library(), EP_NAME, {"partition": partition})
    with pytest.raises(Exception, match=r"Add node 'out'.*\[2,8\] and \[3,8\] are incompatible"):
        session.run(None, feeds)
    # The session is still usable afterwards.
    ok = session.run(None, {"x": np.ones((3, 8), np.float32), "y": np.ones((3, 8), np.float32)})
    np.testing.assert_array_equal(ok[0], np.full((3, 8), 2.0, np.float32))


@pytest.mark.parametrize("partition", ["fused", "per_node", "kernel"])
@pytest.mark.parametrize(("a_feed", "b_feed"), [
    ((2, 3), (4, 5)),
    ((3,), (4,)),          # two 1-D operands of different lengths
    ((2, 3), (4,)),        # a 1-D B that does not fit A's k
])
def test_matmul_inner_dim_conflict_is_an_error(partition, a_feed, b_feed) -> None:
    a_decl = ["m", "k"][-len(a_feed):]
    b_decl = ["k", "n"][:len(b_feed)]
    model = _model([("MatMul", ["a", "b"], "out")], {"a": a_decl, "b": b_decl}, ["out"])
    feeds = {"a": np.ones(a_feed, np.float32), "b": np.ones(b_feed, np.float32)}
    session = engine_session(model, _library(), EP_NAME, {"partition": partition})
    shapes = (r"\[" + ",".join(map(str, a_feed)) + r"\] and \["
              + ",".join(map(str, b_feed)) + r"\]")
    with pytest.raises(Exception, match=r"MatMul node 'out'.*" + shapes):
        session.run(None, feeds)


def test_wrong_rank_is_rejected_by_ort_before_the_engine() -> None:
    model = _model([("Relu", ["x"], "out")], {"x": ["batch", 8]}, ["out"])
    session = engine_session(model, _library(), EP_NAME)
    with pytest.raises(Exception, match="(?i)rank|dimension"):
        session.run(None, {"x": np.ones((2, 8, 1), np.float32)})


SPECIAL = np.array([[np.nan, -np.inf, np.inf, -0.0, 0.0, -1e30, 1e30, 88.8]], np.float32)


@pytest.mark.parametrize("op", ["Identity", "Relu", "Sigmoid", "Add", "Mul", "MatMul"])
def test_nan_and_infinities_give_orts_result(op: str) -> None:
    if op == "MatMul":
        model = _model([(op, ["x", "w"], "out")], {"x": [1, 8], "w": [8, 8]}, ["out"])
        feeds = {"x": SPECIAL, "w": np.eye(8, dtype=np.float32)}
    elif op in ("Add", "Mul"):
        model = _model([(op, ["x", "x"], "out")], {"x": [1, 8]}, ["out"])
        feeds = {"x": SPECIAL}
    else:
        model = _model([(op, ["x"], "out")], {"x": [1, 8]}, ["out"])
        feeds = {"x": SPECIAL}
    with np.errstate(all="ignore"):
        want = cpu_session(model, "disabled").run(None, feeds)[0]
        got = engine_session(model, _library(), EP_NAME, opt_level="disabled").run(
            None, feeds)[0]
    if op in ("Identity", "Relu", "Add", "Mul"):  # exact ops: -0.0 stays -0.0, NaN stays NaN
        from tests.support.engine_sessions import assert_same_bits

        assert_same_bits(got, want)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("partition", ["fused", "per_node", "kernel"])
def test_empty_tensor_with_a_zero_dim_gives_an_empty_result(partition: str) -> None:
    session = engine_session(MIXED, _library(), EP_NAME, {"partition": partition})
    feeds = {"x": np.ones((0, 64), np.float32), "y": np.ones((0, 64), np.float32),
             "w": np.ones((64, 32), np.float32)}
    got = session.run(None, feeds)[0]
    assert got.shape == (0, 32)
    # And a zero inner dimension: MatMul sums nothing, so the result is all zeros.
    model = _model([("MatMul", ["a", "b"], "out")], {"a": [2, "k"], "b": ["k", 3]}, ["out"])
    zero_k = engine_session(model, _library(), EP_NAME).run(
        None, {"a": np.ones((2, 0), np.float32), "b": np.ones((0, 3), np.float32)})[0]
    np.testing.assert_array_equal(zero_k, np.zeros((2, 3), np.float32))


def test_dtypes_the_engine_does_not_compute_are_not_claimed() -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["out"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2])],
        [helper.make_tensor_value_info("out", TensorProto.DOUBLE, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    from tests.support.engine_sessions import nodes_by_ep

    session = engine_session(model.SerializeToString(), _library(), EP_NAME,
                             allow_fallback=True)
    assert nodes_by_ep(session) == {"CPUExecutionProvider": 1}
    np.testing.assert_array_equal(session.run(None, {"x": np.array([-1.0, 2.0])})[0], [0.0, 2.0])


# Symbolic (named or unnamed) dims promise nothing at run time: ORT's CPU EP broadcasts
# whatever shapes arrive, so the engine must too (or not claim the node).
# (declared a, declared b, fed a, fed b, steps on the general strided path per Run)
BROADCASTS = [
    (["N", "M"], ["N", "M"], [3, 1], [3, 4], 1),   # a column against a matrix
    (["N", "M"], ["N", "M"], [3, 1], [1, 4], 1),   # a column against a row: both grow
    (["N", "M"], ["N", "M"], [1, 4], [3, 4], 0),   # a [1,w] row: fast once its 1 is stripped
    (["N", "M"], ["M"], [3, 4], [4], 0),           # a row
    (["N", "M"], ["M"], [3, 1], [4], 1),           # a row that is wider than a's last dim
    ([None, None], [None, None], [3, 1], [1, 4], 1),  # unnamed dims
    ([None, 4], [None, 4], [2, 4], [1, 4], 0),
    ([2, 1], [1, 3], [2, 1], [1, 3], 1),           # the same, static
    ([2, 1, 3], [4, 1], [2, 1, 3], [4, 1], 1),     # rank 3 against rank 2, each broadcasting
    ([1, 1, 3], [2, 3], [1, 1, 3], [2, 3], 0),     # leading 1s before a row
    (["N", "M"], ["N", "M"], [0, 1], [1, 4], 0),   # empty result: nothing to run
]


@pytest.mark.parametrize("chain", [False, True], ids=["one_node", "fused_chain"])
@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize(("a_decl", "b_decl", "a_feed", "b_feed", "strided"), BROADCASTS)
def test_any_broadcast_at_run_time_gives_orts_result(a_decl, b_decl, a_feed, b_feed, strided,
                                                     op, chain) -> None:
    from tests.support.engine_sessions import assert_same_bits, nodes_by_ep

    if chain:  # Relu -> op -> Identity: the broadcast inside a fused plan, from a slot
        nodes = [("Relu", ["a"], "r"), (op, ["r", "b"], "s"), ("Identity", ["s"], "out")]
    else:
        nodes = [(op, ["a", "b"], "out")]
    model = _model(nodes, {"a": a_decl, "b": b_decl}, ["out"])
    rng = np.random.default_rng(5)
    feeds = {"a": rng.standard_normal(a_feed).astype(np.float32),
             "b": rng.standard_normal(b_feed).astype(np.float32)}
    session = engine_session(model, _library(), EP_NAME, opt_level="disabled")
    assert nodes_by_ep(session) == {EP_NAME: len(nodes)}
    want = cpu_session(model, "disabled").run(None, feeds)[0]
    reset_counters(_library())
    assert_same_bits(session.run(None, feeds)[0], want)
    # Only what the fast kernels cannot do takes the strided path.
    assert read_counters(_library(), EP_NAME)["strided_broadcasts"] == strided


def test_an_input_of_unknown_rank_is_not_claimed() -> None:
    """A plan holds at most 8 dims; without a declared rank the input could bring more."""
    from tests.support.engine_sessions import nodes_by_ep

    model = _model([("Relu", ["x"], "r"), ("Relu", ["r"], "out")], {"x": None}, ["out"])
    session = engine_session(model, _library(), EP_NAME, opt_level="disabled",
                             allow_fallback=True)
    assert set(nodes_by_ep(session)) == {"CPUExecutionProvider"}
    x = np.linspace(-1, 1, 2 * 3).astype(np.float32).reshape([1] * 8 + [2, 3])  # rank 10
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum(x, 0))


@pytest.mark.parametrize("partition", ["fused", "per_node", "kernel"])
def test_sigmoid_is_accurate_over_the_whole_float_range(partition: str) -> None:
    """The vectorized exp: every input from -120 to 120 (both tails, the -87 cutoff)."""
    x = np.linspace(-120, 120, 64 * 1024, dtype=np.float32).reshape(-1, 1024)
    model = _model([("Sigmoid", ["x"], "out")], {"x": ["batch", 1024]}, ["out"])
    got = engine_session(model, _library(), EP_NAME, {"partition": partition}).run(
        None, {"x": x})[0]
    want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    assert float(np.max(np.abs(got - want))) < 2e-7
    assert float(np.max(np.abs(got - want) / want, where=want > 1e-30, initial=0.0)) < 1e-6


def _sweep() -> np.ndarray:
    """Every kind of float32: a dense ramp over [-100, 100], both sides of +-87 (where exp
    leaves the normal range) and +-88, every float in [12, 12.8] (where the fused Sigmoid's
    fit hands over to its clamp at 12.4), three values in each of the 254 normal binades and
    the subnormal one (x^2 overflows from 2^64 up), subnormals and zeros of both signs, +-inf,
    NaNs with several payloads, and 2^16 random bit patterns (finite or not)."""
    rng = np.random.default_rng(51)
    tiny = np.array([1e-45, 3e-44, 1e-40, 1e-39, 1.1754942e-38, 1.1754944e-38], np.float32)
    special = np.array([0.0, np.inf, np.nan], np.float32)
    nans = np.array([0x7FC00000, 0x7FC00001, 0x7F800001, 0xFFC00000, 0xFFFFFFFF],
                    np.uint32).view(np.float32)
    parts = [np.linspace(-100, 100, 40_001, dtype=np.float32),
             np.linspace(-89, -86, 3_001, dtype=np.float32),
             np.linspace(86, 89, 3_001, dtype=np.float32),
             np.arange(0x41400000, 0x414CCCCE, dtype=np.uint32).view(np.float32),
             np.ldexp(np.array([[1.0], [1.3], [1.999]]), np.arange(-149, 128)).ravel()
             .astype(np.float32),
             tiny, special, nans,
             rng.integers(0, 2**32, 2**16, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    x = np.concatenate(parts)
    return np.concatenate([x, -x])  # 2 * 951 246 elements: a partial last vector too


def test_sigmoid_in_a_fused_loop_is_orts_over_the_whole_float_range() -> None:
    """The fused loop's Sigmoid (vectors in registers, see kernels_fused.c) against ORT's
    CPU EP, within the Sigmoid cases' tolerance, with NaN and +-inf propagated as ORT does."""
    from epbench.cases.spec import SIGMOID_TOLERANCE

    x = _sweep()[None, :]
    model = _model([("Sigmoid", ["x"], "s"), ("Identity", ["s"], "out")], {"x": [1, x.size]},
                   ["out"])
    session = engine_session(model, _library(), EP_NAME, opt_level="disabled")
    session.run(None, {"x": x})
    reset_counters(_library())
    got = session.run(None, {"x": x})[0]
    counters = read_counters(_library(), EP_NAME)
    assert (counters["fused_loops"], counters["fused_loop_nodes"]) == (1, 2)
    want = cpu_session(model, "disabled").run(None, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    # Per node within 3/4 of the tolerance: a Sigmoid's slope is at most 1/4, so a chain's
    # error then stays within it at any depth (e / (1 - 1/4)); the fit is 5.7e-6 from ORT.
    assert float(np.max(np.abs(got[finite] - want[finite]))) <= 0.75 * SIGMOID_TOLERANCE
    infinite = np.isinf(x)
    np.testing.assert_array_equal(got[infinite], want[infinite])  # exactly 0 and 1


# A static chain: after its first Run the plan skips the shape pass, and its fused loop is
# re-pointed at ORT's buffers only when one moved (plan_run.c), so new buffers every Run,
# the same buffer with new contents, and outputs the caller binds must all be followed.
STATIC_CHAIN = _model([("Add", ["x", "y"], "a"), ("Add", ["a", "y"], "b"),
                       ("Relu", ["b"], "out")], {"x": [2, 8], "y": [2, 8]}, ["out"])


def _chain(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.maximum((x + y) + y, np.float32(0))  # the loop's order of float32 sums


def test_a_static_fused_loop_follows_buffers_that_move_between_runs() -> None:
    session = engine_session(STATIC_CHAIN, _library(), EP_NAME)
    rng = np.random.default_rng(5)
    feeds = [{n: rng.standard_normal((2, 8)).astype(np.float32) for n in "xy"}
             for _ in range(4)]  # all alive at once: four distinct pairs of buffers
    for feed in feeds + feeds[::-1]:
        np.testing.assert_array_equal(session.run(None, feed)[0], _chain(**feed))
    same = feeds[0]
    same["y"][:] = rng.standard_normal((2, 8)).astype(np.float32)  # same buffer, new values
    np.testing.assert_array_equal(session.run(None, same)[0], _chain(**same))
    outs = [np.full((2, 8), np.nan, np.float32) for _ in range(2)]
    for feed, out in zip(feeds, outs + outs, strict=True):
        binding = session.io_binding()
        for name, value in feed.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("out", "cpu", 0, np.float32, out.shape, out.ctypes.data)
        session.run_with_iobinding(binding)
        np.testing.assert_array_equal(out, _chain(**feed))
