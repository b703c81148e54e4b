"""Sessions: identical options for every arm but the EP; the timed call is the bound call."""

from __future__ import annotations

import numpy as np
import pytest

from epbench.harness.sessions import bind, max_abs_error, session_options, timed_call

# Config entries every arm must share (DESIGN.md's measurement rules).
SHARED_ENTRIES = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning",
                  "session.record_ep_graph_assignment_info")


def _entries(so) -> dict[str, str]:
    return {key: so.get_session_config_entry(key) for key in SHARED_ENTRIES}


def test_every_arm_gets_the_same_options_but_the_ep() -> None:
    nxrt = pytest.importorskip("nxrt_ep_cpu")
    from epbench.harness.arms import parse_arm
    from epbench.harness.sessions import register_arm

    registration = register_arm(parse_arm("plugin:nxrt_ep_cpu:name=nx_opts"),
                                nxrt.get_library_path())
    control = session_options("disabled", 3, None, {}, allow_fallback=False)
    plugin = session_options("disabled", 3, registration, {}, allow_fallback=False)
    for so in (control, plugin):
        assert (so.intra_op_num_threads, so.inter_op_num_threads) == (3, 3)
        assert _entries(so) == dict.fromkeys(SHARED_ENTRIES[:2], "0") | {
            SHARED_ENTRIES[2]: "1"}
    assert control.graph_optimization_level == plugin.graph_optimization_level
    assert plugin.get_session_config_entry("session.disable_cpu_ep_fallback") == "1"
    allowed = session_options("all", 1, registration, {}, allow_fallback=True)
    with pytest.raises(Exception, match="does not have configuration"):
        allowed.get_session_config_entry("session.disable_cpu_ep_fallback")


def test_max_abs_error_covers_every_output() -> None:
    a = [np.zeros(3, np.float32), np.ones(2, np.float32)]
    assert max_abs_error(a, [np.zeros(3), np.ones(2)]) == 0.0
    assert max_abs_error(a, [np.full(3, 0.5), np.ones(2)]) == 0.5  # first output counts
    assert max_abs_error(a, [np.zeros(3), np.ones(2) * 3]) == 2.0  # last output counts
    assert max_abs_error(a, [np.zeros(4), np.ones(2)]) == float("inf")  # shape
    nan = np.array([np.nan, 1.0], np.float32)
    assert max_abs_error([nan], [nan.copy()]) == 0.0  # NaN where ORT has NaN is agreement
    assert max_abs_error([nan], [np.array([0.0, 1.0])]) == float("inf")


class _Native:
    def __init__(self) -> None:
        self.calls = []

    def run_with_iobinding(self, binding, options) -> None:
        self.calls.append((binding, options))


def test_the_timed_call_is_the_native_bound_run() -> None:
    class Session:
        _sess = _Native()

    class Binding:
        _iobinding = object()

    call = timed_call(Session(), Binding())
    call()
    call()
    assert Session._sess.calls == [(Binding._iobinding, None)] * 2


def test_outputs_are_prebound_and_written_by_the_timed_call() -> None:
    import onnxruntime as ort

    from epbench.cases.grids import case_by_name

    built = case_by_name("relu_d10_w8").build()
    session = ort.InferenceSession(built.model_bytes, providers=["CPUExecutionProvider"])
    expected = session.run(None, built.inputs)
    bound = bind(session, built.inputs, expected)
    assert max_abs_error(expected, bound.outputs()) > 0  # zeros before any run
    before = [v.data_ptr() for v in bound.output_values]
    bound.run()
    assert max_abs_error(expected, bound.outputs()) == 0.0
    assert [v.data_ptr() for v in bound.output_values] == before  # ORT wrote into our buffer
