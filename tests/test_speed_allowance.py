"""The speed-change allowance between two runs (findings.speed_allowance, issue 46): 0 up
to CONTROL_SHIFT_LIMIT, then a jump growing with |log| of the controls' ratio, as fitted
on the archived A/A pairs of separate runs (docs/validation/speed_shift.py --fit)."""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import pytest

from epbench.reports import defaults, stats
from epbench.reports.findings import across_speed_change, flag_bar, speed_allowance
from epbench.reports.verdicts import Judgement, Settings, Threshold

ROOT = Path(__file__).resolve().parents[1]
LIMIT = defaults.CONTROL_SHIFT_LIMIT


def _judged(verdict: str, lo: float, hi: float, shift: float) -> str:
    """The verdict across a speed change of ``shift`` for an interval [lo, hi] (changes)."""
    j = Judgement(verdict, "why", True, 0.01)
    th = Threshold(noise=0.005, source="twin", t=0.01, alert=0.2)
    change = stats.Change(1.0 + (lo + hi) / 2.0, 1.0 + lo, 1.0 + hi, 0.001, 30)
    return across_speed_change(j, change, th, shift).verdict


def test_the_allowance_jumps_at_the_limit_and_grows_with_the_shift():
    assert speed_allowance(None) == speed_allowance(0.0) == speed_allowance(LIMIT) == 0.0
    assert speed_allowance(-0.03) == speed_allowance(math.nan) == 0.0
    # Pinned: z(95 %) x sqrt(0.000159 + 0.00216 x (log(1 + shift) - log 1.05)).
    for shift, allowance in ((0.06, 0.02626), (0.1, 0.03157), (0.2, 0.04146),
                             (0.5, 0.05975), (1.0, 0.07718)):
        assert speed_allowance(shift) == pytest.approx(allowance, abs=1e-5), shift
    # Either run slower alike: a base control 20 % longer is a shift of 1 / 1.2 - 1.
    assert speed_allowance(1.0 / 1.2 - 1.0) == pytest.approx(speed_allowance(0.2), rel=1e-12)
    shifts = [LIMIT + 0.001 * i for i in range(1, 1000)]
    sizes = [speed_allowance(s) for s in shifts]
    assert all(a < b for a, b in itertools.pairwise(sizes))


def test_the_allowance_jumps_to_the_fitted_constant_just_beyond_the_limit():
    # A change of speed state moves a case at once (VM G): z x sqrt(SPEED_SHIFT_JUMP).
    jump = 1.959964 * math.sqrt(defaults.SPEED_SHIFT_JUMP)
    assert jump == pytest.approx(0.02472, abs=1e-5)
    assert speed_allowance(LIMIT * (1.0 + 1e-9)) == pytest.approx(jump, abs=1e-6)
    below = 1.0 / (1.0 + LIMIT) - 1.0  # the base run's control LIMIT longer
    assert speed_allowance(below * (1.0 - 1e-9)) == 0.0
    assert speed_allowance(below * (1.0 + 1e-9)) == pytest.approx(jump, abs=1e-6)


def test_a_case_across_a_20_percent_shift_needs_more_than_one_across_6():
    # t 1 %; an interval from +3.9 % clears t by 2.9 %: more than 6 %'s 2.6 %, less than
    # 20 %'s 4.1 %; from +5.5 % it clears both.
    assert _judged("regression", 0.039, 0.05, 0.06) == "regression"
    assert _judged("regression", 0.039, 0.05, 0.20) == "inconclusive"
    assert _judged("regression", 0.055, 0.07, 0.20) == "regression"
    assert _judged("improvement", -0.05, -0.039, -0.06) == "improvement"
    assert _judged("improvement", -0.05, -0.039, 1.0 / 1.2 - 1.0) == "inconclusive"
    settings = Settings()
    assert flag_bar(0.01, 0.2, False, settings) - flag_bar(0.01, 0.06, False, settings) == (
        pytest.approx(speed_allowance(0.2) - speed_allowance(0.06)))
    assert flag_bar(0.01, 0.04, False, settings) == 0.01


def _judged_t(verdict: str, lo: float, hi: float, shift: float, t: float) -> str:
    j = Judgement(verdict, "why", True, 0.01)
    th = Threshold(noise=t / 2.0, source="twin", t=t, alert=2.0 * t)
    change = stats.Change(1.0 + (lo + hi) / 2.0, 1.0 + lo, 1.0 + hi, 0.001, 30)
    return across_speed_change(j, change, th, shift).verdict


def test_a_no_change_stands_when_its_widened_interval_is_within_t():
    # Within the limit nothing is widened; beyond it a ✅ stands only when t exceeds the
    # jump and its interval widened by the allowance still lies within ±t.
    assert _judged("no_change", -0.002, 0.002, LIMIT * 0.99) == "no_change"
    assert _judged("no_change", -0.002, 0.002, LIMIT + 0.001) == "inconclusive"  # 2.5 % > 1 %
    assert _judged_t("no_change", -0.002, 0.002, LIMIT + 0.001, 0.03) == "no_change"
    assert _judged_t("no_change", -0.002, 0.002, 0.20, 0.03) == "inconclusive"  # 4.1 % > 3 %
    assert _judged_t("no_change", -0.002, 0.002, 0.20, 0.045) == "no_change"



def test_each_end_of_a_no_change_interval_is_widened_on_its_own_side():
    # An interval lopsided either way: only the end nearer ±t decides (allowance 2.5 %).
    shift = LIMIT + 0.001
    assert _judged_t("no_change", -0.004, 0.004, shift, 0.03) == "no_change"
    assert _judged_t("no_change", -0.002, 0.008, shift, 0.03) == "inconclusive"  # 3.3 % > 3 %
    assert _judged_t("no_change", -0.008, 0.002, shift, 0.03) == "inconclusive"

def _speed_shift_module():
    spec = importlib.util.spec_from_file_location(
        "speed_shift", ROOT / "docs" / "validation" / "speed_shift.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ARCHIVE = ROOT / "docs" / "validation" / "archives" / "own_builds_same_separate.tar.xz"
VM_G, VM_H = "5479976013c325cd", "d70b4c2b4892ed1f"  # host keys (RESULTS.md names the VMs)


@pytest.fixture(scope="module")
def archived_series() -> list[tuple[str, list[tuple[float, float]]]]:
    module = _speed_shift_module()
    return [(host.split()[0], module.aa_pairs(lines))
            for host, lines in module.printed_outputs([ARCHIVE])]


def test_a_refit_from_the_archived_pairs_gives_the_constants(archived_series):
    """defaults.SPEED_SHIFT_JUMP and _VARIANCE are the fit's upper bounds on the archive."""
    assert sorted((host, len(pairs)) for host, pairs in archived_series) == [
        (VM_G, 126), (VM_H, 30), (VM_H, 96), (VM_H, 126), (VM_H, 126)]
    fit = _speed_shift_module().fit_allowance(archived_series)
    assert (fit["pairs"], fit["beyond"]) == (504, 82)
    assert round(fit["c0"], 6) == 0.000069 and round(fit["c0_se"], 6) == 0.000055
    assert round(fit["a"], 5) == 0.00143 and round(fit["a_se"], 5) == 0.00044
    assert round(fit["jump"], 6) == defaults.SPEED_SHIFT_JUMP
    assert round(fit["slope"], 5) == defaults.SPEED_SHIFT_VARIANCE
    # In-sample, baseline included: at least 95 % on each host.
    assert fit["covered"] == {VM_G: (46, 48), VM_H: (34, 34)}


def test_a_negative_fitted_slope_gives_no_negative_constant():
    # A series whose excess variance falls with the shift, exactly: c0 0.0006, a -0.002,
    # no residual, so the slope's upper bound is below 0 and is held at 0.
    x_limit = math.log1p(LIMIT)
    pairs = [(0.0, 0.01), (0.0, -0.01)] + [
        (x_limit + u, math.sqrt(0.0001 + 0.0006 - 0.002 * u)) for u in (0.1, 0.2, 0.3)]
    fit = _speed_shift_module().fit_allowance([("h", pairs)])
    assert fit["a"] == pytest.approx(-0.002) and fit["slope"] == 0.0
    assert fit["jump"] == pytest.approx(0.0006)
    assert fit["covered"] == {"h": (3, 3)}


@pytest.mark.parametrize(("pairs", "says"), [
    ([(0.5, 0.01), (0.6, 0.02)], "no A/A pair within the limit"),
    ([(0.0, 0.01), (0.5, 0.01), (0.5, 0.02)], "at 1 shifts"),
    ([(0.0, 0.01)], "0 A/A pairs beyond the limit"),
    ([(0.0, 0.01), (0.2, 0.02), (0.3, 0.03)], "2 A/A pairs beyond the limit, at 2 shifts"),
])
def test_a_series_too_thin_to_fit_says_why(pairs, says):
    with pytest.raises(ValueError, match=says):
        _speed_shift_module().fit_allowance([("h", pairs)])


def test_the_shipped_allowance_covers_95_percent_of_each_hosts_pairs(archived_series):
    # The allowance compare uses, with each series' own noise within the limit added back
    # (what the comparison's interval stands for): every host's pairs beyond the limit.
    z = 1.959964
    x_limit = math.log1p(LIMIT)
    covered: dict[str, list[int]] = {}
    for host, pairs in archived_series:
        baseline = [d * d for x, d in pairs if x <= x_limit]
        noise = z * z * sum(baseline) / len(baseline)
        for x, d in pairs:
            if x > x_limit:
                tally = covered.setdefault(host, [0, 0])
                tally[0] += abs(d) <= math.sqrt(noise + speed_allowance(math.expm1(x)) ** 2)
                tally[1] += 1
    assert covered == {VM_G: [46, 48], VM_H: [34, 34]}
    assert all(inside >= 0.95 * n for inside, n in covered.values())
    # The two would-be false 🔴 A/A pairs (VM G): below their allowance on their own.
    for longer, change in ((0.734, 0.0526), (0.770, 0.0612)):
        assert change < speed_allowance(longer)
        assert [h for h, pairs in archived_series for x, d in pairs
                if round(math.expm1(x), 3) == longer
                and d == pytest.approx(change)] == [VM_G]
