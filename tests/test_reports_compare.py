"""reports.compare: verdicts, their error rates under a stated noise model, and refusals.

Noise model (tests/support/synthetic.py, REALISTIC): per round and arm, log-normal block
noise with sigma 1.5 %, a machine factor with sigma 3 % shared by the arms of a
round, and a 5 % chance per block of an interference spike making it 5-30 %
slower. Thresholds come from a simulated calibration (5 A/A repeats per case)
under the same model, like `epbench calibrate` would measure them.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from epbench.cli.exit_codes import exit_code_for
from epbench.core.numbers import block_summary
from epbench.reports import calibrate, compare, comparison, defaults, findings, render, stats
from epbench.reports.comparison import CaseRow, CompareError, Comparison
from epbench.reports.findings import (
    NAMED_CASES,
    NAMED_CHARS,
    across_speed_change,
    ambiguous_cases,
    beyond_speed_limit,
    control_shift,
    held_back_by_gate,
    longer_run,
    named,
    speed_allowance,
)
from epbench.reports.verdicts import (
    IntervalTests,
    Judgement,
    Settings,
    Threshold,
    adjusted_words,
    judge,
    judge_grid,
    overall_verdict,
    threshold_for,
)
from tests.support import synthetic
from tests.support.synthetic import as_results


def Side(label, doc, arm, path=None):  # noqa: N802 -- stands in for comparison.Side
    """comparison.Side of a test's document: the tests build dicts, read into the model once."""
    return comparison.Side(label, as_results(doc), arm, path)

GRID = 20
ROUNDS = 30
TRIALS = 500
# The within-run noise alone (no per-session offset): what more rounds can beat.
WITHIN_RUN_ONLY = synthetic.NoiseModel(session_sigma=0.0)


def _calibrated_thresholds(rng, settings, noise, rounds, calibration_rounds=ROUNDS):
    """Thresholds from a simulated `epbench calibrate` (5 A/A repeats per case, each a
    new pair of sessions), read through the profile like `compare` reads it."""
    aa = synthetic.paired_log_ratios(
        GRID * defaults.CALIBRATION_REPEATS, calibration_rounds, rng, noise
    )
    changes = stats.paired_changes(list(aa))
    profile = {
        "rounds": calibration_rounds,
        "cases": {str(i): {"same-run": calibrate.noise_of(changes[i::GRID])}
                  for i in range(GRID)},
    }
    return [
        threshold_for(
            calibrate.profile_noise(profile, str(i), None, rounds, "same-run")[0],
            "profile", settings,
        )
        for i in range(GRID)
    ]


def _flags(effect=0.0, noise=synthetic.REALISTIC, rounds=ROUNDS):
    """Per trial, the verdicts of a 20-case grid (one kernel call for all 500 x 20 cases);
    with an effect, case `trial % GRID` of each trial is that much slower."""
    rng = np.random.default_rng(2024)
    settings = Settings()
    thresholds = _calibrated_thresholds(rng, settings, noise, rounds)
    effects = np.zeros(TRIALS * GRID)
    effects[np.arange(TRIALS) * GRID + np.arange(TRIALS) % GRID] = effect
    rows = synthetic.paired_log_ratios(TRIALS * GRID, rounds, rng, noise, effect=effects)
    changes = stats.paired_changes(list(rows))
    verdicts = []
    for trial in range(TRIALS):
        part = changes[trial * GRID : (trial + 1) * GRID]
        js = judge_grid(part, thresholds, [0] * GRID, [rounds] * GRID, settings.fdr)
        verdicts.append([j.verdict for j in js])
    return verdicts, thresholds


@pytest.mark.parametrize("rounds", [30, 90, 120])
def test_aa_family_wise_false_alarm_rate_is_at_most_5_percent(rounds):
    # Calibrated at 30 rounds, compared at 30, 90 or 120: the per-session offset does
    # not shrink with rounds, so neither may the threshold below it.
    verdicts, thresholds = _flags(rounds=rounds)
    false_alarm = np.mean([any(v in ("alert", "regression") for v in trial) for trial in verdicts])
    assert false_alarm <= 0.05
    # Calibrated, not floored: the thresholds reflect this noise (a few %).
    assert all(0.02 <= th.t <= 0.06 for th in thresholds)
    # And A/A mostly reads as no change rather than as a wall of ❔.
    assert np.mean([v == "no_change" for trial in verdicts for v in trial]) >= 0.8


def test_threshold_does_not_shrink_below_the_session_offset_with_more_rounds():
    rng = np.random.default_rng(7)
    at_30 = _calibrated_thresholds(rng, Settings(), synthetic.REALISTIC, 30)
    rng = np.random.default_rng(7)
    at_1000 = _calibrated_thresholds(rng, Settings(), synthetic.REALISTIC, 1000)
    # Sampling shrinks 1/sqrt(33) but the offset stays: t falls by far less than 5.8x.
    assert all(b.t >= 0.7 * a.t for a, b in zip(at_30, at_1000, strict=True))


def _power(verdicts):
    flagged = [trial[t % GRID] in ("alert", "regression") for t, trial in enumerate(verdicts)]
    others = [v for t, trial in enumerate(verdicts) for i, v in enumerate(trial) if i != t % GRID]
    return np.mean(flagged), np.mean([v in ("alert", "regression") for v in others])


def test_a_true_5_percent_slowdown_is_flagged_in_95_percent_of_trials_without_session_offsets():
    # Within-run noise only: 5 % is flagged >= 95 % of the time at 30 rounds.
    power, others = _power(_flags(effect=0.05, noise=WITHIN_RUN_ONLY)[0])
    assert power >= 0.95
    # The other 19 cases of each trial stay quiet.
    assert others <= 0.01


def test_with_session_offsets_a_10_percent_slowdown_is_flagged_in_95_percent_of_trials():
    # With realistic per-session offsets (sd 1 % between two sessions) the threshold is
    # ~4 %, and a 5 % slowdown is flagged only ~40 % of the time at 30 rounds (~70 % at
    # 120): no statistic can tell a 5 % change from a session offset one run saw.
    power, others = _power(_flags(effect=0.10)[0])
    assert power >= 0.95
    assert others <= 0.01
    power_5, _ = _power(_flags(effect=0.05)[0])
    assert 0.2 <= power_5 <= 0.6


def _change(ratio, lo, hi, p=0.001, n=30):
    return stats.Change(ratio, lo, hi, p, n)


TH = Threshold(noise=0.01, source="profile", t=0.02, alert=0.04)


@pytest.mark.parametrize(
    ("change", "significant", "unquiet", "verdict"),
    [
        (_change(1.10, 1.07, 1.13), True, 0, "alert"),
        (_change(1.10, 1.07, 1.13), True, 3, "regression"),  # unquiet: never 🔴, held to ⚠️
        (_change(1.03, 1.025, 1.035), True, 3, "regression"),
        (_change(1.03, 1.01, 1.05), True, 0, "inconclusive"),  # straddles t
        (_change(1.10, 1.07, 1.13), False, 0, "inconclusive"),  # BH said no
        (_change(0.95, 0.93, 0.97), True, 0, "improvement"),
        (_change(0.95, 0.93, 0.97), False, 0, "inconclusive"),  # BH said no: not 🟢
        (_change(0.97, 0.95, 0.99), True, 0, "inconclusive"),  # straddles -t
        (_change(1.005, 0.99, 1.015), True, 0, "no_change"),  # significant but tiny
        (_change(1.0, 1.0, 1.0, p=1.0), False, 0, "no_change"),
        (_change(1.5, 1.4, 1.6, n=3), True, 0, "not_comparable"),  # too few rounds
    ],
)
def test_verdict_rules(change, significant, unquiet, verdict):
    assert judge(change, significant, 0.01, TH, unquiet, 30).verdict == verdict


def test_unquiet_alert_reason_names_the_gate():
    j = judge(_change(1.10, 1.07, 1.13), True, 0.01, TH, 4, 30)
    assert "4 of 30 rounds failed the idle gate" in j.reason


@pytest.mark.parametrize(
    ("quiet_only", "quiet_significant", "verdict"),
    [
        (_change(1.05, 1.045, 1.055, n=26), True, "alert"),  # the quiet rounds: an alert
        (_change(1.05, 1.045, 1.055, n=26), False, "held back"),  # ...not significant
        # Quiet rounds whose interval excludes the alert level (4 %) demote it to ⚠️,
        # never further: a smaller slowdown with these unquiet rounds is ⚠️ too.
        (_change(1.03, 1.025, 1.035, n=26), True, "below"),
        (_change(1.03, 1.025, 1.035, n=26), False, "below"),  # significance is not needed
        (_change(1.03, 1.0199, 1.035, n=26), True, "below"),  # lower bound below t
        (_change(1.01, 0.99, 1.03, n=26), True, "below"),  # no regression at all
        (_change(1.03, 1.015, 1.045, n=26), True, "held back"),  # ...reaching the alert
        (_change(1.03, 1.02, 1.04, n=26), True, "held back"),  # ...hi exactly at the alert
        # Too few to stand alone, or none: the alert is held back to a regression.
        (_change(1.03, 1.025, 1.035, n=3), True, "too few"),
        (_change(1.03, 1.025, 1.035, n=5), True, "too few"),  # fewer than needed
        (_change(1.03, 1.025, 1.035, n=6), True, "below"),  # as many as needed
        (None, False, "too few"),
    ],
)
def test_a_would_be_alert_with_unquiet_rounds_stands_on_its_quiet_rounds(
        quiet_only, quiet_significant, verdict):
    j = judge(_change(1.05, 1.045, 1.055), True, 0.01, TH, 4, 30, quiet_only,
                      quiet_significant, needed=6)
    if verdict == "alert":
        assert (j.verdict, j.held_back) == ("alert", False)
        assert "on the 26 quiet rounds alone (4 unquiet set aside)" in j.reason
        return
    assert j.verdict == "regression"
    assert j.held_back is (verdict != "below")
    phrase = {"below": "quiet rounds alone put it below the alert level 4.0%",
              "held back": "quiet rounds alone neither reach nor exclude it",
              "too few": "too few quiet ones stand alone: a regression, not an alert"}[verdict]
    assert phrase in j.reason
    if verdict == "below" and quiet_only.n == 26 and quiet_only.lo == 1.025:
        assert j.reason == ("slower by 5.0% (at least 4.5%) on all rounds, but 4 of 30 rounds "
                            "failed the idle gate and the 26 quiet rounds alone put it below "
                            "the alert level 4.0% (at most +3.5% at 95%): a regression, not an "
                            "alert")


def test_threshold_is_floor_or_k_times_noise_and_default_without_profile():
    s = Settings()
    assert threshold_for(0.001, "profile", s).t == defaults.FLOOR
    assert threshold_for(0.02, "profile", s).t == pytest.approx(defaults.K * 0.02)
    assert threshold_for(0.02, "profile", s).alert == pytest.approx(
        defaults.ALERT_FACTOR * defaults.K * 0.02
    )
    no_profile = threshold_for(None, "no profile", s)
    expected = max(defaults.FLOOR, defaults.K * defaults.NOISE_WITHOUT_PROFILE)
    assert no_profile.t == pytest.approx(expected)
    assert threshold_for(0.02, "profile", Settings(alert=0.10)).alert == 0.10
    # An --alert below t is raised to t: an alert is never weaker than a regression.
    low = threshold_for(0.02, "profile", Settings(alert=0.005))
    assert low.alert == low.t == pytest.approx(0.04)


# --------------------------------------------------------------------------- documents

CASES = {
    "relu_d1_w8": {"ort": 1000.0, "base": 900.0, "pr": 900.0},
    "relu_d10_w8": {"ort": 3000.0, "base": 1500.0, "pr": 1500.0},
    "relu_d100_w8": {"ort": 21000.0, "base": 7000.0, "pr": 7000.0},
    "matmul_128x128": {"ort": 50000.0, "base": 40000.0, "pr": 40000.0},
}


def _compared(base, pr, **kwargs):
    """compare.compare's comparison as its JSON document (compare.json)."""
    return compare.compare(base, pr, **kwargs).to_dict()


def _compared_files(paths, **kwargs):
    return compare.compare_files(paths, **kwargs).to_dict()


def typed(doc):
    """A comparison's JSON document read back as compare.json is (Comparison.from_json)."""
    return doc if isinstance(doc, Comparison) else Comparison.from_json(doc)


def _row(**fields):
    """A CaseRow as an older compare.json gives it: only the required keys and `fields`."""
    base = {"case": "x", "verdict": "no_change", "emoji": "", "reason": "", "base_ns": None,
            "pr_ns": None, "change": None, "ci": [None, None], "threshold": 0.02, "rounds": 30,
            "unquiet": 0, "control_drift": None}
    return typed({**_empty(), "cases": [{**base, **fields}]}).cases[0]


@functools.cache
def _empty():
    """A comparison document to hang hand-made rows on."""
    fixtures = Path(__file__).parent / "fixtures" / "results"
    return _compared_files([str(fixtures / "same_run.json")], base_arm="base",
                                 pr_arm="pr")


def _doc(cases=CASES, **kw):
    # These tests check the comparison's logic on known effects; the error rates under
    # session offsets are the simulations' business above.
    kw.setdefault("noise", WITHIN_RUN_ONLY)
    return synthetic.results_doc(cases, **kw)


def _slower(cases, which, factor):
    out = {n: dict(arms) for n, arms in cases.items()}
    for name in which:
        out[name]["pr"] *= factor
    return out


def _calibrated_profile(cases=CASES, repeats=5):
    """A profile measured like `epbench calibrate` would, on synthetic A/A runs."""
    runs = [
        _doc({n: {"ort": a["ort"], "ort_b": a["ort"]} for n, a in cases.items()}, seed=100 + i)
        for i in range(repeats)
    ]
    return calibrate.profile_from_runs([as_results(r) for r in runs], None, "ort", "ort_b",
                                       arm_spec="ort")


def test_a_quiet_alert_quotes_its_own_bound_at_its_own_level():
    # The case is selected (1 of 2) and shown at the adjusted 97.5 %; the quiet rounds'
    # bound the rule read is their own 95 % one, and the reason says which is which.
    shown = _change(1.10, 1.06, 1.14)
    tests = IntervalTests([0.001, 1.0], [0.001, 1.0], [0.001, math.nan],
                          lambda cases, level: [shown for _ in cases])
    quiet = _change(1.09, 1.05, 1.13, n=26)
    j, _ = judge_grid([_change(1.10, 1.07, 1.13), _change(1.0, 0.99, 1.01)], [TH, TH],
                      [4, 0], [30, 30], 0.05, [quiet, None], needed=6, tests=tests)
    assert j.verdict == "alert"
    assert j.reason == (
        "slower by 9.0% (at least 5.0% at 95%) on the 26 quiet rounds alone (4 unquiet set "
        "aside), beyond the alert level 4.0% (interval shown at 97.50%: adjusted for "
        "selecting 1 of the 2 cases tested, Benjamini-Yekutieli)")
    below = judge(_change(1.05, 1.045, 1.055), True, 0.01, TH, 4, 30,
                  _change(1.03, 1.025, 1.035, n=26), True, needed=6, confidence=0.9)
    assert "(at most +3.5% at 90%)" in below.reason


def test_the_adjusted_interval_is_worded_for_one_case_and_for_all():
    assert adjusted_words(0.95, 1, 1) == (
        "interval shown at 95.00%: the only case tested, nothing to adjust for")
    assert adjusted_words(0.95, 3, 3) == (
        "interval shown at 95.00%: all 3 cases tested were selected, nothing to adjust for")
    assert adjusted_words(0.9875, 1, 4) == (
        "interval shown at 98.75%: adjusted for selecting 1 of the 4 cases tested, "
        "Benjamini-Yekutieli")


def test_same_run_flags_the_slowed_case_and_only_it():
    doc = _doc(_slower(CASES, ["relu_d100_w8"], 1.06), seed=3)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    by_case = {r["case"]: r for r in result["cases"]}
    # No profile: t = max(1 %, 2 x 2 %) = 4 %, so +6 % is a regression, not an alert.
    assert by_case["relu_d100_w8"]["verdict"] == "regression"
    assert by_case["relu_d100_w8"]["threshold"] == pytest.approx(0.04)
    assert result["mode"] == "same-run"
    assert any("no calibration profile" in w for w in result["warnings"])
    # With the calibrated profile of this noise (t 2.6 %, alert 5.1 %) the same +6.3 % is
    # ⚠️: 🔴 needs the alert level itself rejected (the interval starts at 4.4 %); its
    # interval, selected, is shown FCR-adjusted. +12 % is an alert.
    profile = _calibrated_profile()
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"), profile=profile)
    row = next(r for r in result["cases"] if r["case"] == "relu_d100_w8")
    assert row["verdict"] == "regression"
    assert row["ci_level"] == pytest.approx(1 - 0.05 / 4)
    assert ("interval shown at 98.75%: adjusted for selecting 1 of the 4 cases tested, "
            "Benjamini-Yekutieli") in row["reason"]
    doc = _doc(_slower(CASES, ["relu_d100_w8"], 1.12), seed=3)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"), profile=profile)
    by_case = {r["case"]: r for r in result["cases"]}
    assert by_case["relu_d100_w8"]["verdict"] == "alert"
    assert result["cases"][0]["case"] == "relu_d100_w8"  # worst first
    assert {by_case[c]["verdict"] for c in CASES if c != "relu_d100_w8"} == {"no_change"}
    assert result["overall"]["headline"] == "🔴 Regression"
    assert exit_code_for(comparison=typed(result), fail_on="alert")[0] == 5
    assert exit_code_for(comparison=typed(result), fail_on="never")[0] == 0


def _profile_for(doc, noise, rounds=30):
    return {
        "schema": calibrate.PROFILE_SCHEMA, "host_key": doc["host"]["key"], "rounds": rounds,
        "cases": {
            name: {"definition_sha256": case["definition_sha256"],
                   "same-run": {"noise": noise}, "separate-runs": {"noise": noise}}
            for name, case in doc["cases"].items()
        },
    }


def _machine(cases, factor):
    """The same cases on a machine ``factor`` times as slow for every arm."""
    return {n: {a: v * factor for a, v in arms.items()} for n, arms in cases.items()}


def test_separate_runs_use_the_double_ratio_and_ignore_machine_speed():
    base = _doc(seed=1)
    # The PR run's machine is 3 % slower for every arm (within CONTROL_SHIFT_LIMIT), and
    # the PR arm itself 12 % slower on one case: only that case may be flagged. (Two runs'
    # exact interval is the conservative Bonferroni one, so t is ~5 % here and 8 % would
    # straddle it.)
    slow = _machine(CASES, 1.03)
    pr = _doc(_slower(slow, ["relu_d10_w8"], 1.12), seed=2)
    result = _compared(
        Side("base", base, "base"), Side("pr", pr, "pr"), profile=_calibrated_profile()
    )
    by_case = {r["case"]: r for r in result["cases"]}
    assert result["mode"] == "separate-runs"
    assert by_case["relu_d10_w8"]["verdict"] in ("alert", "regression")
    assert by_case["relu_d10_w8"]["change"] == pytest.approx(0.12, abs=0.02)
    others = {by_case[c]["verdict"] for c in CASES if c != "relu_d10_w8"}
    assert others <= {"no_change", "inconclusive"} and "no_change" in others


@pytest.mark.parametrize("factor", [1.3, 1 / 1.3])
def test_two_runs_at_speeds_too_far_apart_are_inconclusive_whatever_they_show(factor):
    # The PR run's machine 30 % slower (or the base run's) for every arm, and the PR arm
    # 12 % slower on one case: the double ratio sees it, but a real machine's speed does
    # not move every case as it moves the control, so no case is judged.
    base = _doc(seed=1)
    pr = _doc(_slower(_machine(CASES, factor), ["relu_d10_w8"], 1.12), seed=2)
    result = _compared(
        Side("base", base, "base"), Side("pr", pr, "pr"), profile=_calibrated_profile()
    )
    by_case = {r["case"]: r for r in result["cases"]}
    assert {r["verdict"] for r in result["cases"]} == {"inconclusive"}
    assert result["overall"]["headline"] == "❔ Inconclusive"
    slower, other = ("PR", "base") if factor > 1 else ("base", "PR")
    for row in result["cases"]:
        shift = row["control_shift"]
        assert shift == pytest.approx(factor - 1.0, abs=0.03)  # the noise's offsets
        longer = max(1.0 + shift, 1.0 / (1.0 + shift)) - 1.0
        assert f"took {longer:.1%} longer a Run in the {slower} run than in the {other} one" in (
            row["reason"])
    # What the case would have been is kept in its reason.
    assert by_case["relu_d10_w8"]["change"] == pytest.approx(0.12, abs=0.02)
    reason = by_case["relu_d10_w8"]["reason"]
    assert re.match(r"\+1[12]\.\d% would be (🔴|⚠️) \(slower by", reason)
    reason = by_case["relu_d1_w8"]["reason"]
    assert re.match(r"[+-]\d\.\d% would be ✅ \(the whole interval", reason)
    (warning,) = [w for w in result["warnings"] if "another speed" in w]
    shift = by_case["relu_d10_w8"]["control_shift"]
    longer = max(1.0 + shift, 1.0 / (1.0 + shift)) - 1.0
    assert (f"relu_d10_w8 (the {slower} run's control {longer:.1%} longer: allowance "
            f"{speed_allowance(shift):.1%})") in warning
    assert "more than 5% longer a Run" in warning
    assert "by more than the allowance its shift gives, which grows with it" in warning
    assert warning == result["warnings"][0]
    assert render.overall_sentence(typed(result)) == (
        "4 could not be decided (4 as the two runs' controls ran at different speeds: rerun "
        "both back to back).")


def test_a_change_beyond_the_allowance_keeps_its_verdict_across_a_speed_change():
    # The PR arm 30 % slower on one case and 30 % faster on another, the PR run's machine
    # 20 % slower: both clear t by more than the ~4.1 % a 20 % speed change may move a case.
    base = _doc(seed=1)
    pr = _doc(_slower(_slower(_machine(CASES, 1.2), ["relu_d10_w8"], 1.3),
                      ["relu_d100_w8"], 1 / 1.3), seed=2)
    result = _compared(
        Side("base", base, "base"), Side("pr", pr, "pr"), profile=_calibrated_profile()
    )
    by_case = {r["case"]: r for r in result["cases"]}
    slower, faster = by_case["relu_d10_w8"], by_case["relu_d100_w8"]
    assert slower["verdict"] == "alert" and faster["verdict"] == "improvement"
    for row in (slower, faster):
        assert "longer a Run in the PR run than in the base one" in row["reason"]
        allowance = speed_allowance(row["control_shift"])
        assert 0.04 < allowance < 0.043
        assert f"clears the threshold by more than the {allowance:.1%} such" in row["reason"]
    assert {by_case[c]["verdict"] for c in ("relu_d1_w8", "matmul_128x128")} == {"inconclusive"}
    assert render.overall_sentence(typed(result)) == (
        "1 of 4 cases got slower beyond their threshold; 1 got faster; 2 could not be "
        "decided (2 as the two runs' controls ran at different speeds: rerun both back to "
        "back).")


def _judged(verdict, ratio, lo, hi, t=0.01, alert=0.02):
    j = Judgement(verdict, "why", True, 0.01)
    th = Threshold(noise=t / 2, source="twin", t=t, alert=alert)
    return across_speed_change(j, _change(ratio, lo, hi), th, 0.5)


def test_across_a_speed_change_only_what_clears_the_allowance_stands():
    # t 1 %, alert 2 %, the PR run's control 50 % slower: the allowance is 5.98 %.
    a = speed_allowance(0.5)
    assert a == pytest.approx(0.0598, abs=5e-5)
    assert _judged("alert", 1.20, 1.09, 1.30).verdict == "alert"
    assert _judged("alert", 1.10, 1.075, 1.16).verdict == "alert"  # the change, not lo, - a
    kept = _judged("alert", 1.075, 1.072, 1.09)  # clears t, but 7.5 % - 6 % < the alert
    assert kept.verdict == "regression"
    assert kept.reason.endswith("a regression, not an alert: the change less 6.0%, 1.5%, is "
                                "below the alert level 2.0%")
    # Just either side of t + a on the interval's bound.
    assert _judged("regression", 1.08, 1.0 + 0.01 + a - 0.001, 1.09).verdict == "inconclusive"
    assert _judged("regression", 1.08, 1.0 + 0.01 + a + 0.001, 1.09).verdict == "regression"
    assert _judged("improvement", 0.90, 0.88, 1.0 - 0.01 - a - 0.001).verdict == "improvement"
    assert _judged("improvement", 0.93, 0.92, 1.0 - 0.01 - a + 0.001).verdict == (
        "inconclusive")
    assert _judged("improvement", 0.90, 0.85, 0.94).verdict == "inconclusive"  # hi, not lo
    assert _judged("no_change", 1.0, 0.999, 1.001).verdict == "inconclusive"  # a > t
    was_unsure = _judged("inconclusive", 1.0, 0.98, 1.02)
    assert was_unsure.reason == (
        "why; also the ORT control took 50.0% longer a Run in the PR run than in the base "
        "one: rerun both sides back to back, more rounds alone may not settle it")
    j = Judgement("inconclusive", "the interval straddles ±1.0%; rerun with more "
                          "--rounds", False, 0.5)
    th = Threshold(noise=0.005, source="twin", t=0.01, alert=0.02)
    reason = across_speed_change(j, _change(1.0, 0.98, 1.02), th, -0.5).reason
    assert reason == ("the interval straddles ±1.0%; also the ORT control took 100.0% "
                      "longer a Run in the base run than in the PR one: rerun both sides "
                      "back to back, more rounds alone may not settle it")
    for untouched in ("failed", "not_comparable"):
        assert _judged(untouched, 1.0, 0.98, 1.02).reason == "why"
    moved = _judged("regression", 1.05, 1.03, 1.07)
    assert moved.reason == ("+5.0% would be ⚠️ (why), but the ORT control took 50.0% longer "
                            "a Run in the PR run than in the base one, and the interval does "
                            "not clear the threshold by the 6.0% such a change may move a "
                            "case; rerun both sides back to back")


def test_cases_held_by_the_speed_rule_are_not_for_a_rerun_of_one_side():
    # More rounds of one run cannot settle a case whose two runs ran at different speeds.
    rows = [_row(case=name, verdict=verdict, change=0.05, alert=0.02, control_shift=shift,
                 unquiet=3)
            for name, verdict, shift in (("unsure", "inconclusive", None),
                                         ("held", "regression", None),
                                         ("moved", "inconclusive", 0.3),
                                         ("moved_held", "regression", -0.3))]
    assert ambiguous_cases(replace(typed(_empty()), cases=tuple(rows))) == ["unsure", "held"]
    assert [held_back_by_gate(r) for r in rows] == [False, True, False, False]


def test_the_speed_limit_is_on_the_ratio_of_the_controls_either_way():
    limit = defaults.CONTROL_SHIFT_LIMIT
    assert not beyond_speed_limit(None)
    for inside in (0.0, limit * 0.99, 1.0 / (1.0 + limit * 0.99) - 1.0):
        assert not beyond_speed_limit(inside)
    for beyond in (limit * 1.01, 1.0 / (1.0 + limit * 1.01) - 1.0):
        assert beyond_speed_limit(beyond)
    assert control_shift(np.array([100.0, 100.0, 0.0]), np.array([130.0])) == (
        pytest.approx(0.3))
    assert control_shift(np.array([0.0]), np.array([130.0])) is None
    # What a file may hold instead of a number is no shift, never a crash.
    for junk in ("x", True, -2.0, math.nan, [0.5]):
        assert not beyond_speed_limit(junk)
    assert longer_run(-0.5) == ("base", pytest.approx(1.0))


def test_a_control_exactly_at_the_limit_is_not_beyond_it():
    # "More than 5 %": 1050 ns vs 1000 ns is 5 %, though 1050 / 1000 - 1 rounds above 0.05.
    for shift in (control_shift([1000.0], [1050.0]), control_shift([1050.0], [1000.0])):
        assert not beyond_speed_limit(shift)
        assert speed_allowance(shift) == 0.0
    assert beyond_speed_limit(control_shift([1000.0], [1050.001]))
    assert beyond_speed_limit(control_shift([1050.001], [1000.0]))


def test_a_control_time_that_rounds_the_shift_to_infinity_is_beyond_the_limit():
    # A control median of 5e-324 ns beside 1000 ns: p / b overflows (or rounds to 0), and
    # the speed rule must not be skipped for want of a finite shift.
    for shift, slower in ((control_shift([5e-324], [1000.0]), "PR"),
                          (control_shift([1000.0], [5e-324]), "base")):
        assert shift in (math.inf, -1.0)
        assert beyond_speed_limit(shift)
        assert longer_run(shift) == (slower, math.inf)
        assert speed_allowance(shift) == math.inf
    base = _doc(seed=1)
    pr = _doc(seed=2)
    # More than half the PR's rounds: the control's median; the others stay usable.
    for rnd in pr["cases"]["relu_d10_w8"]["rounds"][:16]:
        rnd["summary_ns"]["ort"].update(dict.fromkeys(("median", "min", "q1", "q3"), 5e-324))
    result = _compared(Side("base", base, "base"), Side("pr", pr, "pr"))
    row = next(r for r in result["cases"] if r["case"] == "relu_d10_w8")
    # Judged on its usable rounds with no OverflowError on the way (stats.control_drift,
    # nested.process_sample), and held ❔ by the speed rule.
    assert row["verdict"] == "inconclusive"
    assert "took ∞% longer a Run in the base run than in the PR one" in row["reason"]
    assert "inf%" not in json.dumps(result, ensure_ascii=False)


def test_the_speed_limit_is_quoted_as_the_constant():
    from click.testing import CliRunner

    from epbench.cli.main import cli

    limit = f"{defaults.CONTROL_SHIFT_LIMIT:.0%}".replace("%", " %")
    # The allowance as the docs quote it: just beyond the limit, at a control 10 % and
    # 50 % longer.
    jump = f"{speed_allowance(defaults.CONTROL_SHIFT_LIMIT + 1e-9):.1%}".replace("%", " %")
    at = f"{speed_allowance(0.1):.1%} at 10 %, {speed_allowance(0.5):.1%} at 50 %".replace(
        "% ", " % ")
    root = Path(__file__).resolve().parents[1]
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    assert f"{limit} longer a Run than the other's (`CONTROL_SHIFT_LIMIT`)" in readme
    assert (f"an allowance, {jump} just beyond the limit, that grows with the shift ({at}; "
            "`SPEED_SHIFT_JUMP`, `SPEED_SHIFT_VARIANCE`") in readme
    design = " ".join((root / "docs" / "design.md").read_text(encoding="utf-8").split())
    assert f"`CONTROL_SHIFT_LIMIT` ({limit})" in design
    assert (f"an allowance, {jump} just beyond the limit, that grows with the shift "
            f"(`SPEED_SHIFT_JUMP`, `SPEED_SHIFT_VARIANCE`: {at})") in design
    text = CliRunner().invoke(cli, ["compare", "--help"], terminal_width=200).output
    text = " ".join(text.split())
    assert f"more than {limit} longer a Run" in text
    assert f"allowance, {jump} just beyond {limit}, that grows with the shift ({at})" in text


def test_a_family_across_a_speed_change_is_not_judged():
    cases = {f"relu_d{d}_w8": {"ort": 800 + 200.0 * d, "pr": 500 + 60.0 * d}
             for d in (1, 10, 100)}
    base = _doc(cases, seed=3)
    for factor, judged in ((1.02, True), (1.3, False)):
        pr = _doc(_slower(_machine(cases, factor), ["relu_d100_w8"], 1.2), seed=4)
        (fam,) = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))["families"]
        assert fam["finding"].startswith("not judged") is not judged
        if not judged:
            assert "relu_d1_w8, relu_d10_w8, relu_d100_w8" in fam["finding"]


def test_aa_of_two_runs_of_the_same_code_shows_no_red_or_warning():
    base, pr = _doc(seed=10), _doc(seed=11)
    for profile in (None, _calibrated_profile()):
        result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"), profile=profile)
        assert not {r["verdict"] for r in result["cases"]} & {"alert", "regression", "failed"}


def test_counters_changes_are_reported_exactly_whatever_the_noise():
    counters = {"relu_d1_w8": {"base": {"ort_api_calls": 7, "allocs": 2},
                               "pr": {"ort_api_calls": 4, "allocs": 2}}}
    doc = _doc(counters=counters)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    assert result["counters"] == [
        {"case": "relu_d1_w8", "counter": "ort_api_calls", "base": 7, "pr": 4, "change": -3 / 7}
    ]
    # A counter on one side only is a change too; a side without counters at all is shown.
    counters = {"relu_d1_w8": {"base": {"allocs": 2.0}, "pr": {"allocs": 2.0, "locks": 5.0}},
                "relu_d10_w8": {"pr": {"allocs": 1.0}}}
    doc = _doc(counters=counters)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    assert result["counters"] == [
        {"case": "relu_d1_w8", "counter": "locks", "base": None, "pr": 5.0, "change": None},
        {"case": "relu_d10_w8", "counter": "allocs", "base": None, "pr": 1.0, "change": None},
    ]
    text = render.render_terminal(typed(result))
    assert "relu_d1_w8  locks/Run  - -> 5\n" in text  # integers print as integers


def test_counter_change_prints_its_percentage_and_integers():
    counters = {"relu_d1_w8": {"base": {"ort_api_calls": 8.0}, "pr": {"ort_api_calls": 6.0}}}
    doc = _doc(counters=counters)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    assert "ort_api_calls/Run  8 -> 6 (-25.0%)" in render.render_terminal(typed(result))
    assert "| 8 | 6 | -25.0% |" in render.render_markdown(typed(result))


def test_rerun_errors_reach_the_report_one_line_per_case():
    doc = _doc()
    doc["cases"]["relu_d1_w8"]["rerun_errors"] = ["crashed: signal 11", "timed out"]
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    text = render.render_terminal(typed(result))
    assert "re-run failed: relu_d1_w8: crashed: signal 11; timed out" in text
    assert "Re-run of `relu_d1_w8` failed: `crashed: signal 11; timed out`." in (
        render.render_markdown(typed(result)))


def test_separate_runs_with_unequal_rounds_name_both_counts():
    base, pr = _doc(rounds=20, seed=1), _doc(rounds=30, seed=2)
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))
    assert "20 (base) and 30 (PR) rounds" in render.render_terminal(typed(result))
    assert "20 (base) and 30 (PR) rounds per case" in render.render_markdown(typed(result))


def test_family_decomposition_tells_per_node_from_per_run():
    # Base: 500 ns per Run + 60 ns per node. PR: per-node cost +20 %, per-Run unchanged.
    depths = (1, 10, 100, 1000)
    cases = {
        f"relu_d{d}_w8": {"ort": 800 + 200.0 * d, "base": 500 + 60.0 * d, "pr": 500 + 72.0 * d}
        for d in depths
    }
    doc = _doc(cases, noise=synthetic.NoiseModel(0.01, 0.005, 0.0, session_sigma=0.0), seed=5)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"),
                             profile=_profile_for(doc, 0.003))
    (fam,) = result["families"]
    assert fam["family"] == "relu_w8" and fam["depths"] == list(depths)
    assert fam["per_node"]["change"] == pytest.approx(0.20, abs=0.01)
    assert fam["per_node"]["lo"] < 0.20 < fam["per_node"]["hi"]
    assert fam["per_run"]["lo"] < 0.0 < fam["per_run"]["hi"]
    assert fam["finding"].startswith("per-node cost rose by 19.") or fam["finding"].startswith(
        "per-node cost rose by 20."
    )
    assert "per-Run cost rose" not in fam["finding"]
    assert fam["base"]["slope_ns"] == pytest.approx(60.0, rel=0.02)


def test_failed_pr_case_is_failed_and_base_failure_is_not_comparable():
    base = _doc(seed=1)
    pr = _doc(status={"relu_d1_w8": "crashed"}, seed=2)
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))
    by_case = {r["case"]: r for r in result["cases"]}
    assert by_case["relu_d1_w8"]["verdict"] == "failed"
    assert "pr crashed" in by_case["relu_d1_w8"]["reason"]
    assert exit_code_for(comparison=typed(result), fail_on="alert")[0] == 5
    result = _compared(Side("base", pr, "pr"), Side("pr", base, "pr"))
    by_case = {r["case"]: r for r in result["cases"]}
    assert by_case["relu_d1_w8"]["verdict"] == "not_comparable"


def test_one_sided_cases_are_listed_not_dropped():
    base = _doc(seed=1)
    pr = _doc({n: a for n, a in CASES.items() if n != "matmul_128x128"} |
              {"relu_d1_w4096": {"ort": 5000.0, "base": 4000.0, "pr": 4000.0}}, seed=2)
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))
    assert result["only_base"] == ["matmul_128x128"]
    assert result["only_pr"] == ["relu_d1_w4096"]
    assert len(result["cases"]) == 3


def test_compare_of_a_50_case_grid_is_one_kernel_call_per_test(monkeypatch):
    calls = []
    real = stats._paired_kernel
    monkeypatch.setattr(stats, "_paired_kernel", lambda x, *a: calls.append(x.shape) or real(x, *a))
    cases = {f"relu_d{d}_w{w}": {"ort": 1000.0 + d, "base": 900.0 + d, "pr": 900.0 + d}
             for d in range(1, 11) for w in (8, 16, 32, 64, 128)}
    doc = _doc(cases, samples=3)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    assert len(result["cases"]) == 50
    # The change, then its three interval nulls (above t, below -t, above the alert
    # level); nothing is selected, so no FCR-adjusted interval is computed.
    assert calls == [(50, 30)] * 4


# --------------------------------------------------------------------------- refusals


def test_refuses_different_hosts_unless_forced():
    base, pr = _doc(seed=1), _doc(seed=2, host_key="otherhost")
    with pytest.raises(CompareError, match="different hosts.*pass --force"):
        compare.compare(Side("base", base, "pr"), Side("pr", pr, "pr"))
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"),
                             settings=Settings(force=True))
    assert any("different hosts" in w and "--force" in w for w in result["warnings"])


def test_separate_runs_timed_with_different_slices_are_compared_with_a_warning():
    base, pr = _doc(seed=1), _doc(seed=2)
    pr["config"]["block_slices"] = 32  # base: an older file, which has no such key
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))
    assert [w for w in result["warnings"] if "slices" in w] == [
        "base and PR cut their blocks into different numbers of slices (1 vs 32): how often "
        "the arms alternate can move their ratio to the control; re-run the older side with "
        "the other's --slices"]
    base["config"]["block_slices"] = 32
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))
    assert not [w for w in result["warnings"] if "slices" in w]


def test_refuses_different_schema_versions():
    base, pr = _doc(seed=1), _doc(seed=2)
    pr["schema"] = "epbench.results/3"
    with pytest.raises(CompareError, match="different results schema versions"):
        compare.compare(Side("base", base, "pr"), Side("pr", pr, "pr"))


def test_refuses_different_case_definitions():
    base = _doc(seed=1)
    pr = _doc(seed=2, definition={"relu_d10_w8": "changed"})
    with pytest.raises(CompareError, match="case definitions differ .* relu_d10_w8"):
        compare.compare(Side("base", base, "pr"), Side("pr", pr, "pr"))


def test_refuses_no_common_case():
    base = _doc(seed=1)
    pr = _doc({"relu_d1_w4096": {"ort": 5000.0, "pr": 4000.0}}, seed=2)
    with pytest.raises(CompareError, match="share no case"):
        compare.compare(Side("base", base, "pr"), Side("pr", pr, "pr"))


def test_refuses_unknown_or_identical_arms_and_missing_control():
    doc = _doc()
    with pytest.raises(CompareError, match="arm 'nope' is not in the pr results"):
        compare.compare(Side("base", doc, "base"), Side("pr", doc, "nope"))
    with pytest.raises(CompareError, match="both 'base'"):
        compare.compare(Side("base", doc, "base"), Side("pr", doc, "base"))
    other = _doc(seed=4)
    other["control"] = "missing"
    with pytest.raises(CompareError, match="lack their control arm"):
        compare.compare(Side("base", doc, "pr"), Side("pr", other, "pr"))


def test_refuses_a_profile_from_another_host_unless_forced():
    doc = _doc()
    profile = _profile_for(doc, 0.01) | {"host_key": "elsewhere"}
    with pytest.raises(CompareError, match="calibrated on host elsewhere"):
        compare.compare(Side("base", doc, "base"), Side("pr", doc, "pr"), profile=profile)


def test_a_profile_timed_with_other_slices_is_used_with_a_warning():
    doc = _doc()
    profile = _profile_for(doc, 0.01)  # no block_slices: an older profile, whole blocks
    doc["config"]["block_slices"] = 64
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"), profile=profile)
    assert [w for w in result["warnings"] if "slice" in w] == [
        "the noise profile was calibrated with 1 slice(s) per block, these results were "
        "timed with 64: its noise figures overstate this run's; re-run `epbench calibrate`"]
    profile["block_slices"] = 64
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"), profile=profile)
    assert not [w for w in result["warnings"] if "slice" in w]
    doc["config"]["block_slices"] = 1
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"), profile=profile)
    assert [w for w in result["warnings"] if "slice" in w] == [
        "the noise profile was calibrated with 64 slice(s) per block, these results were "
        "timed with 1: its noise figures understate this run's; re-run `epbench calibrate`"]


def test_a_profile_records_how_its_runs_were_timed():
    runs = [_doc({"relu_d10_w8": {"ort": 1.0, "ort_b": 1.0}}, seed=100 + i) for i in range(2)]
    for run in runs:
        run["config"]["block_slices"] = 16
    profile = calibrate.profile_from_runs([as_results(r) for r in runs], None, "ort", "ort_b",
                                          arm_spec="ort")
    assert profile["block_slices"] == 16


def test_settings_refuse_nonsense():
    for bad in ({"confidence": 1.5}, {"fdr": 0.0}, {"floor": -1.0}, {"alert": 0.0},
                {"resamples": 100}):
        with pytest.raises(CompareError):
            Settings(**bad)


def test_choose_arms_needs_a_name_when_ambiguous():
    doc = _doc()
    with pytest.raises(CompareError, match="say which to compare with --base"):
        compare.choose_arms(as_results(doc), as_results(doc), None, None)
    single = _doc({"relu_d1_w8": {"ort": 1000.0, "plugin:x": 900.0}})
    single = as_results(single)
    assert compare.choose_arms(single, single, None, None) == ("plugin:x", "plugin:x")


def test_profile_noise_scales_with_rounds_and_checks_definitions():
    doc = _doc()
    profile = _profile_for(doc, 0.01, rounds=30)
    noise, source = calibrate.profile_noise(
        profile, "relu_d1_w8", "def-relu_d1_w8", 120, "same-run"
    )
    # No sampling estimate in this profile: all of it may be session offset, not scaled down.
    assert source == "profile" and noise == pytest.approx(0.01)
    assert calibrate.profile_noise(profile, "relu_d1_w8", "def-relu_d1_w8", 15, "same-run")[
        0] == pytest.approx(0.01 * math.sqrt(2.0))
    assert calibrate.profile_noise(profile, "nope", None, 30, "same-run") == (
        None, "profile lacks this case"
    )
    noise, source = calibrate.profile_noise(profile, "relu_d1_w8", "other", 30, "same-run")
    assert noise is None and "another definition" in source
    assert math.isfinite(threshold_for(noise, source, Settings()).t)


def test_judge_grid_controls_the_fdr_across_the_grid():
    # One case with p = 0.01 alone would be significant at 0.05, but among 20 tests
    # BH needs p <= 0.05 / 20 for the smallest: it is ❔, not ⚠️.
    changes = [_change(1.05, 1.03, 1.07, p=0.01)] + [_change(1.0, 0.99, 1.01, p=0.9)] * 19
    js = judge_grid(changes, [TH] * 20, [0] * 20, [30] * 20, fdr=0.05)
    assert js[0].verdict == "inconclusive" and not js[0].significant
    assert "not significant" in js[0].reason
    js = judge_grid(changes[:1], [TH], [0], [30], fdr=0.05)
    # Alone it is significant; its interval starts at 3 %, below the alert level 4 %.
    assert js[0].verdict == "regression"


def test_quiet_rounds_whose_interval_reaches_exactly_the_alert_level():
    # Binary-exact numbers: a lower bound of exactly the alert level makes an alert
    # ("at least"), an upper bound of exactly it does not exclude one.
    th = Threshold(noise=0.25, source="profile", t=0.5, alert=1.0)
    whole = _change(2.25, 2.0, 2.5)
    at = judge(whole, True, 0.01, th, 4, 30, _change(2.25, 2.0, 2.5, n=26), True)
    assert at.verdict == "alert"
    up_to = judge(whole, True, 0.01, th, 4, 30, _change(1.75, 1.5, 2.0, n=26), True)
    assert (up_to.verdict, up_to.held_back) == ("regression", True)


def test_quiet_rounds_need_three_degrees_of_freedom_to_stand_for_a_case_of_several():
    # One process's interval covers its rounds, not what processes differ by; two or
    # three processes' t interval (1 or 2 df) is too wide for its silence to count.
    # Set aside, they leave the alert held back to a regression, the reason says so.
    whole = stats.Change(1.05, 1.045, 1.055, 0.001, 30, processes=6)
    for processes, why in ((1, "too few quiet ones stand alone"),
                           (2, "too few quiet ones stand alone"),
                           (3, "too few quiet ones stand alone"),
                           (4, "the 20 quiet rounds alone put it below the alert level")):
        quiet = stats.Change(1.03, 1.025, 1.035, 0.001, 20, processes=processes)
        j = judge(whole, True, 0.01, TH, 4, 30, quiet, True)
        assert j.verdict == "regression" and why in j.reason
    # The degrees of freedom recorded win over the count (Welch's for two runs).
    quiet = stats.Change(1.03, 1.025, 1.035, 0.001, 20, processes=4, df=2.5)
    assert judge(whole, True, 0.01, TH, 4, 30, quiet, True).held_back
    quiet = stats.Change(1.05, 1.045, 1.055, 0.001, 20, processes=1)
    j = judge(whole, True, 0.01, TH, 4, 30, quiet, True)
    assert j.verdict == "regression" and "too few quiet ones stand alone" in j.reason


def test_unquiet_rounds_never_make_an_alert_but_quiet_rounds_alone_can():
    quiet = _change(1.10, 1.07, 1.13)
    j = judge(_change(1.10, 1.07, 1.13), True, 0.01, TH, 3, 30, quiet, True)
    assert j.verdict == "alert" and "on the 30 quiet rounds alone (3 unquiet set aside)" in j.reason
    # Too few quiet rounds to stand on: the load takes the alert only, in one run or two.
    for quiet_only, shared_load in itertools.product(
            (_change(1.10, 1.07, 1.13, n=4), None), (True, False)):
        j = judge(_change(1.10, 1.07, 1.13), True, 0.01, TH, 3, 30, quiet_only, True,
                          shared_load=shared_load)
        assert j.verdict == "regression" and j.held_back
        assert ("rerun both runs" in j.reason) is not shared_load
    # Quiet rounds that stand alone and show no regression make it ⚠️, never ❔: a
    # +3 % with the same unquiet rounds is ⚠️, and +10 % may not read weaker.
    for shared_load in (True, False):
        j = judge(_change(1.10, 1.07, 1.13), True, 0.01, TH, 3, 30,
                          _change(1.01, 0.99, 1.03), True, shared_load=shared_load)
        assert (j.verdict, j.held_back) == ("regression", False)
    j = judge(_change(1.10, 1.07, 1.13), True, 0.01, TH, 3, 30,
                      _change(1.03, 1.025, 1.035), True)
    assert j.verdict == "regression"  # the quiet rounds make a regression, not an alert
    j = judge(_change(1.10, 1.07, 1.13), True, 0.01, TH, 3, 30, quiet, False)
    assert (j.verdict, j.held_back) == ("regression", True)


@pytest.mark.parametrize(("unquiet", "verdict"), [(range(0, 30, 10), "alert"),
                                                  (range(4, 30), "regression")])
def test_compare_judges_alerts_on_quiet_rounds_only(unquiet, verdict):
    """One run: 3 unquiet rounds leave 27 quiet ones that make the alert; 26 leave too
    few to stand alone, and the load, shared by both arms, caps the alert at ⚠️."""
    doc = _doc(_slower(CASES, ["relu_d100_w8"], 1.10), seed=3,
               unquiet_rounds={"relu_d100_w8": list(unquiet)})
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"),
                             profile=_calibrated_profile())
    row = next(r for r in result["cases"] if r["case"] == "relu_d100_w8")
    assert row["verdict"] == verdict
    assert row["unquiet"] == len(unquiet)
    if verdict == "regression":
        assert "rounds failed the idle gate and too few quiet ones stand alone" in row["reason"]


@pytest.mark.parametrize("loaded", ["base", "pr", "both"])
def test_between_two_runs_an_unquiet_would_be_alert_is_held_back_to_a_regression(loaded):
    """Two runs, a load on one or both: the alert is held back to ⚠️, the verdict a
    smaller slowdown with the same unquiet rounds gets (test_verdict_rules), never ❔."""
    unquiet = {"relu_d100_w8": list(range(4, 30))}
    base = _doc(CASES, seed=3, unquiet_rounds=unquiet if loaded != "pr" else None)
    pr = _doc(_slower(CASES, ["relu_d100_w8"], 1.30), seed=4,
              unquiet_rounds=unquiet if loaded != "base" else None)
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"),
                             profile=_calibrated_profile())
    row = next(r for r in result["cases"] if r["case"] == "relu_d100_w8")
    assert row["ci"][0] >= row["alert"]  # all of it beyond the alert level
    assert row["verdict"] == "regression"
    assert "a regression, not an alert; rerun both runs on a quiet machine" in row["reason"]
    assert row["unquiet"] == 26 * (2 if loaded == "both" else 1)


def test_interrupted_runs_are_said_and_ambiguous_cases_listed():
    doc = _doc(_slower(CASES, ["relu_d100_w8"], 1.06), seed=3)
    doc["interrupted"] = True
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    assert any("the pr run was interrupted" in w for w in result["warnings"])
    assert ambiguous_cases(typed(result)) == [
        r["case"] for r in result["cases"] if r["verdict"] == "inconclusive"
    ]


def test_a_warning_the_idle_gate_held_back_from_an_alert_is_worth_a_rerun():
    """relu_d100_w8: +10 %, 26 of 30 rounds unquiet (⚠️ held back); relu_d10_w8: +10 %
    on quiet rounds (🔴); matmul_128x128: +3 %, 26 unquiet (a ⚠️ below the alert level)."""
    unquiet = list(range(4, 30))
    doc = _doc(_slower(_slower(CASES, ["relu_d100_w8", "relu_d10_w8"], 1.10),
                       ["matmul_128x128"], 1.03), seed=3,
               unquiet_rounds={"relu_d100_w8": unquiet, "matmul_128x128": unquiet})
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"),
                             profile=_calibrated_profile())
    verdicts = {r["case"]: r["verdict"] for r in result["cases"]}
    assert verdicts == {"relu_d1_w8": "no_change", "relu_d10_w8": "alert",
                        "relu_d100_w8": "regression", "matmul_128x128": "regression"}
    assert ambiguous_cases(typed(result)) == ["relu_d100_w8"]


def test_held_back_is_a_warning_whose_change_reaches_the_alert_level() -> None:
    # An older file's row, which does not say whether the gate held it back.
    row = _row(verdict="regression", change=0.04, alert=0.04, unquiet=3)
    assert row.held_back is None
    assert held_back_by_gate(row)  # at the alert level exactly: held back
    assert not held_back_by_gate(replace(row, change=0.0399))
    assert not held_back_by_gate(replace(row, verdict="alert"))
    assert not held_back_by_gate(replace(row, change=None))
    assert not held_back_by_gate(replace(row, held_back=False))


def test_documented_defaults_match_the_constants():
    from click.testing import CliRunner

    from epbench.cli.main import cli

    text = CliRunner().invoke(cli, ["compare", "--help"], terminal_width=200).output
    for option in ("--confidence", "--resamples", "--floor", "--k", "--fdr", "--fail-on"):
        pattern = r"^\s+" + re.escape(option) + r" .*?\[default: ([^\];]+)"
        shown = re.search(pattern, text, re.S | re.M)
        assert shown is not None, option
        value, expected = shown.group(1).strip(), defaults.documented()[option]
        if option == "--fail-on":
            assert value == expected
        else:
            assert float(value) == float(expected), option


# --------------------------------------------------------------------------- nothing judged


def test_a_grid_with_no_judged_case_is_inconclusive_not_no_regression():
    # 4 rounds: too few for an exact 95 % interval, however slow the PR is.
    doc = _doc(_slower(CASES, list(CASES), 2.0), rounds=4)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    assert {r["verdict"] for r in result["cases"]} == {"not_comparable"}
    assert result["overall"] == {"key": "inconclusive", "headline": "❔ Inconclusive"}
    row = result["cases"][0]
    # A ➖ row shows no change or interval, and its remedy names the rounds it needs.
    assert row["change"] is None and row["ci"] == [None, None]
    assert "need 6" in row["reason"] and "--rounds 6 or more" in row["reason"]
    assert ambiguous_cases(typed(result)) == []  # ➖ is not something a re-run settles


def test_every_base_case_crashed_is_inconclusive_and_failures_head_the_headline():
    base = _doc(status=dict.fromkeys(CASES, "crashed"), seed=1)
    pr = _doc(seed=2)
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))
    assert {r["verdict"] for r in result["cases"]} == {"not_comparable"}
    assert result["overall"]["key"] == "inconclusive"
    # A failed PR case with everything else within noise: ❌, not ✅.
    result = _compared(Side("base", pr, "pr"), Side("pr", base, "pr"))
    assert result["overall"] == {"key": "failed", "headline": "❌ Failed"}
    rows = [CaseRow(case="x", verdict=v, emoji="", reason="", base_ns=None, pr_ns=None,
                            change=None, ci=[None, None], p=None, q=None, significant=False,
                            threshold=0.0, alert=0.0, noise=0.0, noise_source="", rounds=0,
                            unquiet=0, control_drift=None)
            for v in ("no_change", "failed")]
    assert overall_verdict(rows).key == "failed"
    assert overall_verdict(rows[:1]).key == "no_change"


def test_rounds_without_a_usable_time_are_named_in_the_reason():
    doc = _doc(rounds=30)
    # A block with no calls has no time (a zero or negative one is refused at load).
    for r in doc["cases"]["relu_d10_w8"]["rounds"][:16]:
        r["summary_ns"]["pr"] = block_summary([])
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    row = next(r for r in result["cases"] if r["case"] == "relu_d10_w8")
    assert "16 of 30 rounds dropped" in row["reason"]
    assert row["pr_ns"] == pytest.approx(1500.0, rel=0.05)  # not "0.00 ns"
    for r in doc["cases"]["relu_d10_w8"]["rounds"][:27]:
        r["summary_ns"]["pr"] = block_summary([])
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    row = next(r for r in result["cases"] if r["case"] == "relu_d10_w8")
    assert row["verdict"] == "not_comparable"
    assert "27 of 30 rounds had no usable time" in row["reason"] and "--rounds" not in row["reason"]


# --------------------------------------------------------------------------- behaviour


def test_quiet_rounds_alone_need_their_lower_bound_above_the_alert_and_significance():
    weak_lo = _change(1.10, 1.01, 1.13)  # a big change whose interval reaches below t = 2 %
    j = judge(_change(1.10, 1.07, 1.13), True, 0.01, TH, 3, 30, weak_lo, True)
    assert (j.verdict, j.held_back) == ("regression", True)
    # judge_grid: a quiet-only p above the grid's BH level (0.05 x 2 / 2) is not significant,
    # one at or below it is, even when it is larger than every rejected p of the grid.
    full = [_change(1.10, 1.07, 1.13, p=1e-9), _change(1.10, 1.07, 1.13, p=1e-9)]
    for quiet_p, verdict in ((0.5, "regression"), (0.01, "alert")):
        quiet = [_change(1.10, 1.07, 1.13, p=quiet_p), None]
        js = judge_grid(full, [TH, TH], [3, 0], [30, 30], 0.05, quiet)
        assert [j.verdict for j in js] == [verdict, "alert"]


def test_unquiet_rounds_of_the_base_run_count_too():
    base = _doc(seed=1, unquiet_rounds={"relu_d10_w8": (0, 10, 20)})
    pr = _doc(_slower(CASES, ["relu_d10_w8"], 1.25), seed=2)
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))
    row = next(r for r in result["cases"] if r["case"] == "relu_d10_w8")
    assert row["unquiet"] == 3
    # The base run's unquiet rounds count too: set aside, they leave 27 quiet base rounds,
    # which stand alone and make the alert.
    assert row["verdict"] == "alert"
    assert "on the 27 quiet rounds alone (3 unquiet set aside)" in row["reason"]


def test_a_falling_control_warns_like_a_rising_one(monkeypatch):
    doc = _doc(noise=synthetic.NoiseModel(0.0, 0.002, 0.0, drift=-0.08, session_sigma=0.0))
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    assert result["cases"][0]["control_drift"] == pytest.approx(-0.08, abs=0.01)
    # Every case drifted: one warning names them all, each with its drift.
    (warning,) = [w for w in result["warnings"] if "control drifted" in w]
    assert "not biased" in warning
    for row in result["cases"]:
        assert row["drift_exceeds_threshold"]
        assert f"{row['case']} ({row['control_drift']:+.1%})" in warning
    # A long list is cut: the comment job refuses a warning over 4000 characters.
    monkeypatch.setattr(findings, "NAMED_CASES", 1)
    result = _compared(Side("base", doc, "base"), Side("pr", doc, "pr"))
    (warning,) = [w for w in result["warnings"] if "control drifted" in w]
    first = result["cases"][0]
    assert (f"{first['case']} ({first['control_drift']:+.1%}) and "
            f"{len(result['cases']) - 1} more:") in warning


def test_both_sides_failed_is_not_comparable_not_failed():
    base = _doc(status={"relu_d1_w8": "crashed"}, seed=1)
    pr = _doc(status={"relu_d1_w8": "crashed"}, seed=2)
    result = _compared(Side("base", base, "pr"), Side("pr", pr, "pr"))
    row = next(r for r in result["cases"] if r["case"] == "relu_d1_w8")
    assert row["verdict"] == "not_comparable"
    assert "pr crashed" in row["reason"] and "base crashed" in row["reason"]


def test_two_runs_family_fits_resample_independently():
    # Identical data on both sides: with one shared draw the per-node ratio would be
    # exactly 1 in every resample (a zero-width interval); independent draws give width.
    cases = {f"relu_d{d}_w8": {"ort": 800 + 200.0 * d, "pr": 500 + 60.0 * d}
             for d in (1, 10, 100)}
    doc = _doc(cases, seed=3)
    copy = json.loads(json.dumps(doc))
    result = _compared(Side("base", doc, "pr"), Side("pr", copy, "pr"))
    (fam,) = result["families"]
    assert fam["per_node"]["lo"] < 0.0 < fam["per_node"]["hi"]


def test_the_terminal_report_lists_cases_on_one_side_only():
    base = _doc(seed=1)
    pr = _doc({n: a for n, a in CASES.items() if n != "matmul_128x128"}, seed=2)
    text = render.render_terminal(compare.compare(Side("base", base, "pr"), Side("pr", pr, "pr")))
    assert "only in base: matmul_128x128" in text


def test_large_integral_counters_print_as_integers():
    assert render.format_count(1234567.0) == "1234567"
    assert render.format_count(2.5) == "2.5" and render.format_count(None) == "-"


def test_min_rounds_for_one_and_two_runs():
    # One run at 95 %: 2 / 2^6 <= 0.05 < 2 / 2^5. Two runs split alpha: 2 / 2^7 <= 0.025.
    assert stats.min_rounds(0.95) == 6
    assert stats.min_rounds(0.95, 2) == 7


def test_a_warning_names_at_most_so_many_cases():
    # The comment job refuses a warning over 4000 characters; a grid can have thousands.
    names = [f"case_{i:04d}" for i in range(NAMED_CASES + 5)]
    assert named(names[:NAMED_CASES]) == ", ".join(names[:NAMED_CASES])
    assert named(names) == ", ".join(names[:NAMED_CASES]) + " and 5 more"
    assert named(names[:1]) == "case_0000"
    # Names of 200 characters (the schema's most): cut by length before the count.
    long = [f"{i:03d}" + "x" * 197 for i in range(NAMED_CASES)]
    text = named(long)
    fit = NAMED_CHARS // 202  # ", " between names
    assert text == ", ".join(long[:fit]) + f" and {len(long) - fit} more"
    assert len(text) <= NAMED_CHARS + len(" and 99 more")
    # One name is always shown, however long.
    assert named(["y" * 3000]) == "y" * 3000
