"""docs/validation/c_loop.c, through c_vs_python_loop.py's wrapper: it compiles under the
engine's -Werror flags, times exactly the calls asked for, writes what ORT's Python API
writes, and hands ORT's errors back in one line.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "c_vs_python_loop", ROOT / "docs" / "validation" / "c_vs_python_loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, Any]:
    script = _script()
    c = script.build_c_loop(tmp_path_factory.mktemp("c_loop"))
    err = ctypes.create_string_buffer(script.ERR_LEN)
    script.check(c.ecl_init(str(script.ort_library()).encode(), err, script.ERR_LEN), err)
    return script, c


def _relu() -> tuple[Any, str, list[np.ndarray]]:
    """The one-node case, the name of its output, and what ORT's Python API writes."""
    import onnxruntime as ort

    from epbench.cases.grids import case_by_name

    built = case_by_name("relu_d1_w8").build()
    session = ort.InferenceSession(built.model_bytes, providers=["CPUExecutionProvider"])
    return built, session.get_outputs()[0].name, session.run(None, built.inputs)


def test_a_block_times_exactly_the_calls_asked_and_writes_what_ort_writes(loop) -> None:
    script, c = loop
    built, name, expected = _relu()
    outputs = [(name, np.zeros_like(expected[0]))]
    timed = script.CLoop(c, built.model_bytes, True, None, {}, built.inputs, outputs)
    try:
        samples = timed.block(7)
        assert len(samples) == 7
        assert all(s > 0 for s in samples)  # each call timed, none left at the zero fill
        assert np.array_equal(timed.outputs[0], expected[0])
    finally:
        c.ecl_destroy(timed.handle)


def test_ort_errors_come_back_in_one_line(loop) -> None:
    script, c = loop
    built, name, expected = _relu()
    with pytest.raises(SystemExit, match=r"^c_loop: CreateSessionFromArray: "):
        script.CLoop(c, b"not a model", True, None, {}, built.inputs, [])
    with pytest.raises(SystemExit, match=r"^c_loop: no device of EP nosuch: "):
        script.CLoop(c, built.model_bytes, True, "nosuch", {}, built.inputs, [])
    wrong = [(name, np.zeros(expected[0].size + 1, np.float32))]  # not the output's shape
    timed = script.CLoop(c, built.model_bytes, True, None, {}, built.inputs, wrong)
    try:
        with pytest.raises(SystemExit, match=r"^c_loop: RunWithBinding: "):
            timed.block(2)
    finally:
        c.ecl_destroy(timed.handle)
