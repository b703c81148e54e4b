"""The run summary: p50 per arm, ratio to the control with a CI, drift, chain-family fits.

`summarize` builds a frozen RunSummary that the text table, the run report and the HTML
page read; `epbench run` and `epbench summary` print it. Its JSON form
(`RunSummary.to_dict`) is stable: {"cases": {CASE: {"arms": {ARM: {"p50_ns",
"ratio_vs_ort", "ci95", "nodes_executed", "nodes_by_ep"}}, "verified", "status", ...}},
"families": {...}, "gate": {...}}. All numbers come from reports.stats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from epbench.cases.spec import CaseSpec
from epbench.core.errors import CaseError
from epbench.core.model import Results
from epbench.reports import defaults, stats
from epbench.reports.comparison import Gate, JsonValue

if TYPE_CHECKING:
    import numpy as np

CHAIN_KINDS = ("chain", "binary")


def family_of(spec: Mapping[str, object]) -> str | None:
    """The chain family of a case spec dict ("relu_w8", "relu_w8_dyn_b4", "add_w8"), else None.

    The rule lives in cases.spec.CaseSpec.family alone; a spec that does not read
    back (damaged or foreign) has no family rather than a guessed one.
    """

    try:
        return CaseSpec.from_dict(dict(spec)).family
    except CaseError:
        return None


def gate_summary(doc: Results) -> Gate:
    """Rounds that passed the idle gate vs unquiet ones, and the worst steal seen."""
    total = quiet = 0
    max_steal = 0.0
    waited = 0.0
    for case in doc.cases.values():
        for rnd in case.rounds:
            total += 1
            quiet += bool(rnd.quiet)
            # The gate's readings are free-form per core (harness.gate), not the model's.
            gate = rnd.gate or {}
            waited += float(gate.get("waited_s") or 0.0)
            for value in (gate.get("steal") or {}).values():
                max_steal = max(max_steal, float(value))
            for value in ((rnd.interference or {}).get("steal") or {}).values():
                max_steal = max(max_steal, float(value))
    processes = [p for case in doc.cases.values() for p in case.processes]
    cfg = doc.config.gate
    return Gate(
        policy=cfg.policy,
        threshold=cfg.threshold,
        rounds=total,
        quiet=quiet,
        unquiet=total - quiet,
        max_steal=max_steal,
        waited_s=waited,
        processes=len(processes),
        # Processes that got no pause budget: the run had stopped waiting (sustained load).
        processes_not_waiting=sum(p.gate_budget_s == 0 for p in processes),
        stops_waiting_after_rounds=cfg.extra.get("stops_waiting_after_rounds"),
    )


@dataclass(frozen=True)
class GateRound:
    """One round's gate readings (gate_rounds); a reading that was not taken is None."""

    case: str
    index: int
    idle_before: float | None  # the worst core's idle before the round
    idle_during: float | None  # ... and during it
    steal: float | None  # the most steal seen
    quiet: bool


def gate_rounds(doc: Results) -> list[GateRound]:
    """Every round's gate readings in run order (cases as the config listed them):
    the worst core's idle before the round and during it (a round too short to judge
    alone: over the window its meter reached back to), the most steal seen, and
    whether the round was quiet. A reading that was not taken is None."""
    cases = doc.cases
    listed = [n for n in doc.config.case_names or [] if n in cases]
    order = listed + [n for n in cases if n not in listed]
    out = []
    for name in order:
        for rnd in cases[name].rounds:
            gate = rnd.gate or {}
            during = rnd.interference or {}
            # A carried gate reading is the previous round's meter: not this round's.
            looked = (during,) if gate.get("carried") else (gate, during)
            steals = [float(v) for part in looked for v in (part.get("steal") or {}).values()]
            if during.get("own_steal") is not None:
                steals.append(float(during["own_steal"]))
            out.append(GateRound(
                case=name,
                index=rnd.index,
                # A carried reading is the previous round's meter, not a look before
                # this one.
                idle_before=(None if gate.get("carried") else
                             min((float(v) for v in (gate.get("idle") or {}).values()),
                                 default=None)),
                idle_during=min((float(v) for v in (during.get("idle") or {}).values()),
                                default=None),
                steal=max(steals, default=None),
                quiet=bool(rnd.quiet),
            ))
    return out


# What a case's control drift is (stats.control_drift), in the words every report quotes.
DRIFT_MEANING = "first round to last, Theil–Sen"


def worst_drift(drifts: Mapping[str, float | None]) -> tuple[str, float] | None:
    """The case whose ORT control drifted most, either way, and its drift (None if no case
    has one); ties go to the case named last, as `max` over (|drift|, name) gives."""
    known = [(abs(d), name, d) for name, d in drifts.items() if d is not None]
    if not known:
        return None
    _, name, drift = max(known)
    return name, drift


@dataclass(frozen=True)
class ArmSummary:
    """One arm on one case: p50 (ns per Run) and its ratio to the control, with an interval."""

    p50_ns: float | None
    ratio_vs_ort: float | None
    ci95: list[float | None]  # [lo, hi]; both None with too few rounds for an exact one
    nodes_executed: int | None
    nodes_by_ep: dict[str, int]


@dataclass(frozen=True)
class CaseSummary:
    """One case of the run: its arms, how it ended, its rounds and its control's drift."""

    arms: dict[str, ArmSummary]
    verified: bool
    status: str
    error: str | None
    rounds: int
    quiet_rounds: int
    control_drift: float | None


@dataclass(frozen=True)
class ArmFit:
    """One arm's fit over a chain family (stats.FamilyFit), None where not finite."""

    slope_ns: float | None
    slope_ci95: list[float | None]
    intercept_ns: float | None
    intercept_ci95: list[float | None]


@dataclass(frozen=True)
class FamilySummary:
    """A chain family's cases (by depth) and each arm's per-node and per-Run cost."""

    cases: list[str]
    depths: list[int]
    arms: dict[str, ArmFit]


@dataclass(frozen=True)
class RunSummary:
    """The summary of one results document."""

    control: str
    confidence: float
    cases: dict[str, CaseSummary]
    families: dict[str, FamilySummary]
    gate: Gate

    def to_dict(self) -> dict[str, JsonValue]:
        """The JSON form `epbench summary --format json` prints (keys sorted by the writer)."""
        return asdict(self)


def summarize(
    doc: Results,
    *,
    confidence: float = defaults.CONFIDENCE,
    resamples: int = defaults.RESAMPLES,  # the family fits' bootstrap
    seed: int = defaults.SEED,
) -> RunSummary:
    """The summary of one results document."""
    control = doc.control
    cases_out: dict[str, CaseSummary] = {}
    # Collect every (case, arm) ratio first so all of them go through one kernel per round count.
    jobs: list[tuple[str, str]] = []
    ratios = []
    medians: dict[str, dict[str, np.ndarray]] = {}
    for name, case in doc.cases.items():
        medians[name] = {arm: stats.round_medians(case, arm) for arm in case.arms}
        ctrl = medians[name].get(control)
        for arm in case.arms:
            if arm != control and ctrl is not None:
                jobs.append((name, arm))
                ratios.append(stats.log_ratios(medians[name][arm], ctrl))
    changes = stats.paired_changes(ratios, confidence=confidence)
    by_job = dict(zip(jobs, changes, strict=True))
    for name, case in doc.cases.items():
        import numpy as np

        arms_out: dict[str, ArmSummary] = {}
        for arm, info in case.arms.items():
            values = medians[name][arm]
            values = values[np.isfinite(values)]
            p50 = float(np.median(values)) if len(values) else math.nan
            if arm == control:
                ratio, ci = (1.0, [1.0, 1.0]) if len(values) else (None, [None, None])
            else:
                ch = by_job[(name, arm)]
                ratio, ci = stats.finite(ch.ratio), [stats.finite(ch.lo), stats.finite(ch.hi)]
                if None in ci:  # too few rounds for an exact interval: no half-interval
                    ci = [None, None]
            arms_out[arm] = ArmSummary(
                p50_ns=stats.finite(p50),
                ratio_vs_ort=ratio,
                ci95=ci,
                nodes_executed=info.nodes_executed,
                nodes_by_ep=dict(info.nodes_by_ep or {}),
            )
        quiet = stats.quiet_mask(case)
        ctrl_values = medians[name].get(control)
        cases_out[name] = CaseSummary(
            arms=arms_out,
            verified=case.verified,
            status=case.status,
            error=case.error,
            rounds=len(quiet),
            quiet_rounds=int(quiet.sum()),
            control_drift=(
                stats.finite(stats.control_drift(ctrl_values)) if ctrl_values is not None else None
            ),
        )
    return RunSummary(
        control=control,
        confidence=confidence,
        cases=cases_out,
        families=family_fits(doc, confidence=confidence, resamples=resamples, seed=seed),
        gate=gate_summary(doc),
    )


def family_members(doc: Results) -> dict[str, list[tuple[int, str]]]:
    """Chain families with at least two depths among the ok cases: family -> [(depth, case)]."""
    families: dict[str, list[tuple[int, str]]] = {}
    for name, case in doc.cases.items():
        family = family_of(case.spec)
        if family and case.ok:
            families.setdefault(family, []).append((int(case.spec["depth"]), name))
    return {
        f: sorted(members)
        for f, members in sorted(families.items())
        if len({d for d, _ in members}) >= 2
    }


def family_fits(
    doc: Results,
    *,
    confidence: float = defaults.CONFIDENCE,
    resamples: int = defaults.RESAMPLES,
    seed: int = defaults.SEED,
) -> dict[str, FamilySummary]:
    """Per chain family: per-node cost (slope) and per-Run cost (intercept) per arm, with CIs."""
    out: dict[str, FamilySummary] = {}
    for family, members in family_members(doc).items():
        cases = [doc.cases[name] for _, name in members]
        arms = sorted(set.intersection(*(set(c.arms) for c in cases)))
        if not arms:
            continue
        rounds = [{arm: stats.round_medians(c, arm) for arm in arms} for c in cases]
        fits = stats.fit_family(
            [d for d, _ in members], rounds, arms,
            confidence=confidence, resamples=resamples, seed=seed,
        )
        out[family] = FamilySummary(
            cases=[name for _, name in members],
            depths=[d for d, _ in members],
            arms={arm: _arm_fit(fit) for arm, fit in fits.items()},
        )
    return out


def _arm_fit(fit: stats.FamilyFit) -> ArmFit:
    return ArmFit(
        slope_ns=stats.finite(fit.slope),
        slope_ci95=[stats.finite(v) for v in fit.slope_ci],
        intercept_ns=stats.finite(fit.intercept),
        intercept_ci95=[stats.finite(v) for v in fit.intercept_ci],
    )
