"""Sessions for one case: the same SessionOptions for every arm but the EP.

Runs inside a worker process only: it loads EP libraries, so a crash here kills
the worker, never the harness. Measurement rules (DESIGN.md): equal thread
counts, no spinning, the case's optimization level for every arm; a plugin arm
must run every node itself unless fallback was allowed.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epbench.cases.spec import graph_optimization_level
from epbench.core.errors import ArmError, CaseError
from epbench.harness.arms import ArmSpec

CPU_EP = "CPUExecutionProvider"


@dataclass
class Registration:
    """A library registered with ORT in this process, and the devices it added."""

    registration_name: str
    library: str
    devices: list[Any]
    ep_name: str
    ep_version: str | None


def register_arm(arm: ArmSpec, library: str) -> Registration:
    """Register one arm's library under the arm's registration name (once per process).

    The devices this registration added are the new tail of ``get_ep_devices()``:
    a library registered twice reports the same EP name twice, so matching by
    name alone could pick the other arm's factory.
    """
    import onnxruntime as ort

    before = len(ort.get_ep_devices())
    name = arm.registration_name
    assert name is not None
    try:
        ort.register_execution_provider_library(name, library)
    except Exception as exc:
        message = str(exc).split(" : ")[-1].strip()
        if "CreateEpFactories" in message:
            raise ArmError(
                f"arm {arm.spec!r}: {library} is not an ONNX Runtime plugin EP "
                f"(no CreateEpFactories export): {message}"
            ) from None
        raise ArmError(f"arm {arm.spec!r}: ORT could not load {library}: {message}") from None
    devices = list(ort.get_ep_devices())[before:]
    if not devices:
        raise ArmError(
            f"arm {arm.spec!r}: {library} registered but reported no device; "
            "its factory found no supported hardware"
        )
    ep_names = {d.ep_name for d in devices}
    if len(ep_names) != 1:
        raise ArmError(f"arm {arm.spec!r}: {library} reported several EPs {sorted(ep_names)}")
    version = devices[0].ep_metadata.get("version") if devices[0].ep_metadata else None
    return Registration(name, library, devices, ep_names.pop(), version)


def session_options(
    opt_level: str, threads: int, registration: Registration | None,
    ep_options: dict[str, str], allow_fallback: bool,
) -> Any:
    """The SessionOptions for one arm: identical across arms except the EP."""
    import onnxruntime as ort


    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = graph_optimization_level(opt_level)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.log_severity_level = 3
    if registration is not None:
        if not allow_fallback:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.add_provider_for_devices(registration.devices, ep_options)
    return so


def nodes_by_ep(session: Any) -> dict[str, int]:
    """How many nodes each EP was assigned, from ORT's own record."""
    counts: Counter[str] = Counter()
    for subgraph in session.get_provider_graph_assignment_info():
        counts[subgraph.ep_name] += len(subgraph.get_nodes())
    return dict(counts)


def foreign_nodes(session: Any, ep_name: str) -> list[tuple[str, str, str]]:
    """(node name, op type, EP) of every node not assigned to ``ep_name``."""
    found = []
    for subgraph in session.get_provider_graph_assignment_info():
        if subgraph.ep_name != ep_name:
            for node in subgraph.get_nodes():
                found.append((node.name or "<unnamed>", node.op_type, subgraph.ep_name))
    return found


def create_session(
    arm: ArmSpec, model_bytes: bytes, opt_level: str, threads: int,
    registration: Registration | None, allow_fallback: bool,
) -> Any:
    """Create the arm's session; a plugin arm that cannot take every node fails the case."""
    import onnxruntime as ort

    so = session_options(opt_level, threads, registration, arm.ep_options, allow_fallback)
    providers = [CPU_EP] if registration is None else None
    try:
        session = ort.InferenceSession(model_bytes, so, providers=providers)
    except Exception as exc:
        message = str(exc).split(" : ")[-1].strip()
        if registration is not None and not allow_fallback:
            # ORT refuses the session without naming the nodes: build it once more
            # with fallback allowed, only to say which nodes went where.
            _refuse_foreign_nodes(arm, registration, model_bytes, opt_level, threads)
        raise CaseError(f"arm {arm.key!r}: session creation failed: {message}") from None
    if registration is not None and not allow_fallback:
        _refuse_foreign_nodes(arm, registration, model_bytes, opt_level, threads, session)
    return session


def _refuse_foreign_nodes(arm: ArmSpec, registration: Registration, model_bytes: bytes,
                          opt_level: str, threads: int, session: Any = None) -> None:
    """Raise CaseError naming every node the arm's EP did not take (if any)."""
    if session is None:
        import onnxruntime as ort

        so = session_options(opt_level, threads, registration, arm.ep_options, True)
        try:
            session = ort.InferenceSession(model_bytes, so)
        except Exception:
            return  # the caller reports the original failure
    foreign = foreign_nodes(session, registration.ep_name)
    if foreign:
        shown = ", ".join(f"{n} ({op}) on {ep}" for n, op, ep in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise CaseError(
            f"arm {arm.key!r}: {len(foreign)} node(s) did not run on "
            f"{registration.ep_name}: {shown}{more}; pass --allow-fallback to measure the split"
        )


def max_abs_error(expected: list[Any], actual: list[Any]) -> float:
    """Largest absolute difference over all outputs; inf on a shape or NaN mismatch."""
    import numpy as np

    worst = 0.0
    for e, a in zip(expected, actual, strict=True):
        e = np.asarray(e)
        a = np.asarray(a)
        if e.shape != a.shape:
            return float("inf")
        if e.size == 0:
            continue
        if e.dtype.kind in "fc":
            nan_e, nan_a = np.isnan(e), np.isnan(a)
            if not np.array_equal(nan_e, nan_a):
                return float("inf")
            diff = np.abs(e.astype(np.float64) - a.astype(np.float64))[~nan_e]
        else:
            diff = np.abs(e.astype(np.float64) - a.astype(np.float64))
        if diff.size:
            worst = max(worst, float(diff.max()))
    return worst


@dataclass
class BoundRun:
    """A session with inputs and outputs bound once, and the call that is timed.

    Holds the OrtValues so they outlive the binding; ``outputs()`` reads what the
    last timed call wrote, which is what verification compares.
    """

    run: Callable[[], object]
    binding: Any
    input_values: list[Any]
    output_values: list[Any]

    def outputs(self) -> list[Any]:
        return [value.numpy() for value in self.output_values]


def timed_call(session: Any, binding: Any) -> Callable[[], object]:
    """ORT's ``run_with_iobinding`` with everything bound once.

    The C-level entry is used directly when present: the Python wrapper only adds
    WebGPU graph-capture checks, identical per arm, which would raise the
    harness's floor and compress every ratio toward 1.
    """
    native_session = getattr(session, "_sess", None)
    native_binding = getattr(binding, "_iobinding", None)
    if native_session is not None and native_binding is not None:
        # A partial calls straight into C: ~25 ns less per timed call than a lambda
        # (measured on relu_d1_w8: 2.09 vs 2.12 us), the same for every arm.
        return functools.partial(native_session.run_with_iobinding, native_binding, None)
    return functools.partial(session.run_with_iobinding, binding)


def bind(session: Any, inputs: dict[str, Any], outputs: list[Any]) -> BoundRun:
    """Bind inputs and pre-allocated outputs (shaped like ``outputs``) once, as OrtValues.

    The timed call then allocates nothing on the harness side, and an EP sees
    the caller's output buffers.
    """
    import numpy as np
    import onnxruntime as ort

    binding = session.io_binding()
    input_values, output_values = [], []
    for name, value in inputs.items():
        ov = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value))
        binding.bind_ortvalue_input(name, ov)
        input_values.append(ov)
    for meta, value in zip(session.get_outputs(), outputs, strict=True):
        ov = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(np.asarray(value)))
        binding.bind_ortvalue_output(meta.name, ov)
        output_values.append(ov)
    return BoundRun(timed_call(session, binding), binding, input_values, output_values)
