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


# The fewest calls a slice may have: a choice near what was measured (runs with slices
# of 31 calls; a replay of kept samples down to 10;
# docs/validation/summaries.tar.xz:slices.txt). A case
# whose shortest block is too short for the requested slices gets fewer, for all its
# arms, so slow calls are not alternated one by one (where each might mostly time the
# caches the other arms left: a guess, not measured).
MIN_SLICE_CALLS = 25


def round_slices(requested: int, fewest_iterations: int) -> int:
    """Slices per block in a round: as requested, but at least MIN_SLICE_CALLS calls in
    the shortest block's slices, and at least 1."""
    return max(1, min(requested, fewest_iterations // MIN_SLICE_CALLS))


def slice_iterations(iterations: int, slices: int, part: int) -> int:
    """Iterations of slice ``part`` when a block of ``iterations`` is cut into ``slices``
    near-equal slices, spread evenly: they sum to ``iterations`` and differ by at most 1."""
    return iterations * (part + 1) // slices - iterations * part // slices


def time_sliced(blocks: list[tuple[Callable[[], object], int]], slices: int,
                clock: Callable[[], int] = time.perf_counter_ns) -> list[list[int]]:
    """Time each ``(run, iterations)`` block cut into ``slices`` slices, slice 1 of every
    block in the given order, then slice 2, ...; one sample list per block, in call order.
    GC stays off for the whole round, not only inside each slice."""
    samples: list[list[int]] = [[] for _ in blocks]
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for part in range(slices):
            for out, (run, iterations) in zip(samples, blocks, strict=True):
                out += time_block(run, slice_iterations(iterations, slices, part), clock)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples
