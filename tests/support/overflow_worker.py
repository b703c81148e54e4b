"""Child process of tests/test_engine_overflow.py: run shape cases on ORT's CPU EP or on the
engine, one JSON line out per case.

Runs apart from pytest so that an engine that crashes (or trips AddressSanitizer) fails the
test that started it instead of killing pytest. `python -m tests.support.overflow_worker
cpu|engine LIBRARY` reads one JSON object per stdin line: `{"id", "nodes": [[op, [inputs],
output]], "inputs": [[name, declared, fed]], "outputs", "partition"}` (a declared dim is an
int, possibly negative, or a symbol name). For each it writes `{"start": id}` before touching
ORT and the outcome after, flushed, so the parent knows which case was running if the
process dies. Outputs travel as their shape and their float32 bytes in hex (exact).
"""

from __future__ import annotations

import json
import sys
from functools import partial
from typing import Any

EP_NAME = "ebe_overflow"


def _model(case: dict) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(op, args, [out], name=out) for op, args, out in case["nodes"]], "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, declared)
         for name, declared, _ in case["inputs"]],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
         for name in case["outputs"]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                              ir_version=10)
    return model.SerializeToString()


def _feeds(case: dict) -> dict:
    import zlib

    import numpy as np

    # The same values in both workers; the parent feeds only tiny or empty tensors.
    rng = np.random.default_rng(zlib.crc32(case["id"].split("/")[0].encode()))
    return {name: rng.standard_normal(fed, dtype=np.float32)
            for name, _, fed in case["inputs"]}


def _outcome(make_session: Any, feeds: dict) -> dict:
    """{"stage": "ok" | "create" | "run", "error": text, "outputs": [[shape, hex]]}."""
    try:
        session = make_session()
    except Exception as exc:  # noqa: BLE001 -- any ORT error is an outcome, not a failure
        return {"stage": "create", "error": str(exc)[-600:]}
    try:
        outputs = session.run(None, feeds)
    except Exception as exc:  # noqa: BLE001
        return {"stage": "run", "error": str(exc)[-600:]}
    return {"stage": "ok", "outputs": [[list(o.shape), o.tobytes().hex()] for o in outputs]}


def main() -> int:
    from tests.support.engine_sessions import cpu_session, engine_session

    role, library = sys.argv[1], sys.argv[2]
    for line in sys.stdin:
        case = json.loads(line)
        print(json.dumps({"start": case["id"]}), flush=True)
        model, feeds = _model(case), _feeds(case)
        if role == "cpu":
            make = partial(cpu_session, model, "disabled")
        else:
            make = partial(engine_session, model, library, EP_NAME,
                           {"partition": case["partition"]}, "disabled")
        print(json.dumps({"id": case["id"], **_outcome(make, feeds)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
