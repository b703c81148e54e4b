"""The HTML report: one self-contained page with plots of a run, a comparison or the history.

`epbench report INPUT --html OUT/` writes OUT/index.html, and compare-commits writes
report.html beside report.md. The page needs nothing but itself: its CSS is inline,
its plots are inline SVG drawn by matplotlib (reports.plots), it has no script and
names no URL, so it opens from a CI artifact or a mail attachment alike.

The numbers are the markdown reports' own: a run through reports.summary (per-round
medians through reports.stats.round_medians), a comparison as the Comparison of
reports.compare. The page carries the markdown's tables as HTML tables too, so a
reader never needs the markdown. A plot that cannot be drawn (one arm, a family with
one depth, no judged case) is replaced by a sentence that says why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from epbench.core.errors import EpbenchError
from epbench.core.model import Case, Results
from epbench.core.results import atomic_write_text, load_results, parse_json, schema_version
from epbench.reports import compare as cmp
from epbench.reports import page_environment, plots, render, stats
from epbench.reports.comparison import SCHEMA, VERDICTS, Comparison, JsonValue, Side
from epbench.reports.summary import (
    CaseSummary,
    RunSummary,
    family_of,
    gate_rounds,
    summarize,
)

if TYPE_CHECKING:
    import markupsafe

PAGE_NAME = "index.html"
TEMPLATE = "report.html.j2"
# Files in a directory that hold a comparison (`epbench compare --format json --output
# DIR/compare.json`, compare-commits' own compare.json), looked for in this order.
COMPARISON_FILES = ("compare.json", "comparison.json")
# The arms compare-commits names its two sides (epbench.workflows.compare_commits's
# BASE_ARM and HEAD_ARM; a test keeps them equal): a results file with both is a
# two-commit run, judged base -> head when its directory holds no comparison.
COMMITS_ARMS = ("base", "head")


class ReportError(EpbenchError):
    """An input the HTML report cannot read, or an output it cannot write."""


@dataclass(frozen=True)
class Plot:
    """One figure of the page: its SVG, or the reason it could not be drawn."""

    anchor: str
    title: str
    caption: str  # one line: how to read it
    svg: markupsafe.Markup | None = None  # the inline SVG
    missing: str | None = None


@dataclass
class Source:
    """What a report is drawn from: a results document, a comparison, or both."""

    label: str
    doc: Results | None = None
    comparison: Comparison | None = None
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- input


def load_source(path: str | Path) -> Source:
    """A results file, a comparison JSON, or a directory holding either (or both).

    A compare-commits directory without a comparison file is judged from its
    results.json, base -> head, with the default settings and this host's profile.
    """
    path = Path(path)
    if not path.exists():
        raise ReportError(f"no such file or directory: {str(path)!r}; pass a results.json, "
                          "a compare JSON or the --out directory of a run")
    if path.is_file():
        if path.suffix == ".jsonl":  # a run's stream: results, never a comparison
            return Source(str(path), doc=load_results(path))
        text = _read_json(path)
        if str(text.get("schema", "")).startswith(SCHEMA.split("/")[0] + "/"):
            return Source(str(path), comparison=_comparison(text, path))
        return Source(str(path), doc=load_results(path))
    comparison = None
    for name in COMPARISON_FILES:
        if (path / name).is_file():
            comparison = _comparison(_read_json(path / name), path / name)
            break
    has_results = any((path / n).is_file() for n in ("results.json", "results.jsonl"))
    if comparison is None and not has_results:
        raise ReportError(
            f"{path} holds no results.json and no {' or '.join(COMPARISON_FILES)}; pass the "
            "--out directory of `epbench run` or `compare-commits`, or a results file"
        )
    source = Source(str(path), doc=load_results(path) if has_results else None,
                    comparison=comparison)
    doc = source.doc
    if comparison is None and doc is not None and all(a in doc.arms for a in COMMITS_ARMS):
        base, head = COMMITS_ARMS
        profile = cmp.load_profile_for(doc.host.key, None)
        source.comparison = cmp.compare(Side("base", doc, base, str(path)),
                                        Side("pr", doc, head, str(path)), profile=profile)
        source.notes.append(
            f"No comparison file in {path}: the verdicts below were judged again from its "
            f"results.json ({base} -> {head}) with the default settings."
        )
    return source


def _read_json(path: Path) -> dict[str, JsonValue]:
    try:
        # The results reader's parser: it refuses nesting and NaN before json recurses.
        doc = parse_json(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"cannot read {path} as JSON ({exc}); pass an epbench results "
                          "file or comparison") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{path} is not an epbench results file or comparison")
    return doc


def _comparison(doc: dict[str, JsonValue], path: Path) -> Comparison:
    name, current = SCHEMA.split("/")
    schema_version(doc.get("schema"), name, int(current), path, "comparison", ReportError,
                   remedy=" to draw it")
    return Comparison.from_json(doc, str(path))


# --------------------------------------------------------------------------- run


def _ratio_arms(case: Case, summary_case: CaseSummary,
                control: str) -> list[plots.ArmRatios]:
    import numpy as np

    ctrl = stats.round_medians(case, control)
    quiet = stats.quiet_mask(case)
    out = []
    for arm in case.arms:
        if arm == control:
            continue
        values = stats.round_medians(case, arm)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where((values > 0) & (ctrl > 0), values / ctrl, np.nan)
        info = summary_case.arms[arm]
        lo, hi = info.ci95
        out.append(plots.ArmRatios(arm, ratios.tolist(), quiet.tolist(),
                                   info.ratio_vs_ort, lo, hi))
    return out


def round_plots(doc: Results, summary: RunSummary) -> list[Plot]:
    """Per case, the per-round ratio of every arm to the in-run control."""
    control = summary.control
    pct = f"{summary.confidence * 100:g} %"
    arms = [a for a in doc.arms if a != control]
    if not arms:
        return [Plot("rounds-none", "Rounds", "", missing=(
            f"Only the control arm `{control}` ran, so there is no ratio to draw: run "
            "with a second arm, e.g. --arm engine."))]
    out = []
    for i, (name, case) in enumerate(doc.cases.items()):
        anchor = f"rounds-{i}"
        caption = (f"Dots: rounds (red ×: unquiet); black: the median ratio to {control}, "
                   f"{pct} interval.")
        if not case.ok:
            out.append(Plot(anchor, name, caption, missing=(
                f"The case did not finish ({case.status}: "
                f"{case.error or 'no detail'}), so it has no rounds to draw.")))
            continue
        if control not in case.arms:
            out.append(Plot(anchor, name, caption, missing=(
                f"The control `{control}` did not run on this case: no ratio to draw.")))
            continue
        ratio_arms = _ratio_arms(case, summary.cases[name], control)
        if not any(math.isfinite(v) for a in ratio_arms for v in a.ratios):
            out.append(Plot(anchor, name, caption, missing=(
                "No round has a usable time for both an arm and the control.")))
            continue
        svg = plots.round_ratios(anchor, name, control, ratio_arms)
        out.append(Plot(anchor, name, caption, _markup(svg)))
    return out


def family_plots(doc: Results, summary: RunSummary) -> list[Plot]:
    """Per chain family, time per Run against depth with the fitted line, per arm."""
    control = summary.control
    out = []
    for i, (family, f) in enumerate(summary.families.items()):
        arms = sorted(f.arms, key=lambda a: (a != control, a))
        caption = ("Dots: p50 per depth; lines: per-Run + per-node cost × depth, fitted; "
                   "flat at the left: per-Run cost dominates.")
        family_arms = [
            plots.ArmFamily(
                arm, [_p50(summary.cases[c], arm) for c in f.cases],
                f.arms[arm].slope_ns, f.arms[arm].intercept_ns, arm == control)
            for arm in arms
            if f.arms[arm].slope_ns is not None and f.arms[arm].intercept_ns is not None
        ]
        anchor = f"family-{i}"
        if not family_arms:
            out.append(Plot(anchor, family, caption, missing="No arm has a finite fit."))
            continue
        svg = plots.family_depths(anchor, family, f.depths, family_arms)
        out.append(Plot(anchor, family, caption, _markup(svg)))
    fitted = set(summary.families)
    depths: dict[str, set[int]] = {}
    for case in doc.cases.values():
        family = family_of(case.spec)
        if family and case.ok:
            depths.setdefault(family, set()).add(int(case.spec["depth"]))
    for family, found in sorted(depths.items()):
        if family in fitted:
            continue
        only = ", ".join(str(d) for d in sorted(found))
        out.append(Plot(f"family-single-{family}", family, "", missing=(
            f"Family `{family}` ran at depth {only} only: a per-node slope needs at least two "
            "depths of one family; add cases of other depths (the default grid has them).")))
    if not out:
        out.append(Plot("families-none", "Chain families", "", missing=(
            "No case of this run is a chain family (a chain of one op at several depths), so "
            "there is no per-node cost to fit; run e.g. --grid default.")))
    return out


def _p50(case: CaseSummary, arm: str) -> float | None:
    return case.arms[arm].p50_ns if arm in case.arms else None


def gate_plot(doc: Results, summary: RunSummary) -> Plot:
    """Idle and steal per round over the run, unquiet rounds marked."""
    caption = ("A column per round in run order: idle of the worst core before it and of the "
               "other cores during it (a round too short to judge alone: over a window "
               "reaching back a few ticks before it), steal below; red columns: unquiet "
               "rounds.")
    rounds = [plots.GateRound(r.case, r.idle_before, r.idle_during, r.steal, r.quiet)
              for r in gate_rounds(doc)]
    if not rounds:
        return Plot("gate", "Idle gate", caption, missing="No round was measured in this run.")
    if all(r.idle_before is None and r.idle_during is None and r.steal is None
           for r in rounds):
        return Plot("gate", "Idle gate", caption, missing=(
            "No gate reading was recorded for any round (the gate was off and the rounds were "
            "too short for a reading during them)."))
    threshold = summary.gate.threshold
    svg = plots.gate("gate", rounds, float(threshold) if threshold is not None else None)
    return Plot("gate", "Idle gate over the run", caption, _markup(svg))


def run_context(doc: Results, summary: RunSummary | None = None) -> dict[str, object]:
    """Everything the page shows of one run: its tables and its plots."""
    summary = summary if summary is not None else summarize(doc)
    control = summary.control
    cases = []
    for name, case in summary.cases.items():
        arms = sorted(case.arms.items(), key=lambda item: item[0] != control)
        cases.append({"name": name, **asdict(case), "arm_rows": arms})
    return {
        "doc": doc, "s": summary, "control": control, "cases": cases,
        "cfg": doc.config,
        "drift": _markup_code(render.drift_sentence(render.run_drifts(summary), _CODE)),
        "failures": [c for c in cases if c["status"] != "ok" or not c["verified"]],
        "round_plots": round_plots(doc, summary),
        "family_plots": family_plots(doc, summary),
        "gate_plot": gate_plot(doc, summary),
        "host": _host_rows(doc.host.to_dict()),
    }


# --------------------------------------------------------------------------- comparison


def forest_plot(comparison: Comparison) -> Plot:
    """Each case's change with its interval against its ±t band, in the verdict's colour."""
    pct = render.confidence_pct(comparison)
    caption = (f"A row per case, regressions on top: the change of PR vs base, its {pct} "
               "interval in the verdict's colour (▲ slower, ▼ faster); grey band: ±t.")
    rows = [
        plots.ForestRow(
            case=r.case, verdict=r.verdict, label=VERDICTS[r.verdict][1],
            change=_number(r.change), lo=_number(r.ci[0]), hi=_number(r.ci[1]),
            threshold=_number(r.threshold), alert=_number(r.alert),
        )
        for r in comparison.cases
    ]
    if not any(r.change is not None for r in rows):
        return Plot("forest", "Changes", caption, missing=(
            "No case could be judged, so there is no change to draw; the table says why for "
            "each case."))
    try:
        svg = plots.forest("forest", rows)
    except (ValueError, OverflowError):  # a compare.json of ±1e308: no axis spans it
        return Plot("forest", "Changes", caption, missing=(
            "The changes and thresholds of this comparison are too large to draw on one "
            "axis; the table gives each case's figures."))
    return Plot("forest", "Changes against their thresholds", caption, _markup(svg))


def comparison_context(comparison: Comparison) -> dict[str, object]:
    """The comparison's headline, tables and forest plot."""
    rows = list(comparison.cases)
    counts = comparison.counts
    styles = {v: plots.VERDICT_STYLE[v][0] for v in VERDICTS}
    return {
        "c": comparison,
        "rows": rows,
        "verdicts": VERDICTS,
        "colours": styles,
        "tally": [(v, VERDICTS[v][1], counts[v]) for v in VERDICTS if counts.get(v)],
        "sentence": render.overall_sentence(comparison),
        "catch_sentence": render.detectable_sentence(comparison),
        "m": render.method_context(comparison),
        "confidence_pct": render.confidence_pct(comparison),
        "rounds_text": render.rounds_text(comparison),
        "tested": render.tested_count(comparison),
        "drift": _markup_code(render.comparison_drift(comparison, _CODE)),
        "forest_plot": forest_plot(comparison),
        "host": _host_rows(comparison.host),
        "headline_words": comparison.overall.headline.split(" ", 1)[1],
        "base_history": _base_history_markup(comparison),
    }


def _CODE(text: str) -> str:  # noqa: N802 (named as the constant it stands for)
    """A name or commit, marked for _markup_code to put in <code>."""
    return f"\x00{text}\x01"


def _markup_code(line: str | None) -> markupsafe.Markup | None:
    """A report's sentence as HTML: the text escaped, what _CODE marked in <code>."""
    import markupsafe

    if line is None:
        return None
    text = str(markupsafe.escape(line))
    return markupsafe.Markup(text.replace("\x00", "<code>").replace("\x01", "</code>"))


def _base_history_markup(comparison: Comparison) -> list[markupsafe.Markup]:
    """render.base_history_lines as HTML: the text escaped, names and commits in <code>."""
    return [_markup_code(line) for line in render.base_history_lines(comparison, _CODE)]


# --------------------------------------------------------------------------- history


# A commit link's prefix (`report --commit-url`): a plain http(s) URL, nothing to escape.
COMMIT_URL = re.compile(r"https?://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]+")
# Only a commit that is hex is linked: any other stored name is shown as text.
_SHA = re.compile(r"[0-9a-fA-F]{7,64}")


def check_commit_url(url: str) -> str:
    """`url` when it is a plain http(s) prefix a commit's sha can follow; a ReportError if not."""
    if not COMMIT_URL.fullmatch(url):
        raise ReportError(f"--commit-url {url[:80]!r} is not a plain http(s) URL; pass a "
                          "prefix such as https://github.com/OWNER/REPO/commit/")
    return url


def commit_link(commit: str, commit_url: str | None) -> dict[str, str | None]:
    """A commit for the page: its short form, and a link when a prefix is given and the
    commit is a hex sha (anything else read from a store stays text)."""
    href = commit_url + commit if commit_url and _SHA.fullmatch(commit) else None
    return {"text": plots.short_commit(commit), "href": href}


def history_plots(
    entries: Sequence[tuple[plots.HistorySeries, Sequence[plots.ChangePoint]]],
) -> list[Plot]:
    """Per series, the ratio over commits with its band, change points over their range."""
    out = []
    for i, (series, change_points) in enumerate(entries):
        anchor = f"history-{i}"
        title = f"{series.case} · {series.arm}"
        caption = ("A point per commit: the arm's time over the in-run control's, band its "
                   "interval; shaded spans are change points, dashed lines the level between "
                   "them; below, instructions per Run where the runs counted them.")
        if len(series.ratio) < 2:
            out.append(Plot(anchor, title, caption, missing=(
                f"Only {len(series.ratio)} run of this series is stored: a history needs two; "
                "add more runs to the store.")))
            continue
        out.append(Plot(anchor, title, caption,
                        _markup(plots.history(anchor, series, change_points))))
    return out


def history_points(series: plots.HistorySeries, commit_url: str | None = None,
                   ) -> list[dict[str, object]]:
    """A series' points as table rows, newest first: commit, ratio, interval, instructions."""
    n = len(series.ratio)

    def at(values: Sequence[float | None], i: int) -> float | None:
        return _number(values[i]) if len(values) == n else None

    return [{"commit": commit_link(series.commits[i], commit_url),
             "ratio": _number(series.ratio[i]), "lo": at(series.lo, i), "hi": at(series.hi, i),
             "instructions": at(series.instructions, i)} for i in reversed(range(n))]


def history_rows(
    entries: Sequence[tuple[plots.HistorySeries, Sequence[plots.ChangePoint]]],
    commit_url: str | None = None,
) -> list[dict[str, object]]:
    """The change points as table rows: case, arm, change, interval, commit range, and
    whether it is open (the series' latest change point, a regression: still slower)."""
    rows = []
    for series, change_points in entries:
        placed = sorted((cp for cp in change_points if 0 < cp.index < len(series.commits)),
                        key=lambda cp: cp.index)
        for k, cp in enumerate(placed):
            rows.append({
                "case": series.case, "arm": series.arm, "change": cp.change,
                "ci": [cp.lo, cp.hi],
                "first": commit_link(series.commits[cp.index - 1], commit_url),
                "last": commit_link(series.commits[cp.index], commit_url),
                "open": k == len(placed) - 1 and cp.change > 0,
                "since": len(series.commits) - cp.index,
            })
    return rows


# --------------------------------------------------------------------------- page


def render_html(
    *,
    doc: Results | None = None,
    comparison: Comparison | None = None,
    history: Sequence[tuple[plots.HistorySeries, Sequence[plots.ChangePoint]]] | None = None,
    source: str | None = None,
    notes: Sequence[str] = (),
    commit_url: str | None = None,
) -> str:
    """The page: a comparison (with its run, when the results document is given), a run,
    or a history, each with its plots and tables."""
    if doc is None and comparison is None and history is None:
        raise ReportError("nothing to report: pass a results file, a comparison or a history")
    context: dict[str, object] = {
        "source": source, "notes": list(notes), "run": None, "cmp": None, "history": None,
    }
    if comparison is not None:
        context["cmp"] = comparison_context(comparison)
    if doc is not None:
        context["run"] = run_context(doc)
    if history is not None:
        if commit_url is not None:
            check_commit_url(commit_url)
        rows = history_rows(history, commit_url)
        context["history"] = {
            "plots": history_plots(history), "rows": rows,
            "open": [r for r in rows if r["open"]],
            "points": [history_points(series, commit_url) for series, _ in history],
        }
    if comparison is not None:
        context["title"] = f"{comparison.overall.headline} · epbench comparison"
    elif doc is not None:
        context["title"] = "epbench run report"
    else:
        context["title"] = "epbench history"
    return page_environment.environment().get_template(TEMPLATE).render(**context)


def make_out_dir(out_dir: str | Path, name: str = PAGE_NAME) -> Path:
    """Create `out_dir` if missing and return the page's path in it; one clear error if
    it cannot be (called before drawing, so a bad --html fails at once)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"cannot write {out / name}: {exc.strerror or exc}; "
                          "choose a writable --html directory") from None
    return out / name


def write_page(text: str, out_dir: str | Path, name: str = PAGE_NAME) -> Path:
    """Write the page into `out_dir` (created if missing); one clear error if it cannot."""
    path = make_out_dir(out_dir, name)
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise ReportError(
            f"cannot write {path}: {exc.strerror or exc}; choose a writable --html directory"
        ) from None
    return path


def write_report(input_path: str | Path, out_dir: str | Path) -> Path:
    """`epbench report INPUT --html OUT`: read INPUT, draw the page, write OUT/index.html."""
    source = load_source(input_path)
    make_out_dir(out_dir)
    text = render_html(doc=source.doc, comparison=source.comparison, source=source.label,
                       notes=source.notes)
    return write_page(text, out_dir)


def _markup(svg: str) -> markupsafe.Markup:
    import markupsafe

    return markupsafe.Markup(svg)  # matplotlib's own SVG, not user text


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _host_rows(host: Mapping[str, JsonValue]) -> list[tuple[str, str]]:
    rows = []
    for key, value in sorted(host.items()):
        if isinstance(value, Mapping):
            continue
        if isinstance(value, (list, tuple)):
            value = ", ".join(str(v) for v in value)
        rows.append((key, "-" if value is None else str(value)))
    return rows
