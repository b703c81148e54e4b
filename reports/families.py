"""Chain families: did a PR change the per-node cost (slope) or the per-Run cost?

One finding per family of cases that differ only in depth, from the fits of
reports.stats.fit_family on both sides (the double ratio to the control between runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from epbench.core.model import Results
from epbench.reports import defaults, stats
from epbench.reports.comparison import (
    CaseRow,
    FamilyChange,
    Fit,
    FitChange,
    RoundMedians,
    Settings,
    Side,
)
from epbench.reports.findings import beyond_speed_limit, named
from epbench.reports.formats import format_share
from epbench.reports.summary import family_members

if TYPE_CHECKING:
    import numpy as np


def family_changes(
    base: Side,
    pr: Side,
    rows: Sequence[CaseRow],
    settings: Settings,
    medians: RoundMedians | None = None,
) -> list[FamilyChange]:
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
        out.append(FamilyChange(
            family=family, cases=tuple(names), depths=tuple(depths), threshold=t,
            base=_fit(b_fit), pr=_fit(p_fit), per_node=slope, per_run=icept,
            finding=_family_finding(slope, icept, t) if not moved else (
                "not judged: the ORT control's time per Run differs between the runs by more "
                f"than {defaults.CONTROL_SHIFT_LIMIT:.0%} on {named(moved)}, so a change in "
                "either cost cannot be told from the machine's speed"),
        ))
    return out


def _fit(fit: stats.FamilyFit) -> Fit:
    return Fit(slope_ns=fit.slope, intercept_ns=fit.intercept,
               slope_ci95=tuple(fit.slope_ci), intercept_ci95=tuple(fit.intercept_ci))


def _processes(doc: Results, names: Sequence[str]) -> list[np.ndarray]:
    return [stats.round_labels(doc.cases[n], "process") for n in names]


def _ratio(num: np.ndarray, den: np.ndarray, point_num: float, point_den: float,
           settings: Settings) -> FitChange:
    if point_den <= 0 or point_num <= 0:
        return FitChange(change=None, lo=None, hi=None)
    point, lo, hi = stats.ratio_with_ci(num, den, point_num / point_den, settings.confidence)
    return FitChange(change=stats.finite(point - 1.0), lo=stats.finite(lo - 1.0),
                     hi=stats.finite(hi - 1.0))


def _family_finding(slope: FitChange, icept: FitChange, t: float) -> str:
    parts = []
    for what, ch in (("per-node cost", slope), ("per-Run cost", icept)):
        lo, hi, change = ch.lo, ch.hi, ch.change
        if lo is None or hi is None or change is None:
            parts.append(f"{what}: too small to resolve")
        elif lo >= t:
            parts.append(f"{what} rose by {change:.1%}")
        elif hi <= -t:
            parts.append(f"{what} fell by {-change:.1%}")
        else:
            # Stated as a finding only when the whole interval is beyond the threshold.
            parts.append(f"{what}: no change resolved ({change:+.1%}, "
                         f"[{lo:+.1%}, {hi:+.1%}] against ±{format_share(t)})")
    return "; ".join(parts)
