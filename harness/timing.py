"""The timed loop: one sample per call, GC off inside a block, and how long a block is.

The worker times every round with it and the overhead measurement times the harness's
own cost with the very same loop, so what one reports is what the other subtracts.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def time_block(run: Callable[[], object], iterations: int,
               clock: Callable[[], int] = time.perf_counter_ns) -> list[int]:
    """Time ``iterations`` calls of ``run``, one sample per call, GC off inside the block."""
    samples = [0] * iterations
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(iterations):
            t0 = clock()
            run()
            samples[i] = clock() - t0
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def block_iterations(ns_per_run: float, target_ms: float, max_iters: int) -> int:
    """Iterations so one block lasts about ``target_ms``, at least 1, at most ``max_iters``."""
    if ns_per_run <= 0:
        return max_iters
    return max(1, min(max_iters, int(target_ms * 1e6 / ns_per_run)))


def slice_iterations(iterations: int, slices: int, part: int) -> int:
    """Iterations of slice ``part`` when a block of ``iterations`` is cut into ``slices``
    near-equal slices (the first ``iterations % slices`` get one more); they sum to
    ``iterations``, and a block shorter than ``slices`` leaves the last slices empty."""
    return iterations // slices + (1 if part < iterations % slices else 0)
