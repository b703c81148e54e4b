"""The measurement floor: what the harness itself costs per timed call.

Two numbers bound what any arm's time can mean: the timer's own overhead (two
back-to-back clock reads, and a timed call of a function that does nothing,
the way ``time_block`` times) and the cost of ``run_with_iobinding`` on a
trivial one-node graph on ORT's CPU EP (everything an arm pays before its EP
does any work). Every results file records them; `epbench floor` prints them.

Only the Python timing loop exists today: the engine library exports no C
timing loop, so there is nothing faster to measure it against (the floor says
so in ``loops``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# The trivial graph: one Relu node, 8 floats (an Identity would be optimized away).
FLOOR_CASE = "relu_d1_w8"
# Timed calls per measurement: enough for a steady median, a few ms in all.
FLOOR_SAMPLES = 2000
# Untimed calls first, so the first samples do not pay for cold caches.
FLOOR_WARMUP = 200


def _median(values: list[int]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def clock_pair_ns(samples: int, clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Median of two back-to-back clock reads: the timer's resolution and cost."""
    pairs = [0] * samples
    for i in range(samples):
        t0 = clock()
        pairs[i] = clock() - t0
    return _median(pairs)


def noop_call_ns(samples: int, clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Median time ``time_block`` reports for a call that does nothing."""
    from epbench.harness.worker import time_block

    return _median(time_block(lambda: None, samples, clock))


def ort_trivial_run_ns(samples: int, threads: int = 1,
                       clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Median time of the bound, timed call on the one-node case on ORT's CPU EP."""
    from epbench.cases.grids import case_by_name
    from epbench.harness.arms import parse_arm
    from epbench.harness.sessions import bind, create_session
    from epbench.harness.worker import time_block

    spec = case_by_name(FLOOR_CASE)
    built = spec.build()
    session = create_session(parse_arm("ort"), built.model_bytes, spec.opt_level, threads,
                             None, False)
    outputs = session.run(None, built.inputs)
    bound = bind(session, built.inputs, outputs)
    time_block(bound.run, FLOOR_WARMUP, clock)
    return _median(time_block(bound.run, samples, clock))


def measure_floor(samples: int = FLOOR_SAMPLES, threads: int = 1,
                  clock: Callable[[], int] = time.perf_counter_ns) -> dict[str, Any]:
    """The floor as recorded in results files (``floor``) and printed by `epbench floor`."""
    if samples < 1:
        from epbench.core.errors import EpbenchError

        raise EpbenchError("--samples must be at least 1 (2000 gives a steady median)")
    ort_ns = ort_trivial_run_ns(samples, threads, clock)
    return {
        "samples": samples,
        "timer_ns": clock_pair_ns(samples, clock),
        "noop_call_ns": noop_call_ns(samples, clock),
        "ort_trivial_run_ns": ort_ns,
        "case": FLOOR_CASE,
        "threads": threads,
        # The loop that drives timed calls, and the alternatives measured against it.
        "loop": "python",
        "loops": {"python": ort_ns, "c": None},
        "c_loop_note": "the engine library exports no C timing loop; only the Python loop "
                       "was measured",
    }


def format_floor(floor: dict[str, Any]) -> str:
    """The floor as a few lines for the terminal."""
    from epbench.reports.render import format_ns

    lines = [
        f"timer (two clock reads)        {format_ns(floor['timer_ns'])}",
        f"timed no-op call               {format_ns(floor['noop_call_ns'])}",
        f"ORT CPU, {floor['case']:<21} {format_ns(floor['ort_trivial_run_ns'])}"
        "  (run_with_iobinding, one node)",
        f"timing loop                    {floor['loop']}"
        + ("" if floor["loops"].get("c") is not None else f" ({floor['c_loop_note']})"),
        f"medians of {floor['samples']} calls, {floor['threads']} thread(s)",
    ]
    return "\n".join(lines) + "\n"
