"""Read the engine's deterministic counters through ctypes.

`ctypes.CDLL` of the path ORT loaded returns the same dlopen handle, so these are the
very counters the EP increments. Counters are kept in total and per EP name (one library
registered under two names is one handle: the per-name view tells the arms apart).
"""

from __future__ import annotations

import ctypes
import sys
import types

from epbench.engine.library import library_path

# The most counters any build exports; a snapshot reports the true count.
_MAX_COUNTERS = 64


def _load(library_path: str) -> ctypes.CDLL | None:
    handle = ctypes.CDLL(library_path)
    try:
        handle.epbench_probe_snapshot  # noqa: B018 -- probe for the export
    except AttributeError:
        return None
    handle.epbench_probe_snapshot.restype = ctypes.c_size_t
    handle.epbench_probe_snapshot.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    handle.epbench_probe_snapshot_ep.restype = ctypes.c_size_t
    handle.epbench_probe_snapshot_ep.argtypes = [
        ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    handle.epbench_probe_name.restype = ctypes.c_char_p
    handle.epbench_probe_name.argtypes = [ctypes.c_size_t]
    handle.epbench_probe_reset.restype = None
    handle.epbench_probe_reset.argtypes = []
    if hasattr(handle, "epbench_probe_spins_for_ns"):  # builds since the knobs spin a loop
        handle.epbench_probe_spins_for_ns.restype = ctypes.c_uint64
        handle.epbench_probe_spins_for_ns.argtypes = [ctypes.c_uint64]
    return handle


def counter_names(library_path: str) -> list[str] | None:
    """Names of the counters the library exports, in snapshot order (None: no probe)."""
    handle = _load(library_path)
    if handle is None:
        return None
    names = []
    while (name := handle.epbench_probe_name(len(names))) is not None:
        names.append(name.decode("ascii"))
    return names


def read_counters(library_path: str, ep_name: str | None = None) -> dict[str, int] | None:
    """Counters of the library at library_path, in total or for one EP name.

    Returns None when the library exports no epbench_probe_* functions (any other plugin
    EP). For an EP name the library never created, every counter is 0.
    """
    handle = _load(library_path)
    if handle is None:
        return None
    names = counter_names(library_path) or []
    values = (ctypes.c_uint64 * _MAX_COUNTERS)()
    if ep_name is None:
        count = handle.epbench_probe_snapshot(values, _MAX_COUNTERS)
    else:
        count = handle.epbench_probe_snapshot_ep(ep_name.encode("utf-8"), values, _MAX_COUNTERS)
        if count == 0:
            return dict.fromkeys(names, 0)
    return {name: int(values[i]) for i, name in enumerate(names[:count])}


def spins_for_ns(library_path: str, ns: int) -> int | None:
    """Loop iterations the library's inject_delay_* knobs spin for ns nanoseconds in this
    process (timed once per library copy, on first use); None for a library without
    the export (any other plugin EP, or an engine built before the knobs spun a loop)."""
    if ns < 0:
        raise ValueError(f"a delay is a non-negative number of nanoseconds, not {ns}")
    handle = _load(library_path)
    if handle is None or not hasattr(handle, "epbench_probe_spins_for_ns"):
        return None
    return int(handle.epbench_probe_spins_for_ns(ns))


def reset_counters(library_path: str) -> None:
    """Zero every counter (total and per EP) of the library; call it between Runs."""
    handle = _load(library_path)
    if handle is not None:
        handle.epbench_probe_reset()


class _CallableModule(types.ModuleType):
    """Lets `engine.probe()` read the bundled build's counters while `engine.probe` stays
    the module the harness imports read_counters from."""

    def __call__(self, ep_name: str | None = None) -> dict[str, int] | None:
        return read_counters(library_path(), ep_name)


sys.modules[__name__].__class__ = _CallableModule
