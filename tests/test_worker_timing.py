"""The timed loop against a fake clock: one sample per call, GC off inside a block."""

from __future__ import annotations

import gc

import pytest

from epbench.harness.timing import (
    MIN_SLICE_CALLS,
    block_iterations,
    round_slices,
    slice_iterations,
    time_block,
    time_sliced,
)


class FakeClock:
    """Advances by a scripted amount on every call to run()."""

    def __init__(self, costs: list[int]) -> None:
        self.now = 1_000
        self.costs = iter(costs)

    def __call__(self) -> int:
        return self.now

    def run(self) -> None:
        self.now += next(self.costs)


def test_one_sample_per_call_measures_only_the_call() -> None:
    clock = FakeClock([5, 7, 11, 13])
    assert time_block(clock.run, 4, clock) == [5, 7, 11, 13]


def test_gc_is_off_inside_the_block_and_restored() -> None:
    seen = []
    gc.enable()
    time_block(lambda: seen.append(gc.isenabled()), 3)
    assert seen == [False, False, False]
    assert gc.isenabled()


def test_gc_state_restored_when_the_call_raises() -> None:
    gc.enable()

    def boom() -> None:
        raise RuntimeError("EP failed")

    with pytest.raises(RuntimeError):
        time_block(boom, 2)
    assert gc.isenabled()


@pytest.mark.parametrize(
    ("ns_per_run", "target_ms", "cap", "expected"),
    [(1_000, 20.0, 1000, 1000), (1_000_000, 20.0, 1000, 20), (50_000_000, 20.0, 1000, 1),
     (0, 20.0, 64, 64), (20_000, 20.0, 5000, 1000)],
)
def test_block_iterations(ns_per_run, target_ms, cap, expected) -> None:
    assert block_iterations(ns_per_run, target_ms, cap) == expected


def test_gc_left_off_when_it_was_off() -> None:
    gc.disable()
    try:
        time_block(lambda: None, 2)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_pinned_to_the_quietest_core_only_when_single_threaded(monkeypatch) -> None:
    from epbench.harness import worker

    pinned = []
    monkeypatch.setattr(worker.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(worker.os, "sched_setaffinity", lambda pid, cores: pinned.append(cores))
    monkeypatch.setattr(worker, "quietest_core", lambda allowed: 2)
    events = []
    assert worker.pin_to_quietest(1, events.append) == ([0, 1, 2], 2)
    assert pinned == [{2}]
    assert events == [{"event": "pinned", "core": 2, "cores": [0, 1, 2]}]
    # ORT's pool threads inherit the affinity: several threads keep every core.
    assert worker.pin_to_quietest(2, events.append) == ([0, 1, 2], None)
    assert pinned == [{2}]


@pytest.mark.parametrize(("iterations", "slices"), [(2000, 16), (2000, 64), (150, 64), (7, 3),
                                                    (3, 8), (1, 1), (64, 64)])
def test_slices_cover_the_block_exactly_and_differ_by_at_most_one(iterations, slices) -> None:
    sizes = [slice_iterations(iterations, slices, part) for part in range(slices)]
    assert sum(sizes) == iterations
    assert max(sizes) - min(sizes) <= 1


def test_a_block_shorter_than_its_slices_spreads_its_calls_over_the_round() -> None:
    assert [slice_iterations(3, 8, p) for p in range(8)] == [0, 0, 1, 0, 0, 1, 0, 1]


@pytest.mark.parametrize(("requested", "fewest", "expected"),
                         [(64, 2000, 64), (64, 266, 10), (64, 49, 1), (64, 1, 1), (1, 2000, 1),
                          (8, 200, 8)])
def test_a_slice_keeps_at_least_min_slice_calls_calls(requested, fewest, expected) -> None:
    assert MIN_SLICE_CALLS == 25  # the expectations below are for 25
    assert round_slices(requested, fewest) == expected


def test_sliced_blocks_alternate_in_order_with_gc_off_for_the_whole_round(monkeypatch) -> None:
    from epbench.harness import timing

    calls: list[str] = []
    gc_seen: list[bool] = []
    # time_block turns GC off inside each slice by itself: look between the slices.
    entering = []
    plain = timing.time_block
    monkeypatch.setattr(timing, "time_block",
                        lambda *a, **k: (entering.append(gc.isenabled()), plain(*a, **k))[1])

    def run(key: str):
        def call() -> None:
            calls.append(key)
            gc_seen.append(gc.isenabled())
        return call

    ticks = iter(range(0, 10_000, 1))
    gc.enable()
    samples = time_sliced([(run("a"), 3), (run("b"), 2)], 2, clock=lambda: next(ticks))
    assert "".join(calls) == "abaab"  # a: 1 + 2 calls, b: 1 + 1
    assert [len(s) for s in samples] == [3, 2]
    assert samples == [[1, 1, 1], [1, 1]]  # one sample per call: two clock reads each
    assert gc_seen == [False] * 5 and gc.isenabled()
    assert entering == [False] * 4


def test_slices_reach_every_worker_and_the_results_file(monkeypatch, tmp_path) -> None:
    """`--slices` is recorded in the file and sent to each process's worker (were it lost
    on the way, the worker would time whole blocks while the file said otherwise)."""
    from epbench.cases.grids import case_by_name
    from epbench.harness import run_config, runner, worker_process

    sent = []

    def fake_worker(request, on_event=None, silence_timeout_s=None, prefix=()):
        sent.append(request)
        return worker_process.WorkerOutcome(events=[{"event": "done"}], returncode=0,
                                            stderr_tail="")

    monkeypatch.setattr(worker_process, "run_worker", fake_worker)
    config = run_config.RunConfig(cases=(case_by_name("relu_d1_w8"),), arms=(), rounds=4,
                                  processes=2, block_slices=8, out_dir=tmp_path / "out")
    results = runner.run(config)
    assert results.config.block_slices == 8
    cases = [r for r in sent if r.get("mode") == "case"]
    assert len(cases) == 2 and all(r["config"]["block_slices"] == 8 for r in cases)


def test_slices_below_one_are_refused() -> None:
    from epbench.cases.grids import case_by_name
    from epbench.core.errors import EpbenchError
    from epbench.harness.run_config import RunConfig

    with pytest.raises(EpbenchError, match="--slices"):
        RunConfig(cases=(case_by_name("relu_d1_w8"),), arms=(), block_slices=0)
