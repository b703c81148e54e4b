"""The speed-change allowance between two runs (findings.speed_allowance, issue 46): 0 up
to CONTROL_SHIFT_LIMIT, then growing with |log| of the controls' ratio, as fitted on the
archived A/A pairs of separate runs (docs/validation/speed_shift.py --fit)."""

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


def test_the_allowance_grows_with_the_shift_from_zero_at_the_limit():
    assert speed_allowance(None) == speed_allowance(0.0) == speed_allowance(LIMIT) == 0.0
    assert speed_allowance(-0.03) == speed_allowance(math.nan) == 0.0
    # Pinned: z(95 %) x sqrt(0.00224 x (log(1 + shift) - log 1.05)).
    for shift, allowance in ((0.06, 0.00903), (0.1, 0.02001), (0.2, 0.03390),
                             (0.5, 0.05540), (1.0, 0.07446)):
        assert speed_allowance(shift) == pytest.approx(allowance, abs=1e-5), shift
    # Either run slower alike: a base control 20 % longer is a shift of 1 / 1.2 - 1.
    assert speed_allowance(1.0 / 1.2 - 1.0) == pytest.approx(speed_allowance(0.2), rel=1e-12)
    shifts = [LIMIT + 0.001 * i for i in range(1, 1000)]
    sizes = [speed_allowance(s) for s in shifts]
    assert all(a < b for a, b in itertools.pairwise(sizes))


def test_the_allowance_is_continuous_at_the_limit():
    # No step: just beyond the limit it is as small as the distance to it makes it.
    assert 0.0 < speed_allowance(LIMIT * (1.0 + 1e-9)) < 1e-5
    assert speed_allowance(LIMIT + 1e-4) < 0.002
    below = 1.0 / (1.0 + LIMIT) - 1.0  # the base run's control LIMIT longer
    assert speed_allowance(below * (1.0 + 1e-9)) < 1e-5


def test_a_case_across_a_20_percent_shift_needs_more_than_one_across_6():
    # t 1 %; an interval from +3 % clears t by 2 %: more than 6 %'s 0.9 %, less than
    # 20 %'s 3.4 %; from +4.5 % it clears both.
    assert _judged("regression", 0.03, 0.05, 0.06) == "regression"
    assert _judged("regression", 0.03, 0.05, 0.20) == "inconclusive"
    assert _judged("regression", 0.045, 0.06, 0.20) == "regression"
    assert _judged("improvement", -0.05, -0.03, -0.06) == "improvement"
    assert _judged("improvement", -0.05, -0.03, 1.0 / 1.2 - 1.0) == "inconclusive"
    settings = Settings()
    assert flag_bar(0.01, 0.2, False, settings) - flag_bar(0.01, 0.06, False, settings) == (
        pytest.approx(speed_allowance(0.2) - speed_allowance(0.06)))
    assert flag_bar(0.01, 0.04, False, settings) == 0.01


def test_a_no_change_stands_when_its_widened_interval_is_within_t():
    # Just beyond the limit a narrow ✅ stays ✅ (no step at the limit); at 20 % the
    # allowance is wider than t, and no interval is narrow enough.
    assert _judged("no_change", -0.002, 0.002, LIMIT + 0.001) == "no_change"
    assert _judged("no_change", -0.002, 0.009, 0.06) == "inconclusive"  # 0.9 + 0.9 > 1
    assert _judged("no_change", -0.0005, 0.0005, 0.20) == "inconclusive"


def _speed_shift_module():
    spec = importlib.util.spec_from_file_location(
        "speed_shift", ROOT / "docs" / "validation" / "speed_shift.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_refit_from_the_archived_pairs_gives_the_constant():
    """defaults.SPEED_SHIFT_VARIANCE is the fit's upper bound on the archived outputs."""
    module = _speed_shift_module()
    archive = ROOT / "docs" / "validation" / "archives" / "own_builds_same_separate.tar.xz"
    series = [module.aa_pairs(lines) for lines in module.printed_outputs([archive])]
    assert sorted(len(pairs) for pairs in series) == [30, 96, 126, 126, 126]
    fit = module.fit_allowance(series)
    assert (fit["pairs"], fit["beyond"], fit["outside"]) == (504, 82, 8)
    assert round(fit["a"], 5) == 0.00159 and round(fit["se"], 5) == 0.00039
    assert round(fit["upper"], 5) == defaults.SPEED_SHIFT_VARIANCE
