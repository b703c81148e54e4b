"""What a comparison finds beside the verdicts, and the rules that adjust them.

The speed-change rule (two runs whose controls ran apart), the within-run-only rule,
the noise a run's A/A twin measured, the exact changes of deterministic counters, the
one-line warnings (drift, speed) and what the comparison could not have caught.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from epbench.core.model import Case, changed_counters
from epbench.core.numbers import median
from epbench.reports import defaults, nested, stats
from epbench.reports.calibrate import pooled_offset
from epbench.reports.comparison import (
    VERDICTS,
    CaseRow,
    Comparison,
    CounterChange,
    Profile,
    RoundMedians,
    Side,
    TwinCase,
    TwinInfo,
)
from epbench.reports.summary import DRIFT_MEANING, family_of
from epbench.reports.verdicts import Judgement, Settings, Threshold

# Two runs with no estimate of what runs differ by (between_run_variance is None).
WITHIN_ONLY_WARNING = (
    "no estimate of how much two runs differ beyond their processes (no calibration "
    "profile with separate-run A/A repeats, no arm measured in both runs): the intervals "
    "cover within-run noise only, so a ⚠️, 🔴 or 🟢 whose interval does not clear {cap:.1%} "
    "is ❔; "
    "run `epbench calibrate --repeats 2` or more on this host, or compare both commits in "
    "one run (`compare-commits`)")


def between_run_variance(
    profile: Profile | None, base: Side, pr: Side, cases: Sequence[str],
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
      moment estimator of nested.unmodelled_variance. Not a twin of a judged arm: it is
      the same code as the arm it copies, so whatever a run does to that code it does
      to both, and its double ratio is the judged one again; fitted from the very
      offset it is to judge, it would explain any A/A difference away.
    """
    from statistics import NormalDist

    if profile is not None:
        entries = [(c.get("separate-runs") or {}) for c in (profile.get("cases") or {}).values()]
        if entries and not any(e.get("estimated") for e in entries):
            offset = pooled_offset(profile, "separate-runs")
            if offset > 0.0:
                z = NormalDist().inv_cdf(0.5 + defaults.NOISE_PERCENTILE / 200.0)
                return (math.log1p(offset) / z) ** 2, "calibration profile"
    judged = (base.arm, pr.arm)
    copies = {doc.twin.key for doc in (base.doc, pr.doc)
              if doc.twin is not None and doc.twin.of in judged}
    for key, arm in sorted(base.doc.arms.items()):
        other = pr.doc.arms.get(key)
        if (key in (base.control, pr.control, *judged) or key in copies or other is None
                or arm.sha256 is None
                or arm.sha256 != other.sha256):
            continue
        pr_s, base_s = [], []
        for name in cases:
            b_case, p_case = base.doc.cases.get(name), pr.doc.cases.get(name)
            if b_case is None or p_case is None or key not in p_case.arms or (
                    key not in b_case.arms):
                continue
            pr_s.append(nested.process_sample(medians(p_case, key), medians(p_case, pr.control),
                                             stats.round_labels(p_case, "process")))
            base_s.append(nested.process_sample(medians(b_case, key),
                                               medians(b_case, base.control),
                                               stats.round_labels(b_case, "process")))
        aa = nested.nested_double_ratio_changes(pr_s, base_s, confidence=settings.confidence)
        if sum(math.isfinite(c.se) for c in aa) >= 2:
            return nested.unmodelled_variance(aa), f"arm {key} measured in both runs"
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


def flag_bar(t: float, shift: float | None, within_only: bool, settings: Settings) -> float:
    """The threshold a slowdown's interval had to clear to be flagged: t, plus the
    speed-change allowance across a change of speed (across_speed_change), at least
    twice the floor when the intervals cover within-run noise only (within_run_only)."""
    bar = t + defaults.SPEED_CHANGE_ALLOWANCE if beyond_speed_limit(shift) else t
    return max(bar, 2.0 * settings.floor) if within_only else bar


def twin_over_target(j: Judgement, twin_change: float | None,
                     settings: Settings) -> Judgement:
    """``j`` judged again against --target-mde: a ✅ whose A/A twin itself differed by more
    than the target is ❔, since two copies of one library could not be told apart at the
    size the run was asked to see."""
    target = settings.target_mde
    if target is None or j.verdict != "no_change" or twin_change is None or (
            abs(twin_change) <= target):
        return j
    return Judgement(
        "inconclusive",
        f"{j.reason}, but the A/A twin itself differed by {twin_change:+.1%}, more than the "
        f"target {target:.1%}; rerun with more --processes, on a quieter machine",
        j.significant, j.q)


# The start of the warning that names the cases short of --target-mde.
TARGET_MISSED = "short of the target"


def target_misses(rows: Sequence[CaseRow], target: float) -> dict[str, str]:
    """The judged cases (``compare``'s rows) whose detectable change is above ``target``,
    each with why: "no measured noise" (no profile, no twin: the default t is above
    target / 2), "A/A noise" (k x the noise set t above target / 2: more processes
    narrow a twin's noise too), "load" (some rounds failed the idle gate), else "processes"
    (the interval is too wide: more worker processes narrow it)."""
    missed = {}
    for row in rows:
        if row.verdict in ("failed", "not_comparable"):
            continue
        size = row.detectable
        if size is not None and size <= target:
            continue
        if row.threshold > target / 2.0 * (1.0 + 1e-9):
            # "no profile": no twin either, so t is the default no process can lower.
            missed[row.case] = ("no measured noise" if row.noise_source == "no profile"
                                else "A/A noise")
        elif row.unquiet:
            missed[row.case] = "load"
        else:
            missed[row.case] = "processes"
    return missed


def target_warnings(rows: Sequence[CaseRow], target: float, *,
                    budget: bool) -> list[str]:
    """The warnings naming the cases short of --target-mde, one per reason (each within
    ``named``'s bound, as the schema bounds one warning). `budget`: re-runs added
    processes until their budget ran out (compare-commits, `run --target-mde`)."""
    missed = target_misses(rows, target)
    sizes = {row.case: row.detectable for row in rows}
    why = {"no measured noise": ("no measured noise (no calibration profile, no A/A twin: "
                                 "the default t is above half the target; run with an A/A "
                                 "twin)"),
           "A/A noise": "A/A noise (k × the noise sets t above half the target; more "
                        "processes narrow a twin's noise too)",
           "load": "load (rounds failed the idle gate; rerun on a quieter machine)",
           "processes": ("budget (the re-runs' budget ran out before more processes reached "
                         "it; pass a larger --budget)" if budget else
                         "too few processes (rerun with more --processes)")}
    warnings = []
    for reason, words in why.items():
        names = [name for name, r in missed.items() if r == reason]
        if not names:
            continue
        items = [f"{name} (≥ {sizes[name]:.1%})" if sizes[name] is not None
                 else f"{name} (no estimate)" for name in names]
        warnings.append(f"{len(names)} case(s) {TARGET_MISSED} detectable change of "
                        f"{target:.1%}, for {words}: {named(items)}")
    return warnings


def control_shift(base_control: Iterable[float], pr_control: Iterable[float]) -> float | None:
    """How much longer the PR run's ORT control took a Run than the base run's, from
    each run's per-round medians (negative: less time), or None without a time."""
    b, p = median_ns(base_control), median_ns(pr_control)
    return p / b - 1.0 if b and p else None


def longer_run(shift: float | None) -> tuple[str, float] | None:
    """Which run's control took longer a Run ("PR" or "base") and by how much (0.3: 30 %
    longer), from a ``control_shift``; None without one."""
    if isinstance(shift, bool) or not isinstance(shift, (int, float)):
        return None
    if not math.isfinite(shift) or shift <= -1.0:
        return None
    return ("PR", float(shift)) if shift >= 0 else ("base", 1.0 / (1.0 + shift) - 1.0)


def beyond_speed_limit(shift: float | None) -> bool:
    """Did one run's control take more than CONTROL_SHIFT_LIMIT longer than the other's?"""
    longer = longer_run(shift)
    return longer is not None and longer[1] > defaults.CONTROL_SHIFT_LIMIT


def _speed_words(shift: float) -> str:
    longer = longer_run(shift)
    assert longer is not None
    slower, by = longer
    other = "base" if slower == "PR" else "PR"
    return f"the ORT control took {by:.1%} longer a Run in the {slower} run than in the {other} one"


# The advice a ❔ from too few rounds ends with (verdicts._judge_bounded), not the remedy here.
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
    # The interval a flag is shown with (FCR-adjusted when selected) is the one that must
    # clear the allowance, and it stays the one shown, at its level.
    shown = j.shown or change
    c, lo, hi = shown.ratio - 1.0, shown.lo - 1.0, shown.hi - 1.0
    keep = {"shown": j.shown, "level": j.level}
    kept = (f"{j.reason}; {moved}, and the whole interval clears the threshold by more "
            f"than the {allowance:.0%} such a change was seen to move a case")
    if j.verdict in ("alert", "regression") and lo - allowance > th.t:
        if j.verdict == "alert" and c - allowance < th.alert:
            return Judgement("regression", f"{kept}; a regression, not an alert: the change "
                             f"less {allowance:.0%}, {c - allowance:.1%}, is below the alert "
                             f"level {th.alert:.1%}", j.significant, j.q, **keep)
        return Judgement(j.verdict, kept, j.significant, j.q, held_back=j.held_back, **keep)
    if j.verdict == "improvement" and hi + allowance < -th.t:
        return Judgement(j.verdict, kept, j.significant, j.q, **keep)
    if j.verdict == "inconclusive":
        reason = j.reason.removesuffix(MORE_ROUNDS)
        return Judgement(j.verdict, f"{reason}; also {moved}: {BACK_TO_BACK}, more rounds "
                         "alone may not settle it", j.significant, j.q)
    return Judgement(
        "inconclusive",
        f"{c:+.1%} would be {VERDICTS[j.verdict][0]} ({j.reason}), but {moved}; "
        f"{BACK_TO_BACK}", j.significant, j.q,
    )


def speed_warning(rows: Sequence[CaseRow]) -> str | None:
    """The one warning for every judged case (``compare``'s rows) whose two runs' controls
    ran more than CONTROL_SHIFT_LIMIT apart, or None (one for them all, as drift_warning)."""
    moved = []
    for row in rows:
        longer = longer_run(row.control_shift)
        if (longer is not None and longer[1] > defaults.CONTROL_SHIFT_LIMIT
                and row.verdict not in ("failed", "not_comparable")):
            moved.append(f"{row.case} (the {longer[0]} run's control {longer[1]:.1%} "
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


def instructions_change(base: Side, pr: Side, case: str) -> float | None:
    def count(side: Side) -> float | None:
        return _counter(side, case, "instructions")

    b, p = count(base), count(pr)
    return p / b - 1.0 if b and p is not None else None


def with_twin(noise: float | None, source: str,
               twin: float | None) -> tuple[float | None, str]:
    """The noise a threshold is set from: the profile's, the twin's, or the larger."""
    if twin is None:
        return noise, source
    if noise is None:
        return twin, "in-run A/A twin"
    if twin > noise:
        return twin, "in-run A/A twin (larger than the profile's)"
    return noise, f"{source} (larger than the in-run A/A twin's)"


@dataclass(frozen=True)
class TwinNoise:
    """What the runs' A/A twins measured (twin_noise)."""

    noise: dict[str, float]  # case -> the twin's standard error, as a fraction
    flagged: list[str]  # cases whose twin differs from its arm beyond the floor
    info: list[TwinInfo] = field(default_factory=list)  # per side, for the comparison
    tau2: float = 0.0  # A/A variance beyond the twins' standard errors, pooled
    # Per case of twin_noise's `cases`: the A/A variance beyond the twins' standard
    # errors, pooled and at least the case's own (the two runs' mean).
    extra: list[float] = field(default_factory=list)


def twin_noise(sides: Sequence[Side], cases: Sequence[str], settings: Settings,
               medians: RoundMedians) -> TwinNoise:
    """The A/A noise each run measured on itself, from its twin (a copy of an arm).

    `noise[case]`: the standard error of the twin's change (as a fraction), the
    larger of the two runs'; the threshold is k x that, not k x the change itself,
    whose coefficient of variation is 0.75 and which shares the base arm with the PR's
    change. `extra`: per case of `cases`, the A/A variance the twins show beyond their
    own standard errors (nested.unmodelled_variances: pooled over the grid, at least the
    case's own; with two runs, their mean), added to the case's standard error; `tau2`
    the grid's pooled term alone. `flagged`: the cases whose twin differs from the arm it
    copies beyond what that noise explains (doubtful_twins), which means the run cannot
    tell two copies of one library apart from a regression. The twin never gets a
    verdict of its own.
    """
    noise: dict[str, float] = {}
    flagged: list[str] = []
    info = []
    tau2: list[float] = []
    extra: list[list[float]] = []
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
            samples.append(nested.process_sample(
                medians(case, twin.key), medians(case, twin.of),
                stats.round_labels(case, "process")))
        changes = nested.nested_changes(samples, confidence=settings.confidence)
        side_tau2 = nested.pooled_unmodelled_variance(changes)
        tau2.append(side_tau2)
        own = dict(zip(names, nested.unmodelled_variances(changes), strict=True))
        extra.append([own.get(name, side_tau2) for name in cases])
        per_case = {}
        for name, change in zip(names, changes, strict=True):
            if not math.isfinite(change.ratio):
                continue
            se = nested.standard_error(change)
            if math.isfinite(se):
                noise[name] = max(noise.get(name, 0.0), math.expm1(se))
            per_case[name] = TwinCase(change=change.ratio - 1.0, se=stats.finite(se),
                                      ci=(change.lo - 1.0, change.hi - 1.0))
        for name in doubtful_twins(samples, changes, names, settings):
            if name not in flagged:
                flagged.append(name)
        info.append(TwinInfo(side=side.label, of=twin.of, key=twin.key, cases=per_case,
                             unmodelled_sd=math.sqrt(side_tau2)))
    mean_extra = ([sum(col) / len(col) for col in zip(*extra, strict=True)] if extra
                  else [0.0] * len(cases))
    return TwinNoise(noise, flagged, info, sum(tau2) / len(tau2) if tau2 else 0.0,
                     mean_extra)


def doubtful_twins(samples: Sequence[nested.ProcessSample], changes: Sequence[stats.Change],
                   names: Sequence[str], settings: Settings) -> list[str]:
    """The cases whose twin's A/A change is beyond what the run's noise explains.

    A per-copy bias the processes cannot see is noise like any other here: each twin is
    judged with the unmodelled variance the other twins show (leave-one-out, so its own
    offset does not explain itself away), at confidence 1 - alpha / m over the m twins
    (Bonferroni: a grid of healthy twins seldom raises the warning), and named when
    that interval lies beyond the floor. A shift that every twin shares (the mean of
    their changes beyond the floor by a t interval across cases) is not a copy's bias,
    which is as often up as down: it names the twins whose own interval is beyond it.
    """
    alpha = 1.0 - settings.confidence
    floor = settings.floor
    finite = [i for i, c in enumerate(changes) if math.isfinite(c.ratio) and c.ratio > 0]
    if not finite:
        return []

    def beyond(c: stats.Change) -> bool:
        return c.lo - 1.0 >= floor or c.hi - 1.0 <= -floor

    loo = nested.unmodelled_variances(changes, own=False)
    # The others' pool is an estimate over m - 1 cases: its degrees of freedom count.
    judged = nested.nested_changes(samples, confidence=1.0 - alpha / len(finite),
                                   extra_variance=loo, extra_df=max(1.0, len(finite) - 2.0))
    out = [names[i] for i in finite if beyond(judged[i])]
    if len(finite) >= 2:
        logs = [math.log(changes[i].ratio) for i in finite]
        mean = sum(logs) / len(logs)
        sd = math.sqrt(sum((y - mean) ** 2 for y in logs) / (len(logs) - 1))
        half = nested.t_quantile(1.0 - alpha / 2.0, len(logs) - 1.0) * sd / math.sqrt(len(logs))
        if math.expm1(mean - half) >= floor or math.expm1(mean + half) <= -floor:
            out += [names[i] for i in finite if names[i] not in out and beyond(changes[i])]
    return out


def median_ns(values: Iterable[float]) -> float | None:
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


def ambiguous_cases(comparison: Comparison) -> list[str]:
    """Cases worth re-running, a budget permitting: ❔, which more rounds can settle, and
    ⚠️ held back from 🔴 by the idle gate (all rounds at the alert level, some unquiet),
    which more quiet rounds can make 🔴."""
    return [row.case for row in comparison.cases
            if (row.verdict == "inconclusive" or held_back_by_gate(row))
            and not beyond_speed_limit(row.control_shift)]


# A warning names at most this many cases, in at most this many characters: the comment
# job refuses a warning over 4000 (comparison.schema.json), a grid can have thousands of
# cases, and a case's name up to 200 characters.
NAMED_CASES = 20
NAMED_CHARS = 2000
# Why a drifting control does not bias a verdict; said wherever a drift is warned of.
DRIFT_CANCELS = ("The per-round ratios cancel a change that slows every arm alike, so the "
                 "verdicts are not biased by it")
DRIFT_MAY_NOT_CANCEL = "a change that depends on the machine's state (clock, cache) may not cancel"


def drift_warning(rows: Sequence[CaseRow]) -> str | None:
    """The one warning for every case (``compare``'s rows) whose ORT control drifted
    beyond its threshold, or None. One for them all: on a drifting machine every case
    drifts, and a warning per case buried the PR comment's table (the rows keep each
    case's drift)."""
    drifted = [f"{row.case} ({row.control_drift:+.1%})" for row in rows
               if row.drift_exceeds_threshold and row.control_drift is not None]
    if not drifted:
        return None
    return (f"the ORT control drifted ({DRIFT_MEANING}) by more than each "
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


def held_back_by_gate(row: CaseRow) -> bool:
    """A ⚠️ that all rounds would make 🔴, held back by the idle gate (`judge`): its quiet
    rounds alone were too few to stand alone, or neither reached nor excluded the alert
    level, so the gate, not the change, kept it from 🔴 and more quiet rounds can settle
    it. A row without `held_back` (an older file) counts when its change reaches the
    alert level with unquiet rounds."""
    if row.verdict != "regression" or beyond_speed_limit(row.control_shift):
        return False  # a case held by the speed rule is not for a rerun of one side
    if row.held_back is not None:
        return row.held_back
    return row.change is not None and row.change >= row.alert and bool(row.unquiet)


# --------------------------------------------------------------------------- counters


def counter_changes(base: Side, pr: Side, cases: Sequence[str]) -> list[CounterChange]:
    """Every deterministic counter that differs between base and PR, exactly, with the
    change as a fraction of base (None when base is 0 or a side lacks the counter)."""
    rows = []
    for name in cases:
        b, p = _counters(base, name), _counters(pr, name)
        if not b and not p:
            continue
        for counter, (old, new) in changed_counters(b, p).items():
            change = (new - old) / old if old and new is not None else None
            rows.append(CounterChange(case=name, counter=counter, base=old, pr=new,
                                      change=change))
    return rows


def detectable_span(values: Sequence[float | None]) -> tuple[float, float, int] | None:
    """(median, worst, how many) of a grid's detectable changes (rows' `detectable`),
    or None when no case has one."""
    known = sorted(v for v in values if v is not None and math.isfinite(v))
    if not known:
        return None
    mid = median(known)
    assert mid is not None
    return mid, known[-1], len(known)


def widened_by(unmodelled_sd: float | None, between_sd: float | None) -> list[str]:
    """The terms a comparison added to every standard error (log-scale sds), as words."""
    def pct(sd: float) -> str:
        # A file may hold any finite sd: exp of more than ~709 would overflow.
        return f"{math.expm1(min(sd, 50.0)):.2%}"

    terms = []
    if unmodelled_sd is not None and unmodelled_sd > 0.0:
        terms.append(f"the twin's A/A spread beyond its processes (sd {pct(unmodelled_sd)})")
    if between_sd is not None and between_sd > 0.0:
        terms.append(f"what two runs differ by (sd {pct(between_sd)})")
    return terms


def noise_used(profile: bool, twin: bool, floor: float, k: float) -> str:
    """Where a comparison's thresholds came from, as words."""
    if profile and twin:
        return "the larger of this host's calibration profile and the run's own A/A twin"
    if profile:
        return "this host's calibration profile"
    if twin:
        return (f"the run's own A/A twin (a second copy of the base arm measured beside it; "
                f"{k:g} × the standard error of its change)")
    return ("no measurement (no calibration profile, no A/A twin), so t is the "
            f"conservative default max({floor:.0%}, {k:g} × "
            f"{defaults.NOISE_WITHOUT_PROFILE:.0%}); `--aa-twin ARM` or `epbench calibrate` "
            "measures it")


def cannot_catch(
    base: Side, pr: Side, rows: Sequence[CaseRow], *, profile: bool, twin: bool,
    unmodelled_sd: float, between_sd: float | None, settings: Settings,
) -> list[str]:
    """What this comparison could not have seen, stated for this run: from each case's
    detectable change, the noise its thresholds came from (`profile`, `twin`) and the
    terms its standard errors were widened by (the twins' `unmodelled_sd`, the
    `between_sd` of two runs; log scale)."""
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
    span = detectable_span([r.detectable for r in rows])
    if judged:
        lo, hi = f"{min(judged):.1%}", f"{max(judged):.1%}"
        thresholds = lo if lo == hi else f"{lo} to {hi}"
        widened = widened_by(unmodelled_sd, between_sd)
        if span is None:
            caught = "Changes below each case's threshold pass as ✅"
        else:
            mid, worst, n = span
            caught = (f"A slowdown smaller than a case's detectable change can pass as ✅: "
                      f"this run could catch ≥ {mid:.1%} in the median of its {n} judged "
                      f"case(s) and ≥ {worst:.1%} in the worst, with "
                      f"{defaults.DETECT_POWER:.0%} probability, each from its own interval "
                      "width and threshold")
        notes.append(
            f"{caught}. The thresholds ({thresholds} here) came from "
            f"{noise_used(profile, twin, settings.floor, settings.k)}"
            + (f"; the standard errors include {' and '.join(widened)}" if widened else "")
            + ". Such small regressions compound over many PRs, so compare against an "
            "older base now and then."
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
