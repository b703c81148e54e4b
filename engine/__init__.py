"""The bundled engine: a C plugin execution provider that ONNX Runtime loads as a library.

`library_path()` is what an arm registers with `register_execution_provider_library`;
`build_info()` says how that file was built; `engine.probe` reads its counters.
Build it with `make engine` (or `python -m epbench.engine.build --inplace`).
"""

from __future__ import annotations

from pathlib import Path

from epbench.engine import probe
from epbench.engine.library import LIBRARY_NAME, library_path

# EP options the engine accepts (passed per session through add_provider_for_devices).
# partition: "fused" (default) claims maximal connected groups of supported nodes as one
# fused node each; "per_node" makes every supported node its own partition; "kernel" runs
# every supported node as a kernel from the EP's kernel registry. The inject_*
# knobs are for validating the harness and default to 0: a busy-wait per Run / per node
# (nanoseconds, spun as a calibrated loop, counted in injected_delay_ns), and extra harmless
# ORT API calls per Run (visible in the counters).
EP_OPTIONS = (
    "partition",
    "inject_delay_ns_per_run",
    "inject_delay_ns_per_node",
    "inject_api_calls_per_run",
)


def build_info(library: str | None = None) -> dict:
    """How a built engine library was made: version, compiler, flags, ORT API version.

    Read from the library itself (it compiles its own description in), so it is true of
    `library` (default: this package's build) even when that came from another commit.
    """
    import ctypes
    import json

    path = library or library_path()
    handle = ctypes.CDLL(path)
    function = handle.epbench_build_info
    function.restype = ctypes.c_char_p
    info = json.loads(function().decode("utf-8"))
    info["library"] = str(Path(path).resolve())
    return info

__all__ = ["EP_OPTIONS", "LIBRARY_NAME", "build_info", "library_path", "probe"]
