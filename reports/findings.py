"""What a comparison finds beside the verdicts, and the rules that adjust them.

The speed-change rule (two runs whose controls ran apart), the within-run-only rule,
the exact changes of deterministic counters, the one-line warnings (drift, speed,
target) and what the comparison could not have caught. The noise a run measured for
itself (its A/A twins, what two runs differ by) is reports/run_noise.py's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from statistics import NormalDist

from epbench.core.model import Case, changed_counters
from epbench.core.numbers import median
from epbench.reports import defaults, stats
from epbench.reports.comparison import (
    VERDICTS,
    CaseRow,
    Comparison,
    CounterChange,
    Side,
)
from epbench.reports.formats import format_growth, format_share
from epbench.reports.summary import DRIFT_MEANING, family_of
from epbench.reports.verdicts import Judgement, Settings, Threshold, default_threshold_text

# Two runs with no estimate of what runs differ by (between_run_variance is None): a flag
# must clear this many times the floor.
WITHIN_ONLY_FLOORS = 2.0


def within_only_cap(settings: Settings) -> float:
    """What a flag's whole interval must clear when two runs' intervals cover within-run
    noise only (within_run_only, flag_bar, within_only_warning)."""
    return WITHIN_ONLY_FLOORS * settings.floor


def within_only_warning(settings: Settings) -> str:
    """compare's warning for two runs with no estimate of what runs differ by."""
    return ("no estimate of how much two runs differ beyond their processes (no calibration "
            "profile with separate-run A/A repeats, no arm measured in both runs): the "
            "intervals cover within-run noise only, so a ⚠️, 🔴 or 🟢 whose interval does not "
            f"clear {format_share(within_only_cap(settings))} is ❔; run `epbench calibrate "
            "--repeats 2` or more on this host, or compare both commits in one run "
            "(`compare-commits`)")


def within_run_only(j: Judgement, change: stats.Change, settings: Settings) -> Judgement:
    """``j`` judged again when two runs' intervals cover within-run noise only: a ⚠️/🔴
    (🟢) stands only when its whole interval clears twice the floor, else ❔. Monotone:
    the interval's bound grows with the change."""
    cap = within_only_cap(settings)
    lo, hi = change.lo - 1.0, change.hi - 1.0
    if j.verdict in ("alert", "regression") and lo < cap or (
            j.verdict == "improvement" and hi > -cap):
        return Judgement(
            "inconclusive",
            f"{change.ratio - 1.0:+.1%} would be {VERDICTS[j.verdict][0]} ({j.reason}), but "
            f"the interval covers within-run noise only and does not clear {format_share(cap)}; "
            "calibrate this host or compare both commits in one run", j.significant, j.q,
            j.shown, j.level)
    return j


def flag_bar(t: float, shift: float | None, within_only: bool, settings: Settings) -> float:
    """The threshold a slowdown's interval had to clear to be flagged: t, plus the
    speed-change allowance the shift gave (speed_allowance, 0 within the limit), at least
    twice the floor when the intervals cover within-run noise only (within_run_only)."""
    bar = t + speed_allowance(shift)
    return max(bar, within_only_cap(settings)) if within_only else bar


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


# How far past CONTROL_SHIFT_LIMIT a shift must be to count as beyond it: p / b - 1 and
# its inverse carry a few ulps of rounding, so a control exactly 5 % slower (1050 ns vs
# 1000 ns gives 0.050000000000000044) is at the limit, not "more than" it.
_LIMIT_ROUNDING = 1e-12


def longer_run(shift: float | None) -> tuple[str, float] | None:
    """Which run's control took longer a Run ("PR" or "base") and by how much (0.3: 30 %
    longer), from a ``control_shift``; None without one (or NaN, or below -1, which no two
    positive times give). +inf, or -1 (the PR's time rounded to 0 beside the base's), is
    infinitely longer."""
    if isinstance(shift, bool) or not isinstance(shift, (int, float)) or math.isnan(shift):
        return None
    if shift < -1.0:
        return None  # no two positive times give it: junk in a file, no shift
    if shift == -1.0:
        return ("base", math.inf)
    return ("PR", float(shift)) if shift >= 0 else ("base", 1.0 / (1.0 + shift) - 1.0)


def speed_allowance(shift: float | None) -> float:
    """How far a change of machine speed between two runs may have moved a case's change
    (defaults.SPEED_SHIFT_JUMP, SPEED_SHIFT_VARIANCE): 0 up to CONTROL_SHIFT_LIMIT, then
    a jump (a change of speed state moves a case at once), growing with |log(1 + shift)|."""
    longer = longer_run(shift)
    if longer is None or not beyond_speed_limit(shift):
        return 0.0
    # |log(1 + shift)| either way round: log1p of how much longer the slower control took;
    # within the rounding of the limit, the jump alone.
    beyond = max(0.0, math.log1p(longer[1]) - math.log1p(defaults.CONTROL_SHIFT_LIMIT))
    z = NormalDist().inv_cdf((1.0 + defaults.SPEED_ALLOWANCE_COVER) / 2.0)
    return z * math.sqrt(defaults.SPEED_SHIFT_JUMP
                         + defaults.SPEED_SHIFT_VARIANCE * beyond)


def beyond_speed_limit(shift: float | None) -> bool:
    """Did one run's control take more than CONTROL_SHIFT_LIMIT longer than the other's?
    An infinite shift (one control's time rounded to 0 beside the other's, or their
    ratio overflowing) counts as beyond: nothing says the runs ran at one speed."""
    longer = longer_run(shift)
    return (longer is not None
            and longer[1] > defaults.CONTROL_SHIFT_LIMIT + _LIMIT_ROUNDING)


def _speed_words(shift: float) -> str:
    longer = longer_run(shift)
    assert longer is not None
    slower, by = longer
    other = "base" if slower == "PR" else "PR"
    return (f"the ORT control took {format_growth(by)} longer a Run in the {slower} run than "
            f"in the {other} one")


# The advice a ❔ from too few rounds ends with (verdicts._judge_bounded), not the remedy here.
MORE_ROUNDS = "; rerun with more --rounds"
BACK_TO_BACK = "rerun both sides back to back"


def across_speed_change(j: Judgement, change: stats.Change, th: Threshold,
                        shift: float | None) -> Judgement:
    """``j`` judged again when the two runs' controls ran too far apart in speed.

    The double ratio cancels a machine's change of speed only for a case that slows
    exactly as the control does, so the change may be off by up to the allowance the
    shift gives (speed_allowance, growing with the shift): a ⚠️/🔴 (🟢) stands only when
    its whole interval clears the threshold by more than that (an alert when its change
    less that is still one), a ✅ only when its interval widened by it still lies within
    ±t; the rest are ❔. Just beyond the limit the allowance already jumps to its
    SPEED_SHIFT_JUMP part (a change of speed state moves a case at once). The warning
    (speed_warning) explains; a reason says what it would be and the allowance.
    """
    if not beyond_speed_limit(shift) or j.verdict in ("failed", "not_comparable"):
        return j
    assert shift is not None
    moved = _speed_words(shift)
    allowance = speed_allowance(shift)
    allowed = format_growth(allowance)
    # The interval a flag is shown with (FCR-adjusted when selected) is the one that must
    # clear the allowance, and it stays the one shown, at its level.
    shown = j.shown or change
    c, lo, hi = shown.ratio - 1.0, shown.lo - 1.0, shown.hi - 1.0
    keep = {"shown": j.shown, "level": j.level}
    kept = (f"{j.reason}; {moved}, and the whole interval clears the threshold by more "
            f"than the {allowed} such a change may move a case")
    if j.verdict in ("alert", "regression") and lo - allowance > th.t:
        if j.verdict == "alert" and c - allowance < th.alert:
            return Judgement("regression", f"{kept}; a regression, not an alert: the change "
                             f"less {allowed}, {c - allowance:.1%}, is below the alert "
                             f"level {format_share(th.alert)}", j.significant, j.q, **keep)
        return Judgement(j.verdict, kept, j.significant, j.q, held_back=j.held_back, **keep)
    if j.verdict == "improvement" and hi + allowance < -th.t:
        return Judgement(j.verdict, kept, j.significant, j.q, **keep)
    within = (f"the interval widened by the {allowed} such a change may move a case "
              f"lies within ±{th.t:.1%}")
    if j.verdict == "no_change":
        if -th.t < lo - allowance and hi + allowance < th.t:
            return Judgement(j.verdict, f"{j.reason}; {moved}, and {within}", j.significant,
                             j.q, **keep)
        return Judgement("inconclusive", f"{c:+.1%} would be {VERDICTS[j.verdict][0]} "
                         f"({j.reason}), but {moved}, and not {within}; {BACK_TO_BACK}",
                         j.significant, j.q)
    if j.verdict == "inconclusive":
        reason = j.reason.removesuffix(MORE_ROUNDS)
        return Judgement(j.verdict, f"{reason}; also {moved}: {BACK_TO_BACK}, more rounds "
                         "alone may not settle it", j.significant, j.q)
    return Judgement(
        "inconclusive",
        f"{c:+.1%} would be {VERDICTS[j.verdict][0]} ({j.reason}), but {moved}, and the "
        f"interval does not clear the threshold by the {allowed} such a change may "
        f"move a case; {BACK_TO_BACK}", j.significant, j.q,
    )


def speed_warning(rows: Sequence[CaseRow]) -> str | None:
    """The one warning for every judged case (``compare``'s rows) whose two runs' controls
    ran more than CONTROL_SHIFT_LIMIT apart, or None (one for them all, as drift_warning)."""
    moved = []
    for row in rows:
        longer = longer_run(row.control_shift)
        if (beyond_speed_limit(row.control_shift) and longer is not None
                and row.verdict not in ("failed", "not_comparable")):
            moved.append(f"{row.case} (the {longer[0]} run's control {format_growth(longer[1])} "
                         "longer: allowance "
                         f"{format_growth(speed_allowance(row.control_shift))})")
    if not moved:
        return None
    return (f"the ORT control took more than {defaults.CONTROL_SHIFT_LIMIT:.0%} longer a Run "
            f"in one run than in the other on {named(moved)}: the machine ran at another "
            "speed (or the runs differ in host or threads), which the double ratio cancels "
            "only for a case that slows exactly as the control does, so a ⚠️, 🔴 or 🟢 among "
            "them is ❔ unless its interval clears the threshold by more than the allowance "
            "its shift gives, which grows with it, and a ✅ is ❔ unless its interval widened "
            "by it lies within the threshold (a smaller regression fails no --fail-on level); "
            f"{BACK_TO_BACK}, or compare arms of one run (`compare-commits`)")


def instructions_change(base: Side, pr: Side, case: str) -> float | None:
    def count(side: Side) -> float | None:
        return _counter(side, case, "instructions")

    b, p = count(base), count(pr)
    return p / b - 1.0 if b and p is not None else None




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


def noise_used(profile: bool, twin: bool, settings: Settings, shared: bool = False) -> str:
    """Where a comparison's thresholds came from, as words (`shared`: every twin was
    registered from its base's own library file)."""
    if profile and twin:
        return "the larger of this host's calibration profile and the run's own A/A twin"
    if profile:
        return "this host's calibration profile"
    if twin:
        what = ("the base arm's library file registered a second time, the one file every "
                "arm of the run loads," if shared else "a second copy of the base arm")
        return (f"the run's own A/A twin ({what} measured beside it; "
                f"{settings.k:g} × the standard error of its change)")
    return ("no measurement (no calibration profile, no A/A twin), so t is the "
            f"conservative default {default_threshold_text(settings)}; `--aa-twin ARM` or "
            "`epbench calibrate` measures it")


def cannot_catch(
    base: Side, pr: Side, rows: Sequence[CaseRow], *, profile: bool, twin: bool,
    unmodelled_sd: float, between_sd: float | None, settings: Settings,
    shared: bool = False,
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
        lo, hi = format_share(min(judged)), format_share(max(judged))
        thresholds = lo if lo == hi else f"{lo} to {hi}"
        widened = widened_by(unmodelled_sd, between_sd)
        if span is None:
            caught = "Changes below each case's threshold pass as ✅"
        else:
            mid, worst, n = span
            caught = (f"A slowdown smaller than a case's detectable change can pass as ✅: "
                      f"this run could catch ≥ {format_share(mid)} in the median of its "
                      f"{n} judged case(s) and ≥ {format_share(worst)} in the worst, with "
                      f"{defaults.DETECT_POWER:.0%} probability, each from its own interval "
                      "width and threshold")
        notes.append(
            f"{caught}. The thresholds ({thresholds} here) came from "
            f"{noise_used(profile, twin, settings, shared)}"
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
