"""The detectable change ("could catch ≥ X %") against simulations with a known truth.

Every simulated case has a known slowdown and a known spread of its process offsets;
the verdicts are verdicts.judge_samples itself, on seeded draws, so every count is exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from epbench.reports import defaults, nested, stats
from epbench.reports.findings import flag_bar, speed_allowance
from epbench.reports.verdicts import (
    GridSamples,
    Settings,
    Threshold,
    bh_levels,
    detectable_change,
    grid_detectable,
    judge_samples,
)

PROCESSES = 6
ROUNDS = 4  # per process
FLAGGED = ("regression", "alert")


def _sample(rng: np.random.Generator, slowdown: float, sd: float) -> nested.ProcessSample:
    """One case's rounds: each process's offset drawn around log(1 + slowdown) with sd
    `sd`, its rounds a hair apart (the process median is the offset)."""
    offsets = rng.normal(math.log1p(slowdown), sd, PROCESSES)
    logs = np.repeat(offsets, ROUNDS) + rng.normal(0.0, 1e-7, PROCESSES * ROUNDS)
    return nested.ProcessSample(logs, np.repeat(np.arange(PROCESSES), ROUNDS))


def _simulate(slowdowns: list[float], sds: list[float], t: float, repeats: int,
              seed: int) -> list[list[tuple[bool, float]]]:
    """Per repeat, per case: (flagged ⚠️/🔴, the stated detectable change)."""
    rng = np.random.default_rng(seed)
    settings = Settings()
    thresholds = [Threshold(t / defaults.K, "simulated", t, defaults.ALERT_FACTOR * t)
                  ] * len(slowdowns)
    out = []
    for _ in range(repeats):
        grid = GridSamples([_sample(rng, d, s) for d, s in zip(slowdowns, sds, strict=True)],
                           [], True)
        changes = grid.changes()
        judged, tests = judge_samples(grid, thresholds, [0] * len(slowdowns),
                                      [len(s) for s in grid.pr], settings, changes=changes)
        stated = grid_detectable(changes, judged, tests, [t] * len(slowdowns), settings, True)
        out.append([(j.verdict in FLAGGED, d) for j, d in zip(judged, stated, strict=True)])
    return out


@pytest.mark.slow  # tens of seconds of simulation
def test_a_slowdown_of_the_detectable_size_is_flagged_in_95_percent_of_runs() -> None:
    # The formula at the true standard error: one case (BH level = fdr), 6 processes.
    sd, t = 0.005, 0.01
    truth = stats.Change(1.0, 1.0, 1.0, 1.0, PROCESSES * ROUNDS, PROCESSES,
                         sd / math.sqrt(PROCESSES), PROCESSES - 1.0)
    size = detectable_change(truth, t, defaults.FDR)
    assert size == pytest.approx(0.01950, abs=5e-5)
    runs = _simulate([size], [sd], t, 1000, seed=7)
    hits = sum(flagged for run in runs for flagged, _ in run)
    assert hits == 949  # 94.9 %: the t quantiles' approximation of the noncentral t
    # Half the size is flagged far less often: the statement is not trivially true.
    half = _simulate([size / 2.0], [sd], t, 1000, seed=7)
    assert sum(f for run in half for f, _ in run) == 27


@pytest.mark.slow  # tens of seconds of simulation
def test_cases_stated_to_catch_a_level_are_flagged_at_it() -> None:
    # validate's check on a grid of 12 cases with three spreads of process offsets, all
    # slowed down by the same level: of the (case, repeat) pairs whose stated detectable
    # change was at most the level, >= 90 % must be flagged.
    sds = [0.002, 0.004, 0.008] * 4
    t = 0.01
    table = {}
    for level in (0.015, 0.02, 0.03):
        runs = _simulate([level] * len(sds), sds, t, 100, seed=11)
        pairs = [pair for run in runs for pair in run]
        stated = [flagged for flagged, size in pairs if size <= level]
        table[level] = (sum(stated), len(stated), sum(f for f, _ in pairs))
    assert table == {0.015: (353, 359, 845), 0.02: (955, 965, 1124), 0.03: (1190, 1190, 1200)}
    for hits, n, _ in table.values():
        assert hits >= 0.9 * n


def test_the_statement_grows_with_the_standard_error_and_the_threshold() -> None:
    def at(se: float, t: float = 0.01, level: float = 0.05, df: float = 5.0) -> float:
        return detectable_change(stats.Change(1.0, 1.0, 1.0, 1.0, 24, 6, se, df), t, level)

    assert at(0.0) == pytest.approx(0.01)  # no noise: the threshold itself
    assert at(0.001) < at(0.002) < at(0.004)
    assert at(0.002, t=0.01) < at(0.002, t=0.02)
    assert at(0.002, level=0.05) < at(0.002, level=0.05 / 12)  # BH's smaller level
    assert at(0.002, df=5.0) > at(0.002, df=50.0)
    # An order-statistic interval (one process) counts with its normal-equivalent se.
    one = stats.Change(1.0, math.exp(-0.0196), math.exp(0.0196), 1.0, 20, 1)
    se = 0.0196 / 1.959963984540054
    z = 1.959963984540054 + 1.6448536269514722
    assert detectable_change(one, 0.01, 0.05) == pytest.approx(
        math.expm1(math.log1p(0.01) + z * se))
    assert math.isnan(detectable_change(stats.NAN_CHANGE, 0.01, 0.05))


def test_the_bh_level_is_the_one_that_applied_to_each_case() -> None:
    # 4 tested of 5, 2 rejected: a rejected case had fdr x 2 / 4, another fdr x 3 / 4.
    levels = bh_levels([True, False, True, False, False], [True, True, True, True, False],
                       0.05)
    assert levels[:4] == pytest.approx([0.025, 0.0375, 0.025, 0.0375])
    assert math.isnan(levels[4])
    assert bh_levels([False] * 3, [True] * 3, 0.05) == pytest.approx([0.05 / 3] * 3)


def test_the_bar_a_flag_clears_follows_the_run_rules() -> None:
    settings = Settings()
    assert flag_bar(0.015, None, False, settings) == 0.015
    assert flag_bar(0.015, 0.01, False, settings) == 0.015  # within the speed limit
    # Across a change of speed, the allowance that shift gave (test_speed_allowance pins it).
    assert flag_bar(0.015, 0.2, False, settings) == pytest.approx(0.015 + speed_allowance(0.2))
    assert flag_bar(0.015, 0.2, False, settings) > flag_bar(0.015, 0.06, False, settings) > (
        0.015)
    assert flag_bar(0.015, None, True, settings) == pytest.approx(2.0 * settings.floor)
    assert flag_bar(0.03, None, True, settings) == 0.03
