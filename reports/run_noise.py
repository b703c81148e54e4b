"""The noise a comparison measures for itself, beside any calibration profile.

What a run's A/A twin (a second copy of an arm) shows about the run's own noise, which
twins differ from the arm they copy beyond it, and what two runs differ by beyond their
processes; compare sets thresholds and standard errors from these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epbench.reports import defaults, nested, stats
from epbench.reports.calibrate import pooled_offset
from epbench.reports.comparison import Profile, RoundMedians, Side, TwinCase, TwinInfo
from epbench.reports.verdicts import Settings

if TYPE_CHECKING:
    import numpy as np


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


def twin_sides(base: Side, pr: Side, same_run: bool) -> tuple[list[Side], str | None]:
    """The sides whose twin may set thresholds, and a warning naming those whose cannot.

    A twin registered from its run's one library file (`shared_library`) measured no two
    files side by side; two runs set two builds' files side by side, so across runs only a
    twin that is a copy counts."""
    if same_run:
        return [base], None
    counted = [s for s in (base, pr) if s.doc.twin is None or not s.doc.twin.shared_library]
    shared = [s.label for s in (base, pr) if not any(s is c for c in counted)]
    if not shared:
        return counted, None
    return counted, (
        f"the A/A twin of the {' and the '.join(shared)} run was its run's one library "
        "file registered again, not a copy: it leaves out what two builds' files differ "
        "by, so it sets no threshold across runs (a run with one arm, or arms of "
        "different files, twins with a copy)")


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
                             unmodelled_sd=math.sqrt(side_tau2),
                             shared_library=True if twin.shared_library else None))
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


# The share of the twins' unmodelled A/A variance that PR / mean(base, twin) carries:
# the twin's change holds two copies' bias (2 b^2), PR / base two as well, PR against the
# mean of two copies of base one and two halves (b^2 + b^2 / 4 + b^2 / 4 = 1.5 b^2).
TWIN_REPLICATE_SHARE = 0.75


def second_replicate(base: Side, pr: Side) -> str | None:
    """The twin's arm key when it is a second copy of base for this comparison, else None.

    In one run whose A/A twin copies the base arm, each round's PR is compared with the
    geometric mean of base and twin (docs/validation/statistics.md: on this machine the
    standard error of a PR with its own library file fell 15 %). Not when the PR arm
    loads base's own library file (same file, other options): what that file's layout
    does to base it does to the PR too, and cancels against base alone, not the twin.
    """
    twin = base.doc.twin
    if base.doc is not pr.doc or twin is None or twin.of != base.arm or (
            pr.arm == twin.key or twin.key not in base.doc.arms):
        return None
    base_arm, pr_arm = base.doc.arms.get(base.arm), pr.doc.arms.get(pr.arm)
    if base_arm is None or pr_arm is None or base_arm.library is None or (
            pr_arm.library == base_arm.library):
        return None
    return twin.key


def replicate_reference(base: np.ndarray, twin: np.ndarray | None) -> np.ndarray | None:
    """Each round's base when the twin stands as a second copy of it (second_replicate):
    the geometric mean of base and twin, round by round. None without a twin, or when the
    twin lacks a time in a round where base has one: the case then stays on base alone,
    losing no round."""
    import numpy as np

    if twin is None or not bool(np.isfinite(twin[np.isfinite(base)]).all()):
        return None
    return np.sqrt(base) * np.sqrt(twin)  # not sqrt(base * twin): 1e-170 squared is 0
