"""The timed loop against a fake clock: one sample per call, GC off inside a block."""

from __future__ import annotations

import gc

import pytest

from epbench.harness.timing import block_iterations, slice_iterations, time_block


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
    assert sizes == sorted(sizes, reverse=True)  # the longer slices come first
