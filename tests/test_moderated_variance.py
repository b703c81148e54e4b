"""Moderated variances: a case judged over 3-8 processes borrows degrees of freedom from
the grid's other cases when their process-level variances are alike (empirical Bayes,
nested.variance_prior), and keeps about its own when they differ widely.

Synthetic grids with a known truth (seeded), in the model of
docs/validation/statistics_sim.py: per case, base, twin and PR are copies of a library,
6 processes x 8 rounds, per process an offset N(0, 0.3 %), per round noise N(0, 1 %).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from epbench.reports import nested, verdicts
from epbench.reports.nested import ProcessSample, VariancePrior, variance_prior

GRID, PROCESSES, PER_PROCESS = 20, 6, 8
LABELS = np.repeat(np.arange(PROCESSES), PER_PROCESS)
FLAGS = ("alert", "regression")


def _arm(rng, effect=0.0, round_sd=0.01):
    return (math.log1p(effect) + rng.normal(0.0, round_sd * 0.3, PROCESSES)[LABELS]
            + rng.normal(0.0, round_sd, PROCESSES * PER_PROCESS))


def _grid(seed, slowed=None, effect=0.0, round_sds=None):
    """PR / base and twin / base of a grid; case `slowed` is `effect` slower."""
    rng = np.random.default_rng([46, 4601, seed])
    pr, twins = [], []
    for i in range(GRID):
        sd = round_sds[i] if round_sds else 0.01
        base, twin = _arm(rng, round_sd=sd), _arm(rng, round_sd=sd)
        new = _arm(rng, effect if i == slowed else 0.0, round_sd=sd)
        pr.append(ProcessSample(new - base, LABELS))
        twins.append(ProcessSample(twin - base, LABELS))
    return pr, twins


def _verdicts(pr, twins, moderate=True):
    """The verdicts compare() reaches for a one-run grid with its twin."""
    settings = verdicts.Settings()
    aa = nested.nested_changes(twins)
    thresholds = [verdicts.threshold_for(math.expm1(nested.standard_error(c)), "twin", settings)
                  for c in aa]
    off = {} if moderate else {"moderate": False}  # on by default, as compare() builds it
    grid = verdicts.GridSamples(pr, [], True, extra_variance=nested.unmodelled_variances(aa),
                                extra_df=GRID - 1.0, **off)
    js, _ = verdicts.judge_samples(grid, thresholds, [0] * GRID, [len(s) for s in pr], settings)
    return [j.verdict for j in js]


@pytest.mark.parametrize("x", [0.3, 1.0, 2.5, 5.9, 40.0])
def test_the_polygamma_helpers_match_scipy(x):
    assert nested._digamma(x) == pytest.approx(special.digamma(x), abs=1e-8)
    assert nested._trigamma(x) == pytest.approx(special.polygamma(1, x), abs=1e-8)
    assert nested._tetragamma(x) == pytest.approx(special.polygamma(2, x), abs=1e-8)
    assert nested._trigamma_inverse(special.polygamma(1, x)) == pytest.approx(x, rel=1e-7)


def test_alike_variances_lend_their_degrees_of_freedom():
    pr, _ = _grid(0)
    prior = variance_prior(pr)
    assert prior.df > 2 * (PROCESSES - 1)  # a moment fit over 20 cases: far from inf
    # One process value's variance: two arms' offsets and medians of 8 rounds.
    truth = 2.0 * (0.003**2 + (1.2533 * 0.01) ** 2 / PER_PROCESS)
    assert prior.s2 == pytest.approx(truth, rel=0.25)
    plain = nested.nested_changes(pr)
    moderated = nested.nested_changes(pr, prior=prior)
    assert all(c.df == PROCESSES - 1 for c in plain)
    assert all(c.df == pytest.approx(prior.df + PROCESSES - 1) for c in moderated)
    # The same points: only the spread is shrunk.
    assert [c.ratio for c in moderated] == [c.ratio for c in plain]


def test_variances_that_differ_widely_keep_about_their_own():
    sds = [0.002 * 3 ** (i % 5) for i in range(GRID)]  # 0.2 % to 16 %: 81 x apart
    pr, _ = _grid(1, round_sds=sds)
    prior = variance_prior(pr)
    assert 0.0 < prior.df < PROCESSES - 1


def test_too_few_cases_give_no_prior():
    pr, _ = _grid(2)
    assert variance_prior(pr[:9]) == VariancePrior()  # a handful of cases: too rough
    assert variance_prior(pr[:10]).df > 0.0
    assert VariancePrior().moderated(0.5, 5.0) == (0.5, 5.0)
    assert VariancePrior(math.inf, 0.2).moderated(0.5, 5.0) == (0.2, math.inf)
    assert VariancePrior(5.0, 0.2).moderated(0.5, 5.0) == (pytest.approx(0.35), 10.0)


def test_a_three_percent_slowdown_is_caught_among_alike_cases():
    """The slowed case's interval-null test borrows the grid's degrees of freedom: with
    its own 5 it needs t > 5.6 at BH's smallest cut-off, with the grid's about 3."""
    seeds = range(30)
    moderated = sum(_verdicts(*_grid(s, s % GRID, 0.03))[s % GRID] in FLAGS for s in seeds)
    plain = sum(_verdicts(*_grid(s, s % GRID, 0.03), moderate=False)[s % GRID] in FLAGS
                for s in seeds)
    assert (moderated, plain) == (28, 23)


def test_alike_cases_borrowing_degrees_of_freedom_raise_no_false_flag():
    flagged = [sum(v in FLAGS for v in _verdicts(*_grid(100 + s))) for s in range(30)]
    assert sum(flagged) == 0
    sds = [0.005, 0.01, 0.02, 0.03] * (GRID // 4)  # noise differing 6 x by case
    flagged = [sum(v in FLAGS for v in _verdicts(*_grid(200 + s, round_sds=sds)))
               for s in range(30)]
    assert sum(flagged) == 0


def test_a_subset_of_cases_is_judged_with_the_whole_grids_prior():
    """The FCR-adjusted intervals of the selected cases, and the quiet rounds, read the
    prior of every case of the grid, not of the few asked for."""
    pr, _ = _grid(3)
    keep = LABELS < 4  # the rounds of 4 of the 6 processes are quiet
    quiet = [ProcessSample(s.logs[keep], s.processes[keep]) for s in pr]
    grid = verdicts.GridSamples(pr, [], True, quiet_pr=quiet[:2], quiet_index=[0, 1])
    whole = grid.changes()
    alone = grid.changes(cases=[3])[0]
    assert (alone.se, alone.df) == (whole[3].se, whole[3].df)
    prior = variance_prior(pr)
    # These 20 cases' variances spread less than sampling alone would: the prior is
    # worth the cases' degrees of freedom together, never infinitely many.
    assert prior.df == GRID * (PROCESSES - 1)
    assert grid.changes(quiet=True)[1].df == pytest.approx(prior.df + 3.0)


def test_the_prior_fit_recovers_a_known_prior():
    """Smyth's moment fit pins d0 and s0²: each case's true variance is drawn from a scaled
    inverse chi-square prior (d0 8 around s0² (0.4 %)²) and its sample variance from 6
    process values (d 5). Over 20 seeds of 4000 cases the fit was off by at most 14 % in
    d0 (sd 6 %) and 2.7 % in s0² (sd 1.3 %); a d0 of 2 * trigamma_inverse(spread / 2)
    is +92 % off."""
    d0, s0, cases, d = 8.0, 0.004**2, 4000, 5
    labels = np.arange(d + 1)
    rng = np.random.default_rng([4, 2004, 0])
    true = d0 * s0 / rng.chisquare(d0, cases)
    prior = variance_prior([ProcessSample(rng.normal(0.0, math.sqrt(v), d + 1), labels)
                            for v in true])
    assert prior.df == pytest.approx(d0, rel=0.2)
    assert prior.s2 == pytest.approx(s0, rel=0.1)
