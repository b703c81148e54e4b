"""The harness's overhead: what the harness itself costs per timed call.

Two numbers bound what any arm's time can mean: the timer's own overhead (two
back-to-back clock reads, and a timed call of a function that does nothing,
the way ``time_block`` times) and the cost of ``run_with_iobinding`` on a
trivial one-node graph on ORT's CPU EP (everything an arm pays before its EP
does any work). Every results file records them; `epbench overhead` prints them.

Only the Python timing loop exists today: the engine library exports no C
timing loop, so there is nothing faster to measure it against (the overhead
says so in ``loops``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from epbench.cases.built import BuiltCase
from epbench.cases.grids import case_by_name
from epbench.core.errors import EpbenchError
from epbench.core.numbers import median
from epbench.harness.arms import parse_arm
from epbench.harness.sessions import bind, create_session
from epbench.harness.timing import time_block

# The trivial graph: one Relu node, 8 floats (an Identity would be optimized away).
OVERHEAD_CASE = "relu_d1_w8"
# Timed calls per measurement: enough for a steady median, a few ms in all.
OVERHEAD_SAMPLES = 2000
# Untimed calls first, so the first samples do not pay for cold caches.
OVERHEAD_WARMUP = 200


def clock_pair_ns(samples: int, clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Median of two back-to-back clock reads: the timer's resolution and cost."""
    pairs = [0] * samples
    for i in range(samples):
        t0 = clock()
        pairs[i] = clock() - t0
    return median(pairs)


def noop_call_ns(samples: int, clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Median time ``time_block`` reports for a call that does nothing."""
    return median(time_block(lambda: None, samples, clock))


def ort_trivial_run_ns(samples: int, threads: int = 1,
                       clock: Callable[[], int] = time.perf_counter_ns,
                       built: BuiltCase | None = None) -> float:
    """Median time of the bound, timed call on the one-node case on ORT's CPU EP
    (``built``: that case already built, as a worker gets it; else it is built here)."""
    spec = case_by_name(OVERHEAD_CASE)
    if built is None:
        built = spec.build()
    session = create_session(parse_arm("ort"), built.model_bytes, spec.opt_level, threads,
                             None, False)
    outputs = session.run(None, built.inputs)
    bound = bind(session, built.inputs, outputs)
    time_block(bound.run, OVERHEAD_WARMUP, clock)
    return median(time_block(bound.run, samples, clock))


def measure_overhead(samples: int = OVERHEAD_SAMPLES, threads: int = 1,
                     clock: Callable[[], int] = time.perf_counter_ns,
                     built: BuiltCase | None = None) -> dict[str, Any]:
    """The overhead as recorded in results files and printed by `epbench overhead`."""
    if samples < 1:

        raise EpbenchError("--samples must be at least 1 (2000 gives a steady median)")
    ort_ns = ort_trivial_run_ns(samples, threads, clock, built)
    return {
        "samples": samples,
        "timer_ns": clock_pair_ns(samples, clock),
        "noop_call_ns": noop_call_ns(samples, clock),
        "ort_trivial_run_ns": ort_ns,
        "case": OVERHEAD_CASE,
        "threads": threads,
        # The loop that drives timed calls, and the alternatives measured against it.
        "loop": "python",
        "loops": {"python": ort_ns, "c": None},
        "c_loop_note": "the engine library exports no C timing loop; only the Python loop "
                       "was measured",
    }
