"""`epbench validate`: the harness measures its own false-positive rate and power.

On this machine and within a time budget, the bundled engine runs against
itself in one interleaved run per case, as several arms that differ only in
the engine's test knobs:

- ``a`` and ``a2``: identical (A/A): any ⚠️/🔴 between them is a false positive;
- ``d1`` .. ``d10``: ``inject_delay_ns_per_run`` set to 1, 2, 3, 5, 10 % of the
  case's engine time per Run, measured first (the pilot): a verdict ⚠️/🔴 against
  ``a`` is a detection; the minimum detectable effect (MDE) of a case is the
  smallest level detected in >= 95 % of repeats;
- ``n5``: the same 5 % spread over the nodes (``inject_delay_ns_per_node``);
- ``c``: ``inject_api_calls_per_run`` = API_CALLS: the comparator's counter table
  must show exactly that many more ORT calls per Run, in every repeat.

Putting every arm in one run per case shares the worker start, the warm-up and
the in-run control between all comparisons, which is what makes enough repeats
fit a 10-minute budget on 2 cores. Every comparison is `reports.compare.compare`
itself, with the host's calibration profile when there is one (as `compare`
would judge a real PR). A last run with a fixed arm order (``ort``, ``a``,
``a2`` every round) shows the position bias that counterbalancing removes.

Writes validation.json (VALIDATION_SCHEMA) and validation.md (through the
reports' jinja2 environment).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epbench.core.errors import EpbenchError
from epbench.core.numbers import median
from epbench.core.results import atomic_write_text
from epbench.harness.arms import parse_arm
from epbench.harness.runner import RunConfig
from epbench.harness.runner import run as real_run
from epbench.reports import calibrate as cal
from epbench.reports import compare as cmp
from epbench.reports import stats
from epbench.reports.render import environment, to_json

if TYPE_CHECKING:
    from epbench.cases.spec import CaseSpec

VALIDATION_SCHEMA = "epbench.validation/1"
# Injected slowdowns, as fractions of the case's measured engine time per Run.
LEVELS = (0.01, 0.02, 0.03, 0.05, 0.10)
# The level also injected per node (inject_delay_ns_per_node), to check that path too.
PER_NODE_LEVEL = 0.05
# Extra harmless ORT API calls per Run on the counter arm.
API_CALLS = 5
# Verdicts that count as "flagged a slowdown": a false positive in A/A, a detection otherwise.
FLAGGED = frozenset({"regression", "alert"})
# A level is detectable when flagged in at least this share of repeats.
POWER_TARGET = 0.95
BASE_ARM = "a"
TWIN_ARM = "a2"
COUNTER_ARM = "c"
PER_NODE_ARM = "n5"
# Seconds kept back at the end for comparing and writing the report.
RESERVE_S = 5.0
# Rounds of the pilot that measures each case's engine time.
PILOT_ROUNDS = 4


def level_arm(level: float) -> str:
    """The arm key (and registration name) of an injected level: 0.05 -> d5."""
    return f"d{round(level * 100):d}"


@dataclass(frozen=True)
class Plan:
    """What validate runs, from its options; recorded in validation.json."""

    cases: tuple[CaseSpec, ...]
    budget_s: float = 600.0
    rounds: int = 20
    block_target_ms: float = 10.0
    max_repeats: int = 50
    seed: int = 0
    position_test: bool = True
    gate_policy: str = "wait"
    grids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.budget_s <= 0 or self.rounds < 5 or self.max_repeats < 1:
            raise EpbenchError("--budget must be > 0, --rounds >= 5 and --max-repeats >= 1; "
                               "e.g. --budget 600 --rounds 20")
        if not self.cases:
            raise EpbenchError("no cases to validate with: pass --grid NAME or --case NAME")


def arm_specs(engine_ns: float, n_nodes: int) -> list[str]:
    """The arm specs of one case: A/A twins, one arm per level, per-node, counters."""
    specs = [f"engine:name={BASE_ARM}", f"engine:name={TWIN_ARM}"]
    for level in LEVELS:
        delay = max(1, round(level * engine_ns))
        specs.append(f"engine:name={level_arm(level)},inject_delay_ns_per_run={delay}")
    per_node = max(1, round(PER_NODE_LEVEL * engine_ns / max(1, n_nodes)))
    specs.append(f"engine:name={PER_NODE_ARM},inject_delay_ns_per_node={per_node}")
    specs.append(f"engine:name={COUNTER_ARM},inject_api_calls_per_run={API_CALLS}")
    return specs


def wilson_interval(hits: int, n: int, z: float = 1.959964) -> list[float | None]:
    """95 % Wilson score interval of a proportion (sane at 0 and at n, unlike the normal one)."""
    if n == 0:
        return [None, None]
    p = hits / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return [max(0.0, centre - half), min(1.0, centre + half)]


def proportion(hits: int, n: int) -> dict[str, Any]:
    return {"hits": hits, "n": n, "rate": hits / n if n else None, "ci": wilson_interval(hits, n)}


def _finite_median(values: Sequence[float | None]) -> float | None:
    return median(v for v in values if v is not None and math.isfinite(v))


def engine_times(doc: Mapping[str, Any], arm: str) -> dict[str, float]:
    """Median ns per Run of ``arm`` per case that ran (the pilot's measurement)."""

    out = {}
    for name, case in doc.get("cases", {}).items():
        if case.get("status") != "ok":
            continue
        ns = _finite_median(list(stats.round_medians(case, arm)))
        if ns is not None and ns > 0:
            out[name] = ns
    return out


def counter_check(rows: Sequence[Mapping[str, Any]], case: str) -> tuple[bool, str]:
    """Did the counter table show exactly API_CALLS more ORT calls per Run, and nothing else?"""
    mine = [r for r in rows if r["case"] == case]
    calls = [r for r in mine if r["counter"] == "ort_api_calls"]
    others = [r["counter"] for r in mine if r["counter"] != "ort_api_calls"]
    if not calls:
        return False, "no ort_api_calls change in the counter table"
    base, pr = calls[0]["base"], calls[0]["pr"]
    if base is None or pr is None or pr - base != API_CALLS:
        return False, f"ort_api_calls/Run {base} -> {pr}, expected +{API_CALLS}"
    if others:
        return False, f"other counters changed too: {', '.join(others)}"
    return True, f"ort_api_calls/Run {base:g} -> {pr:g}"


def merge_docs(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One results document from per-case runs of the same arms (one repeat)."""
    merged = dict(docs[0])
    merged["cases"] = {}
    merged["interrupted"] = False
    for doc in docs:
        merged["cases"].update(doc.get("cases", {}))
        merged["interrupted"] = merged["interrupted"] or bool(doc.get("interrupted"))
    return merged


def validate(
    plan: Plan,
    *,
    settings: Any = None,
    profile_path: str | None = None,
    run: Callable[[Any], dict[str, Any]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_status: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run the validation within ``plan.budget_s`` and return the validation document.

    ``run`` is harness.runner.run unless a test injects a fake; ``clock`` paces
    the budget (a test injects a fake one).
    """

    if run is None:

        run = real_run
    settings = settings or cmp.Settings()
    start = clock()
    notes: list[str] = []
    base_config = RunConfig(
        cases=plan.cases, arms=(parse_arm(f"engine:name={BASE_ARM}"),), rounds=PILOT_ROUNDS,
        block_target_ms=plan.block_target_ms, seed=plan.seed, gate_policy=plan.gate_policy,
        out_dir=None, grids=plan.grids,
    )
    on_status(f"pilot: measuring the engine's time per Run on {len(plan.cases)} case(s)")
    pilot = run(base_config)
    engine_ns = engine_times(pilot, BASE_ARM)
    for name, case in pilot.get("cases", {}).items():
        if name not in engine_ns:
            notes.append(f"{name} left out: the engine did not run it ({case.get('error')})")
    specs = [c for c in plan.cases if c.name in engine_ns]
    if not specs:
        raise EpbenchError("the engine ran none of the cases in the pilot, so there is nothing "
                           "to validate with; check `epbench run --arm engine` on them first")
    nodes = {name: _nodes(pilot["cases"][name]) for name in engine_ns}
    arms_by_case = {c.name: tuple(parse_arm(s) for s in arm_specs(engine_ns[c.name],
                                                                  nodes[c.name]))
                    for c in specs}
    pilot_s = clock() - start

    def one_repeat(index: int) -> dict[str, Any]:
        docs = []
        for offset, spec in enumerate(specs):
            on_status(f"repeat {index + 1}: {spec.name}")
            docs.append(run(replace(
                base_config, cases=(spec,), arms=arms_by_case[spec.name], rounds=plan.rounds,
                seed=plan.seed + 1000 * (index + 1) + offset,
            )))
        return merge_docs(docs)

    repeats: list[dict[str, Any]] = []
    fixed_doc = None
    repeats_s = 0.0
    budget_end = plan.budget_s - RESERVE_S
    while len(repeats) < plan.max_repeats:
        elapsed = clock() - start
        if repeats:
            per_repeat = repeats_s / len(repeats)
            if elapsed + per_repeat > budget_end:
                break
        began = clock()
        doc = one_repeat(len(repeats))
        repeats_s += clock() - began
        repeats.append(doc)
        if doc["interrupted"]:
            notes.append("interrupted: the report covers the repeats finished before it")
            break
        if len(repeats) == 1 and plan.position_test:
            # Right after the first repeat, so the budget can never squeeze it out.
            on_status("position test: A/A in a fixed arm order")
            fixed_doc = run(replace(
                base_config, cases=tuple(specs),
                arms=(parse_arm(f"engine:name={BASE_ARM}"), parse_arm(f"engine:name={TWIN_ARM}")),
                rounds=plan.rounds, fixed_order=True, seed=plan.seed + 999,
            ))
    elapsed = clock() - start
    if elapsed > plan.budget_s:
        notes.append(f"over budget: {elapsed:.0f} s for a budget of {plan.budget_s:.0f} s "
                     "(one repeat took longer than the budget left); raise --budget or "
                     "validate fewer cases")
    on_status(f"comparing {len(repeats)} repeat(s)")
    host_key = (repeats[0].get("host") or {}).get("key")
    profile = cmp.load_profile_for(host_key, profile_path)
    result = summarize(repeats, fixed_doc, engine_ns, settings=settings, profile=profile)
    result.update({
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": repeats[0].get("host"),
        "floor": repeats[0].get("floor"),
        "plan": {
            "grids": list(plan.grids), "cases": [c.name for c in specs],
            "budget_s": plan.budget_s, "rounds": int(repeats[0]["config"]["rounds"]),
            "rounds_requested": plan.rounds, "block_target_ms": plan.block_target_ms,
            "repeats": len(repeats), "max_repeats": plan.max_repeats,
            "position_test": fixed_doc is not None, "gate_policy": plan.gate_policy,
            "levels": list(LEVELS), "per_node_level": PER_NODE_LEVEL, "api_calls": API_CALLS,
            "arms": {name: [a.spec for a in arms] for name, arms in arms_by_case.items()},
            "runs": 1 + len(repeats) * len(specs) + (fixed_doc is not None),
            "pilot_s": round(pilot_s, 1), "repeat_s": round(repeats_s / len(repeats), 1),
            "elapsed_s": round(elapsed, 1),
        },
        "profile": {"path": (profile or {}).get("path"), "used": profile is not None},
        "notes": notes + result.pop("notes"),
    })
    return result


def _nodes(case: Mapping[str, Any]) -> int:
    arm = (case.get("arms") or {}).get(BASE_ARM) or {}
    return int(arm.get("nodes_executed") or 1)


def summarize(
    repeats: Sequence[Mapping[str, Any]],
    fixed_doc: Mapping[str, Any] | None,
    engine_ns: Mapping[str, float],
    *,
    settings: Any,
    profile: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The validation statistics from the repeats' documents (no measuring here)."""

    names = [n for n in engine_ns if all(n in d.get("cases", {}) for d in repeats)]
    pr_arms = [TWIN_ARM] + [level_arm(v) for v in LEVELS] + [PER_NODE_ARM]
    verdicts: dict[str, dict[str, list[str]]] = {n: {a: [] for a in pr_arms} for n in names}
    changes: dict[str, dict[str, list[float | None]]] = {n: {a: [] for a in pr_arms}
                                                         for n in names}
    counters: dict[str, list[tuple[bool, str]]] = {n: [] for n in names}
    thresholds: dict[str, list[float]] = {n: [] for n in names}
    warnings: set[str] = set()
    for doc in repeats:
        base = cmp.Side("base", doc, BASE_ARM)
        for arm in pr_arms:
            comparison = cmp.compare(base, cmp.Side("pr", doc, arm), settings=settings,
                                     profile=profile)
            warnings.update(comparison.get("warnings", []))
            rows = {r["case"]: r for r in comparison["cases"]}
            for n in names:
                verdicts[n][arm].append(rows[n]["verdict"])
                changes[n][arm].append(rows[n]["change"])
                if arm == TWIN_ARM:
                    thresholds[n].append(rows[n]["threshold"])
        counter_rows = cmp.counter_changes(base, cmp.Side("pr", doc, COUNTER_ARM), names)
        for n in names:
            counters[n].append(counter_check(counter_rows, n))

    position = None
    if fixed_doc is not None:
        ran = [n for n in names if (fixed_doc.get("cases", {}).get(n) or {}).get("status") == "ok"]
        if ran:
            trimmed = [{**d, "cases": {n: d["cases"][n] for n in ran}} for d in repeats]
            fixed = {**fixed_doc, "cases": {n: fixed_doc["cases"][n] for n in ran}}
            position = cal.profile_from_runs(trimmed, fixed, BASE_ARM, TWIN_ARM,
                                             arm_spec="engine", seed=settings.seed)
    cases: dict[str, Any] = {}
    for n in names:
        aa = verdicts[n][TWIN_ARM]
        detection = {}
        for level in LEVELS:
            got = verdicts[n][level_arm(level)]
            detection[level_arm(level)] = {
                "level": level, **proportion(sum(v in FLAGGED for v in got), len(got)),
                "measured_change": _finite_median(changes[n][level_arm(level)]),
                # ❔ is not a detection: e.g. a would-be 🔴 from rounds that failed the gate.
                "inconclusive": sum(v == "inconclusive" for v in got),
                "verdicts": got,
            }
        mde = next((lvl for lvl in LEVELS
                    if (detection[level_arm(lvl)]["rate"] or 0.0) >= POWER_TARGET), None)
        per_node = verdicts[n][PER_NODE_ARM]
        exact = [ok for ok, _ in counters[n]]
        calibrated = (position or {}).get("cases", {}).get(n, {})
        pos = calibrated.get("position_bias")
        cases[n] = {
            "engine_ns": engine_ns[n],
            "threshold": _finite_median(thresholds[n]),
            "false_positives": {**proportion(sum(v in FLAGGED for v in aa), len(aa)),
                                "verdicts": aa, "changes": changes[n][TWIN_ARM]},
            "detection": detection,
            "mde": mde,
            # What the comparator saw at that level: the effect the injected delay really had.
            "mde_measured": detection[level_arm(mde)]["measured_change"] if mde else None,
            "per_node": {"level": PER_NODE_LEVEL,
                         **proportion(sum(v in FLAGGED for v in per_node), len(per_node)),
                         "measured_change": _finite_median(changes[n][PER_NODE_ARM])},
            "counters": {"exact": sum(exact), "n": len(exact), "all_exact": all(exact),
                         "details": sorted({why for _, why in counters[n]})},
            "position_bias": pos,
            # The A/A noise these repeats measured (as `calibrate` computes it): what a
            # profile from this run would set t from.
            "aa_noise": (calibrated.get("same-run") or {}).get("noise"),
        }
    return {
        "schema": VALIDATION_SCHEMA,
        "cases": cases,
        "summary": _grid_summary(cases, verdicts, names, len(repeats), position),
        "settings": {"floor": settings.floor, "k": settings.k, "fdr": settings.fdr,
                     "confidence": settings.confidence},
        "notes": sorted(warnings),
    }


def _grid_summary(cases: Mapping[str, Any], verdicts: Mapping[str, Any], names: Sequence[str],
                  n_repeats: int, position: Mapping[str, Any] | None) -> dict[str, Any]:
    fp_hits = sum(c["false_positives"]["hits"] for c in cases.values())
    fp_n = sum(c["false_positives"]["n"] for c in cases.values())
    # Family-wise: a repeat counts once if any case of the grid was flagged.
    any_fp = sum(any(verdicts[n][TWIN_ARM][r] in FLAGGED for n in names)
                 for r in range(n_repeats))
    detection = {}
    for level in LEVELS:
        key = level_arm(level)
        hits = sum(c["detection"][key]["hits"] for c in cases.values())
        total = sum(c["detection"][key]["n"] for c in cases.values())
        detection[key] = {"level": level, **proportion(hits, total),
                          "inconclusive": sum(c["detection"][key]["inconclusive"]
                                              for c in cases.values())}
    counters_n = sum(c["counters"]["n"] for c in cases.values())
    counters_exact = sum(c["counters"]["exact"] for c in cases.values())
    return {
        "repeats": n_repeats,
        "false_positive_rate": proportion(fp_hits, fp_n),
        "familywise_false_positive_rate": proportion(any_fp, n_repeats),
        "detection": detection,
        "mde": {n: cases[n]["mde"] for n in names},
        "position_bias": (position or {}).get("position_bias"),
        "counters": {"exact": counters_exact, "n": counters_n,
                     "all_exact": counters_exact == counters_n},
    }


def render_markdown(result: Mapping[str, Any]) -> str:
    """validation.md, through the reports' templates."""

    return environment().get_template("validation.md.j2").render(
        v=result, levels=[level_arm(v) for v in LEVELS], power=POWER_TARGET,
        flagged="⚠️/🔴",
    )


def write_outputs(result: Mapping[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """validation.json and validation.md into ``out_dir`` (atomic writes)."""

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EpbenchError(f"cannot create {str(out)!r}: {exc.strerror}; pass --out DIR "
                           "somewhere writable") from None
    json_path, md_path = out / "validation.json", out / "validation.md"
    atomic_write_text(json_path, to_json(result))
    atomic_write_text(md_path, render_markdown(result))
    return json_path, md_path
