"""Rendering: the PR comment (markdown) and the terminal text, from one Comparison.

Templates live in reports/templates/*.j2; this module only supplies the
environment and the number formats, so wording changes are template diffs. One
exception: the sentences about the base commit's history (base_history_lines) are
built here once, for the markdown, terminal and HTML templates alike.

Every string the PR comment takes from a comparison (a case name, a reason, a
warning, a host value: the pull request's code may have written any of them) goes
through `inert`, the template filter of the same name, and nothing else: a number
goes through a number format.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from epbench.reports import defaults, stats
from epbench.reports.comparison import (
    VERDICTS,
    CaseRow,
    Comparison,
    Gate,
    JsonValue,
    Profile,
    json_text,
)
from epbench.reports.findings import beyond_speed_limit, detectable_span, noise_used, widened_by
from epbench.reports.formats import format_share
from epbench.reports.sticky import STICKY_MARKER
from epbench.reports.summary import DRIFT_MEANING, RunSummary, worst_drift
from epbench.reports.verdicts import alert_rule_text, threshold_rule_text

if TYPE_CHECKING:
    import jinja2

# A JSON document other than a comparison or a run summary (a profile, a validation).
Document = Mapping[str, JsonValue]


def sticky_marker() -> str:
    """The hidden line that lets the GitHub client find and update its one comment."""

    return STICKY_MARKER


def format_ns(ns: float | None) -> str:
    """ns per Run in the unit that keeps 3 significant digits: 812 ns, 12.3 µs, 4.56 ms."""
    if ns is None or not math.isfinite(ns):
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{_sig3(ns / scale)} {unit}"
    return f"{_sig3(ns)} ns"


def _sig3(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_pct(change: float | None, digits: int = 1) -> str:
    """A fractional change as a signed percentage: +5.2%, -0.3%."""
    if change is None or not math.isfinite(change):
        return "-"
    value = change * 100
    if round(value, digits) == 0:
        value = 0.0  # no "-0.0%"
    return f"{value:+.{digits}f}%"


def format_detectable(value: float | None) -> str:
    """A case's detectable change as the table shows it: ≥ 2.3%."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"≥ {format_share(value)}"


def detectable_sentence(comparison: Comparison) -> str:
    """The grid's detectable changes in one sentence, median and worst ("" when no case
    has one): numbers only, whatever file the comparison came from."""
    span = detectable_span([r.detectable for r in comparison.cases])
    if span is None:
        return ""
    mid, worst, n = span
    return (f"Could catch a slowdown of ≥ {format_share(mid)} in the median case and "
            f"≥ {format_share(worst)} in the worst ({n} case(s) judged, "
            f"{defaults.DETECT_POWER:.0%} probability each).")


def method_context(comparison: Comparison) -> dict[str, object]:
    """What templates/_method.j2 says of the method that judged a comparison: numbers and
    fixed words only."""
    settings = comparison.settings
    twins = comparison.twin
    sds = [t.unmodelled_sd for t in twins if t.unmodelled_sd is not None]
    # compare() adds the mean of the sides' tau^2 (run_noise.twin_noise).
    tau = math.sqrt(sum(sd * sd for sd in sds) / len(sds)) if sds else None
    between = comparison.between_runs
    return {
        "threshold_rule": threshold_rule_text(settings), "fdr": settings.fdr,
        "noise_from": noise_used(comparison.profile is not None, bool(twins), settings,
                                 shared=bool(twins) and all(t.shared_library for t in twins)),
        "alert": alert_rule_text(settings),
        # BH ran over the rows with a p-value; ❌ and ➖ rows had none.
        "tested": sum(r.verdict not in ("failed", "not_comparable") for r in comparison.cases),
        "confidence_pct": confidence_pct(comparison),
        "same_run": comparison.same_run,
        "replicate": any(t.replicate for t in twins),
        "widened": widened_by(tau, between.sd if between is not None else None),
        # A one-process case's exact interval is widened into a t interval by the twins'
        # term and the two runs' (nested._one_process), plain only without either.
        "one_twin": bool(twins),
        "one_between": between is not None and (between.sd or 0.0) > 0.0,
        "power": f"{defaults.DETECT_POWER:.0%}",
        # compare-commits held a case re-run on ❔ to the statement of the pass that re-ran it.
        "kept": any(r.kept is not None for r in (comparison.reruns or {}).values()),
    }


def format_ratio_ci(ratio: float | None,
                    ci: Sequence[float | None] | None) -> tuple[str, str]:
    """A ratio and its interval as text: ('1.023x', '[0.998, 1.047]')."""
    if ratio is None or not math.isfinite(ratio):
        return "-", "-"
    if not ci or ci[0] is None or ci[1] is None:
        return f"{ratio:.3f}x", "-"
    return f"{ratio:.3f}x", f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def to_json(doc: Document) -> str:
    """Stable JSON (sorted keys; NaN becomes null) for machines; a comparison has its own
    (Comparison.to_json)."""
    return json_text(_clean(doc))


def _clean(value: JsonValue) -> JsonValue:
    if isinstance(value, float):
        return stats.finite(value)
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


# Above this many ✅ rows the PR comment folds them into a <details> block, so a
# 50-case grid still reads as "what changed" first.
COLLAPSE_NO_CHANGE_OVER = 8

TEMPLATES = ("comment.md.j2", "terminal.txt.j2", "calibration.txt.j2")


def environment() -> jinja2.Environment:
    """The jinja2 environment over reports/templates, with the number formats as filters."""
    from pathlib import Path

    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).with_name("templates"))),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # markdown and plain text, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        ns=format_ns, pct=format_pct, share=format_share, ci=format_ci, cell=md_cell,
        count=format_count, gate=gate_text, inert=inert,
        catch=format_detectable,
    )
    return env


def gate_text(gate: Gate) -> str:
    """What the idle gate saw over one run (summary.gate_summary's counts), in the one
    clause every report quotes: the PR comment, the terminal, the run report, both pages."""
    steal = format_share(gate.max_steal)
    if gate.policy == "off":
        return (f"idle gate off (rounds not checked before running), {gate.unquiet} of "
                f"{gate.rounds} rounds showed load while running, max steal {steal}")
    return (f"{gate.quiet} of {gate.rounds} rounds passed the idle gate ({gate.policy or '-'}, "
            f"{gate_threshold_text(gate.threshold)}), {gate.unquiet} unquiet, max steal "
            f"{steal}{gate_waiting_text(gate)}")


def gate_threshold_text(threshold: float | None) -> str:
    """The idle a round needed on every other core, as the reports and the gate plot's
    legend quote it: ≥ 0.93 idle."""
    return f"≥ {'-' if threshold is None else f'{threshold:g}'} idle"


def gate_waiting_text(gate: Gate) -> str:
    """What the gate's pause budget did, when the run stopped waiting ("" otherwise)."""
    stopped = gate.processes_not_waiting
    if not stopped:
        return ""
    return (f"; the gate stopped waiting for quiet in {stopped} of {gate.processes} "
            f"processes (after {gate.stops_waiting_after_rounds or 'many'} rounds in "
            "a row had no passing look: a sustained load)")


def format_count(value: float | int | None) -> str:
    """A counter value: an integer when it is one (5, not 5.0), "-" when absent."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:g}"


def rounds_text(comparison: Comparison) -> str:
    """The round count of the comparison, both sides' when two runs differ."""
    base, pr = comparison.base.rounds, comparison.pr.rounds
    if not comparison.same_run and base != pr:
        return f"{base} (base) and {pr} (PR) rounds"
    return f"{pr} rounds"


def format_ci(ci: Sequence[float | None] | None) -> str:
    """An interval of fractional changes: [+1.2 %, +3.4 %]."""
    if not ci or ci[0] is None or ci[1] is None:
        return "-"
    return f"[{format_pct(ci[0])}, {format_pct(ci[1])}]"


# What could end or split a code span, or the line or table cell it sits in: a
# backtick, a pipe (GFM splits table cells before it parses code spans) and line
# breaks. Each becomes a look-alike that cannot.
_INERT = str.maketrans({"`": "\u02cb", "|": "\u2502", "\n": " ", "\r": " ", "\x0b": " ",
                        "\x0c": " ", "\x85": " ", "\u2028": " ", "\u2029": " "})


def inert(value: object) -> str:
    """Text from a comparison as data in markdown: one code span on one line.

    GitHub renders nothing inside a code span: no @mention, link, autolinked URL,
    commit or issue reference, image, HTML tag, emphasis or emoji shortcode. The
    span cannot be left (no backtick, no pipe, no line break survives), so neither
    can the <details> block, table row or list item around it. Used for every
    string the PR comment takes from a comparison, in a table or not.
    """
    text = str(value).translate(_INERT)
    return f"`{text}`" if text else "` `"  # `` would be two literal backticks, not a span


def md_cell(value: object) -> str:
    """Text safe inside a markdown table cell (a '|' would end the cell)."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def drift_sentence(drifts: Mapping[str, float | None], code: Callable[[str], str] = inert,
                   exceeded: int | None = None) -> str | None:
    """The one sentence on the ORT control's drift that every report shows: the worst
    case's drift (stats.control_drift, DRIFT_MEANING) and, for a comparison, in how many
    cases it passed the case's threshold (``exceeded``). None when no case has a drift."""
    worst = worst_drift(drifts)
    if worst is None:
        return None
    name, drift = worst
    text = f"ORT control drift ({DRIFT_MEANING}): worst {format_pct(drift)} ({code(name)})"
    if exceeded is None:
        return text + "."
    if exceeded:
        return text + f", more than the case's threshold in {exceeded} case(s)."
    return text + ", within every case's threshold."


def comparison_drift(comparison: Comparison, code: Callable[[str], str] = inert) -> str | None:
    """drift_sentence for a comparison's rows."""
    return drift_sentence({r.case: r.control_drift for r in comparison.cases}, code,
                          exceeded=sum(r.drift_exceeds_threshold for r in comparison.cases))


SHORT_SHA = 7


def base_history_lines(comparison: Comparison,
                       code: Callable[[str], str] = inert) -> list[str]:
    """What the history says about the base commit (compare.json's `base_history`), as
    sentences; [] when the comparison has none. `code` marks up every string taken
    from the comparison (`inert` for markdown, <code> for HTML, which also escapes).

    A change point that touches the base gives a line each; none gives one short line
    (the PR comment leaves that one out: reports.bot.artifact.comment_body), as does a
    history that could not be read after the run (`error`). `change_points` and
    `unplaced` are optional (compare.json files written before them still render).
    """
    bh = comparison.base_history
    if not bh:
        return []
    base = code(bh.commit[:SHORT_SHA])
    if bh.error:
        return [f"Base {base} was not checked against the history, which could not be read "
                f"after the run: {code(bh.error)}"]
    unplaced = bh.unplaced or 0
    unknown = (f"git does not know the commits of {unplaced} change point(s) (a shallow "
               "clone, or commits of another fork?), so it could not place the base "
               "against them: no claim either way about those.")
    lines = []
    for f in bh.findings:
        ci = ("" if f.lo is None or f.hi is None
              else f" [{format_pct(f.lo)}, {format_pct(f.hi)}]")
        where = (f"{code(f.case)}, {code(f.arm)}: {format_pct(f.change)}{ci} between "
                 f"{code(f.before[:SHORT_SHA])} and {code(f.after[:SHORT_SHA])}")
        if f.kind == "inside":
            lines.append(f"Base {base} sits inside a {f.direction} change point of {where}: "
                         "the base itself may carry that change.")
        else:
            lines.append(f"Base {base} comes soon after a regression change point of {where}: "
                         "the PR is measured against a base that already carries it.")
    if lines:
        return lines + ([f"Base {base}: {unknown}"] if unplaced else [])
    if not bh.series:
        return [f"Base {base}: the history holds no series of these cases for machine "
                f"{code(bh.machine)}, so no change point was checked (pass "
                "--machine-class when the history groups machines)."]
    if not bh.tested:
        return [f"Base {base}: the history's {bh.series} series of these cases are too short "
                f"for a change-point test (it needs {bh.min_points} commits)."]
    short = f", {bh.too_short} too short to test" if bh.too_short else ""
    tested = f"no change point of its {bh.tested} series tested{short} touches it."
    if bh.measured:
        return [f"Base {base} is in the history; {tested}"]
    if bh.placed_by_git and unplaced:
        return [f"Base {base} has no run in the history; placed by git ancestry, no change "
                f"point it could be placed against touches it, but {unknown}"]
    if bh.placed_by_git:
        return [f"Base {base} has no run in the history; placed by git ancestry, {tested}"]
    if unplaced:
        return [f"Base {base} has no run in the history, and {unknown}"]
    if bh.change_points == 0:
        return [f"Base {base} has no run in the history; its {bh.tested} series tested"
                f"{short} have no change point."]
    return [f"Base {base} has no run in the history and nothing placed it; no change point "
            "was checked."]


def _split_rows(rows: list[CaseRow]) -> tuple[list[CaseRow], list[CaseRow]]:
    """(rows shown in the main table, ✅ rows folded away) for the PR comment."""
    quiet = [r for r in rows if r.verdict == "no_change"]
    if len(quiet) <= COLLAPSE_NO_CHANGE_OVER:
        return list(rows), []
    return [r for r in rows if r.verdict != "no_change"], quiet


def _context(comparison: Comparison, code: Callable[[str], str] = inert) -> dict[str, object]:

    rows = list(comparison.cases)
    shown, folded = _split_rows(rows)
    counts = comparison.counts
    tally = ", ".join(
        f"{counts[v]} {VERDICTS[v][0]}" for v in VERDICTS if counts.get(v)
    )
    return {
        "c": comparison,
        "rows": rows,
        "shown": shown,
        "folded": folded,
        "tally": tally,
        "verdicts": VERDICTS,
        "instructions": any(r.instructions_change is not None for r in rows),
        "instructions_flagged": any(r.instructions_flag for r in rows),
        "marker": sticky_marker(),
        "sentence": overall_sentence(comparison),
        "catch_sentence": detectable_sentence(comparison),
        "m": method_context(comparison),
        "confidence_pct": confidence_pct(comparison),
        "gates": comparison.gate,
        "rounds_text": rounds_text(comparison),
        # BH ran over the rows with a p-value; ❌ and ➖ rows had none.
        "tested": tested_count(comparison),
        "drift": comparison_drift(comparison, code),
        "base_history": base_history_lines(comparison),
    }


def confidence_pct(comparison: Comparison) -> str:
    """The run's confidence level as the tables head their interval column: "95 %"."""
    return f"{comparison.settings.confidence * 100:g} %"


def tested_count(comparison: Comparison) -> int:
    """How many cases Benjamini-Hochberg ran over: those with a p-value (not ❌ or ➖)."""
    return sum(r.verdict not in ("failed", "not_comparable") for r in comparison.cases)


def overall_sentence(comparison: Comparison) -> str:
    """One plain sentence that says what happened."""
    counts = comparison.counts
    n = len(comparison.cases)
    bad = counts.get("alert", 0) + counts.get("regression", 0)
    parts = []
    if counts.get("failed"):
        parts.append(f"{counts['failed']} of {n} cases failed on the PR side")
    if bad:
        parts.append(f"{bad} of {n} cases got slower beyond their threshold")
    if counts.get("improvement"):
        parts.append(f"{counts['improvement']} got faster")
    if counts.get("inconclusive"):
        # More rounds do not help a case whose two runs ran at different machine speeds.
        moved = sum(r.verdict == "inconclusive" and beyond_speed_limit(r.control_shift)
                    for r in comparison.cases)
        parts.append(f"{counts['inconclusive']} could not be decided (" + (
            "rerun with more rounds" if not moved else
            f"{moved} as the two runs' controls ran at different speeds: rerun both back to "
            "back" if moved == counts["inconclusive"] else
            f"{moved} as the two runs' controls ran at different speeds; the others: rerun "
            "with more rounds") + ")")
    missing = counts.get("not_comparable", 0)
    if missing == n:
        return f"No case of {n} could be compared (see the reasons below)."
    if not parts:
        judged = n - missing
        text = f"No case of {judged} changed beyond its threshold"
        return text + (f"; {missing} could not be compared." if missing else ".")
    if missing:
        parts.append(f"{missing} could not be compared")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def render_markdown(comparison: Comparison) -> str:
    """The PR comment: GitHub-flavoured markdown with the hidden sticky-comment marker."""
    return environment().get_template("comment.md.j2").render(**_context(comparison))


def render_terminal(comparison: Comparison) -> str:
    """The same comparison as fixed-width text for a terminal."""
    ctx = _context(comparison, str)
    # The verdict goes last: emoji widths differ between terminals and would skew columns.
    header = ("case", "base", "pr", "change", f"{ctx['confidence_pct']} CI", "threshold",
              "could catch", "")
    table = [header] + [
        (r.case, format_ns(r.base_ns), format_ns(r.pr_ns), format_pct(r.change),
         format_ci(r.ci), format_share(r.threshold), format_detectable(r.detectable),
         f"{r.emoji} {VERDICTS[r.verdict][1]}")
        for r in comparison.cases
    ]
    ctx["table"] = align_columns(table)
    return environment().get_template("terminal.txt.j2").render(**ctx)


def align_columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as left-aligned columns two spaces apart (terminal tables)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


def render_calibration(profile: Profile) -> str:
    """A noise profile for the terminal: per case the noise it will judge with."""
    rows = [("case", "noise same run", "noise two runs", "p95 |A/A|", "fixed-order bias")]
    for name, entry in sorted(profile.get("cases", {}).items()):
        bias = (entry.get("position_bias") or {}).get("fixed_order_change")
        rows.append((
            name,
            _pct_or_dash(entry["same-run"].get("noise")),
            _pct_or_dash(entry["separate-runs"].get("noise")),
            _pct_or_dash(entry["same-run"].get("p95_abs")),
            format_pct(bias, 2) if bias is not None else "-",
        ))
    return environment().get_template("calibration.txt.j2").render(
        p=profile, table=align_columns(rows)
    )


def _pct_or_dash(value: float | None) -> str:
    return format_share(value, 2)


def format_overhead(overhead: Document) -> str:
    """The harness's overhead (`epbench overhead`) as a few lines for the terminal."""
    lines = [
        f"timer (two clock reads)        {format_ns(overhead['timer_ns'])}",
        f"timed no-op call               {format_ns(overhead['noop_call_ns'])}",
        f"ORT CPU, {overhead['case']:<21} {format_ns(overhead['ort_trivial_run_ns'])}"
        "  (run_with_iobinding, one node)",
        f"timing loop                    {overhead['loop']}"
        + ("" if overhead["loops"].get("c") is not None else f" ({overhead['c_loop_note']})"),
        f"medians of {overhead['samples']} calls, {overhead['threads']} thread(s)",
    ]
    return "\n".join(lines) + "\n"


def render_summary_table(summary: RunSummary) -> str:
    """The summary as fixed-width text for the terminal."""
    lines: list[str] = []
    rows = [("case", "arm", "p50", "vs ort", f"{summary.confidence:.0%} CI",
             "nodes", "status")]
    control = summary.control
    for name, case in summary.cases.items():
        status = case.status if case.verified else f"{case.status} (unverified)"
        # The control first: every other arm's ratio is relative to it.
        arms = sorted(case.arms.items(), key=lambda item: item[0] != control)
        for arm, a in arms:
            nodes = a.nodes_by_ep
            split = (
                " (" + ", ".join(f"{ep}:{n}" for ep, n in sorted(nodes.items())) + ")"
                if len(nodes) > 1 else ""
            )
            ratio, ci = format_ratio_ci(a.ratio_vs_ort, a.ci95)
            rows.append((name, arm, format_ns(a.p50_ns), ratio, ci,
                         f"{a.nodes_executed}{split}", status))
            name, status = "", ""
    lines.extend(align_columns(rows))
    drift = drift_sentence(run_drifts(summary), str)
    if drift is not None:
        lines.append("")
        lines.append(drift)
    if summary.families:
        lines.append("")
        frows = [("family", "arm", "per node", "CI", "per Run", "CI")]
        for family, f in summary.families.items():
            label = f"{family} (d={','.join(map(str, f.depths))})"
            for arm, fit in sorted(f.arms.items(), key=lambda item: item[0] != control):
                frows.append((
                    label, arm, format_ns(fit.slope_ns), _ci_ns(fit.slope_ci95),
                    format_ns(fit.intercept_ns), _ci_ns(fit.intercept_ci95),
                ))
                label = ""
        lines.extend(align_columns(frows))
    lines.append("")
    lines.append(f"run: {gate_text(summary.gate)}")
    return "\n".join(lines) + "\n"


def run_drifts(summary: RunSummary) -> dict[str, float | None]:
    """Each case's control drift from a run summary (summary.summarize)."""
    return {name: case.control_drift for name, case in summary.cases.items()}


def _ci_ns(ci: list[float | None]) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return "-"
    return f"[{format_ns(ci[0])}, {format_ns(ci[1])}]"
