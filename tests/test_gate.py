"""The idle gate: /proc/stat parsing from fixture files, usage between two
snapshots, the wait/strict/off policies on a fake clock with scripted
readings, the interference meter, the quietest core and the terminal line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from epbench.core.errors import EXIT_GATE, GateError
from epbench.harness.gate import (
    FIRST_BACKOFF_S,
    MAX_BACKOFF_S,
    GateReading,
    IdleGate,
    current_gate_state,
    format_gate_reading,
    quietest_core,
)
from epbench.harness.interference import (
    MAX_METER_MARKS,
    InterferenceMeter,
    carried_from_meter,
    longest_window_one_busy_tick_fails,
)
from epbench.harness.proc_stat import (
    CoreUsage,
    CpuTimes,
    parse_proc_stat,
    read_proc_stat,
    usage_between,
)

FIXTURES = Path(__file__).parent / "fixtures" / "proc_stat"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def fixture_usage(pair: str) -> dict[str, CoreUsage]:
    return usage_between(
        parse_proc_stat(fixture(f"{pair}.before")), parse_proc_stat(fixture(f"{pair}.after"))
    )


class FakeClock:
    """time.monotonic and time.sleep in one: sleeping advances the clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedStat:
    """A fake /proc/stat whose every look (two reads) advances each core by
    the scripted ticks. A look is {core: (busy, idle, steal)}; busy ticks are
    charged to `user`. Looking more often than scripted fails the test."""

    def __init__(self, looks: list[dict[int, tuple[int, int, int]]]) -> None:
        self.looks = looks
        self.reads = 0
        cores = sorted({c for look in looks for c in look})
        self.counters = {c: [1000, 0, 500, 90000, 0, 0, 0, 0] for c in cores}

    def read(self) -> str:
        if self.reads % 2 == 1:  # the read that closes a look
            look_index = self.reads // 2
            assert look_index < len(self.looks), "the gate looked more often than scripted"
            for core, (busy, idle, steal) in self.looks[look_index].items():
                self.counters[core][0] += busy
                self.counters[core][3] += idle
                self.counters[core][7] += steal
        self.reads += 1
        rows = [f"cpu{c} " + " ".join(map(str, v)) for c, v in self.counters.items()]
        total = [sum(col) for col in zip(*self.counters.values(), strict=True)]
        return "\n".join(["cpu  " + " ".join(map(str, total)), *rows, "ctxt 1"]) + "\n"

    @property
    def looks_taken(self) -> int:
        return self.reads // 2


IDLE = (0, 5, 0)  # a core fully idle over a 5-tick (50 ms) window
BUSY = (2, 3, 0)  # 60 % idle


def gate_with(stat: ScriptedStat, clock: FakeClock, **kwargs) -> IdleGate:
    kwargs.setdefault("cores", [0, 1])
    return IdleGate(clock=clock.clock, sleep=clock.sleep, read=stat.read, **kwargs)


# ---- parsing -----------------------------------------------------------------


def test_parse_modern_format_reads_every_cpu_row_and_all_ten_columns() -> None:
    rows = parse_proc_stat(fixture("steal_vm.before"))
    assert sorted(rows) == ["cpu", "cpu0", "cpu1", "cpu2", "cpu3"]
    assert rows["cpu0"] == CpuTimes(110200, 300, 42010, 1498100, 5100, 0, 1900, 40110, 10400, 0)


def test_parse_old_kernel_fills_missing_columns_with_zero() -> None:
    rows = parse_proc_stat(fixture("old_kernel_2_4.before"))
    assert sorted(rows) == ["cpu", "cpu0", "cpu1"]  # page/swap/disk_io lines are skipped
    assert rows["cpu1"] == CpuTimes(600, 20, 400, 48980)
    assert rows["cpu1"].steal == 0 and rows["cpu1"].iowait == 0


def test_parse_2_6_0_format_has_iowait_irq_softirq_but_no_steal() -> None:
    rows = parse_proc_stat("cpu  10 1 5 900 7 2 3\ncpu0 10 1 5 900 7 2 3\n")
    assert rows["cpu0"] == CpuTimes(10, 1, 5, 900, 7, 2, 3, 0, 0, 0)


def test_parse_ignores_columns_a_future_kernel_might_add() -> None:
    rows = parse_proc_stat("cpu0 1 2 3 4 5 6 7 8 9 10 11 12\n")
    assert rows["cpu0"] == CpuTimes(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)


@pytest.mark.parametrize(
    "text, message",
    [
        ("intr 1 2 3\nctxt 4\n", "no cpu rows"),
        ("cpu0 1 2 3\n", "has 3 columns"),
        ("cpu0 1 2 x 4\n", "not numeric"),
    ],
)
def test_parse_refuses_malformed_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_proc_stat(text)


def test_this_machines_proc_stat_parses() -> None:
    rows = parse_proc_stat(read_proc_stat())
    assert "cpu" in rows and "cpu0" in rows


# ---- usage between two snapshots --------------------------------------------


@pytest.mark.parametrize(
    "pair, expected",
    [
        ("idle_2core", {"cpu": (0.98, 0.0), "cpu0": (0.97, 0.0), "cpu1": (0.99, 0.0)}),
        (
            "busy_4core",
            {
                "cpu": (0.735, 0.0),
                "cpu0": (0.96, 0.0),
                "cpu1": (0.98, 0.0),
                "cpu2": (0.05, 0.0),
                "cpu3": (0.95, 0.0),
            },
        ),
        (
            # cpu0 ran a guest for 10 of its 30 user ticks: counted once, not twice.
            "steal_vm",
            {
                "cpu": (0.81, 0.0975),
                "cpu0": (0.45, 0.20),
                "cpu1": (0.90, 0.08),
                "cpu2": (0.97, 0.03),
                "cpu3": (0.92, 0.08),
            },
        ),
        ("old_kernel_2_4", {"cpu": (0.945, 0.0), "cpu0": (0.90, 0.0), "cpu1": (0.99, 0.0)}),
    ],
)
def test_usage_between_fixture_snapshots(pair: str, expected: dict) -> None:
    usage = fixture_usage(pair)
    assert sorted(usage) == sorted(expected)
    for name, (idle, steal) in expected.items():
        assert usage[name].idle == pytest.approx(idle, abs=1e-12), name
        assert usage[name].steal == pytest.approx(steal, abs=1e-12), name
    assert usage["cpu0"].ticks == 100


def test_iowait_counts_as_idle() -> None:
    # idle_2core cpu1: 98 idle + 1 iowait of 100 ticks.
    assert fixture_usage("idle_2core")["cpu1"].idle == pytest.approx(0.99, abs=1e-12)


def test_counter_going_backwards_counts_as_zero() -> None:
    before = parse_proc_stat("cpu0 100 0 100 1000 50 0 0 0 0 0\n")
    after = parse_proc_stat("cpu0 110 0 100 1090 40 0 0 0 0 0\n")  # iowait -10
    usage = usage_between(before, after)["cpu0"]
    assert usage == CoreUsage(idle=0.9, steal=0.0, ticks=100)


def test_core_without_elapsed_ticks_reads_as_idle() -> None:
    snap = parse_proc_stat("cpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert usage_between(snap, snap)["cpu0"] == CoreUsage(idle=1.0, steal=0.0, ticks=0)


def test_core_taken_offline_is_left_out() -> None:
    before = parse_proc_stat(fixture("idle_2core.before"))
    after = parse_proc_stat(fixture("idle_2core.after").replace("cpu1 ", "xcpu1 "))
    assert sorted(usage_between(before, after)) == ["cpu", "cpu0"]


# ---- policies ----------------------------------------------------------------


def test_wait_passes_on_first_quiet_look_without_backoff() -> None:
    stat, clock = ScriptedStat([{0: IDLE, 1: IDLE}]), FakeClock()
    reading = gate_with(stat, clock, window_s=0.05).check()
    assert reading.passed and reading.attempts == 1
    assert clock.sleeps == [0.05]  # just the window
    assert reading.waited_s == pytest.approx(0.05)
    assert reading.idle == {"cpu0": 1.0, "cpu1": 1.0}


def test_wait_backs_off_doubling_until_the_cores_are_quiet() -> None:
    stat = ScriptedStat([{0: IDLE, 1: BUSY}, {0: BUSY, 1: IDLE}, {0: IDLE, 1: IDLE}])
    clock = FakeClock()
    reading = gate_with(stat, clock, window_s=0.05, max_wait_s=5.0).check()
    assert reading.passed and reading.attempts == 3 and stat.looks_taken == 3
    # window, pause 0.05, window, pause 0.1, window
    assert clock.sleeps == pytest.approx([0.05, FIRST_BACKOFF_S, 0.05, 2 * FIRST_BACKOFF_S, 0.05])
    assert reading.waited_s == pytest.approx(0.30)


def test_wait_gives_up_at_max_wait_and_marks_the_round_unquiet() -> None:
    stat = ScriptedStat([{0: IDLE, 1: BUSY}] * 4)
    clock = FakeClock()
    reading = gate_with(stat, clock, window_s=0.05, max_wait_s=0.5).check()
    # looks end at 0.05, 0.15, 0.30, 0.55; pauses 0.05, 0.1, 0.2 (the last one
    # is what remained of the 0.5 s allowance); then the fourth look fails too.
    assert not reading.passed and reading.attempts == 4
    assert clock.sleeps == pytest.approx([0.05, 0.05, 0.05, 0.1, 0.05, 0.2, 0.05])
    assert reading.waited_s == pytest.approx(0.55)
    assert reading.idle == {"cpu0": 1.0, "cpu1": 0.6}


def test_wait_truncates_the_last_pause_to_the_allowance() -> None:
    stat = ScriptedStat([{0: BUSY, 1: IDLE}] * 3)
    clock = FakeClock()
    reading = gate_with(stat, clock, window_s=0.05, max_wait_s=0.2).check()
    # looks end at 0.05, 0.15; pauses 0.05 then only 0.05 of the 0.1 due.
    assert reading.attempts == 3 and not reading.passed
    assert clock.sleeps == pytest.approx([0.05, 0.05, 0.05, 0.05, 0.05])


def test_wait_look_ending_on_max_wait_is_the_last_despite_float_sums() -> None:
    # Looks end at 0.1, 0.25, 0.45, 0.75; the clock sums the last to
    # 0.7499999999999999, which must not buy a 1e-16 s pause and a fifth look.
    stat = ScriptedStat([{0: BUSY, 1: IDLE}] * 5)
    clock = FakeClock()
    reading = gate_with(stat, clock, window_s=0.1, max_wait_s=0.75).check()
    assert reading.attempts == 4 and stat.looks_taken == 4
    assert clock.sleeps[1::2] == pytest.approx([0.05, 0.1, 0.2])


def test_wait_backoff_is_capped() -> None:
    stat = ScriptedStat([{0: BUSY, 1: BUSY}] * 8)
    clock = FakeClock()
    gate_with(stat, clock, window_s=0.05, max_wait_s=3.0).check()
    pauses = clock.sleeps[1::2]
    assert pauses[:6] == pytest.approx([0.05, 0.1, 0.2, 0.4, MAX_BACKOFF_S, MAX_BACKOFF_S])
    assert max(pauses) == MAX_BACKOFF_S


def test_wait_budget_caps_waiting_across_checks() -> None:
    stat = ScriptedStat([{0: BUSY, 1: IDLE}] * 4)
    clock = FakeClock()
    gate = gate_with(stat, clock, window_s=0.05, max_wait_s=10.0, budget_s=0.12)
    first = gate.check()
    # pauses 0.05 and then 0.07 (what is left of the budget), three looks.
    assert first.attempts == 3 and not first.passed
    assert clock.sleeps[1::2] == pytest.approx([0.05, 0.07])
    second = gate.check()  # the budget is spent: one look, no pause
    assert second.attempts == 1 and not second.passed
    assert stat.looks_taken == 4


def test_threshold_is_inclusive() -> None:
    at_threshold = {0: (7, 93, 0), 1: (0, 100, 0)}
    below = {0: (8, 92, 0), 1: (0, 100, 0)}
    reading = gate_with(ScriptedStat([at_threshold]), FakeClock(), policy="strict").check()
    assert reading.passed and reading.idle["cpu0"] == pytest.approx(0.93)
    with pytest.raises(GateError):
        gate_with(ScriptedStat([below]), FakeClock(), policy="strict").check()


def test_steal_counts_against_idle() -> None:
    stolen = {0: (0, 90, 10), 1: (0, 100, 0)}  # never busy, but 10 % stolen
    reading = gate_with(ScriptedStat([stolen]), FakeClock(), policy="wait", max_wait_s=0).check()
    assert not reading.passed
    assert reading.idle["cpu0"] == pytest.approx(0.9)
    assert reading.steal["cpu0"] == pytest.approx(0.1)


def test_strict_raises_after_one_look_with_a_remedy() -> None:
    stat, clock = ScriptedStat([{0: IDLE, 1: BUSY}]), FakeClock()
    with pytest.raises(GateError) as caught:
        gate_with(stat, clock, policy="strict").check()
    message = caught.value.message
    assert "busy" in message and "cpu1 was 60.0% idle" in message
    assert "`--gate wait`" in message and "`--gate off`" in message
    assert caught.value.exit_code == EXIT_GATE
    assert stat.looks_taken == 1 and len(clock.sleeps) == 1


def test_strict_passes_a_quiet_machine() -> None:
    stat = ScriptedStat([{0: IDLE, 1: IDLE}])
    assert gate_with(stat, FakeClock(), policy="strict").check().passed


def test_off_neither_reads_nor_sleeps() -> None:
    def no_read() -> str:
        raise AssertionError("the gate read /proc/stat with policy off")

    clock = FakeClock()
    gate = IdleGate(policy="off", cores=[0, 1], clock=clock.clock, sleep=clock.sleep, read=no_read)
    reading = gate.check(exclude_core=1)
    assert reading == GateReading(
        passed=True, idle={}, steal={}, waited_s=0.0, attempts=0, excluded_core=1
    )
    assert clock.sleeps == []


def test_excluded_core_is_not_judged() -> None:
    busy_own_core = [{0: IDLE, 1: (5, 0, 0)}]
    reading = gate_with(ScriptedStat(busy_own_core), FakeClock(), policy="strict").check(
        exclude_core=1
    )
    assert reading.passed and reading.idle == {"cpu0": 1.0} and reading.excluded_core == 1
    with pytest.raises(GateError):
        gate_with(ScriptedStat(busy_own_core), FakeClock(), policy="strict").check()


def test_only_the_configured_cores_are_judged() -> None:
    stat = ScriptedStat([{0: IDLE, 1: BUSY, 2: IDLE}])
    reading = gate_with(stat, FakeClock(), cores=[0, 2], policy="strict").check()
    assert reading.passed and sorted(reading.idle) == ["cpu0", "cpu2"]


def test_nothing_left_to_judge_passes() -> None:
    stat = ScriptedStat([{0: BUSY}])
    reading = gate_with(stat, FakeClock(), cores=[0], policy="strict").check(exclude_core=0)
    assert reading.passed and reading.idle == {}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"policy": "sometimes"},
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"window_s": 0.0},
        {"max_wait_s": -1.0},
    ],
)
def test_bad_gate_settings_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        IdleGate(cores=[0], **kwargs)


def test_reading_to_dict_is_rounded_and_sorted() -> None:
    reading = GateReading(
        passed=False,
        idle={"cpu1": 0.6, "cpu0": 0.987654},
        steal={"cpu1": 0.0, "cpu0": 0.012345},
        waited_s=0.55000001,
        attempts=4,
        threshold=0.93,
        excluded_core=None,
    )
    as_dict = reading.to_dict()
    assert as_dict == {
        "attempts": 4,
        "carried": False,
        "excluded_core": None,
        "idle": {"cpu0": 0.9877, "cpu1": 0.6},
        "passed": False,
        "steal": {"cpu0": 0.0123, "cpu1": 0.0},
        "threshold": 0.93,
        "waited_s": 0.55,
    }
    assert list(as_dict["idle"]) == ["cpu0", "cpu1"]


# ---- interference across a round --------------------------------------------


def test_interference_records_other_cores_and_own_steal() -> None:
    # One "look" = start() and stop(): cpu0 (ours) busy and 10 % stolen, cpu1 mostly idle.
    stat = ScriptedStat([{0: (18, 0, 2), 1: (1, 19, 0)}])
    clock = FakeClock()
    meter = InterferenceMeter(
        exclude_core=0, cores=[0, 1], threshold=0.93, clock=clock.clock, read=stat.read
    )
    meter.start()
    clock.now += 0.2
    result = meter.stop()
    assert result == {
        "elapsed_s": 0.2,
        "idle": {"cpu1": 0.95},
        "lookback_s": 0.0,
        "max_steal": 0.0,
        "min_idle": 0.95,
        "own_core": 0,
        "own_steal": 0.1,
        "quiet": True,
        "steal": {"cpu1": 0.0},
        "threshold": 0.93,
        "ticks": 20,
    }


def test_interference_does_not_judge_a_round_of_too_few_ticks() -> None:
    # 4 ticks, one of them busy: 75 % idle is an accident of tick granularity.
    stat = ScriptedStat([{0: (4, 0, 0), 1: (1, 3, 0)}])
    meter = InterferenceMeter(exclude_core=0, cores=[0, 1], threshold=0.93, read=stat.read)
    meter.start()
    result = meter.stop()
    assert result["quiet"] is None
    assert result["ticks"] == 4
    assert result["idle"] == {} and result["own_steal"] is None


def test_interference_flags_a_busy_other_core() -> None:
    stat = ScriptedStat([{0: (20, 0, 0), 1: (3, 17, 0), 2: (0, 20, 0)}])
    meter = InterferenceMeter(exclude_core=0, cores=[0, 1, 2], read=stat.read)
    meter.start()
    result = meter.stop()
    assert result["quiet"] is False
    assert result["idle"] == {"cpu1": 0.85, "cpu2": 1.0} and result["min_idle"] == 0.85


class LiveStat:
    """A fake /proc/stat that moves only when told: `spend(core, busy, idle)` adds
    ticks (busy ones to `user`), and every read returns the counters as they stand."""

    def __init__(self, cores: list[int]) -> None:
        self.counters = {c: [1000, 0, 500, 90000, 0, 0, 0, 0] for c in cores}

    def spend(self, core: int, busy: int = 0, idle: int = 0, steal: int = 0) -> None:
        self.counters[core][0] += busy
        self.counters[core][3] += idle
        self.counters[core][7] += steal

    def read(self) -> str:
        rows = [f"cpu{c} " + " ".join(map(str, v)) for c, v in self.counters.items()]
        return "\n".join(rows) + "\n"


def _metered_round(meter: InterferenceMeter, stat: LiveStat, clock: FakeClock,
                   other_busy: int, other_idle: int) -> dict:
    """One round of 10 ms a tick: the worker's core 0 busy, core 1 as given."""
    meter.start()
    ticks = other_busy + other_idle
    stat.spend(0, busy=ticks)
    stat.spend(1, busy=other_busy, idle=other_idle)
    clock.now += ticks / 100
    return meter.stop()


def _live_meter(cores: tuple[int, ...] = (0, 1)
                ) -> tuple[InterferenceMeter, LiveStat, FakeClock]:
    """A meter for a worker on core 0, over a LiveStat of `cores` and a fake clock."""
    stat, clock = LiveStat(list(cores)), FakeClock()
    return (InterferenceMeter(exclude_core=0, cores=list(cores), threshold=0.93,
                              clock=clock.clock, read=stat.read), stat, clock)


def _round_over(meter: InterferenceMeter, stat: LiveStat,
                ticks: dict[int, tuple[int, int]]) -> dict:
    """One round in which each core spends (busy, idle) ticks."""
    meter.start()
    for core, (busy, idle) in ticks.items():
        stat.spend(core, busy=busy, idle=idle)
    return meter.stop()


def test_a_round_too_short_alone_is_judged_over_the_rounds_before_it() -> None:
    meter, stat, clock = _live_meter()
    first = _metered_round(meter, stat, clock, 0, 3)
    assert (first["quiet"], first["ticks"], first["lookback_s"]) == (None, 3, None)
    clock.now += 0.005  # between rounds: the next round's re-warm
    second = _metered_round(meter, stat, clock, 0, 3)
    # From the first round's start: 6 ticks, all idle; 0.035 s back from this round's start.
    assert (second["quiet"], second["ticks"], second["idle"]) == (True, 6, {"cpu1": 1.0})
    assert second["lookback_s"] == 0.035 and second["elapsed_s"] == 0.03


def test_a_busy_tick_in_the_rounds_reached_back_over_makes_the_round_unquiet() -> None:
    meter, stat, clock = _live_meter()
    _metered_round(meter, stat, clock, 1, 2)
    second = _metered_round(meter, stat, clock, 0, 3)
    assert second["quiet"] is False and second["min_idle"] == round(5 / 6, 4)


def test_a_round_long_enough_alone_does_not_reach_back() -> None:
    meter, stat, clock = _live_meter()
    assert _metered_round(meter, stat, clock, 1, 5)["quiet"] is False
    second = _metered_round(meter, stat, clock, 0, 5)
    assert (second["quiet"], second["ticks"], second["lookback_s"]) == (True, 5, 0.0)


def test_a_window_reaches_back_to_the_shortest_that_holds_enough_ticks() -> None:
    # A busy round, then two short idle ones: the third is judged from the second's
    # start (6 idle ticks), not from the busy round's.
    meter, stat, clock = _live_meter()
    _metered_round(meter, stat, clock, 2, 4)
    _metered_round(meter, stat, clock, 0, 3)
    third = _metered_round(meter, stat, clock, 0, 3)
    assert (third["quiet"], third["ticks"], third["lookback_s"]) == (True, 6, 0.03)


def _gate_over(stat: LiveStat, clock: FakeClock, looks: list[tuple[int, int]]) -> IdleGate:
    """A gate whose looks (and back-off pauses) spend ticks: look i of the script
    gives core 1 (busy, idle) ticks and core 0 idle ones; pauses are idle."""
    script = iter(looks)
    sleeps = []

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        sleeps.append(seconds)
        if len(sleeps) % 2 == 1:  # a look's window; pauses come between looks
            busy, idle = next(script)
            stat.spend(1, busy=busy, idle=idle)
            stat.spend(0, idle=busy + idle)
        else:
            stat.spend(1, idle=round(seconds * 100))
            stat.spend(0, idle=round(seconds * 100))

    return IdleGate(cores=[0, 1], clock=clock.clock, sleep=sleep, read=stat.read)


def test_the_gate_s_look_marked_before_a_round_is_reached_back_to() -> None:
    meter, stat, clock = _live_meter()
    gate = _gate_over(stat, clock, [(0, 5)])
    assert gate.last_look_start is None
    stat.spend(1, busy=1)  # before the look: not in its window
    assert gate.check().passed
    assert gate.last_look_start is not None and gate.last_look_start[0] == 0.0
    meter.mark(*gate.last_look_start)
    clock.now += 0.002
    reading = _metered_round(meter, stat, clock, 0, 2)
    # From the look's start: its 5 idle ticks and the round's 2, not the busy one before.
    assert (reading["quiet"], reading["ticks"], reading["lookback_s"]) == (True, 7, 0.052)


def test_the_window_starts_at_the_last_look_of_a_check_that_waited() -> None:
    # The first look sees a busy tick, the gate pauses 50 ms and looks again: the
    # round's window starts at that second look, not over the busy one.
    meter, stat, clock = _live_meter()
    gate = _gate_over(stat, clock, [(1, 4), (0, 5)])
    reading = gate.check()
    assert reading.passed and reading.attempts == 2
    meter.mark(*gate.last_look_start)
    reading = _metered_round(meter, stat, clock, 0, 2)
    assert (reading["quiet"], reading["ticks"]) == (True, 7)


def test_the_longest_window_in_which_one_busy_tick_fails() -> None:
    assert longest_window_one_busy_tick_fails(0.93) == 14  # 13/14 < 0.93 <= 14/15
    assert longest_window_one_busy_tick_fails(0.9) == 9  # 9/10 is not below 0.9
    assert longest_window_one_busy_tick_fails(0.75) == 3
    assert longest_window_one_busy_tick_fails(1.0) is None


@pytest.mark.parametrize(("gap", "quiet", "ticks"), [(11, False, 14), (12, None, 3)])
def test_a_window_reaches_back_only_as_far_as_one_busy_tick_still_fails(gap, quiet, ticks):
    # A round, a gap with no snapshot, then a 3-tick round with a busy tick on core 1:
    # the shortest window reaching back starts at the first round's end. At 14 ticks
    # the busy one fails it; at 15 it would pass 0.93, so the round is left unjudged.
    meter, stat, clock = _live_meter()
    _metered_round(meter, stat, clock, 0, 3)
    stat.spend(1, idle=gap)
    stat.spend(0, idle=gap)
    clock.now += gap / 100
    second = _metered_round(meter, stat, clock, 1, 2)
    assert (second["quiet"], second["ticks"]) == (quiet, ticks)


def test_the_reach_back_limit_is_the_judged_core_with_the_most_ticks() -> None:
    # Reaching back to the first round's end: core 2 then holds 5 ticks, enough to
    # judge, but core 1 holds 15, where its busy tick would pass 0.93: not judged.
    meter, stat, _ = _live_meter((0, 1, 2))
    _round_over(meter, stat, {0: (3, 0), 1: (0, 3), 2: (0, 3)})
    stat.spend(1, idle=12)
    stat.spend(2, idle=2)
    assert _round_over(meter, stat, {0: (3, 0), 1: (1, 2), 2: (0, 3)})["quiet"] is None


def test_a_mark_stamped_after_the_round_s_start_is_not_reached_back_to() -> None:
    # Not in the worker (one clock, in order), but a window must hold the whole round:
    # a handed snapshot stamped later than the round's start is dropped, not used.
    meter, stat, clock = _live_meter()
    before_load = parse_proc_stat(stat.read())
    stat.spend(1, busy=3)
    meter.mark(0.3, before_load)
    reading = _metered_round(meter, stat, clock, 0, 2)
    assert (reading["quiet"], reading["ticks"], reading["elapsed_s"]) == (None, 2, 0.02)


def test_a_long_round_is_judged_alone_whatever_its_length() -> None:
    # The reach-back limit is for windows reaching back: a round of 30 ticks with one
    # busy one is judged alone, as always (29/30 passes 0.93).
    meter, stat, clock = _live_meter()
    reading = _metered_round(meter, stat, clock, 1, 29)
    assert (reading["quiet"], reading["ticks"], reading["lookback_s"]) == (True, 30, 0.0)


def test_a_window_holds_enough_ticks_on_every_judged_core() -> None:
    # Core 1 has 5 ticks (one busy), core 2 only 3: the fewest decide, so the round
    # (with nothing before it) is not judged.
    meter, stat, _ = _live_meter((0, 1, 2))
    reading = _round_over(meter, stat, {0: (5, 0), 1: (1, 4), 2: (0, 3)})
    assert (reading["quiet"], reading["ticks"]) == (None, 3)


def test_the_own_core_s_steal_is_a_share_of_its_running_time() -> None:
    # The window reaches back over a gate look the worker slept through (its core
    # idle); 1 of the round's 3 ticks was stolen: a third, not an eighth.
    meter, stat, clock = _live_meter()
    meter.mark(0.0, parse_proc_stat(stat.read()))
    stat.spend(0, idle=5)
    stat.spend(1, idle=5)
    clock.now += 0.05
    meter.start()
    stat.spend(0, busy=2, steal=1)
    stat.spend(1, idle=3)
    clock.now += 0.03
    reading = meter.stop()
    assert (reading["quiet"], reading["ticks"]) == (True, 8)
    assert reading["own_steal"] == 0.3333


def test_with_no_other_core_the_own_core_s_steal_is_the_round_s() -> None:
    # Nothing to judge, so no window reaches back: the steal of earlier rounds does
    # not colour a round that had none.
    meter, stat, _ = _live_meter((0,))
    for _ in range(3):
        meter.start()
        stat.spend(0, busy=5, steal=5)
        meter.stop()
    reading = _round_over(meter, stat, {0: (10, 0)})
    assert (reading["quiet"], reading["lookback_s"], reading["own_steal"]) == (None, None, 0.0)


def test_a_mark_older_than_the_latest_is_ignored() -> None:
    meter, stat, clock = _live_meter()
    _metered_round(meter, stat, clock, 0, 3)
    older = LiveStat([0, 1])
    older.counters[1][0] -= 9  # a window from it would hold 9 busy ticks of core 1
    meter.mark(-1.0, parse_proc_stat(older.read()))
    second = _metered_round(meter, stat, clock, 0, 3)
    assert second["quiet"] is True and second["ticks"] == 6


def test_a_window_reaches_back_over_a_bounded_number_of_snapshots() -> None:
    # A busy round, then rounds that see no tick on the other core, each after a
    # handed look snapshot: the window can reach the busy round's start only while
    # that is among the last MAX_METER_MARKS snapshots.
    meter, stat, clock = _live_meter()
    assert _metered_round(meter, stat, clock, 5, 0)["quiet"] is False
    seen = []
    for _ in range(MAX_METER_MARKS // 3 + 1):
        meter.mark(clock.now, parse_proc_stat(stat.read()))
        seen.append(_metered_round(meter, stat, clock, 0, 0)["quiet"])
    # Kept: the busy round's start and end, then a look, a start and an end a round:
    # round k's start makes 3k + 1, so the busy start is gone once 3k + 1 > the cap.
    reachable = (MAX_METER_MARKS - 1) // 3
    assert seen == [False] * reachable + [None] * (len(seen) - reachable)


def test_interference_stop_without_start_is_an_error() -> None:
    meter = InterferenceMeter(cores=[0], read=lambda: "cpu0 1 1 1 1\n")
    with pytest.raises(RuntimeError):
        meter.stop()


# ---- the quietest core -------------------------------------------------------


def test_quietest_core_takes_the_most_idle() -> None:
    stat, clock = ScriptedStat([{0: (3, 7, 0), 1: (1, 9, 0), 2: (2, 8, 0)}]), FakeClock()
    assert quietest_core({0, 1, 2}, read=stat.read, sleep=clock.sleep, window_s=0.1) == 1
    assert clock.sleeps == [0.1]


def test_quietest_core_breaks_idle_ties_by_lower_steal() -> None:
    stat = ScriptedStat([{0: (0, 9, 1), 1: (1, 9, 0)}])  # both 90 % idle
    assert quietest_core({0, 1}, read=stat.read, sleep=FakeClock().sleep) == 1
    stat = ScriptedStat([{0: (1, 9, 0), 1: (0, 9, 1)}])
    assert quietest_core({0, 1}, read=stat.read, sleep=FakeClock().sleep) == 0


def test_quietest_core_breaks_full_ties_away_from_core_zero() -> None:
    stat = ScriptedStat([{0: IDLE, 1: IDLE, 2: IDLE}])
    assert quietest_core({0, 1, 2}, read=stat.read, sleep=FakeClock().sleep) == 2


def test_quietest_core_only_considers_allowed_cores() -> None:
    stat = ScriptedStat([{0: BUSY, 1: BUSY, 2: IDLE, 3: BUSY}])
    assert quietest_core({0, 1, 3}, read=stat.read, sleep=FakeClock().sleep) in {0, 1, 3}


def test_quietest_core_of_one_does_not_look() -> None:
    def no_read() -> str:
        raise AssertionError("looked at /proc/stat for a single allowed core")

    assert quietest_core({5}, read=no_read, sleep=FakeClock().sleep) == 5
    with pytest.raises(ValueError):
        quietest_core(set(), read=no_read)


# ---- the terminal line and `epbench gate` ------------------------------------


def test_format_passing_reading() -> None:
    reading = GateReading(
        passed=True,
        idle={"cpu0": 0.99, "cpu1": 0.975},
        steal={"cpu0": 0.0, "cpu1": 0.005},
        waited_s=0.05,
        attempts=1,
        threshold=0.93,
    )
    assert format_gate_reading(reading) == (
        "gate ok: cpu0 idle 99.0% steal 0.0%, cpu1 idle 97.5% steal 0.5% "
        "(threshold 93%, 1 look in 0.05 s)"
    )


def test_format_busy_reading_with_excluded_core() -> None:
    reading = GateReading(
        passed=False,
        idle={"cpu1": 0.6},
        steal={"cpu1": 0.0},
        waited_s=2.1,
        attempts=5,
        threshold=0.93,
        excluded_core=0,
    )
    assert format_gate_reading(reading) == (
        "gate BUSY: cpu1 idle 60.0% steal 0.0%, cpu0 excluded (threshold 93%, 5 looks in 2.10 s)"
    )


def test_format_many_cores_is_summarised_on_one_line() -> None:
    idle = {f"cpu{i}": 1.0 for i in range(16)}
    steal = {f"cpu{i}": 0.0 for i in range(16)}
    idle["cpu12"], steal["cpu3"] = 0.5, 0.25
    reading = GateReading(passed=False, idle=idle, steal=steal, waited_s=0.05, attempts=1)
    line = format_gate_reading(reading)
    assert line == (
        "gate BUSY: 16 cores, lowest idle 50.0% (cpu12), highest steal 25.0% (cpu3) "
        "(threshold 93%, 1 look in 0.05 s)"
    )
    assert "\n" not in line


def test_format_off() -> None:
    off = GateReading(passed=True, idle={}, steal={}, waited_s=0.0, attempts=0)
    assert format_gate_reading(off) == "gate off: not checked"


def test_current_gate_state_looks_once_and_does_not_raise() -> None:
    stat, clock = ScriptedStat([{0: (0, 25, 0), 1: (10, 15, 0)}]), FakeClock()
    reading = current_gate_state(
        0.93, cores=[0, 1], clock=clock.clock, sleep=clock.sleep, read=stat.read
    )
    assert not reading.passed and reading.attempts == 1
    assert reading.idle == {"cpu0": 1.0, "cpu1": 0.6}
    assert clock.sleeps == [0.25]  # the longer one-shot window


def test_by_default_every_listed_core_is_judged_not_the_aggregate() -> None:
    # A worker that pinned itself must still judge the other cores: the
    # default is /proc/stat's list, not this process's affinity.
    stat = ScriptedStat([{0: IDLE, 1: IDLE, 7: BUSY}])
    clock = FakeClock()
    gate = IdleGate(
        policy="wait", max_wait_s=0, clock=clock.clock, sleep=clock.sleep, read=stat.read
    )
    reading = gate.check(exclude_core=0)
    assert sorted(reading.idle) == ["cpu1", "cpu7"] and not reading.passed


def test_interference_defaults_to_every_listed_core() -> None:
    stat = ScriptedStat([{0: (20, 0, 0), 1: IDLE, 5: IDLE}])
    meter = InterferenceMeter(exclude_core=0, read=stat.read)
    meter.start()
    assert sorted(meter.stop()["idle"]) == ["cpu1", "cpu5"]


def test_current_gate_state_defaults_to_this_process_affinity() -> None:
    import os

    allowed = sorted(os.sched_getaffinity(0))
    far_core = max(allowed) + 64  # listed by the fake /proc/stat, never in our affinity
    stat = ScriptedStat([{**{c: IDLE for c in allowed}, far_core: BUSY}])
    reading = current_gate_state(read=stat.read, sleep=FakeClock().sleep)
    assert sorted(reading.idle) == sorted(f"cpu{c}" for c in allowed) and reading.passed


def test_default_wait_limits() -> None:
    # Per round: looks end at 0.05, 0.15, 0.30, 0.55, 1.00 (pauses 0.05, 0.1,
    # 0.2, 0.4 = 0.75 s), then the 1 s allowance is spent.
    stat, clock = ScriptedStat([{0: BUSY, 1: IDLE}] * 70), FakeClock()
    gate = gate_with(stat, clock)
    assert gate.check().attempts == 5
    assert clock.now == pytest.approx(1.0)
    # The 10 s budget of pauses covers 13 such rounds (9.75 s); the 14th gets
    # the last 0.25 s (pauses 0.05, 0.1, 0.1), and from then on one look each.
    attempts = [gate.check().attempts for _ in range(14)]
    assert attempts == [5] * 12 + [4, 1]
    assert stat.looks_taken == 70


def test_a_case_s_processes_share_one_gate_budget(monkeypatch):
    """A busy machine costs a bounded wait per case however many processes it has: the
    runner records each process's share, and the worker's gate is built with it."""
    from epbench.cases.grids import case_by_name
    from epbench.harness import run_config, runner, worker
    from epbench.harness.gate import DEFAULT_BUDGET_S

    config = run_config.RunConfig(cases=(case_by_name("relu_d1_w8"),), arms=(), processes=4)
    gate_cfg = runner._config_record(config, 8)["gate"]
    assert gate_cfg["budget_s"] == DEFAULT_BUDGET_S / 4

    built = {}

    class StopAtGate:
        def __init__(self, **kwargs):
            built.update(kwargs)
            raise RuntimeError("the gate is all this test looks at")

    monkeypatch.setattr(worker, "IdleGate", StopAtGate)
    w = worker.Worker({"config": {"gate": gate_cfg}, "orders": [["ort"]]}, lambda e: None)
    with pytest.raises(RuntimeError, match="all this test looks at"):
        w.rounds([], None)
    assert built["budget_s"] == DEFAULT_BUDGET_S / 4


def test_a_quiet_meter_reading_carries_over_as_the_next_round_s_gate() -> None:
    meter = {"idle": {"cpu0": 0.98}, "steal": {"cpu0": 0.01}, "own_core": 1, "own_steal": 0.0,
             "quiet": True}
    reading = carried_from_meter(meter, 0.93)
    assert reading is not None
    assert reading.to_dict() == {"attempts": 0, "carried": True, "excluded_core": 1,
                                 "idle": {"cpu0": 0.98}, "passed": True,
                                 "steal": {"cpu0": 0.01}, "threshold": 0.93, "waited_s": 0.0}
    assert format_gate_reading(reading) == (
        "gate ok: cpu0 idle 98.0% steal 1.0% during the previous round (no new look)")


@pytest.mark.parametrize("quiet", [False, None])
def test_a_busy_or_unjudged_meter_reading_carries_nothing(quiet) -> None:
    meter = {"idle": {"cpu0": 0.5}, "steal": {"cpu0": 0.0}, "own_core": 1, "quiet": quiet}
    assert carried_from_meter(meter, 0.93) is None


class _FakeBound:
    def __init__(self, key: str, calls: list[str]) -> None:
        self.key, self.calls = key, calls

    def run(self) -> None:
        self.calls.append(self.key)


def _meter(quiet, own_steal=0.0) -> dict:
    return {"idle": {"cpu0": 1.0}, "steal": {"cpu0": 0.0}, "own_core": 1,
            "own_steal": own_steal, "quiet": quiet}


def _rounds_with_fakes(monkeypatch, policy: str, slices: int, meters: list,
                       threshold: float = 0.93, passes: list[bool] | None = None,
                       min_slice_calls: int = 1):
    """Worker.rounds over fake arms (a: 3 calls a block, b: 2; two sessions, whose calls
    are logged as A/B), a fake gate and meter; slices as asked (no minimum length)."""
    from types import SimpleNamespace

    from epbench.harness import timing, worker

    looks, calls, events, meters_made = [], [], [], []
    scripted = iter(meters)
    verdicts = iter(passes or [True] * len(meters))

    class FakeGate:
        last_look_start = None

        def __init__(self, **kwargs) -> None:
            assert kwargs["threshold"] == threshold
            self.policy = kwargs["policy"]

        def check(self, exclude_core=None) -> GateReading:
            looks.append(len(events))
            if self.policy == "off":  # as IdleGate: no look, nothing to hand on
                return GateReading(passed=True, idle={}, steal={}, waited_s=0.0, attempts=0,
                                   threshold=threshold)
            self.last_look_start = (float(len(looks)), {})
            return GateReading(passed=next(verdicts), idle={"cpu0": 1.0}, steal={"cpu0": 0.0},
                               waited_s=0.05, attempts=1, threshold=threshold)

    class FakeMeter:
        def __init__(self, **kwargs) -> None:
            meters_made.append(kwargs)

        def mark(self, at: float, snapshot: dict) -> None:
            calls.append(f"m{at:.0f}")

        def start(self) -> None:
            calls.append("|")

        def stop(self) -> dict:
            calls.append("/")
            return next(scripted)

    monkeypatch.setattr(worker, "IdleGate", FakeGate)
    monkeypatch.setattr(worker, "InterferenceMeter", FakeMeter)
    monkeypatch.setattr(timing, "MIN_SLICE_CALLS", min_slice_calls)
    arms = [SimpleNamespace(arm=SimpleNamespace(key=k), iterations=n,
                            bounds=[_FakeBound(k, calls), _FakeBound(k.upper(), calls)])
            for k, n in (("a", 3), ("b", 2))]
    gate_cfg = {"threshold": threshold, "policy": policy, "max_wait_s": 1.0, "budget_s": 10.0}
    request = {"config": {"gate": gate_cfg, "block_slices": slices},
               "orders": [["a", "b"], ["b", "a"], ["a", "b"]]}
    worker.Worker(request, events.append).rounds(arms, 1)
    # One meter for the process's rounds, so that a round can be judged over those
    # before it.
    assert len(meters_made) == 1
    rounds = [e["round"] for e in events if e["event"] == "round"]
    gates = [e["gate"] for e in events if e["event"] == "gate"]
    return looks, "".join(calls), rounds, gates


def test_each_block_is_cut_into_slices_run_alternately_in_the_round_s_order(monkeypatch):
    _, calls, rounds, _ = _rounds_with_fakes(monkeypatch, "wait", 2, [_meter(True)] * 3)
    # Per round: the gate's look handed to the meter ("m1", the first round only: the
    # others carry the reading), two untimed calls per arm, "|" (the meter starts), the
    # slices (a's 3 calls as 1 + 2, b's 2 as 1 + 1, alternating in the round's order),
    # "/" (it stops).
    # Odd rounds run the second session (upper case).
    assert calls == "m1aabb|abaab/" "BBAA|BABAA/" "aabb|abaab/"
    assert [{k: v["n"] for k, v in r["summary_ns"].items()} for r in rounds] == [
        {"a": 3, "b": 2}] * 3
    assert [r["slices"] for r in rounds] == [2, 2, 2]


def test_one_slice_is_the_plain_block(monkeypatch):
    _, calls, rounds, _ = _rounds_with_fakes(monkeypatch, "wait", 1, [_meter(True)] * 3)
    assert calls == "m1aabb|aaabb/" "BBAA|BBAAA/" "aabb|aaabb/"
    assert [r["slices"] for r in rounds] == [1, 1, 1]


def test_the_gate_looks_only_after_a_round_whose_meter_was_not_quiet(monkeypatch):
    looks, calls, rounds, gates = _rounds_with_fakes(
        monkeypatch, "wait", 2, [_meter(True), _meter(None), _meter(False)], threshold=0.9)
    # Round 0: a look; round 1: carried from round 0's quiet meter; round 2: round 1's
    # meter could not judge, so a look again. Each look is handed to the meter before
    # the round it precedes starts; a carried reading hands nothing.
    assert [g["carried"] for g in gates] == [False, True, False]
    assert [part[:2] for part in calls.split("/")] == ["m1", "BB", "m2", ""]
    assert [g["attempts"] for g in gates] == [1, 0, 1]
    assert gates[1]["threshold"] == 0.9
    assert len(looks) == 2
    # One rule for every round: a gate that passed (looked or carried) and no load seen.
    assert [r["quiet"] for r in rounds] == [True, True, False]


def test_a_round_whose_meter_could_not_judge_is_quiet_after_a_passed_look(monkeypatch):
    _, _, rounds, gates = _rounds_with_fakes(monkeypatch, "wait", 2, [_meter(None)] * 3)
    assert [g["carried"] for g in gates] == [False, False, False]
    assert [r["quiet"] for r in rounds] == [True, True, True]


def test_a_round_whose_gate_did_not_pass_lends_nothing(monkeypatch):
    # A load on the worker's own core fails the gate's look but not the meter, which
    # leaves that core out: the next round must look again, not carry.
    looks, _, rounds, gates = _rounds_with_fakes(monkeypatch, "wait", 2, [_meter(True)] * 3,
                                                 passes=[False, True])
    assert [g["carried"] for g in gates] == [False, False, True]
    assert len(looks) == 2
    assert [r["quiet"] for r in rounds] == [False, True, True]


def test_the_worker_takes_fewer_slices_when_its_shortest_block_is_short(monkeypatch):
    # b's block has 2 calls; with at least 2 calls a slice, 2 requested slices become 1.
    _, calls, rounds, _ = _rounds_with_fakes(monkeypatch, "wait", 2, [_meter(True)] * 3,
                                             min_slice_calls=2)
    assert [r["slices"] for r in rounds] == [1, 1, 1]
    assert calls.startswith("m1aabb|aaabb/")


@pytest.mark.parametrize("policy", ["off", "strict"])
def test_only_wait_carries_a_reading_over(monkeypatch, policy):
    looks, calls, _, gates = _rounds_with_fakes(monkeypatch, policy, 2, [_meter(True)] * 3)
    assert len(looks) == 3
    assert not any(g["carried"] for g in gates)
    # Every look is handed to the meter; `off` takes none.
    assert calls.count("m") == (3 if policy == "strict" else 0)


@pytest.mark.parametrize("own_steal", [None, 0.0701, 0.08])
def test_steal_on_the_worker_s_own_core_carries_nothing(own_steal) -> None:
    assert carried_from_meter(_meter(True, own_steal), 0.93) is None


def test_steal_up_to_one_minus_the_threshold_still_carries() -> None:
    assert carried_from_meter(_meter(True, 0.07), 0.93) is not None


def _rounds(pattern: str) -> list[dict]:
    """A process's rounds: "P" a round whose gate look passed, "F" one whose did not; ""
    a process that crashed before its first round."""
    return [{"quiet": c == "P", "summary_ns": {}, "gate": {"passed": c == "P"}}
            for c in pattern]


def _gates(pattern: str) -> list[dict]:
    """The gate readings of `_rounds(pattern)`, as RunWaitBudget counts them."""
    return [r["gate"] for r in _rounds(pattern)]


# Processes in run order (their rounds), and the budget each must get: the streak of
# rounds with no passing look goes on across processes, a passing round ends it (the
# rounds after it start a new one), and a process with no round leaves it as it was.
WAIT_SCRIPT = [("F" * 8, "full"), ("F" * 8, "full"), ("F" * 8, 0.0), ("FFFPFFFF", 0.0),
               ("PFFFFFFF", "full"), ("F" * 8, "full"), ("", "full"), ("F", "full"),
               ("F" * 8, 0.0)]


def test_a_run_stops_waiting_after_rounds_in_a_row_with_no_passing_look() -> None:
    from epbench.harness.gate import FUTILE_ROUNDS_BEFORE_NO_WAIT, RunWaitBudget

    assert FUTILE_ROUNDS_BEFORE_NO_WAIT == 16  # WAIT_SCRIPT is for 16
    waits = RunWaitBudget(2.5, "wait")
    budgets = []
    for pattern, _ in WAIT_SCRIPT:
        budgets.append(waits.next_budget_s())
        waits.record(_gates(pattern))
    assert budgets == [2.5 if b == "full" else b for _, b in WAIT_SCRIPT]
    assert waits.futile_in_a_row == 24 and waits.next_budget_s() == 0.0
    # A run that continues another (a re-run) starts from its count.
    assert RunWaitBudget(2.5, "wait", 16).next_budget_s() == 0.0
    assert RunWaitBudget(2.5, "wait", 15).next_budget_s() == 2.5


@pytest.mark.parametrize("policy", ["strict", "off"])
def test_only_the_wait_policy_stops_waiting(policy) -> None:
    from epbench.harness.gate import RunWaitBudget

    waits = RunWaitBudget(2.5, policy)
    waits.record(_gates("F" * 40))
    assert waits.next_budget_s() == 2.5 and waits.waiting


def test_each_process_gets_the_budget_the_rounds_before_it_leave(monkeypatch, tmp_path) -> None:
    """The runner asks RunWaitBudget before each process, in run order (process p of
    every case before process p + 1), sends that budget to the worker, records it in
    results.json and results.jsonl alike, and says when waiting stops and resumes."""
    from epbench.cases.grids import case_by_name
    from epbench.core.results import load_results
    from epbench.harness import run_config, runner, worker_process

    script = iter(WAIT_SCRIPT)
    sent = []

    def fake_worker(request, on_event=None, silence_timeout_s=None, prefix=()):
        if request["mode"] != "case":  # the arms' probe
            return worker_process.WorkerOutcome(events=[{"event": "done"}], returncode=0,
                                                stderr_tail="")
        sent.append(request["config"]["gate"]["budget_s"])
        pattern, _ = next(script)
        if not pattern:  # killed before its first round
            return worker_process.WorkerOutcome(events=[], returncode=-11, stderr_tail="")
        events = [*({"event": "round", "round": r} for r in _rounds(pattern)),
                  {"event": "done"}]
        for e in events:
            on_event(e)
        return worker_process.WorkerOutcome(events=events, returncode=0, stderr_tail="")

    said = []

    class Said(runner._NoProgress):
        def status(self, text: str) -> None:
            said.append(text)

    monkeypatch.setattr(worker_process, "run_worker", fake_worker)
    names = ("relu_d1_w8", "relu_d10_w8", "add_d10_w8")
    config = run_config.RunConfig(cases=tuple(case_by_name(n) for n in names), arms=(),
                                  rounds=4, processes=3, progress=Said(), out_dir=tmp_path / "o")
    results = runner.run(config)
    full = results.config.gate.extra["budget_s"]
    assert full > 0 and results.config.gate.extra["stops_waiting_after_rounds"] == 16
    assert sent == [full if b == "full" else b for _, b in WAIT_SCRIPT]
    recorded = [results.cases[n].processes[p].gate_budget_s for p in range(3) for n in names]
    assert recorded == sent
    stream, whole = load_results(tmp_path / "o" / "results.jsonl"), load_results(tmp_path / "o")
    assert stream.to_dict() == whole.to_dict() == results.to_dict()
    assert [p.gate_budget_s for p in whole.cases["relu_d1_w8"].processes] == sent[::3]
    assert runner.futile_rounds_at_end(results) == 24
    assert runner.futile_rounds_at_end(results, before=100) == 24  # a passing look came since
    assert [s.split(" (")[0] for s in said] == [
        "idle gate: 16 rounds in a row had no passing look",
        "idle gate: a look passed; rounds wait for a quiet moment again",
        "idle gate: 16 rounds in a row had no passing look"]
    # With --gate-max-wait 0 no round waits anyway: the same budgets, nothing said.
    script, said[:] = iter(WAIT_SCRIPT), []
    runner.run(replace(config, gate_max_wait_s=0.0, out_dir=None))
    assert said == []
