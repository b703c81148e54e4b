"""Reports a validation: the document's plan record, validation.json and validation.md.

validation.md renders through the reports' jinja2 environment.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from epbench.core.results import atomic_write_text
from epbench.reports.comparison import JsonValue, Profile, Settings
from epbench.reports.formats import format_level
from epbench.reports.render import environment, to_json
from epbench.reports.verdicts import threshold_rule_text
from epbench.workflows.compare_commits import DEFAULT_TARGET_S_PER_CASE, REPORT_RESERVE_S
from epbench.workflows.validate_judge import CALIBRATION_TARGET, POWER_TARGET
from epbench.workflows.validate_plan import (
    API_CALLS,
    COMMITS,
    LEVELS,
    PER_NODE_LEVEL,
    Plan,
    commit_shares,
    level_arm,
    median_case,
    planned_repeat_s,
)
from epbench.workflows.validate_run import RUNS_DIR, Outcome, Pilot, make_dir, write_or_fail

# validation.md lists this many notes (validate's own come first); validation.json has all:
# on a drifting machine the comparator warns in every comparison of every repeat.
NOTES_SHOWN = 12


def levels_of(result: Mapping[str, JsonValue]) -> list[float]:
    """The levels a validation document was measured at (every schema records them)."""
    return list((result.get("plan") or {}).get("levels") or LEVELS)


def render_markdown(result: Mapping[str, JsonValue]) -> str:
    """validation.md, through the reports' templates."""

    levels = levels_of(result)
    recorded = result.get("settings") or {}
    # t's formula in the words every other output uses (verdicts.threshold_rule_text).
    rule = threshold_rule_text(Settings(**{key: recorded[key] for key in ("floor", "k")
                                           if key in recorded}))
    target = (result.get("plan") or {}).get("target_mde")  # schema 8 on
    return environment().get_template("validation.md.j2").render(
        v=result, levels=[level_arm(v) for v in levels], power=POWER_TARGET,
        threshold_rule=rule,
        calibration_target=CALIBRATION_TARGET,
        top_level=max(levels),
        flagged="⚠️/🔴", notes_shown=NOTES_SHOWN,
        deadline_s_per_case=DEFAULT_TARGET_S_PER_CASE, report_reserve_s=REPORT_RESERVE_S,
        target=format_level(target) if target else None,
    )


def write_outputs(result: Mapping[str, JsonValue], out_dir: str | Path) -> tuple[Path, Path]:
    """validation.json and validation.md into ``out_dir`` (atomic writes)."""

    out = make_dir(Path(out_dir))
    json_path, md_path = out / "validation.json", out / "validation.md"
    remedy = (f"rerun validate with another --out; the runs kept so far are in "
              f"{str(out / RUNS_DIR)!r}, and a rerun into this --out empties that folder")
    if result.get("stopped"):
        # On a full disk, the error that stopped validate (a run it could not keep) is
        # said again, or this one would hide it.
        remedy += f"; validate had stopped: {result['stopped']['message']}"
    for path, text in ((json_path, to_json(result)), (md_path, render_markdown(result))):
        write_or_fail(atomic_write_text, path, text, "write", remedy)
    return json_path, md_path


def document(result: dict[str, JsonValue], plan: Plan, pilot: Pilot, outcome: Outcome, *,
             runs: int, notes: list[str], profile: Profile | None,
             pilot_s: float, elapsed: float) -> dict[str, JsonValue]:
    """The validation document: ``result`` (summarize's statistics) with the plan as it
    ran, the profile used, the notes (validate's own first) and how it ended."""
    first = outcome.repeats[0].documents()[0]
    per_load = {k: sum(r.load == k for r in outcome.repeats) for k in plan.loads}
    stopped = outcome.stopped
    result.update({
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": first.host.to_dict(),
        # The harness's own cost per timed call, as the first run measured it.
        "overhead": first.overhead,
        "plan": {
            "grids": list(plan.grids), "cases": [c.name for c in pilot.specs],
            "budget_s": plan.budget_s,
            "rounds": first.config.rounds,
            "rounds_requested": plan.rounds, "processes": plan.processes,
            "sessions": plan.sessions, "aa_twin": plan.aa_twin, "own_builds": True,
            "block_target_ms": plan.block_target_ms, "loads": list(plan.loads),
            "repeats": per_load, "max_repeats": plan.max_repeats,
            "position_test": outcome.fixed_doc is not None, "gate_policy": plan.gate_policy,
            "gate_max_wait_s": plan.gate_max_wait_s,
            "levels": list(plan.levels), "per_node_level": PER_NODE_LEVEL, "api_calls": API_CALLS,
            "arms": {name: [a.spec for a in arms] for name, arms in pilot.same_arms.items()},
            "pr_arms": {name: [a.spec for a in arms] for name, arms in pilot.pr_arms.items()},
            "paths": list(plan.paths),
            "commit_heads": pilot.heads,
            "commit_median_case": median_case(pilot.kept_ns),
            "commit_shares": commit_shares(pilot.kept_ns),
            "commit_instructions": plan.commit_instructions,
            # Every command's --target-mde, and what a repeat was planned on with it.
            "target_mde": plan.target_mde,
            "planned_repeat_s": planned_repeat_s(plan, len(pilot.specs)),
            "runs": runs, "pilot_s": round(pilot_s, 1),
            "repeat_s": round(statistics.fmean(outcome.repeat_times), 1),
            "elapsed_s": round(elapsed, 1),
        },
        "profile": {"path": (profile or {}).get("path"), "used": profile is not None,
                    # The compare-commits path is judged without one only (summarize).
                    "judged": ["without", "with"] if profile is not None and any(
                        p != COMMITS for p in plan.paths) else ["without"]},
        "notes": notes + result.pop("notes"),
        # A Ctrl-C ended it: the report covers whole repeats, and the command exits 130.
        "interrupted": outcome.interrupted,
        # An error ended it after some repeats: the report covers those, and the command
        # then fails with this message and its exit code.
        "stopped": None if stopped is None else {"message": stopped.message,
                                                 "exit_code": stopped.exit_code},
    })
    return result
