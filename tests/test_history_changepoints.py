"""e-divisive change points: the statistic against its definition, and its rates on seeded
synthetic series with the noise of this machine's runs (tests/support/synthetic.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from epbench.cli.history_commands import history
from epbench.reports.history import changepoints as cp
from tests.support import synthetic


def _definition(z: np.ndarray, w: np.ndarray, tau: int, alpha: float = 1.0) -> float:
    """Q(tau) written out pair by pair, as the module docstring defines it."""
    x, y, wx, wy = z[:tau], z[tau:], w[:tau], w[tau:]

    def within(a: np.ndarray, wa: np.ndarray) -> float:
        pairs = [(i, k) for i, k in itertools.permutations(range(len(a)), 2)]
        return (sum(wa[i] * wa[k] * abs(a[i] - a[k]) ** alpha for i, k in pairs)
                / sum(wa[i] * wa[k] for i, k in pairs))

    between = (sum(wx[i] * wy[j] * abs(x[i] - y[j]) ** alpha for i in range(len(x))
                   for j in range(len(y))) / (wx.sum() * wy.sum()))
    n = len(z)
    return tau * (n - tau) / n * (2 * between - within(x, wx) - within(y, wy))


@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_split_statistic_is_the_energy_distance_of_its_definition(weighted, alpha):
    rng = np.random.default_rng(7)
    z = rng.normal(size=13)
    w = rng.uniform(0.3, 3.0, 13) if weighted else np.ones(13)
    fast = cp._split_statistics(np.stack([z, z[::-1]]), np.stack([w, w[::-1]]), 2, alpha)
    for tau in range(2, 12):
        assert fast[0, tau] == pytest.approx(_definition(z, w, tau, alpha), rel=1e-10)
        assert fast[1, tau] == pytest.approx(_definition(z[::-1], w[::-1], tau, alpha),
                                             rel=1e-10)
    assert np.isneginf(fast[0, [0, 1, 12, 13]]).all()  # splits shorter than min_segment
    # One series alone is the stack's first row.
    assert cp._split_statistics(z, w, 2, alpha).tolist() == fast[0].tolist()
    assert cp._split_statistics(z[:0], w[:0], 0).tolist() == [-np.inf]


def test_a_clear_step_is_found_where_it_is_and_equal_weights_change_nothing():
    z = synthetic.history_series(1, 30, np.random.default_rng(1), step=0.05, at=17)[0]
    (found,) = cp.e_divisive(z)
    assert found.index == 17 and found.p <= cp.SIGNIFICANCE
    assert cp.e_divisive(z, np.full(30, 3.0)) == [found]
    # Too short for a split with MIN_SEGMENT points a side, however clear the step.
    assert cp.e_divisive(np.r_[np.zeros(cp.MIN_SEGMENT), np.ones(cp.MIN_SEGMENT - 1)]) == []


def test_the_shortest_testable_series_shows_a_clean_step_for_most_shuffle_seeds():
    # Over 200 shuffle seeds, not one: 12 points show a clean step for ~94 % of them,
    # 9 points for only ~19 % (possible, so "never" was wrong, but a matter of luck).
    n = cp.MIN_POINTS
    assert n == 12
    clean = np.r_[np.zeros(n // 2), np.full(n - n // 2, 0.05)] + np.linspace(0, 1e-4, n)
    found = [cp.e_divisive(clean, seed=s) for s in range(200)]
    assert all(not f or [c.index for c in f] == [n // 2] for f in found)
    assert sum(map(bool, found)) >= 0.85 * 200
    shorter = np.r_[np.zeros(4), np.full(5, 0.05)] + np.linspace(0, 1e-4, 9)
    assert 0.05 * 200 <= sum(bool(cp.e_divisive(shorter, seed=s)) for s in range(200)) <= 0.35 * 200


def _ar1(rng, rho, series=20, length=50, sd=synthetic.HISTORY_SIGMA):
    eps = rng.normal(0.0, sd * np.sqrt(1.0 - rho * rho), (series, length))
    z = np.empty_like(eps)
    z[:, 0] = rng.normal(0.0, sd, series)
    for t in range(1, length):
        z[:, t] = rho * z[:, t - 1] + eps[:, t]
    return z


@pytest.mark.slow  # tens of seconds of simulation
def test_one_detect_over_20_null_series_is_false_at_most_twice_the_level():
    # 60 detects of 20 independent null series of 50 points (1200 series): BH across the
    # series holds the share of detects with any change point near the level (0.01);
    # per series, without it, 14.7 % of such detects reported one. Bound: 2 x nominal.
    # (60, not 100: the 100 cost 20 s of `make test` and gave the same one false detect.)
    rng = np.random.default_rng(461)
    false = sum(any(cp.detect_many(list(_ar1(rng, 0.0)))) for _ in range(60))
    assert false <= 1


@pytest.mark.slow  # tens of seconds of simulation
def test_neighbouring_commits_sharing_noise_do_not_pass_for_a_change():
    # AR(1) noise, rho 0.4: before pre-whitening 19 % of such series showed a change
    # point; now at most 10 % of detects over 20 of them do.
    rng = np.random.default_rng(462)
    false = sum(any(cp.detect_many(list(_ar1(rng, 0.4)))) for _ in range(40))
    assert false <= 4


def test_a_step_large_against_the_noise_is_not_whitened_away():
    # A 3 % step at today's runs' noise moved the one difference across it so far that the
    # differences looked like a random walk: rho went to the cap (0.8) in some series and
    # pre-whitening kept a fifth of the step. The difference across the best split is now
    # left out of the estimate when it stands out, so a large step barely moves it.
    rng = np.random.default_rng(464)
    z = synthetic.history_series(30, 40, rng, sigma=synthetic.RUN_SIGMA, step=0.03, at=20)
    null = synthetic.history_series(30, 40, rng, sigma=synthetic.RUN_SIGMA)
    rhos, null_rhos = [cp.lag1_rho(r) for r in z], [cp.lag1_rho(r) for r in null]
    # Before: a mean of 0.37 against 0.13 without the step; now 0.18.
    assert abs(np.mean(rhos) - np.mean(null_rhos)) < 0.1
    found = cp.detect_many(list(z[:10])) + cp.detect_many(list(z[10:20]))
    assert sum(any(abs(c.index - 20) <= 5 for c in cps) for cps in found) == 20
    # Too short to split: plain differences, no split left out.
    assert cp.lag1_rho(np.r_[0.0, 1.0, 0.0, 1.0, 0.0]) == 0.0


def test_with_one_run_per_commit_at_todays_noise_a_3_percent_step_is_found_in_95_percent():
    # Issue 50's target, through what `history detect` runs (pre-whitening, BH across the
    # series of one detect, the 1 % floor), at the noisiest case's spread: 40 series in
    # detects of 10. The full figures (200 series, false rates on 16 000 null points) come
    # from tests/support/measure_changepoints.py; docs/history.md quotes them.
    rates = synthetic.change_point_rates(40, 40, step=0.03, at=20, seed=13,
                                         sigma=synthetic.RUN_SIGMA_WORST, family=10)
    assert rates["found"] >= 0.95 and rates["false_per_1000"] <= 1.0
    null = synthetic.change_point_rates(40, 50, seed=11, sigma=synthetic.RUN_SIGMA_WORST,
                                        family=10)
    assert null["false_per_1000"] <= 1.0


def test_detect_many_finds_a_3_percent_step_and_drops_one_below_the_minimum_change():
    rng = np.random.default_rng(463)
    found = 0
    for _ in range(40):
        z = np.median(rng.normal(0.0, synthetic.HISTORY_SIGMA, (2, 40)), axis=0)
        z[20:] += np.log(1.03)
        found += any(abs(c.index - 20) <= 5 for c in cp.detect_many([z])[0])
    assert found >= 0.7 * 40
    # A clean step of 0.5 % is as significant as any, and below the 1 % minimum.
    tiny = np.r_[np.zeros(20), np.full(20, np.log(1.005))] + np.linspace(0, 1e-5, 40)
    assert cp.e_divisive(tiny) and cp.detect_many([tiny]) == [[]]
    big = np.r_[np.zeros(20), np.full(20, np.log(1.02))] + np.linspace(0, 1e-5, 40)
    assert [c.index for c in cp.detect_many([big])[0]] == [20]


def test_at_most_one_false_change_point_per_1000_points_at_default_settings():
    # 200 seeded series of 50 points (10 000 points) without a change.
    rates = synthetic.change_point_rates(200, 50, seed=11)
    assert rates["false_per_1000"] <= 1.0


def test_a_3_percent_step_is_found_within_5_points_in_95_percent_of_series():
    # 100 seeded series of 40 commits, the step after 20, each commit measured twice (the
    # history keeps their median): the noise of this machine's runs, 2.4 % a run.
    rates = synthetic.change_point_rates(100, 40, step=0.03, at=20, seed=12, runs_per_commit=2)
    assert rates["found"] >= 0.95


def test_with_one_run_per_commit_a_3_percent_step_is_still_found_in_most_series():
    # Below the 95 % target, as docs/history.md says: at 2.4 % noise a run a 3 % step is
    # 1.25 sd; most misses are found, but 6-15 commits away from where the step is. 68 % in
    # 200 such series (tests/support/measure_changepoints.py, which also shows that neither
    # p <= 0.02, the minimum segment nor the exponent gets one run to 95 % within budget).
    rates = synthetic.change_point_rates(100, 40, step=0.03, at=20, seed=13)
    assert 0.6 <= rates["found"] <= 0.9


def test_the_docs_quote_the_defaults_the_code_has():
    root = Path(__file__).resolve().parent.parent
    docs = " ".join((root / "docs" / "history.md").read_text().split())
    readme = " ".join((root / "README.md").read_text().split())
    help_text = " ".join(history.commands["detect"].help.split())
    assert f"({cp.PERMUTATIONS} shuffles, p ≤ {cp.SIGNIFICANCE:g})" in docs
    assert f"At least {cp.MIN_SEGMENT} commits on each side" in docs
    assert f"a series needs {cp.MIN_POINTS} commits before it is tested" in docs
    assert f"sd **{synthetic.HISTORY_SIGMA * 100:g} %**" in docs
    assert f"tested from {cp.MIN_POINTS} commits on" in readme
    assert f"this machine's noise ({synthetic.HISTORY_SIGMA * 100:g} % a run)" in readme
    assert (f"(p <= {cp.SIGNIFICANCE:g}, {cp.PERMUTATIONS} shuffles, at least "
            f"{cp.MIN_SEGMENT} commits a side)") in help_text
