"""reports.stats against synthetic rounds with a known truth (seeded; no wall clock)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from epbench.reports import defaults, render, stats, summary
from tests.support import synthetic
from tests.support.synthetic import as_results


def _scaled(summary: dict, factor: float) -> dict:
    return {k: (v * factor if k != "n" and v is not None else v) for k, v in summary.items()}


def test_benjamini_hochberg_hand_worked_step_up():
    # m = 4 tested (the NaN is not a test), fdr 0.05: critical values k * 0.05 / 4 =
    # 0.0125, 0.025, 0.0375, 0.05. The smallest p (0.03) misses its 0.0125, but the
    # largest (0.045 <= 0.05) passes, and step-up rejects it and everything below.
    p = [0.04, 0.03, float("nan"), 0.045, 0.035]
    rejected, q = stats.benjamini_hochberg(p, fdr=0.05)
    assert rejected == [True, True, False, True, True]
    # q_(4) = 0.045 * 4/4; every smaller rank takes the running minimum from above.
    assert q[3] == pytest.approx(0.045)
    assert q[0] == pytest.approx(0.045) and q[1] == pytest.approx(0.045)
    assert q[4] == pytest.approx(0.045)
    assert math.isnan(q[2])


def test_benjamini_hochberg_hand_worked_partial():
    # m = 5, critical values 0.01, 0.02, 0.03, 0.04, 0.05: ranks 1 and 2 pass
    # (0.004 <= 0.01, 0.019 <= 0.02); rank 3 (0.035 > 0.03), 4 (0.041 > 0.04)
    # and 5 (0.30 > 0.05) do not, so exactly two are rejected.
    p = [0.30, 0.019, 0.041, 0.004, 0.035]
    rejected, q = stats.benjamini_hochberg(p, fdr=0.05)
    assert rejected == [False, True, False, True, False]
    assert q[3] == pytest.approx(0.02)  # 0.004 * 5 / 1 = 0.02
    assert q[1] == pytest.approx(0.0475)  # 0.019 * 5 / 2
    assert q[4] == pytest.approx(0.05125)  # min(0.035*5/3, 0.041*5/4, 0.30) = 0.05125
    assert q[0] == pytest.approx(0.30)


def test_order_statistic_rank_is_the_exact_binomial_one():
    # Hand-worked: n = 6, P(B <= 0) = 1/64, 2/64 = 0.031 <= 0.05, P(B <= 1) = 7/64: k = 0
    # ([min, max], coverage 1 - 2/64 = 96.9 %). n = 5: 2/32 = 0.0625 > 0.05: unbounded.
    # n = 30 at 95 %: 2 P(B <= 9) = 0.0428 <= 0.05 < 2 P(B <= 10) = 0.0987: k = 9.
    assert stats.order_statistic_rank(6, 0.05) == 0
    assert stats.order_statistic_rank(5, 0.05) == -1
    assert stats.order_statistic_rank(30, 0.05) == 9
    assert stats.sign_tail(4).tolist() == [1 / 16, 5 / 16, 11 / 16, 15 / 16, 1.0]


def test_sign_test_p_is_exact_and_has_no_resampling_floor():
    # All 12 rounds slower: p = 2 / 2^12 (a bootstrap floors at 2/2001 instead).
    (ch,) = stats.paired_changes([np.linspace(0.01, 0.02, 12)])
    assert ch.p == pytest.approx(2.0 / 2**12)
    # 9 of 12 above 0: p = 2 P(B <= 3) = 2 x 299 / 4096.
    x = np.array([0.01] * 9 + [-0.01] * 3)
    (ch,) = stats.paired_changes([x])
    assert ch.p == pytest.approx(2.0 * 299 / 4096)


@pytest.mark.parametrize("n", [5, 7, 13, 30])
def test_median_interval_coverage_is_at_least_nominal(n):
    # 4000 seeded data sets per round count, skewed noise (log-normal spikes) with
    # the true median known: coverage >= 95 % - 1 % (binomial sd ~0.35 %).
    rng = np.random.default_rng(n)
    x = rng.normal(0.0, 0.02, (4000, n)) + np.where(
        rng.random((4000, n)) < 0.1, rng.uniform(0.05, 0.3, (4000, n)), 0.0)
    truth = np.median(rng.normal(0.0, 0.02, 400000) + np.where(
        rng.random(400000) < 0.1, rng.uniform(0.05, 0.3, 400000), 0.0))
    changes = stats.paired_changes(list(x - truth))
    # An unbounded interval (NaN bounds: n = 5 is too few at 95 %) covers everything.
    coverage = np.mean([not (c.lo > 1.0 or c.hi < 1.0) for c in changes])
    assert all(math.isnan(c.lo) for c in changes) == (n == 5)
    assert coverage >= 0.94
    # And the p-value's size under the null is at most 5 % (+ binomial tolerance).
    assert np.mean([c.p <= 0.05 for c in changes]) <= 0.06


@pytest.mark.parametrize("n", [7, 13, 30])
def test_double_ratio_interval_coverage_is_at_least_nominal(n):
    rng = np.random.default_rng(100 + n)
    a = rng.normal(0.0, 0.02, (3000, n))
    b = rng.normal(0.0, 0.02, (3000, n + 3))
    changes = stats.double_ratio_changes(list(a), list(b))
    assert np.mean([c.lo <= 1.0 <= c.hi for c in changes]) >= 0.94
    assert np.mean([c.p <= 0.05 for c in changes]) <= 0.06


def test_double_ratio_p_agrees_with_its_interval():
    rng = np.random.default_rng(8)
    a = [rng.normal(0.03 * (i % 3), 0.02, 20) for i in range(60)]
    b = [rng.normal(0.0, 0.02, 17) for _ in range(60)]
    for c in stats.double_ratio_changes(a, b):
        assert (c.p <= 0.05) == (c.lo > 1.0 or c.hi < 1.0)


def test_log_ratios_keep_only_positive_finite_rounds():
    num = np.array([2.0, 0.0, -1.0, np.nan, 4.0])
    den = np.array([1.0, 1.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(stats.log_ratios(num, den), [math.log(2.0)])


def test_ratio_with_ci_refuses_a_denominator_at_or_below_zero():
    num = np.array([1.0, 1.1, 0.9, 1.05])
    den = np.array([1.0, 0.5, -0.5, 1.0])  # finite ratios, but one denominator < 0
    point, lo, hi = stats.ratio_with_ci(num, den, 1.0)
    assert point == 1.0 and math.isnan(lo) and math.isnan(hi)


def test_paired_change_covers_the_truth_and_detects_it():
    rng = np.random.default_rng(11)
    true = np.log(1.05)
    x = true + rng.normal(0.0, 0.02, 30)
    (ch,) = stats.paired_changes([x])
    assert ch.lo < 1.05 < ch.hi
    assert ch.lo > 1.0 and ch.p < 0.01
    assert ch.n == 30
    assert ch.ratio == pytest.approx(math.exp(np.median(x)))


def test_no_change_has_p_one_and_degenerate_ci():
    (ch,) = stats.paired_changes([np.zeros(20)])
    assert (ch.ratio, ch.lo, ch.hi, ch.p) == (1.0, 1.0, 1.0, 1.0)


def test_too_few_rounds_give_nan_not_a_verdict():
    (ch,) = stats.paired_changes([np.array([0.1])])
    assert math.isnan(ch.ratio) and ch.n == 0


def test_confidence_widens_the_interval():
    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 0.02, 30)
    (c90,) = stats.paired_changes([x], confidence=0.90)
    (c99,) = stats.paired_changes([x], confidence=0.99)
    assert c99.lo < c90.lo and c99.hi > c90.hi


def test_same_inputs_same_interval_whatever_the_rest_of_the_grid():
    rng = np.random.default_rng(4)
    x = rng.normal(0.0, 0.02, 30)
    alone = stats.paired_changes([x])[0]
    in_grid = stats.paired_changes([rng.normal(size=30), x, rng.normal(size=12)])[1]
    assert alone == in_grid


def test_resampling_is_one_kernel_call_per_round_count(monkeypatch):
    # Vectorized by structure: 50 cases of 30 rounds and 7 of 12 rounds are two
    # kernel calls, not 57.
    calls = []
    real = stats._paired_kernel

    def counting(x, *args):
        calls.append(x.shape)
        return real(x, *args)

    monkeypatch.setattr(stats, "_paired_kernel", counting)
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=30) for _ in range(50)] + [rng.normal(size=12) for _ in range(7)]
    out = stats.paired_changes(rows)
    assert sorted(calls) == [(7, 12), (50, 30)]
    assert len(out) == 57 and all(math.isfinite(c.ratio) for c in out)


def test_two_sample_kernel_is_one_call_per_shape(monkeypatch):
    calls = []
    real = stats._two_sample_kernel

    def counting(a, b, *args):
        calls.append((a.shape, b.shape))
        return real(a, b, *args)

    monkeypatch.setattr(stats, "_two_sample_kernel", counting)
    rng = np.random.default_rng(0)
    a = [rng.normal(size=30) for _ in range(20)]
    b = [rng.normal(size=25) for _ in range(20)]
    stats.double_ratio_changes(a, b)
    assert calls == [((20, 30), (20, 25))]


def _arm_vs_control(doc, case, arm):
    c = as_results(doc).cases[case]
    return stats.log_ratios(stats.round_medians(c, arm), stats.round_medians(c, "ort"))


def test_double_ratio_cancels_a_uniform_machine_slowdown_exactly():
    base = synthetic.results_doc({"relu_d10_w8": {"ort": 3000.0, "ep": 2000.0}}, seed=1)
    pr = synthetic.results_doc({"relu_d10_w8": {"ort": 3000.0, "ep": 2000.0}}, seed=2)
    before = stats.double_ratio_changes(
        [_arm_vs_control(pr, "relu_d10_w8", "ep")], [_arm_vs_control(base, "relu_d10_w8", "ep")]
    )[0]
    # The PR run's machine is twice as slow for every arm: every sample doubles.
    # (A power of two keeps the float arithmetic exact, so "cancels" means equal.)
    for rnd in pr["cases"]["relu_d10_w8"]["rounds"]:
        rnd["summary_ns"] = {a: _scaled(s, 2) for a, s in rnd["summary_ns"].items()}
    after = stats.double_ratio_changes(
        [_arm_vs_control(pr, "relu_d10_w8", "ep")], [_arm_vs_control(base, "relu_d10_w8", "ep")]
    )[0]
    assert after == before
    # And a non-binary factor cancels to rounding error.
    for rnd in pr["cases"]["relu_d10_w8"]["rounds"]:
        rnd["summary_ns"] = {a: _scaled(s, 1.37) for a, s in rnd["summary_ns"].items()}
    scaled = stats.double_ratio_changes(
        [_arm_vs_control(pr, "relu_d10_w8", "ep")], [_arm_vs_control(base, "relu_d10_w8", "ep")]
    )[0]
    assert scaled.ratio == pytest.approx(before.ratio, rel=1e-12)
    assert scaled.lo == pytest.approx(before.lo, rel=1e-12)
    assert scaled.hi == pytest.approx(before.hi, rel=1e-12)


def test_fit_family_recovers_known_slope_and_intercept():
    # p50 = 500 ns per Run + 40 ns per node, with 1 % per-round noise.
    rng = np.random.default_rng(8)
    depths = [1, 10, 100, 1000]
    rounds = [
        {"ep": (500.0 + 40.0 * d) * np.exp(rng.normal(0, 0.01, 30))} for d in depths
    ]
    fit = stats.fit_family(depths, rounds, ["ep"])["ep"]
    assert fit.slope == pytest.approx(40.0, rel=0.01)
    assert fit.slope_ci[0] < 40.0 < fit.slope_ci[1]
    assert fit.intercept_ci[0] < 500.0 < fit.intercept_ci[1]
    # Noise-free rounds give the line exactly.
    exact = [{"ep": np.full(9, 500.0 + 40.0 * d)} for d in depths]
    fit = stats.fit_family(depths, exact, ["ep"])["ep"]
    assert fit.slope == pytest.approx(40.0, rel=1e-12)
    assert fit.intercept == pytest.approx(500.0, rel=1e-9)


def test_fit_family_needs_two_depths():
    with pytest.raises(ValueError, match="two distinct depths"):
        stats.fit_family([10, 10], [{"a": np.ones(5)}, {"a": np.ones(5)}], ["a"])


def test_control_drift_measures_first_to_last_change():
    # The control slows down steadily by 4 % from the first round to the last.
    values = 1000.0 * np.exp(np.linspace(0.0, math.log(1.04), 30))
    assert stats.control_drift(values) == pytest.approx(0.04, rel=1e-9)
    falling = 1000.0 * np.exp(np.linspace(0.0, math.log(0.95), 30))
    assert stats.control_drift(falling) == pytest.approx(-0.05, rel=1e-9)
    # Interference spikes at the very ends are not drift, even with few rounds.
    for n in (8, 12, 30):
        spiked = np.full(n, 1000.0)
        spiked[0], spiked[-1] = 900.0, 1300.0
        if n >= 12:
            spiked[-2] = 1250.0
        assert stats.control_drift(spiked) == 0.0
    assert stats.control_drift(np.full(10, 7.0)) == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(stats.control_drift(np.full(stats.MIN_DRIFT_ROUNDS - 1, 5.0)))


def test_summary_has_the_documented_shape():
    doc = synthetic.results_doc(
        {
            "relu_d1_w8": {"ort": 1000.0, "ep": 800.0},
            "relu_d10_w8": {"ort": 3000.0, "ep": 1500.0},
            "matmul_128x128": {"ort": 50000.0, "ep": 60000.0},
        },
        noise=synthetic.NoiseModel(0.0, 0.0, 0.0, session_sigma=0.0),
    )
    shown = summary.summarize(as_results(doc))
    s = shown.to_dict()  # the documented shape is the JSON form's
    assert set(s) >= {"cases", "families", "gate"}
    ep = s["cases"]["matmul_128x128"]["arms"]["ep"]
    assert set(ep) == {"p50_ns", "ratio_vs_ort", "ci95", "nodes_executed", "nodes_by_ep"}
    assert ep["ratio_vs_ort"] == pytest.approx(1.2, rel=1e-3)
    assert s["cases"]["matmul_128x128"]["arms"]["ort"]["ratio_vs_ort"] == 1.0
    assert s["cases"]["relu_d1_w8"]["verified"] is True
    fam = s["families"]["relu_w8"]
    assert fam["depths"] == [1, 10]
    # 800 = a + b, 1500 = a + 10 b  ->  b = 77.8 ns per node, a = 722 ns per Run.
    assert fam["arms"]["ep"]["slope_ns"] == pytest.approx(700 / 9, rel=2e-3)
    assert fam["arms"]["ep"]["intercept_ns"] == pytest.approx(800 - 700 / 9, rel=2e-3)
    assert s["gate"] == {
        "policy": "wait", "threshold": 0.93, "rounds": 90, "quiet": 90, "unquiet": 0,
        "max_steal": 0.0, "waited_s": 0.0, "processes": 3, "processes_not_waiting": 0,
        "stops_waiting_after_rounds": None,
    }
    text = render.render_summary_table(shown)
    assert "matmul_128x128" in text and "1.200x" in text and "relu_w8 (d=1,10)" in text


def test_summary_marks_failed_cases_unverified():
    doc = synthetic.results_doc(
        {"relu_d1_w8": {"ort": 1000.0, "ep": 800.0}}, status={"relu_d1_w8": "crashed"}
    )
    case = summary.summarize(as_results(doc)).cases["relu_d1_w8"]
    assert case.verified is False and case.status == "crashed"
    assert case.arms["ep"].p50_ns is None


def test_defaults_are_sane():
    assert defaults.RESAMPLES >= 2000
    assert 0 < defaults.FLOOR < defaults.K * defaults.NOISE_WITHOUT_PROFILE


def test_interval_coverage_and_p_value_size_under_no_change():
    # 1000 seeded data sets of 30 rounds with no change: the exact 95 % interval
    # covers the truth >= 95 % of the time (95.7 % exactly at n = 30, binomial sd
    # 0.7 %) and p <= 0.05 at most ~5 % of the time (4.3 % exactly).
    x = np.random.default_rng(21).normal(0.0, 0.02, (1000, 30))
    changes = stats.paired_changes(list(x))
    coverage = np.mean([c.lo < 1.0 < c.hi for c in changes])
    size = np.mean([c.p <= 0.05 for c in changes])
    assert 0.94 <= coverage <= 0.98
    assert 0.02 <= size <= 0.06


def test_family_fit_resamples_the_arms_of_a_round_together():
    # Arm b is exactly 1.1 x arm a in every round: paired resampling keeps the ratio of
    # their bootstrap slopes at 1.1 in every resample.
    rng = np.random.default_rng(6)
    depths = [1, 10, 100]
    rounds = []
    for d in depths:
        a = (500 + 60.0 * d) * np.exp(rng.normal(0.0, 0.02, 20))
        rounds.append({"a": a, "b": 1.1 * a})
    fits = stats.fit_family(depths, rounds, ["a", "b"], resamples=2000)
    np.testing.assert_allclose(fits["b"].boot_slope / fits["a"].boot_slope, 1.1, rtol=1e-12)


def test_family_of_is_the_case_spec_rule():
    spec = {**synthetic.case_spec("relu_d10_w8_dyn", batch=4), "name": "relu_d10_w8_dyn_b4"}
    assert summary.family_of(spec) == "relu_w8_dyn_b4"
    assert summary.family_of(synthetic.case_spec("relu_d10_w8")) == "relu_w8"
    assert summary.family_of(synthetic.case_spec("matmul_128x128")) is None
    assert summary.family_of({"name": "x", "bogus": 1}) is None


def test_many_rounds_do_not_overflow_the_exact_tail():
    # 2^1100 overflows a float; the tail switches to log-space terms past 1000 rounds.
    rng = np.random.default_rng(12)
    for n in (1000, 1100, 5000):
        tail = stats.sign_tail(n)
        # Symmetry of Binomial(n, 1/2): P(B <= j) + P(B <= n - 1 - j) = 1.
        np.testing.assert_allclose(tail[:-1] + tail[-2::-1], 1.0, atol=1e-9)
        assert tail[-1] == pytest.approx(1.0) and tail[n // 2] == pytest.approx(0.5, abs=0.02)
        (ch,) = stats.paired_changes([rng.normal(0.01, 0.02, n)])
        assert ch.lo < 1.01 < ch.hi and ch.p < 1e-6
