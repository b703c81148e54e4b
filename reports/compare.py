"""Base vs PR: a verdict per case, judged against a per-case threshold from A/A noise.

Two shapes of input:
- one run with both arms (`compare RUN.json --base ARM --pr ARM`): the change is
  PR / base per round (the rounds are paired);
- two runs (`compare BASE.json PR.json`): the change is the double ratio
  (PR / its in-run control) / (base / its in-run control), so machine speed cancels,
  within limits: a case whose runs' controls ran more than CONTROL_SHIFT_LIMIT apart
  is ❔ unless its interval clears the threshold by more than SPEED_CHANGE_ALLOWANCE
  (a machine's speed does not change every case's time alike).

Per case the threshold is t = max(floor, k x noise), noise from the host's
calibration profile and the run's A/A twin (k x the twin's standard error; the
larger of the two), or a conservative default, said out loud. The A/A variance the
twins show beyond their own standard errors, pooled over the grid (tau^2), is added
to every case's standard error. Verdicts test interval nulls, Benjamini-Hochberg
across the grid (judge_grid):

  🔴 alert        BH rejects "change <= alert level" (2t), and "within +-t"
  ⚠️ regression   BH rejects "within +-t" above; also a would-be alert with unquiet
                 rounds whose quiet rounds alone do not make one (held back from 🔴)
  🟢 improvement  BH rejects "within +-t" below
  ✅ no change    the whole CI lies within +-t
  ❔ inconclusive anything else (the CI straddles a threshold); between two runs, a
                 case whose runs' controls ran too far apart in speed, unless its
                 interval clears the threshold by SPEED_CHANGE_ALLOWANCE
  ❌ failed       the PR side failed, crashed or did not verify
  ➖ not comparable  the base side failed, or too few rounds on a side

A verdict only gets stronger as the change grows: quiet rounds can make a would-be
alert 🔴 or leave it ⚠️, never weaker. The intervals shown for selected cases (⚠️ 🔴
🟢) are FCR-adjusted (Benjamini-Yekutieli 2005). docs/validation/statistics.md has the
simulations behind each rule.
A deterministic counter that changed is reported whatever the noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from epbench.core.errors import EpbenchError
from epbench.core.model import Case, Results, changed_counters
from epbench.core.numbers import median
from epbench.core.results import load_results
from epbench.reports import defaults, stats
from epbench.reports.calibrate import (
    default_profile_path,
    load_profile,
    pooled_offset,
    profile_noise,
)
from epbench.reports.summary import family_members, family_of, gate_summary

SCHEMA = "epbench.comparison/1"

# verdict -> (emoji, words). The order is the severity order, worst first.
VERDICTS: dict[str, tuple[str, str]] = {
    "failed": ("❌", "failed"),
    "alert": ("🔴", "regressed (alert)"),
    "regression": ("⚠️", "regressed"),
    "inconclusive": ("❔", "inconclusive"),
    "not_comparable": ("➖", "not comparable"),
    "improvement": ("🟢", "improved"),
    "no_change": ("✅", "within noise"),
}
SEVERITY = {name: rank for rank, name in enumerate(VERDICTS)}
# `--fail-on` level -> the verdicts that make `compare` exit with EXIT_REGRESSION.
FAIL_ON: dict[str, frozenset[str]] = {
    "alert": frozenset({"failed", "alert"}),
    "regression": frozenset({"failed", "alert", "regression"}),
    "never": frozenset(),
}
HEADLINES = {
    "failed": "❌ Failed",
    "alert": "🔴 Regression",
    "regression": "⚠️ Change",
    "inconclusive": "❔ Inconclusive",
    "no_change": "✅ No regression",
}


class CompareError(EpbenchError):
    """Two results that cannot be compared honestly; the message says what to do."""


@dataclass(frozen=True)
class Settings:
    floor: float = defaults.FLOOR
    k: float = defaults.K
    alert: float | None = None  # absolute alert level; default ALERT_FACTOR x t per case
    confidence: float = defaults.CONFIDENCE
    fdr: float = defaults.FDR
    resamples: int = defaults.RESAMPLES
    seed: int = defaults.SEED
    force: bool = False
    instructions_threshold: float = defaults.INSTRUCTIONS_THRESHOLD

    def __post_init__(self) -> None:
        if not 0.0 < self.confidence < 1.0:
            raise CompareError("--confidence must be between 0 and 1, e.g. 0.95")
        if not 0.0 < self.fdr < 1.0:
            raise CompareError("--fdr must be between 0 and 1, e.g. 0.05")
        if self.floor < 0.0 or self.k <= 0.0:
            raise CompareError("--floor must be >= 0 and --k > 0, e.g. --floor 0.01 --k 2")
        if self.alert is not None and self.alert <= 0.0:
            raise CompareError("--alert is a fractional change > 0, e.g. 0.10 for 10 %")
        if self.resamples < defaults.MIN_RESAMPLES:
            raise CompareError(
                f"--resamples must be at least {defaults.MIN_RESAMPLES} for stable 95 % intervals"
            )


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
    time (zero, negative or missing).
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
        shared_load, alert_significant,
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
) -> Judgement:
    c, lo, hi, t = change.ratio - 1.0, change.lo - 1.0, change.hi - 1.0, th.t
    band = f"±{t:.1%}"
    if -t < lo and hi < t:
        return Judgement("no_change", f"the whole interval lies within {band}", significant, q)
    if significant and c > 0 and lo >= t:
        if not alert_significant:
            return Judgement(
                "regression",
                f"slower by {c:.1%} (at least {lo:.1%}), beyond the threshold {t:.1%}",
                significant, q,
            )
        if not unquiet:
            return Judgement(
                "alert",
                f"slower by {c:.1%} (at least {lo:.1%}), beyond the alert level {th.alert:.1%}",
                significant, q,
            )
        if _quiet_alert(quiet_only, quiet_significant, th):
            # Judged on the quiet rounds alone: they make the alert by themselves.
            assert quiet_only is not None
            q_c, q_lo = quiet_only.ratio - 1.0, quiet_only.lo - 1.0
            return Judgement(
                "alert",
                f"slower by {q_c:.1%} (at least {q_lo:.1%}) on the {quiet_only.n} quiet "
                f"rounds alone ({unquiet} unquiet set aside), beyond the alert level "
                f"{th.alert:.1%}",
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
                f"alone put it below the alert level {th.alert:.1%} (at most "
                f"{quiet_only.hi - 1.0:+.1%}): a regression, not an alert",
                significant, q,
            )
        alone = ("too few quiet ones stand alone" if quiet_only is None else
                 f"the {quiet_only.n} quiet rounds alone neither reach nor exclude it")
        return Judgement(
            "regression",
            f"slower by {c:.1%} (at least {lo:.1%}), beyond the alert level "
            f"{th.alert:.1%}, but {unquiet} of {rounds} rounds failed the idle gate "
            f"and {alone}: a regression, not an alert; {rerun} to tell whether it is one",
            significant, q, held_back=True,
        )
    if significant and c < 0 and hi <= -t:
        return Judgement(
            "improvement",
            f"faster by {-c:.1%} (at least {-hi:.1%}), beyond the threshold {t:.1%}",
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
                  dropped=d, shared_load=shared_load, alert_significant=asig)
        if sh is not None and j.verdict in ("alert", "regression", "improvement"):
            j = Judgement(j.verdict, f"{j.reason} (interval at {level:.2%}: adjusted for "
                          f"the {n_selected} of {n_tested} cases selected, "
                          "Benjamini-Yekutieli)", j.significant, j.q, sh, level, j.held_back)
        out.append(j)
    return out


@dataclass(frozen=True)
class GridSamples:
    """The rounds every verdict of a grid reads: per measurable case, the PR side's log
    ratios with their processes (PR / base in one run, PR / its control between two),
    the base side's (two runs only), and the same over quiet rounds for the cases in
    `quiet_index` (those with unquiet rounds). `extra_variance` (log scale) is added to
    every t interval's squared standard error (twin_noise's tau^2)."""

    pr: Sequence[stats.ProcessSample]
    base: Sequence[stats.ProcessSample]
    same_run: bool
    quiet_pr: Sequence[stats.ProcessSample] = ()
    quiet_base: Sequence[stats.ProcessSample] = ()
    quiet_index: Sequence[int] = ()
    extra_variance: float = 0.0
    extra_df: float = math.inf  # of extra_variance: the cases it was pooled over

    def changes(self, shifts: Sequence[float] | None = None, *,
                confidence: float = defaults.CONFIDENCE, quiet: bool = False,
                cases: Sequence[int] | None = None) -> list[stats.Change]:
        """The changes (of the quiet rounds, or of `cases` only), with `shifts` (log
        scale) taken off the PR side: testing "shifted change <= 1" tests "change <=
        exp(shift)" with the same kernel as the verdicts."""
        pr, base = (self.quiet_pr, self.quiet_base) if quiet else (self.pr, self.base)
        if cases is not None:
            pr = [pr[i] for i in cases]
            base = [base[i] for i in cases] if base else []
        if shifts is not None:
            pr = [s.shifted(d) for s, d in zip(pr, shifts, strict=True)]
        extra = {"extra_variance": self.extra_variance, "extra_df": self.extra_df}
        if self.same_run:
            return stats.nested_changes(pr, confidence=confidence, **extra)
        return stats.nested_double_ratio_changes(pr, base, confidence=confidence, **extra)


def interval_tests(grid: GridSamples, thresholds: Sequence[Threshold],
                   confidence: float = defaults.CONFIDENCE) -> IntervalTests:
    """The interval-null p-values of every case (IntervalTests), from its rounds shifted
    to each null's edge."""
    def doubled(changes: Sequence[stats.Change], upper: bool) -> list[float]:
        return [min(1.0, 2.0 * stats.one_sided_p(c, upper)) for c in changes]

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
                            tests=tests)
    return judgements, tests


# --------------------------------------------------------------------------- documents


class RoundMedians:
    """Per-round medians for one comparison, each (case, arm) computed once."""

    def __init__(self) -> None:
        self._memo: dict[tuple[int, str], Any] = {}

    def __call__(self, case: Case, arm: str) -> Any:
        key = (id(case), arm)  # the documents outlive the comparison that holds this
        if key not in self._memo:
            self._memo[key] = stats.round_medians(case, arm)
        return self._memo[key]


@dataclass
class Side:
    """One side of a comparison: a results document and the arm measured in it."""

    label: str  # "base" or "pr"
    doc: Results
    arm: str
    path: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.doc, Results):
            raise TypeError("Side takes a Results (load_results, or Results.from_dict for a "
                            f"document in memory), not {type(self.doc).__name__}")

    @property
    def control(self) -> str:
        return self.doc.control

    @property
    def host_key(self) -> str | None:
        return self.doc.host.key


@dataclass
class CaseRow:
    case: str
    verdict: str
    emoji: str
    reason: str
    base_ns: float | None
    pr_ns: float | None
    change: float | None
    ci: list[float | None]
    p: float | None
    q: float | None
    significant: bool
    threshold: float
    alert: float
    noise: float
    noise_source: str
    rounds: int
    unquiet: int
    control_drift: float | None
    drift_exceeds_threshold: bool = False
    # The confidence of `ci`: the run's, or for a selected case (⚠️ 🔴 🟢) the
    # Benjamini-Yekutieli FCR-adjusted level 1 - R x fdr / m. `p` and `q` are for the
    # interval null "within +-threshold", not for "no change".
    ci_level: float | None = None
    # A ⚠️ that all rounds would make 🔴, held back by the idle gate.
    held_back: bool = False
    # Two runs: how much longer the PR run's ORT control took a Run than the base run's
    # (negative: less); beyond CONTROL_SHIFT_LIMIT either way, see across_speed_change.
    control_shift: float | None = None
    family: str | None = None
    rerun_errors: list[str] = field(default_factory=list)  # re-runs that failed (compare-commits)
    # Exact change in instructions per Run (when both sides counted them), and whether it
    # reaches --instructions-threshold.
    instructions_change: float | None = None
    instructions_flag: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def choose_arms(
    base: Results, pr: Results, base_arm: str | None, pr_arm: str | None
) -> tuple[str, str]:
    def only_candidate(doc: Results, label: str) -> str:
        others = [a for a in doc.arms if a != doc.control]
        if len(others) != 1:
            raise CompareError(
                f"the {label} file has arms {sorted(doc.arms)}: "
                f"say which to compare with --{label} ARM (or --arm ARM for both)"
            )
        return others[0]

    return base_arm or only_candidate(base, "base"), pr_arm or only_candidate(pr, "pr")


def _require_arm(doc: Results, arm: str, label: str, option: str | None = None) -> None:
    if arm not in doc.arms:
        raise CompareError(
            f"arm {arm!r} is not in the {label} results (it has {sorted(doc.arms)}); "
            f"pass {option or '--' + label} with one of those keys"
        )


def compare_files(
    paths: Sequence[str],
    *,
    base_arm: str | None = None,
    pr_arm: str | None = None,
    arm: str | None = None,
    settings: Settings | None = None,
    profile_path: str | None = None,
) -> dict[str, Any]:
    """`epbench compare`: load one file (two arms) or two (base, PR), pick the arms and the
    profile, and compare. Raises CompareError with a remedy for any unusable input."""
    from pathlib import Path


    if not 1 <= len(paths) <= 2:
        raise CompareError("compare takes one results file (with --base/--pr) or two (BASE PR)")
    if arm and (base_arm or pr_arm):
        raise CompareError("give either --arm or --base/--pr, not both")
    warnings: list[str] = []
    if len(paths) == 1:
        if not (base_arm and pr_arm):
            raise CompareError(
                "one results file needs both arms: epbench compare RUN.json --base ARM --pr ARM"
            )
        doc = load_results(paths[0])
        base, pr = Side("base", doc, base_arm, paths[0]), Side("pr", doc, pr_arm, paths[0])
    else:
        base_doc, pr_doc = load_results(paths[0]), load_results(paths[1])
        if arm:
            _require_arm(base_doc, arm, "base", "--arm")
            _require_arm(pr_doc, arm, "pr", "--arm")
        chosen = choose_arms(base_doc, pr_doc, base_arm or arm, pr_arm or arm)
        base = Side("base", base_doc, chosen[0], paths[0])
        pr = Side("pr", pr_doc, chosen[1], paths[1])
        if Path(paths[0]).resolve() == Path(paths[1]).resolve() or base_doc == pr_doc:
            warnings.append(
                "base and PR are the same results: every change is exactly 0 by construction, "
                "so this says nothing about noise or regressions; compare two runs"
            )
    profile = load_profile_for(base.host_key, profile_path)
    comparison = compare(base, pr, settings=settings, profile=profile)
    comparison["warnings"][:0] = warnings
    return comparison


def _check_comparable(base: Side, pr: Side, settings: Settings, warnings: list[str]) -> None:
    if base.doc.schema != pr.doc.schema:
        raise CompareError(
            f"different results schema versions: base {base.doc.schema!r}, "
            f"pr {pr.doc.schema!r}; load both with the same epbench (it migrates "
            "older files) or re-run the older side"
        )
    if base.host_key != pr.host_key:
        message = (
            f"base and PR were measured on different hosts ({base.host_key} vs {pr.host_key}); "
            "their times are not comparable"
        )
        if not settings.force:
            raise CompareError(message + ": re-run both on one machine, or pass --force")
        warnings.append(message + " (compared anyway because of --force; treat with suspicion)")
    slices = (base.doc.config.block_slices, pr.doc.config.block_slices)
    if slices[0] != slices[1]:
        warnings.append(
            f"base and PR cut their blocks into different numbers of slices ({slices[0]} vs "
            f"{slices[1]}): how often the arms alternate can move their ratio to the control; "
            "re-run the older side with the other's --slices"
        )
    for side in (base, pr):
        if side.control not in side.doc.arms:
            raise CompareError(
                f"the {side.label} results lack their control arm {side.control!r}; "
                "re-run with `epbench run` (it always adds the ort control)"
            )


def _load_profile_noise(
    profile: Mapping[str, Any] | None, host_key: str | None, slices: int, settings: Settings,
    warnings: list[str],
) -> Mapping[str, Any] | None:
    if profile is None:
        return None
    if profile.get("host_key") != host_key:
        message = (
            f"the noise profile was calibrated on host {profile.get('host_key')}, "
            f"these results come from {host_key}"
        )
        if not settings.force:
            raise CompareError(message + ": run `epbench calibrate` on this host, or pass --force")
        warnings.append(message + " (used anyway because of --force)")
    # Profiles older than slicing have no key: they were timed with whole blocks.
    calibrated, measured = profile.get("block_slices", 1), slices
    if calibrated != measured:
        warnings.append(
            f"the noise profile was calibrated with {calibrated} slice(s) per block, these "
            f"results were timed with {measured}: its noise figures "
            f"{'overstate' if calibrated < measured else 'understate'} this run's; "
            "re-run `epbench calibrate`"
        )
    return profile


def _case_noise(
    profile: Mapping[str, Any] | None, name: str, definition: str | None, rounds: int, mode: str
) -> tuple[float | None, str]:

    if profile is None:
        return None, "no profile"
    return profile_noise(profile, name, definition, rounds, mode)


def compare(
    base: Side,
    pr: Side,
    *,
    settings: Settings | None = None,
    profile: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Compare two sides (the same document for a same-run comparison) case by case.

    Returns the comparison document that render.py turns into markdown, text or JSON.
    Raises CompareError when the two sides cannot be compared honestly.
    """

    settings = settings or Settings()
    warnings: list[str] = []
    medians = RoundMedians()
    same_run = base.doc is pr.doc
    mode = "same-run" if same_run else "separate-runs"
    _require_arm(base.doc, base.arm, "base")
    _require_arm(pr.doc, pr.arm, "pr")
    if same_run and base.arm == pr.arm:
        raise CompareError(f"--base and --pr are both {base.arm!r}; name two different arms")
    _check_comparable(base, pr, settings, warnings)
    profile = _load_profile_noise(profile, base.host_key, pr.doc.config.block_slices,
                                  settings, warnings)
    has_twin = any(side.doc.twin for side in (base, pr))
    if profile is None and not has_twin:
        warnings.append(
            "no calibration profile for this host and no A/A twin in the run: every threshold "
            f"is the conservative default max({settings.floor:.0%}, {settings.k:g} x "
            f"{defaults.NOISE_WITHOUT_PROFILE:.0%}); run with --aa-twin ARM, or `epbench "
            "calibrate`, to judge against measured noise"
        )

    for side in (base, pr) if not same_run else (pr,):
        if side.doc.interrupted:
            warnings.append(
                f"the {side.label} run was interrupted: cases it did not reach are missing "
                "or incomplete; rerun it to compare the whole grid"
            )
    base_cases = base.doc.cases
    pr_cases = pr.doc.cases
    common = [c for c in base_cases if c in pr_cases]
    only_base = sorted(c for c in base_cases if c not in pr_cases)
    only_pr = sorted(c for c in pr_cases if c not in base_cases)
    if not common:
        raise CompareError(
            "the two results share no case: run both sides on the same --grid or --case list"
        )
    changed = [
        c for c in common
        if base_cases[c].definition_sha256 != pr_cases[c].definition_sha256
    ]
    if changed:
        raise CompareError(
            f"case definitions differ between base and PR for {', '.join(changed)} "
            "(different model or inputs, so different work); re-run both sides with one "
            "epbench version"
        )

    rows: list[CaseRow] = []
    measurable: list[str] = []
    log_pr: list[stats.ProcessSample] = []
    log_base: list[stats.ProcessSample] = []
    # The same over quiet rounds only, for cases with unquiet ones.
    quiet_pr: list[stats.ProcessSample] = []
    quiet_base: list[stats.ProcessSample] = []
    quiet_index: list[int] = []
    dropped: list[int] = []  # rounds without a usable time (zero, negative, missing), per case
    for name in common:
        b_case, p_case = base_cases[name], pr_cases[name]
        pre = _precheck(name, b_case, p_case, base, pr)
        if pre is not None:
            rows.append(pre)
            continue
        b_vals = medians(b_case, base.arm)
        p_vals = medians(p_case, pr.arm)
        p_quiet, b_quiet = stats.quiet_mask(p_case), stats.quiet_mask(b_case)
        p_proc = stats.round_labels(p_case, "process")
        b_proc = stats.round_labels(b_case, "process")
        if same_run:
            log_pr.append(stats.process_sample(p_vals, b_vals, p_proc))
            dropped.append(len(p_vals) - len(log_pr[-1]))
            if not p_quiet.all():
                quiet_pr.append(stats.process_sample(p_vals, b_vals, p_proc, p_quiet))
                quiet_index.append(len(measurable))
        else:
            p_ctrl = medians(p_case, pr.control)
            b_ctrl = medians(b_case, base.control)
            log_pr.append(stats.process_sample(p_vals, p_ctrl, p_proc))
            log_base.append(stats.process_sample(b_vals, b_ctrl, b_proc))
            dropped.append(len(p_vals) - len(log_pr[-1]) + len(b_vals) - len(log_base[-1]))
            if not (p_quiet.all() and b_quiet.all()):
                quiet_pr.append(stats.process_sample(p_vals, p_ctrl, p_proc, p_quiet))
                quiet_base.append(stats.process_sample(b_vals, b_ctrl, b_proc, b_quiet))
                quiet_index.append(len(measurable))
        measurable.append(name)
    twins = twin_noise([base] if same_run else [base, pr], measurable, settings, medians)
    # The A/A variance no process spread shows (a library copy's own bias), from the
    # twin's changes pooled over the grid: added to every case's standard error.
    between: float | None = 0.0
    between_source = "one run"
    if not same_run:
        between, between_source = between_run_variance(profile, base, pr, measurable, settings,
                                                       medians)
        if between is None:
            warnings.append(WITHIN_ONLY_WARNING.format(cap=2.0 * settings.floor))
    grid = GridSamples(log_pr, log_base, same_run, quiet_pr, quiet_base, quiet_index,
                       extra_variance=twins["tau2"] + (between or 0.0),
                       extra_df=max(1.0, len(measurable) - 1.0))
    changes = grid.changes(confidence=settings.confidence)
    thresholds, unquiet, n_rounds, drifts, shifts = [], [], [], [], []
    for name, change in zip(measurable, changes, strict=True):
        b_case, p_case = base_cases[name], pr_cases[name]
        noise, source = _case_noise(
            profile, name, b_case.definition_sha256, max(change.n, 1), mode
        )
        noise, source = _with_twin(noise, source, twins["noise"].get(name))
        thresholds.append(threshold_for(noise, source, settings))
        u = int((~stats.quiet_mask(p_case)).sum())
        r = len(p_case.rounds)
        if not same_run:
            u += int((~stats.quiet_mask(b_case)).sum())
            r += len(b_case.rounds)
        unquiet.append(u)
        n_rounds.append(r)
        drift = [stats.control_drift(medians(p_case, pr.control))]
        if not same_run:
            drift.append(stats.control_drift(medians(b_case, base.control)))
        finite = [d for d in drift if math.isfinite(d)]
        drifts.append(max(finite, key=abs) if finite else None)
        shifts.append(None if same_run else control_shift(
            medians(b_case, base.control), medians(p_case, pr.control)))
    judgements, tests = judge_samples(grid, thresholds, unquiet, n_rounds, settings,
                                      dropped=dropped, changes=changes)
    for name, change, th, j, u, r, drift, shift, p_beyond in zip(
        measurable, changes, thresholds, judgements, unquiet, n_rounds, drifts, shifts,
        tests.beyond, strict=True,
    ):
        j = across_speed_change(j, change, th, shift)
        if between is None:
            j = within_run_only(j, j.shown or change, settings)
        b_vals = medians(base_cases[name], base.arm)
        p_vals = medians(pr_cases[name], pr.arm)
        # A ➖ row was not judged: it shows no change or interval that could be misread.
        # A selected case shows its FCR-adjusted interval (judge_grid).
        shown = (j.shown or change) if j.verdict != "not_comparable" else stats.NAN_CHANGE
        level = j.level if j.shown is not None else settings.confidence
        rows.append(CaseRow(
            case=name, verdict=j.verdict, emoji=VERDICTS[j.verdict][0], reason=j.reason,
            base_ns=_median_ns(b_vals), pr_ns=_median_ns(p_vals),
            change=stats.finite(shown.ratio - 1.0),
            ci=[stats.finite(shown.lo - 1.0), stats.finite(shown.hi - 1.0)],
            p=stats.finite(p_beyond if j.verdict != "not_comparable" else math.nan),
            q=stats.finite(j.q), significant=j.significant,
            ci_level=level, held_back=j.held_back,
            threshold=th.t, alert=th.alert, noise=th.noise, noise_source=th.source,
            rounds=r, unquiet=u, control_drift=drift,
            drift_exceeds_threshold=drift is not None and abs(drift) > th.t,
            control_shift=shift,
            family=_family(base_cases[name]),
        ))
    for row in rows:
        errors = [*base_cases[row.case].rerun_errors]
        if not same_run:
            errors += pr_cases[row.case].rerun_errors
        row.rerun_errors = [str(e) for e in errors]
    for row in rows:
        row.instructions_change = _instructions_change(base, pr, row.case)
        row.instructions_flag = (row.instructions_change is not None and abs(
            row.instructions_change) >= settings.instructions_threshold)
    rows.sort(key=lambda row: (SEVERITY[row.verdict], -(row.change or 0.0), row.case))
    counters = counter_changes(base, pr, common)
    families = family_changes(base, pr, rows, settings, medians)
    overall = overall_verdict(rows)
    case_rows = [asdict(r) for r in rows]
    drift = drift_warning(case_rows)
    if drift is not None:
        warnings.append(drift)
    speed = speed_warning(case_rows)
    if speed is not None:
        warnings.insert(0, speed)
    if twins["flagged"]:
        warnings.insert(0,
            "the run's A/A twin differs from the arm it copies beyond the threshold on "
            f"{named(twins['flagged'])}: two copies of one library measured apart, so "
            "this run's verdicts are not to be trusted; rerun (more --processes), on a "
            "quieter machine")
    return {
        "schema": SCHEMA,
        "mode": mode,
        "twin": twins["info"],
        "between_runs": {"sd": None if between is None else math.sqrt(between),
                         "source": between_source},
        "base": _side_info(base),
        "pr": _side_info(pr),
        "settings": asdict(settings),
        "profile": _profile_info(profile),
        "warnings": warnings,
        "overall": overall,
        "counts": {v: sum(r.verdict == v for r in rows) for v in VERDICTS},
        "cases": case_rows,
        "only_base": only_base,
        "only_pr": only_pr,
        "counters": counters,
        "families": families,
        "gate": {"base": gate_summary(base.doc), "pr": gate_summary(pr.doc)} if not same_run
        else {"run": gate_summary(pr.doc)},
        "host": pr.doc.host.to_dict(),
        "threads": pr.doc.config.threads,
        "cannot_catch": cannot_catch(base, pr, rows, profile is not None),
    }


# Two runs with no estimate of what runs differ by (between_run_variance is None).
WITHIN_ONLY_WARNING = (
    "no estimate of how much two runs differ beyond their processes (no calibration "
    "profile with separate-run A/A repeats, no arm measured in both runs): the intervals "
    "cover within-run noise only, so a change below {cap:.0%} is ❔ whatever its interval; "
    "run `epbench calibrate --repeats 2` or more on this host, or compare both commits in "
    "one run (`compare-commits`)")


def between_run_variance(
    profile: Mapping[str, Any] | None, base: Side, pr: Side, cases: Sequence[str],
    settings: Settings, medians: RoundMedians,
) -> tuple[float | None, str]:
    """The log-scale variance of what two runs differ by beyond their processes (a run's
    own layout, build and machine state), and where it came from; None when neither
    source exists.

    - The calibration profile's separate-run A/A repeats: their pooled offset (the
      95th percentile of |change| less the sampling part, calibrate.pooled_offset)
      over the normal quantile that percentile sits at. It also holds what processes
      differ by, which the interval already covers: an overestimate, on the safe side.
      A profile with one repeat only guesses separate-run noise and does not count.
    - Otherwise an arm measured in both runs (same key, same library hash, not the
      control): its A/A double ratio between the runs, pooled over the grid by the
      moment estimator of stats.unmodelled_variance.
    """
    from statistics import NormalDist

    if profile is not None:
        entries = [(c.get("separate-runs") or {}) for c in (profile.get("cases") or {}).values()]
        if entries and not any(e.get("estimated") for e in entries):
            offset = pooled_offset(profile, "separate-runs")
            if offset > 0.0:
                z = NormalDist().inv_cdf(0.5 + defaults.NOISE_PERCENTILE / 200.0)
                return (math.log1p(offset) / z) ** 2, "calibration profile"
    for key, arm in sorted(base.doc.arms.items()):
        other = pr.doc.arms.get(key)
        if (key in (base.control, pr.control, base.arm, pr.arm) or other is None
                or arm.sha256 is None
                or arm.sha256 != other.sha256):
            continue
        pr_s, base_s = [], []
        for name in cases:
            b_case, p_case = base.doc.cases.get(name), pr.doc.cases.get(name)
            if b_case is None or p_case is None or key not in p_case.arms or (
                    key not in b_case.arms):
                continue
            pr_s.append(stats.process_sample(medians(p_case, key), medians(p_case, pr.control),
                                             stats.round_labels(p_case, "process")))
            base_s.append(stats.process_sample(medians(b_case, key),
                                               medians(b_case, base.control),
                                               stats.round_labels(b_case, "process")))
        aa = stats.nested_double_ratio_changes(pr_s, base_s, confidence=settings.confidence)
        if sum(math.isfinite(c.se) for c in aa) >= 2:
            return stats.unmodelled_variance(aa), f"arm {key} measured in both runs"
    return None, "none"


def within_run_only(j: Judgement, change: stats.Change, settings: Settings) -> Judgement:
    """``j`` judged again when two runs' intervals cover within-run noise only: a ⚠️/🔴
    (🟢) stands only when its whole interval clears twice the floor, else ❔. Monotone:
    the interval's bound grows with the change."""
    cap = 2.0 * settings.floor
    lo, hi = change.lo - 1.0, change.hi - 1.0
    if j.verdict in ("alert", "regression") and lo < cap or (
            j.verdict == "improvement" and hi > -cap):
        return Judgement(
            "inconclusive",
            f"{change.ratio - 1.0:+.1%} would be {VERDICTS[j.verdict][0]} ({j.reason}), but "
            f"the interval covers within-run noise only and does not clear {cap:.1%}; "
            "calibrate this host or compare both commits in one run", j.significant, j.q,
            j.shown, j.level)
    return j


def control_shift(base_control: Any, pr_control: Any) -> float | None:
    """How much longer the PR run's ORT control took a Run than the base run's, from
    each run's per-round medians (negative: less time), or None without a time."""
    b, p = _median_ns(base_control), _median_ns(pr_control)
    return p / b - 1.0 if b and p else None


def longer_run(shift: Any) -> tuple[str, float] | None:
    """Which run's control took longer a Run ("PR" or "base") and by how much (0.3: 30 %
    longer), from a ``control_shift``; None for anything else (a file may hold anything)."""
    if isinstance(shift, bool) or not isinstance(shift, (int, float)):
        return None
    if not math.isfinite(shift) or shift <= -1.0:
        return None
    return ("PR", float(shift)) if shift >= 0 else ("base", 1.0 / (1.0 + shift) - 1.0)


def beyond_speed_limit(shift: Any) -> bool:
    """Did one run's control take more than CONTROL_SHIFT_LIMIT longer than the other's?"""
    longer = longer_run(shift)
    return longer is not None and longer[1] > defaults.CONTROL_SHIFT_LIMIT


def _speed_words(shift: float) -> str:
    longer = longer_run(shift)
    assert longer is not None
    slower, by = longer
    other = "base" if slower == "PR" else "PR"
    return f"the ORT control took {by:.1%} longer a Run in the {slower} run than in the {other} one"


# The advice a ❔ from too few rounds ends with (_judge_bounded), not the remedy here.
MORE_ROUNDS = "; rerun with more --rounds"
BACK_TO_BACK = "rerun both sides back to back"


def across_speed_change(j: Judgement, change: stats.Change, th: Threshold,
                        shift: float | None) -> Judgement:
    """``j`` judged again when the two runs' controls ran too far apart in speed.

    The double ratio cancels a machine's change of speed only for a case that slows
    exactly as the control does, so the change may be off by up to about
    SPEED_CHANGE_ALLOWANCE: a ⚠️/🔴 (🟢) stands only when its whole interval clears the
    threshold by more than that (an alert when its change less that is still one); the
    rest are ❔. The warning (speed_warning) explains; a reason says what it would be.
    """
    if not beyond_speed_limit(shift) or j.verdict in ("failed", "not_comparable"):
        return j
    assert shift is not None
    moved = _speed_words(shift)
    allowance = defaults.SPEED_CHANGE_ALLOWANCE
    c, lo, hi = change.ratio - 1.0, change.lo - 1.0, change.hi - 1.0
    kept = (f"{j.reason}; {moved}, and the whole interval clears the threshold by more "
            f"than the {allowance:.0%} such a change was seen to move a case")
    if j.verdict in ("alert", "regression") and lo - allowance > th.t:
        if j.verdict == "alert" and c - allowance < th.alert:
            return Judgement("regression", f"{kept}; a regression, not an alert: the change "
                             f"less {allowance:.0%}, {c - allowance:.1%}, is below the alert "
                             f"level {th.alert:.1%}", j.significant, j.q)
        return Judgement(j.verdict, kept, j.significant, j.q)
    if j.verdict == "improvement" and hi + allowance < -th.t:
        return Judgement(j.verdict, kept, j.significant, j.q)
    if j.verdict == "inconclusive":
        reason = j.reason.removesuffix(MORE_ROUNDS)
        return Judgement(j.verdict, f"{reason}; also {moved}: {BACK_TO_BACK}, more rounds "
                         "alone may not settle it", j.significant, j.q)
    return Judgement(
        "inconclusive",
        f"{c:+.1%} would be {VERDICTS[j.verdict][0]} ({j.reason}), but {moved}; "
        f"{BACK_TO_BACK}", j.significant, j.q,
    )


def speed_warning(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The one warning for every judged case (``compare``'s rows) whose two runs' controls
    ran more than CONTROL_SHIFT_LIMIT apart, or None (one for them all, as drift_warning)."""
    moved = []
    for row in rows:
        longer = longer_run(row.get("control_shift"))
        if (longer is not None and longer[1] > defaults.CONTROL_SHIFT_LIMIT
                and row["verdict"] not in ("failed", "not_comparable")):
            moved.append(f"{row['case']} (the {longer[0]} run's control {longer[1]:.1%} "
                         "longer)")
    if not moved:
        return None
    return (f"the ORT control took more than {defaults.CONTROL_SHIFT_LIMIT:.0%} longer a Run "
            f"in one run than in the other on {named(moved)}: the machine ran at another "
            "speed (or the runs differ in host or threads), which the double ratio cancels "
            "only for a case that slows exactly as the control does, so those cases are ❔ "
            f"unless their interval clears the threshold by more than "
            f"{defaults.SPEED_CHANGE_ALLOWANCE:.0%} (a smaller regression fails no --fail-on "
            f"level); {BACK_TO_BACK}, or compare arms of one run (`compare-commits`)")


def _instructions_change(base: Side, pr: Side, case: str) -> float | None:
    def count(side: Side) -> float | None:
        return _counter(side, case, "instructions")

    b, p = count(base), count(pr)
    return p / b - 1.0 if b and p is not None else None


def _with_twin(noise: float | None, source: str,
               twin: float | None) -> tuple[float | None, str]:
    """The noise a threshold is set from: the profile's, the twin's, or the larger."""
    if twin is None:
        return noise, source
    if noise is None:
        return twin, "in-run A/A twin"
    if twin > noise:
        return twin, "in-run A/A twin (larger than the profile's)"
    return noise, f"{source} (larger than the in-run A/A twin's)"


def twin_noise(sides: Sequence[Side], cases: Sequence[str], settings: Settings,
               medians: RoundMedians) -> dict[str, Any]:
    """The A/A noise each run measured on itself, from its twin (a copy of an arm).

    `noise[case]`: the standard error of the twin's change (as a fraction), the
    larger of the two runs'; the threshold is k x that, not k x the change itself,
    whose coefficient of variation is 0.75 and which shares the base arm with the PR's
    change. `tau2`: the A/A variance the twins show beyond their own standard errors,
    pooled over the grid (stats.unmodelled_variance; with two runs, their mean): a
    bias of one library copy that no process spread sees, added to every case's
    standard error. A twin whose change would itself have been flagged against the
    floor (significant, the whole interval beyond it) means the run cannot tell two
    copies of one library apart from a regression: `flagged` names them. The twin
    never gets a verdict of its own.
    """
    noise: dict[str, float] = {}
    flagged: list[str] = []
    info = []
    tau2: list[float] = []
    floor_only = threshold_for(settings.floor / settings.k, "floor", settings)
    for side in sides:
        twin = side.doc.twin
        if twin is None or twin.key not in side.doc.arms:
            continue
        names, samples = [], []
        for name in cases:
            case = side.doc.cases.get(name)
            if case is None or not case.ok:
                continue
            names.append(name)
            samples.append(stats.process_sample(
                medians(case, twin.key), medians(case, twin.of),
                stats.round_labels(case, "process")))
        changes = stats.nested_changes(samples, confidence=settings.confidence)
        side_tau2 = stats.unmodelled_variance(changes)
        tau2.append(side_tau2)
        per_case = {}
        for name, change in zip(names, changes, strict=True):
            if not math.isfinite(change.ratio):
                continue
            se = stats.standard_error(change)
            if math.isfinite(se):
                noise[name] = max(noise.get(name, 0.0), math.expm1(se))
            per_case[name] = {"change": change.ratio - 1.0, "se": stats.finite(se),
                              "ci": [change.lo - 1.0, change.hi - 1.0]}
            beyond = (change.lo - 1.0 >= floor_only.t) or (change.hi - 1.0 <= -floor_only.t)
            if change.p < 1.0 - settings.confidence and beyond and name not in flagged:
                flagged.append(name)
        info.append({"side": side.label, "of": twin.of, "key": twin.key,
                     "cases": per_case, "unmodelled_sd": math.sqrt(side_tau2)})
    return {"noise": noise, "flagged": flagged, "info": info,
            "tau2": sum(tau2) / len(tau2) if tau2 else 0.0}


def _median_ns(values: Any) -> float | None:
    # the same rounds the ratios use: finite, positive
    return median(float(v) for v in values if math.isfinite(v) and v > 0)


def _family(case: Case) -> str | None:
    return family_of(case.spec)


def _counter(side: Side, case: str, counter: str) -> float | None:
    """`counter` per Run of the side's arm on `case`, None if it was not counted."""
    c = side.doc.cases.get(case)
    arm = c.arms.get(side.arm) if c is not None else None
    counters = arm.counters_per_run if arm is not None else None
    return counters.get(counter) if counters else None  # counters: name -> value


def _counters(side: Side, case: str) -> Mapping[str, float] | None:
    arm = side.doc.cases[case].arms.get(side.arm)
    return arm.counters_per_run if arm is not None else None


def _precheck(
    name: str, b_case: Case, p_case: Case, base: Side, pr: Side
) -> CaseRow | None:
    """A row for a case that cannot be measured (failed side, arm missing), else None."""
    def problem(case: Case, side: Side) -> str | None:
        if not case.ok:
            return f"{side.label} {case.status}: {case.error or 'no detail'}"
        info = case.arms.get(side.arm)
        if info is None:
            return f"{side.label} did not run arm {side.arm!r} on this case"
        if not info.verified:
            return f"{side.label} arm {side.arm!r} did not verify against ORT"
        return None

    pr_problem = problem(p_case, pr)
    base_problem = problem(b_case, base)
    if pr_problem is None and base_problem is None:
        return None
    verdict = "failed" if pr_problem is not None and base_problem is None else "not_comparable"
    reason = "; ".join(p for p in (pr_problem, base_problem) if p)
    return CaseRow(
        case=name, verdict=verdict, emoji=VERDICTS[verdict][0], reason=reason,
        base_ns=None, pr_ns=None, change=None, ci=[None, None], p=None, q=None,
        significant=False, threshold=math.nan, alert=math.nan, noise=math.nan,
        noise_source="-", rounds=len(p_case.rounds), unquiet=0, control_drift=None,
        family=_family(b_case),
    )


def overall_verdict(rows: Sequence[CaseRow]) -> dict[str, str]:
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
    return {"key": key, "headline": HEADLINES[key]}


def ambiguous_cases(comparison: Mapping[str, Any]) -> list[str]:
    """Cases worth re-running, a budget permitting: ❔, which more rounds can settle, and
    ⚠️ held back from 🔴 by the idle gate (all rounds at the alert level, some unquiet),
    which more quiet rounds can make 🔴."""
    return [row["case"] for row in comparison["cases"]
            if (row["verdict"] == "inconclusive" or held_back_by_gate(row))
            and not beyond_speed_limit(row.get("control_shift"))]


# A warning names at most this many cases, in at most this many characters: the comment
# job refuses a warning over 4000 (comparison.schema.json), a grid can have thousands of
# cases, and a case's name up to 200 characters.
NAMED_CASES = 20
NAMED_CHARS = 2000
# Why a drifting control does not bias a verdict; said wherever a drift is warned of.
DRIFT_CANCELS = ("The per-round ratios cancel a change that slows every arm alike, so the "
                 "verdicts are not biased by it")
DRIFT_MAY_NOT_CANCEL = "a change that depends on the machine's state (clock, cache) may not cancel"


def drift_warning(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The one warning for every case (``compare``'s rows) whose ORT control drifted
    beyond its threshold, or None. One for them all: on a drifting machine every case
    drifts, and a warning per case buried the PR comment's table (the rows keep each
    case's drift)."""
    drifted = [f"{row['case']} ({row['control_drift']:+.1%})" for row in rows
               if row["drift_exceeds_threshold"]]
    if not drifted:
        return None
    return ("the ORT control drifted from the first round to the last by more than each "
            f"case's own threshold on {named(drifted)}: the machine changed speed during the "
            f"run. {DRIFT_CANCELS}, but the ns columns are, and {DRIFT_MAY_NOT_CANCEL}; rerun "
            "on a quieter machine to be sure")


def named(cases: Sequence[str]) -> str:
    """``a, b, c`` or, past NAMED_CASES names or NAMED_CHARS characters, ``a, b and 8 more``."""
    shown: list[str] = []
    for case in cases[:NAMED_CASES]:
        if shown and len(", ".join([*shown, case])) > NAMED_CHARS:
            break
        shown.append(case)
    rest = len(cases) - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest else "")


def held_back_by_gate(row: Mapping[str, Any]) -> bool:
    """A ⚠️ that all rounds would make 🔴, held back by the idle gate (`judge`): its quiet
    rounds alone were too few to stand alone, or neither reached nor excluded the alert
    level, so the gate, not the change, kept it from 🔴 and more quiet rounds can settle
    it. A row without `held_back` (an older file) counts when its change reaches the
    alert level with unquiet rounds."""
    if row["verdict"] != "regression" or beyond_speed_limit(row.get("control_shift")):
        return False  # a case held by the speed rule is not for a rerun of one side
    if "held_back" in row:
        return bool(row["held_back"])
    return (row["change"] is not None and row["change"] >= row["alert"]
            and bool(row.get("unquiet")))


# --------------------------------------------------------------------------- counters


def counter_changes(base: Side, pr: Side, cases: Sequence[str]) -> list[dict[str, Any]]:
    """Every deterministic counter that differs between base and PR, exactly, with the
    change as a fraction of base (None when base is 0 or a side lacks the counter)."""
    rows = []
    for name in cases:
        b, p = _counters(base, name), _counters(pr, name)
        if not b and not p:
            continue
        for counter, (old, new) in changed_counters(b, p).items():
            change = (new - old) / old if old and new is not None else None
            rows.append({"case": name, "counter": counter, "base": old, "pr": new,
                         "change": change})
    return rows


# --------------------------------------------------------------------------- families


def family_changes(
    base: Side,
    pr: Side,
    rows: Sequence[CaseRow],
    settings: Settings,
    medians: RoundMedians | None = None,
) -> list[dict[str, Any]]:
    """Per chain family: did the per-node cost (slope) or the per-Run cost (intercept) change?"""
    medians = medians or RoundMedians()
    judged = {r.case: r for r in rows if r.change is not None}
    base_families = family_members(base.doc)
    pr_families = family_members(pr.doc)
    out = []
    for family, members in base_families.items():
        names = [n for _, n in members if n in judged and (
            any(n == m for _, m in pr_families.get(family, [])))]
        depths = [d for d, n in members if n in names]
        if len(set(depths)) < 2:
            continue
        t = max(judged[n].threshold for n in names)
        opts = {"confidence": settings.confidence, "resamples": settings.resamples}
        if base.doc is pr.doc:
            rounds = [{a: medians(base.doc.cases[n], a) for a in (base.arm, pr.arm)}
                      for n in names]
            fits = stats.fit_family(depths, rounds, [base.arm, pr.arm], seed=settings.seed,
                                    processes=_processes(base.doc, names), **opts)
            b_fit, p_fit = fits[base.arm], fits[pr.arm]
            slope = _ratio(p_fit.boot_slope, b_fit.boot_slope, p_fit.slope, b_fit.slope, settings)
            icept = _ratio(p_fit.boot_intercept, b_fit.boot_intercept,
                           p_fit.intercept, b_fit.intercept, settings)
        else:
            b_fits = stats.fit_family(
                depths,
                [{a: medians(base.doc.cases[n], a) for a in (base.arm, base.control)}
                 for n in names],
                [base.arm, base.control], seed=settings.seed,
                processes=_processes(base.doc, names), **opts,
            )
            p_fits = stats.fit_family(
                depths,
                [{a: medians(pr.doc.cases[n], a) for a in (pr.arm, pr.control)}
                 for n in names],
                [pr.arm, pr.control], seed=settings.seed + 1,
                processes=_processes(pr.doc, names), **opts,
            )
            b_fit, p_fit = b_fits[base.arm], p_fits[pr.arm]
            bc, pc = b_fits[base.control], p_fits[pr.control]
            slope = _ratio(
                p_fit.boot_slope * bc.boot_slope, b_fit.boot_slope * pc.boot_slope,
                p_fit.slope * bc.slope, b_fit.slope * pc.slope, settings,
            )
            icept = _ratio(
                p_fit.boot_intercept * bc.boot_intercept, b_fit.boot_intercept * pc.boot_intercept,
                p_fit.intercept * bc.intercept, b_fit.intercept * pc.intercept, settings,
            )
        moved = [n for n in names if beyond_speed_limit(judged[n].control_shift)]
        out.append({
            "family": family, "cases": names, "depths": depths, "threshold": t,
            "base": b_fit.to_dict(), "pr": p_fit.to_dict(),
            "per_node": slope, "per_run": icept,
            "finding": _family_finding(slope, icept, t) if not moved else (
                "not judged: the ORT control's time per Run differs between the runs by more "
                f"than {defaults.CONTROL_SHIFT_LIMIT:.0%} on {named(moved)}, so a change in "
                "either cost cannot be told from the machine's speed"),
        })
    return out


def _processes(doc: Results, names: Sequence[str]) -> list[Any]:
    return [stats.round_labels(doc.cases[n], "process") for n in names]


def _ratio(num: Any, den: Any, point_num: float, point_den: float,
           settings: Settings) -> dict[str, float | None]:
    if point_den <= 0 or point_num <= 0:
        return {"change": None, "lo": None, "hi": None}
    point, lo, hi = stats.ratio_with_ci(num, den, point_num / point_den, settings.confidence)
    return {"change": stats.finite(point - 1.0), "lo": stats.finite(lo - 1.0),
            "hi": stats.finite(hi - 1.0)}


def _family_finding(slope: Mapping[str, Any], icept: Mapping[str, Any], t: float) -> str:
    parts = []
    for what, ch in (("per-node cost", slope), ("per-Run cost", icept)):
        lo, hi = ch.get("lo"), ch.get("hi")
        if lo is None or hi is None:
            parts.append(f"{what}: too small to resolve")
        elif lo >= t:
            parts.append(f"{what} rose by {ch['change']:.1%}")
        elif hi <= -t:
            parts.append(f"{what} fell by {-ch['change']:.1%}")
        else:
            # Stated as a finding only when the whole interval is beyond the threshold.
            parts.append(f"{what}: no change resolved ({ch['change']:+.1%}, "
                         f"[{lo:+.1%}, {hi:+.1%}] against ±{t:.1%})")
    return "; ".join(parts)


# --------------------------------------------------------------------------- context


def _side_info(side: Side) -> dict[str, Any]:
    arm = side.doc.arms.get(side.arm)
    return {
        "path": side.path, "arm": side.arm, "spec": arm.spec if arm else None,
        "sha256": arm.sha256 if arm else None, "ep_name": arm.ep_name if arm else None,
        "control": side.control, "rounds": side.doc.config.rounds,
        "arms": sorted(side.doc.arms), "created": side.doc.created,
        "git_commit": side.doc.host.git_commit,
        "host_key": side.host_key, "interrupted": bool(side.doc.interrupted),
    }


def _profile_info(profile: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if profile is None:
        return None
    return {k: profile.get(k) for k in ("path", "host_key", "created", "arm", "rounds", "repeats")}


def cannot_catch(
    base: Side, pr: Side, rows: Sequence[CaseRow], calibrated: bool
) -> list[str]:
    """What this comparison could not have seen, stated for this run."""
    notes = []
    # A spec is cases.spec.CaseSpec's dict; a user model has no op or width.
    specs = [c.spec for c in pr.doc.cases.values()]
    ops = sorted({str(s.get("op")) for s in specs if s.get("op")})
    widths = sorted({int(s["width"]) for s in specs if s.get("width")})
    notes.append(
        "Paths the grid does not cover: only "
        + (", ".join(ops) if ops else "the listed cases")
        + (f" at widths {', '.join(map(str, widths))}" if widths else "")
        + " ran; other ops, shapes, dtypes and graph patterns were not measured."
    )
    judged = [r.threshold for r in rows if math.isfinite(r.threshold)]
    if judged:
        span = (f"{min(judged):.1%}" if f"{min(judged):.1%}" == f"{max(judged):.1%}"
                else f"{min(judged):.1%} to {max(judged):.1%}")
        notes.append(
            f"Changes below each case's threshold ({span} here) "
            "pass as ✅; such small regressions compound over many PRs, so compare against an "
            "older base now and then."
        )
    if not calibrated:
        notes.append(
            "No A/A calibration profile: thresholds are a conservative default, so real "
            "regressions smaller than that default can pass."
        )
    threads = pr.doc.config.threads
    if threads == 1:
        notes.append(
            "Multi-threaded behaviour: the run used one intra-op thread, so contention and "
            "scaling effects of more threads are not measured."
        )
    missing_counters = [r.case for r in rows
                        if r.case in pr.doc.cases and not _counters(pr, r.case)]
    if missing_counters:
        notes.append(
            f"Deterministic counters: the PR arm reported none for {len(missing_counters)} "
            "case(s) (only libraries exporting epbench_probe_* do), so those verdicts rest on "
            "wall-clock time alone."
        )
    notes.append(
        "Cold start: session creation, first-run and cache-cold latency are outside the timer; "
        "only warmed-up steady-state Run calls are measured."
    )
    if any(r.unquiet for r in rows):
        notes.append(
            "Some rounds ran while other cores were busy (idle gate failed); such a case is an "
            "alert only if its quiet rounds alone make one, so a real alert there may show "
            "as ⚠️ rather than 🔴."
        )
    return notes


def load_profile_for(host_key: str | None, path: str | None) -> dict[str, Any] | None:
    """The calibration profile to judge with: --profile FILE, else the host's cached one."""

    if path is not None:
        return load_profile(path)
    if host_key is None:
        return None
    candidate = default_profile_path(host_key)
    return load_profile(candidate) if candidate.is_file() else None
