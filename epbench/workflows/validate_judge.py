"""Judges a validation's repeats: false positives, detection and MDE per path and load.

Every comparison is `reports.compare.compare` itself; nothing here measures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from epbench.core.model import Results
from epbench.core.numbers import median
from epbench.reports import calibrate as cal
from epbench.reports import compare as cmp
from epbench.reports import defaults as verdict_defaults
from epbench.reports.comparison import CounterChange, JsonValue, Profile
from epbench.reports.findings import (
    DRIFT_CANCELS,
    DRIFT_MAY_NOT_CANCEL,
    TARGET_MISSED,
    beyond_speed_limit,
    speed_allowance,
    target_misses,
)
from epbench.reports.summary import DRIFT_MEANING
from epbench.workflows.validate_plan import (
    API_CALLS,
    BASE_ARM,
    COMMITS,
    COUNTER_ARM,
    LEVELS,
    PATHS,
    PER_NODE_ARM,
    PER_NODE_LEVEL,
    SAME_PROCESS,
    TWIN_ARM,
    commit_head_arm,
    level_arm,
)
from epbench.workflows.validate_run import Repeat, finite_median

# 2: results per (path, load, profile); compare-commits' replication settings.
# 3: the compare-commits path (the whole command, re-runs included), plan.paths.
# 4: plan.levels any set of whole percents (--levels), where it was always LEVELS.
# 5: plan.own_builds: every arm but the base loads its own copy of the library (OwnBuilds).
# 6: stopped: the error that ended the validation after some repeats, else null.
# 7: results' calibration: per level, the (case, repeat) pairs whose stated detectable
#    change was at most it, and how many of those were flagged.
# 8: plan.target_mde (--target-mde, else null) and plan.planned_repeat_s; settings.target_mde;
#    results' case_detection (per level: how many cases reached POWER_TARGET, whether all
#    did, the case flagged least often, the range of the cases' measured changes);
#    commands' per_comparison (per A/A and level, its commands' seconds). Calibration
#    compares a pair's stated change with the shift its case measured at the level (the
#    detection's measured_change), not the nominal level; a case's detection carries each
#    repeat's stated change (`detectable`).
VALIDATION_SCHEMA = "epbench.validation/8"


# Verdicts that count as "flagged a slowdown": a false positive in A/A, a detection otherwise.
FLAGGED = frozenset({"regression", "alert"})
# A level is detectable when flagged in at least this share of repeats.
POWER_TARGET = 0.95
# A comparison states what it could catch with 95 % probability (reports' detectable
# change); the statement holds at a level when the cases stated to catch it were
# flagged at it in at least this share of repeats.
CALIBRATION_TARGET = 0.90


def wilson_interval(hits: int, n: int, z: float = 1.959964) -> list[float | None]:
    """95 % Wilson score interval of a proportion (sane at 0 and at n, unlike the normal one)."""
    if n == 0:
        return [None, None]
    p = hits / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return [max(0.0, centre - half), min(1.0, centre + half)]


class Proportion(TypedDict):
    """A share of the validation document: ``hits`` of ``n``, and its Wilson interval."""

    hits: int
    n: int
    rate: float | None
    ci: list[float | None]


def proportion(hits: int, n: int) -> Proportion:
    return {"hits": hits, "n": n, "rate": hits / n if n else None, "ci": wilson_interval(hits, n)}



def counter_check(rows: Sequence[CounterChange], case: str) -> tuple[bool, str]:
    """Did the counter table show exactly API_CALLS more ORT calls per Run, and nothing else?"""
    mine = [r for r in rows if r.case == case]
    calls = [r for r in mine if r.counter == "ort_api_calls"]
    others = [r.counter for r in mine if r.counter != "ort_api_calls"]
    if not calls:
        return False, "no ort_api_calls change in the counter table"
    base, pr = calls[0].base, calls[0].pr
    if base is None or pr is None or pr - base != API_CALLS:
        return False, f"ort_api_calls/Run {base} -> {pr}, expected +{API_CALLS}"
    if others:
        return False, f"other counters changed too: {', '.join(others)}"
    return True, f"ort_api_calls/Run {base:g} -> {pr:g}"


def comparisons(rep: Repeat, path: str,
                levels: Sequence[float] = LEVELS) -> list[tuple[str, cmp.Side, cmp.Side]]:
    """What one repeat compares on one path: (what, base side, PR side).

    ``what`` is "aa", a level's arm key, or the per-node arm. Same-process: arms of
    one run. Separate runs: the A/A pair is two runs of ``a``; a level is the plain
    base run against the PR run's delayed arm (the double ratio). compare-commits: each
    command's ``a`` against its head arm, re-runs merged.
    """
    if path == COMMITS:
        out = []
        for what, results in rep.commits.items():
            head = commit_head_arm(what)
            out.append((what, cmp.Side("base", results, BASE_ARM), cmp.Side("pr", results, head)))
        return out
    if path == SAME_PROCESS:
        doc = _ran(rep.same_process, "same-process")
        base = cmp.Side("base", doc, BASE_ARM)
        out = [("aa", base, cmp.Side("pr", doc, TWIN_ARM))]
        out += [(level_arm(v), base, cmp.Side("pr", doc, level_arm(v))) for v in levels]
        return [*out, (PER_NODE_ARM, base, cmp.Side("pr", doc, PER_NODE_ARM))]
    base = cmp.Side("base", _ran(rep.base, "base"), BASE_ARM)
    again = _ran(rep.base_again, "second base")
    pr = _ran(rep.pr, "PR")
    out = [("aa", base, cmp.Side("pr", again, BASE_ARM))]
    return out + [(level_arm(v), base, cmp.Side("pr", pr, level_arm(v))) for v in levels]


def _ran(results: Results | None, what: str) -> Results:
    """A repeat's run on a path it took (the caller asks only for those)."""
    if results is None:
        raise ValueError(f"the repeat has no {what} run")
    return results


def summarize(
    repeats: Sequence[Repeat],
    fixed_doc: Results | None,
    engine_ns: Mapping[str, float],
    *,
    settings: cmp.Settings,
    profile: Profile | None,
    loads: Sequence[str],
    levels: Sequence[float] = LEVELS,
) -> dict[str, JsonValue]:
    """The validation statistics from the repeats' runs (no measuring here): the
    validation document (validation.json) but for what `validate_report.document` adds."""

    names = [n for n in engine_ns
             if all(n in d.cases for r in repeats for d in r.documents())]
    warnings: set[str] = set()
    judged = [("without", None)] + ([("with", profile)] if profile is not None else [])
    results = []
    ran = [p for p in PATHS if any(_has_path(r, p) for r in repeats)]
    for path in ran:
        for load in loads:
            mine = [r for r in repeats if r.load == load]
            # The compare-commits path's re-runs were chosen without a profile: judged with
            # one, its rows would be of a command that never ran.
            for label, prof in judged[:1] if path == COMMITS else judged:
                results.append(_judge_path(mine, path, load, label, prof, names, engine_ns,
                                           settings, warnings, levels))
    counters: dict[str, list[tuple[bool, str]]] = {n: [] for n in names}
    for rep in repeats:
        doc = rep.same_process
        if doc is None:
            continue
        rows = cmp.counter_changes(cmp.Side("base", doc, BASE_ARM),
                                   cmp.Side("pr", doc, COUNTER_ARM), names)
        for n in names:
            counters[n].append(counter_check(rows, n))
    position = None
    unloaded = [r.same_process for r in repeats
                if r.load == "none" and r.same_process is not None]
    if fixed_doc is not None and unloaded:
        ran = [n for n in names if (c := fixed_doc.cases.get(n)) is not None and c.ok]
        if ran:
            trimmed = [d.replaced(cases={n: d.cases[n] for n in ran}) for d in unloaded]
            fixed = fixed_doc.replaced(cases={n: fixed_doc.cases[n] for n in ran})
            position = cal.profile_from_runs(trimmed, fixed, BASE_ARM, TWIN_ARM,
                                             arm_spec="engine", seed=settings.seed)
    cases: dict[str, dict[str, JsonValue]] = {}
    for n in names:
        exact = [ok for ok, _ in counters[n]]
        calibrated = (position or {}).get("cases", {}).get(n, {})
        cases[n] = {
            "engine_ns": engine_ns[n],
            "counters": {"exact": sum(exact), "n": len(exact), "all_exact": all(exact),
                         "details": sorted({why for _, why in counters[n]})},
            "position_bias": calibrated.get("position_bias"),
            # The unloaded same-process A/A noise (as `calibrate` computes it): what a
            # profile from this run would set t from.
            "aa_noise": (calibrated.get("same-run") or {}).get("noise"),
        }
    counters_n = sum(c["counters"]["n"] for c in cases.values())
    counters_exact = sum(c["counters"]["exact"] for c in cases.values())
    if not counters_n:  # the same-process path did not run: nothing was checked
        for c in cases.values():
            c["counters"]["all_exact"] = None
    return {
        "schema": VALIDATION_SCHEMA,
        "results": results,
        "cases": cases,
        "counters": {"exact": counters_exact, "n": counters_n,
                     "all_exact": counters_exact == counters_n if counters_n else None},
        "position_bias": (position or {}).get("position_bias"),
        "settings": {"floor": settings.floor, "k": settings.k, "fdr": settings.fdr,
                     "confidence": settings.confidence, "target_mde": settings.target_mde},
        "notes": sorted(warnings),
    }


def _has_path(rep: Repeat, path: str) -> bool:
    if path == COMMITS:
        return bool(rep.commits)
    return (rep.same_process if path == SAME_PROCESS else rep.base) is not None


@dataclass
class _Seen:
    """What the comparisons of one (path, load, profile) said, per case and comparison
    ("aa", a level's arm key, the per-node arm)."""

    verdicts: dict[str, dict[str, list[str]]]
    changes: dict[str, dict[str, list[float | None]]]
    thresholds: dict[str, list[float]]  # of the A/A comparisons
    detectable: dict[str, dict[str, list[float | None]]]  # stated, per case and comparison
    sources: dict[str, set[str]]  # where those thresholds came from
    # (repeat, case) pairs whose control drift was measured, and the drifts beyond the
    # threshold seen in each: a repeat's comparisons share its runs (on the
    # compare-commits path each has its own, whose drifts are pooled per case-repeat),
    # so counting comparisons would count one run's drift many times.
    pairs: set[tuple[int, str]] = field(default_factory=set)
    drifted: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    judged: int = 0  # case comparisons
    moved: int = 0  # ... of those, whose runs ran at different speeds
    # With --target-mde: per case, the comparisons that left it short of the target, and
    # per reason (findings.target_misses), how many comparisons gave it.
    short: dict[str, int] = field(default_factory=dict)
    short_why: dict[str, int] = field(default_factory=dict)


def _judge_path(repeats: Sequence[Repeat], path: str, load: str, label: str,
                profile: Profile | None, names: Sequence[str],
                engine_ns: Mapping[str, float], settings: cmp.Settings,
                warnings: set[str], levels: Sequence[float] = LEVELS) -> dict[str, JsonValue]:
    """False positives, detection and MDE of one (path, load, profile) over its repeats."""
    prefix = f"{path}, {load} load, {label} profile: "
    seen = _compare_repeats(repeats, path, profile, names, settings, warnings, prefix, levels)
    _note_speed_changes(seen, prefix, warnings)
    _note_target(seen, prefix, settings.target_mde, warnings, rerun=path == COMMITS)
    cases = {n: _case_result(seen, n, engine_ns[n], levels) for n in names}
    return _path_result(repeats, path, load, label, names, seen, cases, levels)


def _compare_repeats(repeats: Sequence[Repeat], path: str, profile: Profile | None,
                     names: Sequence[str], settings: cmp.Settings, warnings: set[str], prefix: str,
                     levels: Sequence[float]) -> _Seen:
    """Every comparison of every repeat on ``path``, judged; the comparator's own warnings
    into ``warnings`` but for the drift and speed ones, which `_note_speed_changes` sums."""
    whats = [what for what, _, _ in comparisons(repeats[0], path, levels)] if repeats else []
    seen = _Seen(verdicts={n: {w: [] for w in whats} for n in names},
                 changes={n: {w: [] for w in whats} for n in names},
                 detectable={n: {w: [] for w in whats} for n in names},
                 thresholds={n: [] for n in names}, sources={n: set() for n in names})
    verdicts = seen.verdicts
    for index, rep in enumerate(repeats):
        for what, base, pr in comparisons(rep, path, levels):
            # A command's ❔ re-runs state what the pass that re-ran them did, as it did.
            kept = rep.commits_kept.get(what) if path == COMMITS else None
            comparison = cmp.compare(base, pr, settings=settings, profile=profile, kept=kept)
            # The control's drift and the runs' change of speed are summed up below, once
            # for the path: one warning per comparison, each naming other cases, made most
            # of a drifting VM's report.
            # So are the cases short of --target-mde: each comparison names its own, with
            # sizes that rarely repeat, and 21 repeats' worth pushed every other note out.
            said = {cmp.drift_warning(comparison.cases), cmp.speed_warning(comparison.cases)}
            warnings.update(prefix + w for w in comparison.warnings
                            if w not in said and TARGET_MISSED not in w)
            shown = [r for r in comparison.cases if r.case in verdicts]
            if settings.target_mde is not None:
                for case, why in target_misses(shown, settings.target_mde).items():
                    seen.short[case] = seen.short.get(case, 0) + 1
                    seen.short_why[why] = seen.short_why.get(why, 0) + 1
            seen.judged += len(shown)
            seen.moved += sum(beyond_speed_limit(r.control_shift)
                              and r.verdict not in ("failed", "not_comparable")
                              for r in shown)
            for r in comparison.cases:
                if r.control_drift is None or r.case not in verdicts:
                    continue  # a failed case, too few rounds to tell a drift, or not shown
                seen.pairs.add((index, r.case))
                if r.drift_exceeds_threshold:
                    seen.drifted.setdefault((index, r.case), []).append(r.control_drift)
            rows = {r.case: r for r in comparison.cases}
            for n in names:
                row = rows.get(n)
                verdicts[n][what].append(row.verdict if row else "failed")
                seen.changes[n][what].append(row.change if row else None)
                seen.detectable[n][what].append(row.detectable if row else None)
                if what == "aa" and row:
                    seen.thresholds[n].append(row.threshold)
                    seen.sources[n].add(row.noise_source)
    return seen


def _note_target(seen: _Seen, prefix: str, target: float | None, warnings: set[str], *,
                 rerun: bool) -> None:
    """One note for the path: how many case comparisons ended short of --target-mde, why
    (findings.target_misses' reasons; with ``rerun``, compare-commits' re-runs, too few
    processes means their budget ran out), and each such case with its count."""
    if target is None or not seen.short:
        return
    words = {"processes": "budget" if rerun else "processes"}
    why = ", ".join(f"{words.get(reason, reason)} {count}"
                    for reason, count in sorted(seen.short_why.items()))
    cases = ", ".join(f"{name} {count}" for name, count in sorted(seen.short.items()))
    warnings.add(f"{prefix}{sum(seen.short.values())} of {seen.judged} case comparisons ended "
                 f"{TARGET_MISSED} detectable change of {target:.1%} (by reason: {why}; by "
                 f"case: {cases})")


def _note_speed_changes(seen: _Seen, prefix: str, warnings: set[str]) -> None:
    """One note each, for the path, of the control's drifts and of the runs' changes of
    speed that its comparisons saw."""
    if seen.drifted:
        drifts = [d for ds in seen.drifted.values() for d in ds]
        lo, hi = f"{min(drifts):+.1%}", f"{max(drifts):+.1%}"
        spread = f"a drift of {lo}" if lo == hi else f"drifts between {lo} and {hi}"
        warnings.add(
            f"{prefix}the ORT control drifted ({DRIFT_MEANING}) by more than "
            f"the case's threshold in {len(seen.drifted)} of {len(seen.pairs)} case-repeats (a "
            f"case's runs in one repeat; {spread}): the machine changed speed during the runs. "
            f"{DRIFT_CANCELS}, but {DRIFT_MAY_NOT_CANCEL}; validate on a quieter "
            "machine to be sure")
    if seen.moved:
        warnings.add(
            f"{prefix}the two runs' ORT controls took more than "
            f"{verdict_defaults.CONTROL_SHIFT_LIMIT:.0%} longer a Run in one than in the other in "
            f"{seen.moved} of {seen.judged} case comparisons: the machine changed speed between "
            "runs, so those were ❔ unless their interval cleared the threshold by more than "
            "the allowance their shift gave (`compare`'s rule for two runs: "
            f"{speed_allowance(0.1):.1%} at a control 10% longer, "
            f"{speed_allowance(0.5):.1%} at 50%)")


def _case_result(seen: _Seen, n: str, engine_ns: float,
                 levels: Sequence[float]) -> dict[str, JsonValue]:
    """One case's false positives, detection per level, MDE and per-node detection."""
    verdicts, changes = seen.verdicts[n], seen.changes[n]
    aa = verdicts["aa"]
    detection: dict[str, JsonValue] = {}
    for level in levels:
        got = verdicts[level_arm(level)]
        detection[level_arm(level)] = {
            "level": level, **proportion(sum(v in FLAGGED for v in got), len(got)),
            "measured_change": finite_median(changes[level_arm(level)]),
            # ❔ is not a detection: e.g. an interval that straddles the threshold.
            "inconclusive": sum(v == "inconclusive" for v in got),
            "verdicts": got,
            # Per repeat, the change it stated it could catch and the one it measured
            # (calibration).
            "detectable": seen.detectable[n][level_arm(level)],
            "changes": changes[level_arm(level)],
        }
    mde = next((lvl for lvl in levels if at_power(detection[level_arm(lvl)]["rate"])), None)
    case: dict[str, JsonValue] = {
        "engine_ns": engine_ns,
        "threshold": finite_median(seen.thresholds[n]),
        "noise_sources": sorted(seen.sources[n]),
        "false_positives": {**proportion(sum(v in FLAGGED for v in aa), len(aa)),
                            "verdicts": aa, "changes": changes["aa"]},
        "detection": detection,
        "mde": mde,
        # What the comparator saw at that level: the effect the injected delay really had.
        "mde_measured": detection[level_arm(mde)]["measured_change"] if mde else None,
    }
    if PER_NODE_ARM in verdicts:
        got = verdicts[PER_NODE_ARM]
        case["per_node"] = {"level": PER_NODE_LEVEL,
                            **proportion(sum(v in FLAGGED for v in got), len(got)),
                            "measured_change": finite_median(changes[PER_NODE_ARM])}
    return case


def _path_result(repeats: Sequence[Repeat], path: str, load: str, label: str,
                 names: Sequence[str], seen: _Seen, cases: dict[str, dict[str, JsonValue]],
                 levels: Sequence[float]) -> dict[str, JsonValue]:
    """The path's totals over its cases, and the cases."""
    fp_hits = sum(c["false_positives"]["hits"] for c in cases.values())
    fp_n = sum(c["false_positives"]["n"] for c in cases.values())
    # Family-wise: a repeat counts once if any case of the grid was flagged.
    any_fp = sum(any(seen.verdicts[n]["aa"][r] in FLAGGED for n in names)
                 for r in range(len(repeats)))
    detection: dict[str, JsonValue] = {}
    for level in levels:
        key = level_arm(level)
        hits = sum(c["detection"][key]["hits"] for c in cases.values())
        total = sum(c["detection"][key]["n"] for c in cases.values())
        detection[key] = {"level": level, **proportion(hits, total),
                          "inconclusive": sum(c["detection"][key]["inconclusive"]
                                              for c in cases.values())}
    mdes = [cases[n]["mde"] for n in names]
    known = sorted(m for m in mdes if m is not None)
    return {
        "calibration": calibration(cases, levels),
        "path": path, "load": load, "profile": label,
        "repeats": len(repeats),
        "false_positive_rate": proportion(fp_hits, fp_n),
        "familywise_false_positive_rate": proportion(any_fp, len(repeats)),
        "detection": detection,
        "mde": {n: cases[n]["mde"] for n in names},
        # The median case's MDE, None (above the top level) when half the cases or more saw
        # no level.
        "median_mde": (known[(len(mdes) - 1) // 2] if len(known) > (len(mdes) - 1) // 2
                       else None) if mdes else None,
        "case_detection": {level_arm(level): case_detection(cases, level) for level in levels},
        "cases": cases,
        **({"commands": _commands(repeats, names)} if path == COMMITS else {}),
    }


def calibration(cases: Mapping[str, Mapping[str, JsonValue]],
                levels: Sequence[float]) -> dict[str, dict[str, object]]:
    """Does each comparison's "could catch" hold? Per level: of the (case, repeat) pairs
    whose stated detectable change was at most the shift the case measured there, how
    many were flagged (`holds`: at least CALIBRATION_TARGET of them; None when no pair
    stated it). `cases`: a path's per-case results (`_case_result`, or a
    validation.json's `results[i]["cases"]` from epbench.validation/8 on; older files,
    without each repeat's statement and change, state nothing here).

    The shift is measured, not the level: the delay is a share of the median case's
    engine time, and the Python loop's time around it dilutes it further (+1.3 to +1.8 %
    at a nominal 2 % on compare-commits, 2026-12-07), so a case stating 1.9 % at a true
    +1.5 % was counted against a statement it never made. A pair's shift is the median
    of its case's *other* repeats' changes (`other_repeats_shift`): its own change is its
    estimate, high exactly when it is flagged, and a median that includes it made the
    check pass whatever the statement with one repeat, and nearly so with two.
    """
    table = {}
    for level in levels:
        key = level_arm(level)
        stated = []
        for case in cases.values():
            seen = _as_dict(_as_dict(case.get("detection")).get(key))
            verdicts = _as_list(seen.get("verdicts"))
            sizes = _as_list(seen.get("detectable"))
            changes = _as_list(seen.get("changes"))
            if not len(verdicts) == len(sizes) == len(changes):
                continue  # an older file: no statement per repeat
            stated += [verdict in FLAGGED
                       for verdict, size, shift in zip(verdicts, sizes,
                                                       other_repeats_shift(changes), strict=True)
                       if shift is not None and isinstance(size, float | int) and size <= shift]
        share = proportion(sum(stated), len(stated))
        table[key] = {"level": level, **share,
                      "holds": share["rate"] >= CALIBRATION_TARGET if stated else None}
    return table


def at_power(rate: float | None) -> bool:
    """Whether a detection rate reaches POWER_TARGET (None: nothing was judged)."""
    return rate is not None and rate >= POWER_TARGET


def case_detection(cases: Mapping[str, Mapping[str, JsonValue]],
                   level: float) -> dict[str, JsonValue]:
    """At one level, whether every case was flagged in >= POWER_TARGET of its repeats: how
    many were (``at_power`` of ``cases``, ``all_at_power``), the case flagged least often
    (ties by name) with its rate, hits and repeats (None when no case was judged), and the
    lowest and highest of the cases' measured changes. One delay serves every case of a
    run, so a case's real slowdown is its share of the level (`commit_shares`), measured:
    a level's row is evidence for the changes in that range, not for the nominal level."""
    key = level_arm(level)
    judged = {n: c["detection"][key] for n, c in cases.items()
              if c["detection"][key]["rate"] is not None}
    lowest = min(judged, key=lambda n: (judged[n]["rate"], n)) if judged else None
    low = judged.get(lowest) or {}
    measured = [c["detection"][key].get("measured_change") for c in cases.values()]
    finite = [m for m in measured if m is not None and math.isfinite(m)]
    reached = sum(at_power(d["rate"]) for d in judged.values())
    return {"level": level, "cases": len(cases), "at_power": reached,
            "all_at_power": bool(cases) and reached == len(cases),
            "lowest_case": lowest, "lowest_rate": low.get("rate"),
            "lowest_hits": low.get("hits"), "lowest_n": low.get("n"),
            "measured_low": min(finite, default=None), "measured_high": max(finite, default=None)}


def command_seconds(took: Sequence[float]) -> dict[str, JsonValue]:
    """How many commands took ``took`` seconds, the median and the longest (None if none)."""
    return {"n": len(took), "median_s": median(took), "max_s": max(took, default=None)}


def other_repeats_shift(changes: Sequence[JsonValue]) -> list[float | None]:
    """Per repeat, the median of the finite changes the case measured in its other repeats
    (None when it has no other): the shift a repeat's statement is held to."""
    finite = [c if isinstance(c, float | int) and math.isfinite(c) else None for c in changes]
    return [finite_median(finite[:i] + finite[i + 1:]) for i in range(len(finite))]


def _as_dict(value: object) -> Mapping[str, JsonValue]:
    return value if isinstance(value, dict) else {}


def _as_list(value: object) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def _commands(repeats: Sequence[Repeat], names: Sequence[str]) -> dict[str, JsonValue]:
    """What the compare-commits commands took: seconds each, in all and per comparison (the
    A/A, each level), and the re-runs and rounds their cases ended with (a case's
    ``reruns`` counts the re-runs that added rounds)."""
    took = [s for r in repeats for s in r.commits_s.values()]
    ended = [r.commits[what].cases[n] for r in repeats for what in r.commits for n in names]
    whats = list(dict.fromkeys(what for r in repeats for what in r.commits_s))
    return {**command_seconds(took),
            "per_comparison": {what: command_seconds([r.commits_s[what] for r in repeats
                                                      if what in r.commits_s])
                               for what in whats},
            "case_reruns": sum(c.reruns for c in ended),
            "rerun_cases": sum(bool(c.reruns) for c in ended), "case_runs": len(ended),
            "median_rounds": median(len(c.rounds) for c in ended)}
