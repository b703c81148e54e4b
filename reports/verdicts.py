"""Verdicts: the settings, the per-case threshold, and judging a case and a grid.

A case's change is judged against t = max(floor, k x noise) by interval nulls,
Benjamini-Hochberg across the grid (judge_grid); reports.compare holds the rules in
words and assembles the comparison.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from epbench.reports import defaults, nested, stats
from epbench.reports.comparison import (  # Settings: re-exported, its home is comparison
    HEADLINES,
    CaseRow,
    Overall,
    Settings,
)
from epbench.reports.formats import format_level, format_share


def target_settings(settings: Settings, target_mde: float | None) -> Settings:
    """`settings` aiming every case at a detectable change of `target_mde`: the floor
    follows the target, t = max(target / 2, k x noise), so a threshold leaves room for
    the interval's half-width under the target."""
    if target_mde is None:
        return settings
    from dataclasses import replace

    return replace(settings, floor=target_mde / 2.0, target_mde=target_mde)


@dataclass(frozen=True)
class Threshold:
    noise: float  # typical A/A |change| at this round count, as a fraction
    source: str  # "profile" or why not
    t: float
    alert: float


def threshold_for(noise: float | None, source: str, settings: Settings) -> Threshold:
    """t = max(floor, k x noise); without a calibrated noise, the conservative default."""
    if noise is None or not math.isfinite(noise):
        noise = defaults.NOISE_WITHOUT_PROFILE
    t = max(settings.floor, settings.k * noise)
    alert = settings.alert if settings.alert is not None else defaults.ALERT_FACTOR * t
    return Threshold(noise=noise, source=source, t=t, alert=max(alert, t))


# threshold_for's rules in the words every output quotes (the method paragraph, the
# no-measurement warning, cannot-catch): changed with the rules, here, or nowhere.


def default_threshold_text(settings: Settings) -> str:
    """t when no noise was measured, as a formula: max(1%, 2 × 2%)."""
    return (f"max({format_level(settings.floor)}, {settings.k:g} × "
            f"{format_level(defaults.NOISE_WITHOUT_PROFILE)})")


def threshold_rule_text(settings: Settings) -> str:
    """t's formula: t = max(1%, 2 × A/A noise)."""
    return f"t = max({format_level(settings.floor)}, {settings.k:g} × A/A noise)"


def alert_rule_text(settings: Settings) -> str:
    """The alert level a 🔴 needs: 2t, or an --alert level (never below t)."""
    if settings.alert is not None:
        return f"{format_level(settings.alert)} (or t, where t is larger)"
    return f"{defaults.ALERT_FACTOR:g}t"


@dataclass(frozen=True)
class Judgement:
    verdict: str
    reason: str
    significant: bool
    q: float
    # The change shown for the case: FCR-adjusted (Benjamini-Yekutieli) when it was
    # selected, at confidence `level`; None: the change judged, at the run's confidence.
    shown: stats.Change | None = None
    level: float | None = None
    # A ⚠️ that all rounds would make 🔴, held back by the idle gate (a quiet rerun can
    # make it 🔴); not when the quiet rounds alone exclude the alert level.
    held_back: bool = False


# Quiet rounds of a case that spans processes stand alone only with at least this many
# degrees of freedom: with 1 the t quantile is 12.7 and their interval says nothing.
QUIET_MIN_DF = 3


def judge(
    change: stats.Change,
    significant: bool,
    q: float,
    th: Threshold,
    unquiet: int,
    rounds: int,
    quiet_only: stats.Change | None = None,
    quiet_significant: bool = False,
    *,
    needed: int = defaults.MIN_ROUNDS,
    dropped: int = 0,
    shared_load: bool = False,
    alert_significant: bool | None = None,
    confidence: float = defaults.CONFIDENCE,
) -> Judgement:
    """The verdict of one case from its change, its tests and its threshold.

    `significant`: the grid's BH rejects "the change lies within +-t" for this case
    (an interval null, judge_grid); `alert_significant`: it rejects "the change is at
    most the alert level" (None: the interval's lower bound clears the alert level).
    A verdict only gets stronger as the change grows, all else equal: a case with
    rounds that failed the idle gate is held back from 🔴 to ⚠️ (the load can take the
    alert away, never the slowdown), and is 🔴 only when its quiet rounds alone make an
    alert (`quiet_only`, `quiet_significant`: their alert-level test passes the grid's
    BH cut-off). Quiet rounds are heard only when they stand alone: enough rounds and,
    when the case spans processes, at least QUIET_MIN_DF degrees of freedom. Whatever
    they show, a would-be alert is never weaker than ⚠️, the verdict a smaller
    slowdown with the same unquiet rounds gets. `needed` is the fewest usable rounds
    that give a bounded interval; `dropped` how many of the `rounds` had no usable
    time (zero, negative or missing). `confidence`: the level of `quiet_only`'s
    interval, quoted beside its bounds (the case's own may be FCR-adjusted).
    """
    needed = max(needed, defaults.MIN_ROUNDS)
    bounded = all(math.isfinite(x) for x in (change.ratio, change.lo, change.hi))
    if change.n < needed or not bounded:
        usable = change.n if math.isfinite(change.ratio) else rounds - dropped
        why = f"only {max(usable, 0)} usable rounds, too few for an exact interval (need {needed})"
        if dropped:
            why += (f"; {dropped} of {rounds} rounds had no usable time (zero or missing), "
                    "check that the arm's timer works")
        else:
            why += f"; rerun with --rounds {needed} or more"
        return Judgement("not_comparable", why, False, q)
    if quiet_only is not None and not _stands_alone(quiet_only, change, needed):
        quiet_only, quiet_significant = None, False
    if alert_significant is None:
        alert_significant = change.lo - 1.0 >= th.alert
    judgement = _judge_bounded(
        change, significant, q, th, unquiet, rounds, quiet_only, quiet_significant,
        shared_load, alert_significant, confidence,
    )
    if dropped:
        reason = f"{judgement.reason} ({dropped} of {rounds} rounds dropped: no usable time)"
        return Judgement(judgement.verdict, reason, judgement.significant, judgement.q,
                         held_back=judgement.held_back)
    return judgement


def _judge_bounded(
    change: stats.Change,
    significant: bool,
    q: float,
    th: Threshold,
    unquiet: int,
    rounds: int,
    quiet_only: stats.Change | None,
    quiet_significant: bool,
    shared_load: bool,
    alert_significant: bool,
    confidence: float = defaults.CONFIDENCE,
) -> Judgement:
    c, lo, hi, t = change.ratio - 1.0, change.lo - 1.0, change.hi - 1.0, th.t
    band = f"±{format_share(t)}"
    if -t < lo and hi < t:
        return Judgement("no_change", f"the whole interval lies within {band}", significant, q)
    if significant and c > 0 and lo >= t:
        if not alert_significant:
            return Judgement(
                "regression",
                f"slower by {c:.1%} (at least {lo:.1%}), beyond the threshold {format_share(t)}",
                significant, q,
            )
        if not unquiet:
            return Judgement(
                "alert",
                f"slower by {c:.1%} (at least {lo:.1%}), beyond the alert level "
                f"{format_share(th.alert)}",
                significant, q,
            )
        if _quiet_alert(quiet_only, quiet_significant, th):
            # Judged on the quiet rounds alone: they make the alert by themselves.
            assert quiet_only is not None
            q_c, q_lo = quiet_only.ratio - 1.0, quiet_only.lo - 1.0
            # Their bound is the one the rule read: their own interval at `confidence`,
            # not the (maybe FCR-adjusted) interval the case is shown with.
            return Judgement(
                "alert",
                f"slower by {q_c:.1%} (at least {q_lo:.1%} at {confidence:.0%}) on the "
                f"{quiet_only.n} quiet rounds alone ({unquiet} unquiet set aside), beyond "
                f"the alert level {format_share(th.alert)}",
                significant, q,
            )
        rerun = ("rerun on a quiet machine" if shared_load else
                 "rerun both runs on a quiet machine")
        if quiet_only is not None and quiet_only.hi - 1.0 < th.alert:
            # The quiet rounds' own interval excludes the alert level: evidence against
            # an alert, not against the regression all rounds show.
            return Judgement(
                "regression",
                f"slower by {c:.1%} (at least {lo:.1%}) on all rounds, but {unquiet} of "
                f"{rounds} rounds failed the idle gate and the {quiet_only.n} quiet rounds "
                f"alone put it below the alert level {format_share(th.alert)} (at most "
                f"{quiet_only.hi - 1.0:+.1%} at {confidence:.0%}): a regression, not an alert",
                significant, q,
            )
        alone = ("too few quiet ones stand alone" if quiet_only is None else
                 f"the {quiet_only.n} quiet rounds alone neither reach nor exclude it")
        return Judgement(
            "regression",
            f"slower by {c:.1%} (at least {lo:.1%}), beyond the alert level "
            f"{format_share(th.alert)}, but {unquiet} of {rounds} rounds failed the idle gate "
            f"and {alone}: a regression, not an alert; {rerun} to tell whether it is one",
            significant, q, held_back=True,
        )
    if significant and c < 0 and hi <= -t:
        return Judgement(
            "improvement",
            f"faster by {-c:.1%} (at least {-hi:.1%}), beyond the threshold {format_share(t)}",
            significant, q,
        )
    if not significant and (lo >= t or hi <= -t):
        why = f"beyond {band} but not significant at FDR {q:.3f} across the grid"
    else:
        why = f"the interval straddles {band}"
    return Judgement("inconclusive", why + "; rerun with more --rounds", significant, q)


def _dof(change: stats.Change) -> float:
    """The degrees of freedom behind a change's t interval (processes - 1 if unrecorded)."""
    return change.df if math.isfinite(change.df) else change.processes - 1.0


def _stands_alone(quiet_only: stats.Change, change: stats.Change, needed: int) -> bool:
    """Can the quiet rounds alone be judged like the whole? As many rounds as a verdict
    needs, and, when the whole spans processes, at least QUIET_MIN_DF degrees of
    freedom over processes: one process's interval covers its rounds only, not what
    processes differ by, and two processes' t interval (1 df) is 5 times as wide as
    six processes' would be, so its silence is no evidence."""
    if quiet_only.n < needed:
        return False
    return change.processes < 2 or (quiet_only.processes >= 2
                                    and _dof(quiet_only) >= QUIET_MIN_DF)


def _quiet_alert(quiet_only: stats.Change | None, significant: bool, th: Threshold) -> bool:
    """The quiet rounds alone: their alert-level test passed, enough of them, and the
    interval's lower bound at least the alert level."""
    if quiet_only is None or quiet_only.n < defaults.MIN_ROUNDS or not significant:
        return False
    if not (math.isfinite(quiet_only.lo) and math.isfinite(quiet_only.ratio)):
        return False
    return quiet_only.lo - 1.0 >= th.alert


@dataclass(frozen=True)
class IntervalTests:
    """Per case, p-values of interval nulls, each a doubled one-sided p (the convention
    of the two-sided interval printed beside it, so p <= alpha exactly when the
    level-(1 - alpha) interval clears the level):

    - `beyond`: H0 "-t <= change <= t", 2 x min(P[change <= t], P[change >= -t]);
    - `alert`: H0 "change <= alert level", 2 x P[...];
    - `quiet_alert`: the same over the quiet rounds (NaN: all quiet);
    - `at_level(cases, confidence)`: those cases' changes at another confidence (for
      the FCR-adjusted intervals of the selected cases).
    """

    beyond: Sequence[float]
    alert: Sequence[float]
    quiet_alert: Sequence[float]
    at_level: Callable[[Sequence[int], float], list[stats.Change]] | None = None


def _bh_cutoff(rejected: Sequence[bool], pvalues: Sequence[float], fdr: float) -> float:
    """The BH rejection level fdr x R / m of a family (-1 when nothing was rejected): a
    p-value of another test at or below it would have been rejected too. (Not "the
    largest rejected p": exact p-values are discrete, and fewer quiet rounds can never
    reach the full run's smallest p.)"""
    tested = sum(math.isfinite(p) for p in pvalues)
    return fdr * sum(rejected) / tested if tested and any(rejected) else -1.0


def judge_grid(
    changes: Sequence[stats.Change],
    thresholds: Sequence[Threshold],
    unquiet: Sequence[int],
    rounds: Sequence[int],
    fdr: float = defaults.FDR,
    quiet_only: Sequence[stats.Change | None] | None = None,
    *,
    needed: int = defaults.MIN_ROUNDS,
    dropped: Sequence[int] | None = None,
    shared_load: bool = False,
    tests: IntervalTests | None = None,
    confidence: float = defaults.CONFIDENCE,
) -> list[Judgement]:
    """Benjamini-Hochberg across the grid decides what is significant, then each case
    is judged.

    With `tests` (what `compare` passes): ⚠️/🟢 need BH at `fdr` to reject "within +-t"
    (`tests.beyond`), 🔴 needs a second BH family to reject "at most the alert level"
    (`tests.alert`), and a case with unquiet rounds is 🔴 only if its quiet rounds'
    alert-level p-value is within that family's rejection level. The selected cases
    (BH rejections of `beyond`) are shown with intervals at confidence 1 - R x fdr / m
    (R selected of m tested): Benjamini and Yekutieli's (2005) false-coverage-rate
    adjustment, so at most a share `fdr` of the shown intervals miss. Without `tests`
    (a bare list of changes), BH runs on the changes' own p-values for "no change" and
    the alert level on the intervals: the rule before interval nulls, kept for callers
    that have no rounds.
    """
    floor_n = max(needed, defaults.MIN_ROUNDS)
    testable = [c.n >= floor_n for c in changes]
    quiet_only = list(quiet_only) if quiet_only is not None else [None] * len(changes)
    dropped = list(dropped) if dropped is not None else [0] * len(changes)
    if tests is None:
        pvalues = [c.p if ok else math.nan for c, ok in zip(changes, testable, strict=True)]
        rejected, q = stats.benjamini_hochberg(pvalues, fdr)
        cutoff = _bh_cutoff(rejected, pvalues, fdr)
        alert_sig: list[bool | None] = [None] * len(changes)
        quiet_sig = [qc is not None and qc.p <= cutoff for qc in quiet_only]
        shown: list[stats.Change | None] = [None] * len(changes)
        level: float | None = None
        n_selected = n_tested = 0
    else:
        pvalues = [p if ok else math.nan for p, ok in zip(tests.beyond, testable, strict=True)]
        rejected, q = stats.benjamini_hochberg(pvalues, fdr)
        alert_p = [p if ok else math.nan for p, ok in zip(tests.alert, testable, strict=True)]
        alert_rejected, _ = stats.benjamini_hochberg(alert_p, fdr)
        alert_cutoff = _bh_cutoff(alert_rejected, alert_p, fdr)
        alert_sig = list(alert_rejected)
        quiet_sig = [qc is not None and math.isfinite(p) and p <= alert_cutoff
                     for qc, p in zip(quiet_only, tests.quiet_alert, strict=True)]
        shown = [None] * len(changes)
        level = None
        selected = [i for i, r in enumerate(rejected) if r]
        n_selected, n_tested = len(selected), sum(math.isfinite(p) for p in pvalues)
        if selected and tests.at_level is not None:
            level = 1.0 - fdr * n_selected / n_tested
            for i, c in zip(selected, tests.at_level(selected, level), strict=True):
                # An interval the adjusted level leaves unbounded (too few rounds for an
                # exact interval that wide) is not shown: the judged one is.
                if all(math.isfinite(x) for x in (c.ratio, c.lo, c.hi)):
                    shown[i] = c
    out = []
    rows = zip(changes, rejected, q, thresholds, unquiet, rounds, quiet_only, quiet_sig,
               alert_sig, shown, dropped, strict=True)
    for c, sig, qv, th, u, n, qc, qs, asig, sh, d in rows:
        j = judge(sh if sh is not None else c, sig, qv, th, u, n, qc, qs, needed=needed,
                  dropped=d, shared_load=shared_load, alert_significant=asig,
                  confidence=confidence)
        if sh is not None and j.verdict in ("alert", "regression", "improvement"):
            assert level is not None
            j = Judgement(j.verdict, f"{j.reason} ({adjusted_words(level, n_selected, n_tested)})",
                          j.significant, j.q, sh, level, j.held_back)
        out.append(j)
    return out


def adjusted_words(level: float, selected: int, tested: int) -> str:
    """What the interval a selected case is shown with is: at `level`, adjusted for
    choosing `selected` of `tested` cases (Benjamini-Yekutieli), or, when every case
    tested was selected (one of one among them), at 1 - fdr with nothing to adjust."""
    if selected >= tested:
        which = ("the only case tested" if tested == 1 else
                 f"all {tested} cases tested were selected")
        return f"interval shown at {level:.2%}: {which}, nothing to adjust for"
    return (f"interval shown at {level:.2%}: adjusted for selecting {selected} of the "
            f"{tested} cases tested, Benjamini-Yekutieli")


@dataclass(frozen=True)
class GridSamples:
    """The rounds every verdict of a grid reads: per measurable case, the PR side's log
    ratios with their processes (PR / base in one run, PR / its control between two),
    the base side's (two runs only), and the same over quiet rounds for the cases in
    `quiet_index` (those with unquiet rounds). `extra_variance` (log scale; one for the
    grid or one per case of `pr`) is added to every case's squared standard error
    (twin_noise's `extra`, with the between-run term of two runs)."""

    pr: Sequence[nested.ProcessSample]
    base: Sequence[nested.ProcessSample]
    same_run: bool
    quiet_pr: Sequence[nested.ProcessSample] = ()
    quiet_base: Sequence[nested.ProcessSample] = ()
    quiet_index: Sequence[int] = ()
    extra_variance: float | Sequence[float] = 0.0
    extra_df: float = math.inf  # of extra_variance: the cases it was pooled over
    # One run: every case's process-level variance is shrunk toward the grid's
    # (nested.variance_prior, empirical Bayes), so a case judged with 3-8 processes
    # borrows degrees of freedom from the others when their variances are alike.
    moderate: bool = True

    def changes(self, shifts: Sequence[float] | None = None, *,
                confidence: float = defaults.CONFIDENCE, quiet: bool = False,
                cases: Sequence[int] | None = None) -> list[stats.Change]:
        """The changes (of the quiet rounds, or of `cases` only), with `shifts` (log
        scale) taken off the PR side: testing "shifted change <= 1" tests "change <=
        exp(shift)" with the same kernel as the verdicts."""
        pr, base = (self.quiet_pr, self.quiet_base) if quiet else (self.pr, self.base)
        extras = nested.per_case(self.extra_variance, len(self.pr))
        if quiet:  # a case's quiet rounds carry its own extra variance
            extras = [extras[i] for i in self.quiet_index]
        if cases is not None:
            pr = [pr[i] for i in cases]
            base = [base[i] for i in cases] if base else []
            extras = [extras[i] for i in cases]
        if shifts is not None:
            pr = [s.shifted(d) for s, d in zip(pr, shifts, strict=True)]
        extra = {"extra_variance": extras, "extra_df": self.extra_df}
        if self.same_run:
            # The prior is the whole grid's, whichever rounds or cases are asked for.
            prior = nested.variance_prior(self.pr) if self.moderate else None
            return nested.nested_changes(pr, confidence=confidence, prior=prior, **extra)
        return nested.nested_double_ratio_changes(pr, base, confidence=confidence, **extra)


def interval_tests(grid: GridSamples, thresholds: Sequence[Threshold],
                   confidence: float = defaults.CONFIDENCE) -> IntervalTests:
    """The interval-null p-values of every case (IntervalTests), from its rounds shifted
    to each null's edge."""
    def doubled(changes: Sequence[stats.Change], upper: bool) -> list[float]:
        return [min(1.0, 2.0 * nested.one_sided_p(c, upper)) for c in changes]

    up = doubled(grid.changes([math.log1p(th.t) for th in thresholds]), True)
    # A threshold of 100 % or more has no lower edge: nothing can be that much faster.
    down = doubled(grid.changes([math.log1p(-min(th.t, 0.999999)) for th in thresholds]),
                   False)
    alert = doubled(grid.changes([math.log1p(th.alert) for th in thresholds]), True)
    quiet = [math.nan] * len(thresholds)
    if grid.quiet_index:
        at = grid.changes([math.log1p(thresholds[i].alert) for i in grid.quiet_index],
                          quiet=True)
        for i, p in zip(grid.quiet_index, doubled(at, True), strict=True):
            quiet[i] = p

    def at_level(cases: Sequence[int], level: float) -> list[stats.Change]:
        return grid.changes(confidence=level, cases=cases)

    beyond = [min(u, d) for u, d in zip(up, down, strict=True)]
    return IntervalTests(beyond, alert, quiet, at_level)


def judge_samples(
    grid: GridSamples,
    thresholds: Sequence[Threshold],
    unquiet: Sequence[int],
    rounds: Sequence[int],
    settings: Settings,
    *,
    dropped: Sequence[int] | None = None,
    changes: Sequence[stats.Change] | None = None,
) -> tuple[list[Judgement], IntervalTests]:
    """Every case's verdict from its rounds: the changes (given, or computed), the quiet
    rounds' changes, the interval-null tests, then judge_grid."""
    if changes is None:
        changes = grid.changes(confidence=settings.confidence)
    quiet_changes: list[stats.Change | None] = [None] * len(changes)
    if grid.quiet_index:
        computed = grid.changes(confidence=settings.confidence, quiet=True)
        for i, change in zip(grid.quiet_index, computed, strict=True):
            quiet_changes[i] = change
    tests = interval_tests(grid, thresholds, settings.confidence)
    needed = stats.min_rounds(settings.confidence, 1 if grid.same_run else 2)
    judgements = judge_grid(changes, thresholds, unquiet, rounds, settings.fdr, quiet_changes,
                            needed=needed, dropped=dropped, shared_load=grid.same_run,
                            tests=tests, confidence=settings.confidence)
    return judgements, tests


def overall_verdict(rows: Sequence[CaseRow]) -> Overall:
    """The headline: the worst verdict of the grid, in words people know.

    A grid where no case could be judged (every row ➖) is ❔, never ✅: nothing
    was shown to be within noise.
    """
    verdicts = {r.verdict for r in rows}
    judged = verdicts - {"not_comparable", "failed"}
    if "failed" in verdicts:
        key = "failed"
    elif "alert" in verdicts:
        key = "alert"
    elif "regression" in verdicts:
        key = "regression"
    elif "inconclusive" in verdicts or not judged:
        key = "inconclusive"
    else:
        key = "no_change"
    return Overall(key=key, headline=HEADLINES[key])


def _quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t (the normal's beyond 1e5 degrees of freedom)."""
    if not math.isfinite(df) or df > 1e5:
        from statistics import NormalDist

        return NormalDist().inv_cdf(q)
    return nested.t_quantile(q, df)


def detectable_change(change: stats.Change, t: float, level: float,
                      power: float = defaults.DETECT_POWER) -> float:
    """The smallest slowdown (a fraction) this comparison would have flagged, ⚠️ or 🔴,
    with probability `power`; NaN when the change has no standard error.

    A case is flagged when the BH test rejects "within +-t" above at `level` (the
    rejection level that applied to it, bh_levels), that is when the change's log
    estimate less q_a x se clears log(1 + t), q_a the 1 - level / 2 quantile of
    Student's t at the change's degrees of freedom (the interval-null p-values are
    doubled one-sided ones). The estimate of a true slowdown d is log(1 + d) + se x T,
    so it clears with probability `power` when log(1 + d) = log(1 + t) + (q_a + q_b) x
    se, q_b the `power` quantile. `se` and `df` are the ones the verdict used: the
    twin's tau^2 and the between-run term are in them already. `t` is the threshold the
    flag had to clear (with the speed-change allowance, or the within-run-only cap,
    where those applied).
    """
    se = nested.standard_error(change)
    if not (math.isfinite(se) and math.isfinite(t) and 0.0 < level < 1.0):
        return math.nan
    df = change.df if math.isfinite(change.df) else math.inf
    if df < 1.0:
        return math.nan
    q = _quantile(1.0 - level / 2.0, df) + _quantile(power, df)
    return math.expm1(math.log1p(t) + q * se)


def bh_levels(significant: Sequence[bool], tested: Sequence[bool], fdr: float) -> list[float]:
    """Per case, the BH rejection level that applied to it: fdr x R / m for a case among
    the R rejected of the m tested, fdr x (R + 1) / m for one that was not (the level it
    would have needed with one more rejection: its own); NaN for a case not tested."""
    m = sum(tested)
    rejected = sum(s for s, ok in zip(significant, tested, strict=True) if ok)
    return [fdr * (rejected + (not s)) / m if ok and m else math.nan
            for s, ok in zip(significant, tested, strict=True)]


def grid_detectable(changes: Sequence[stats.Change], judgements: Sequence[Judgement],
                    tests: IntervalTests, bars: Sequence[float], settings: Settings,
                    same_run: bool) -> list[float]:
    """Every case's detectable change (detectable_change), at the BH level that applied
    to it in this grid (bh_levels over the cases judge_grid tested), `bars` the
    thresholds each flag had to clear."""
    needed = max(stats.min_rounds(settings.confidence, 1 if same_run else 2),
                 defaults.MIN_ROUNDS)
    tested = [c.n >= needed and math.isfinite(p)
              for c, p in zip(changes, tests.beyond, strict=True)]
    levels = bh_levels([j.significant for j in judgements], tested, settings.fdr)
    return [detectable_change(c, bar, level)
            for c, bar, level in zip(changes, bars, levels, strict=True)]


def kept_detectable(detectable: float, kept: float | None) -> float:
    """The detectable change a case states: its own (`detectable`), or at least `kept`,
    the one stated on the pass whose ❔ made compare-commits re-run it. The re-runs go on
    exactly while the estimate stays low, so the last pass's smaller standard error
    overstates what the whole procedure catches; it flags at least as often as the pass
    that re-ran the case, so that pass's statement holds for it
    (docs/validation/statistics.md, "Why validate found it optimistic")."""
    if kept is None or not math.isfinite(detectable):
        return detectable
    return max(kept, detectable)
