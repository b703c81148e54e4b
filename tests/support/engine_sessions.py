"""Small helpers to run a model on the engine and on ORT's CPU EP in this process.

Used by the engine's tests only, so it lives in tests/support, outside the installed
package. The harness has its own, stricter session code (harness/sessions.py); this
module only needs to be correct, not measured.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

CPU_EP = "CPUExecutionProvider"


def register(name: str, library: str) -> list[Any]:
    """Register `library` under `name` once per process and return its OrtEpDevices.

    A name already registered (by an earlier test) is reused: ORT refuses a second
    registration of the same name.
    """
    import os

    import onnxruntime as ort

    devices = [d for d in ort.get_ep_devices() if d.ep_name == name]
    if not devices:
        # ORT resolves a relative path against its own folder, not the working directory.
        ort.register_execution_provider_library(name, os.path.abspath(library))
        devices = [d for d in ort.get_ep_devices() if d.ep_name == name]
    if not devices:
        raise RuntimeError(f"{library} registered as {name!r} but reported no device")
    return devices


def session_options(opt_level: str = "all", threads: int = 1) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if opt_level == "all"
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    return options


def engine_session(model: bytes, library: str, name: str,
                   ep_options: dict[str, str] | None = None, opt_level: str = "all",
                   threads: int = 1, allow_fallback: bool = False) -> Any:
    """An InferenceSession whose nodes run on the engine registered as `name`."""
    import onnxruntime as ort

    devices = register(name, library)
    options = session_options(opt_level, threads)
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if not allow_fallback:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options.add_provider_for_devices(devices, dict(ep_options or {}))
    return ort.InferenceSession(model, options)


def cpu_session(model: bytes, opt_level: str = "all") -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(model, session_options(opt_level), providers=[CPU_EP])


def nodes_by_ep(session: Any) -> Counter:
    """How many nodes of the (optimized) graph each EP was assigned."""
    counts: Counter = Counter()
    for subgraph in session.get_provider_graph_assignment_info():
        counts[subgraph.ep_name] += len(subgraph.get_nodes())
    return counts


def partitions_by_ep(session: Any) -> Counter:
    """How many subgraphs (fused partitions) each EP was assigned."""
    return Counter(s.ep_name for s in session.get_provider_graph_assignment_info())


def assert_same_bits(got: Any, want: Any) -> None:
    """float32 arrays equal bit for bit (so -0.0 != +0.0), for the ops that are exact.

    Identity, Relu, Add and Mul compute one IEEE operation per element, as ORT's CPU EP
    does, so nothing short of the same bits is ORT's result.
    """
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == np.float32, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not differ.any(), (
        f"{int(differ.sum())} of {got.size} elements differ in their bits: "
        f"got {got[differ][:4]!r}, want {want[differ][:4]!r}")
