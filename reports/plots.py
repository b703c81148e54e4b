"""The HTML report's plots, drawn with matplotlib and returned as inline SVG.

Each function takes plain numbers (reports.html reads the results documents through
reports.stats, reports.summary and reports.compare) and returns the markup of one
figure, ready to sit inside a page: no XML prologue, no namespace URLs, and every id
prefixed with the figure's own name. Several SVGs share one HTML document, where an
id defined twice would make one figure's marker or clip path resolve to another's.

matplotlib is used through its object API (`matplotlib.figure.Figure`, drawn by its SVG
backend), never pyplot: no GUI backend is chosen and no global figure list grows.
Settings that change the output live in `_STYLE`, applied per figure with
`rc_context`, so the page does not depend on the user's matplotlibrc.
"""

from __future__ import annotations

import functools
import io
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec

if TYPE_CHECKING:  # matplotlib and numpy load only when a page is drawn
    import numpy as np
    import numpy.typing as npt
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from epbench.reports.render import format_ns, format_pct, gate_threshold_text

# verdict -> (colour, marker). The colours are the verdict emoji's (🔴 red, ⚠️ amber,
# 🟢 green, ✅ a paler green, ❔/➖ greys, ❌ dark red); the markers point the way the
# time moved (^ slower, v faster), so the plot reads without colour too.
VERDICT_STYLE: dict[str, tuple[str, str]] = {
    "failed": ("#8b0000", "X"),
    "alert": ("#d62728", "^"),
    "regression": ("#e69500", "^"),
    "inconclusive": ("#6f6f6f", "D"),
    "not_comparable": ("#b0b0b0", "s"),
    "improvement": ("#1a9e1a", "v"),
    "no_change": ("#86c586", "o"),
}
# Arms other than the control, in order of appearance; red and green are left out,
# they mean verdicts and unquiet rounds here.
ARM_COLOURS = ("#1f77b4", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22")
CONTROL_COLOUR = "#555555"
UNQUIET_COLOUR = "#d62728"

_STYLE = {
    "svg.fonttype": "none",  # text stays text: smaller, selectable, sharp at any zoom
    # Labels are names from the user (cases, arms, machine classes, commits): a `$` in
    # one is a dollar sign, never mathtext, which raises on `$\foo$`.
    "text.parse_math": False,
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e4e4e4",
    "grid.linewidth": 0.6,
    "legend.fontsize": 8.0,
    "legend.frameon": False,
}
# The page's fonts, then generic fallbacks: the SVG's text is laid out by the browser.
_FONTS = ["DejaVu Sans", "sans-serif"]


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig: Figure, name: str) -> str:
    """The figure as inline SVG: prologue and namespace URLs dropped, every id prefixed
    with `name` (unique in the page)."""
    import matplotlib

    buf = io.StringIO()
    # A fixed hash salt: the same data draws the same bytes (no random ids).
    with matplotlib.rc_context({**_STYLE, "svg.hashsalt": name}):
        fig.savefig(buf, format="svg",
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    # Inside HTML the parser puts <svg> in the SVG namespace and maps xlink:href
    # itself; the xmlns declarations are the only URLs matplotlib writes.
    text = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text, count=2)
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", name)
    text = re.sub(r'(\s)id="([^"]+)"', rf'\1id="{prefix}-\2"', text)
    text = re.sub(r'(href="|url\()#([^")]+)', rf"\1#{prefix}-\2", text)
    return text.strip() + "\n"


_Args = ParamSpec("_Args")


def _drawing(fn: Callable[_Args, str]) -> Callable[_Args, str]:
    """Run a drawing function under the house style (fonts, sizes, grid)."""

    @functools.wraps(fn)
    def wrapper(*args: _Args.args, **kwargs: _Args.kwargs) -> str:
        import matplotlib

        with matplotlib.rc_context({**_STYLE, "font.family": _FONTS}):
            return fn(*args, **kwargs)

    return wrapper


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


# --------------------------------------------------------------------------- rounds


@dataclass(frozen=True)
class ArmRatios:
    """One arm's per-round ratios to the in-run control, and their median with its interval."""

    arm: str
    ratios: Sequence[float]  # per round, NaN where a side had no usable time
    quiet: Sequence[bool]  # per round, did the idle gate pass
    median: float | None
    lo: float | None
    hi: float | None


@_drawing
def round_ratios(name: str, case: str, control: str, arms: Sequence[ArmRatios]) -> str:
    """Strip plot of one case: a dot per round per arm, unquiet rounds as red crosses,
    the median as a bar with its interval; x is the ratio to the control."""
    import numpy as np

    fig = _figure(5.2, 0.8 + 0.42 * len(arms))
    ax = fig.add_subplot()
    ax.grid(axis="y", visible=False)
    for i, a in enumerate(arms):
        colour = ARM_COLOURS[i % len(ARM_COLOURS)]
        ratios = np.asarray(a.ratios, dtype=np.float64)
        quiet = np.asarray(a.quiet, dtype=bool)[: len(ratios)]
        # Deterministic jitter (golden-ratio sequence) spreads equal values apart.
        y = i + 0.28 * (((np.arange(len(ratios)) * 0.618034) % 1.0) - 0.5)
        ok = np.isfinite(ratios)
        ax.scatter(ratios[ok & quiet], y[ok & quiet], s=14, color=colour, alpha=0.65,
                   linewidths=0, zorder=2)
        if (ok & ~quiet).any():
            ax.scatter(ratios[ok & ~quiet], y[ok & ~quiet], s=22, marker="x",
                       color=UNQUIET_COLOUR, linewidths=1.2, zorder=3)
        if a.median is not None and a.lo is not None and a.hi is not None:
            ax.plot([a.lo, a.hi], [i, i], color="black", linewidth=2.4, zorder=4,
                    solid_capstyle="butt")
        if a.median is not None:
            ax.plot([a.median], [i], marker="|", markersize=16, markeredgewidth=2.4,
                    color="black", zorder=5)
    values = _finite([v for a in arms for v in a.ratios])
    if values and min(values) <= 1.0 <= max(values) * 1.02:
        ax.axvline(1.0, color=CONTROL_COLOUR, linestyle="--", linewidth=0.8, zorder=1)
    ax.set_yticks(range(len(arms)), [a.arm for a in arms])
    ax.set_ylim(len(arms) - 0.5, -0.5)
    ax.xaxis.set_major_locator(_few_ticks())
    ax.xaxis.set_major_formatter(_times_formatter())
    ax.set_xlabel(f"time per Run / {control}'s, in the same round")
    ax.set_title(case, family="monospace")
    return _svg(fig, name)


def _few_ticks() -> MaxNLocator:
    from matplotlib.ticker import MaxNLocator

    # Ratios print as "0.775×": more than ~6 of them run into each other.
    return MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10])


def _times_formatter() -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:.3g}×")


# --------------------------------------------------------------------------- families


@dataclass(frozen=True)
class ArmFamily:
    """One arm over a chain family: p50 per depth and the fitted line's numbers."""

    arm: str
    p50_ns: Sequence[float | None]  # per depth, same order as the family's depths
    slope_ns: float
    intercept_ns: float
    control: bool = False


@_drawing
def family_depths(name: str, family: str, depths: Sequence[int], arms: Sequence[ArmFamily]) -> str:
    """Time per Run against depth for every arm, points and the fitted line, log-log.

    On log axes the line intercept + slope x depth bends: flat at small depths where
    the per-Run cost dominates, parallel to the diagonal where the per-node cost does.
    """
    import numpy as np

    fig = _figure(5.2, 3.2 + 0.17 * len(arms))
    ax = fig.add_subplot()
    d = np.asarray(depths, dtype=np.float64)
    dense = np.geomspace(d.min(), d.max(), 120)
    colour_index = 0
    for a in arms:
        if a.control:
            colour = CONTROL_COLOUR
        else:
            colour = ARM_COLOURS[colour_index % len(ARM_COLOURS)]
            colour_index += 1
        p50 = np.array([v if v is not None else np.nan for v in a.p50_ns], dtype=np.float64)
        fitted = a.intercept_ns + a.slope_ns * dense
        keep = fitted > 0  # a negative intercept has no place on a log axis
        label = (f"{a.arm}: {format_ns(a.slope_ns)}/node "
                 f"{'+' if a.intercept_ns >= 0 else '−'} {format_ns(abs(a.intercept_ns))}/Run")
        ax.plot(dense[keep], fitted[keep], color=colour, linewidth=1.4, label=label)
        ok = np.isfinite(p50) & (p50 > 0)
        ax.plot(d[ok], p50[ok], linestyle="none", marker="o", markersize=5, color=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sorted(set(depths)), [str(v) for v in sorted(set(depths))])
    # The measured points set the range: a fit with a negative per-Run cost dives
    # towards 0 at small depths, and would otherwise stretch the axis by decades.
    points = _finite([v for a in arms for v in a.p50_ns if v is not None and v > 0])
    if points:
        ax.set_ylim(min(points) / 1.6, max(points) * 1.6)
    ax.yaxis.set_major_locator(_log_ticks())
    ax.yaxis.set_major_formatter(_ns_formatter())
    ax.minorticks_off()
    ax.set_xlabel("depth (nodes in the chain)")
    ax.set_ylabel("time per Run (p50)")
    ax.set_title(family, family="monospace")
    # Below the axes, where it can cover no point.
    fig.legend(loc="outside lower center", ncols=1)
    return _svg(fig, name)


def _log_ticks() -> LogLocator:
    from matplotlib.ticker import LogLocator

    # 1, 2, 5 per decade: a range of less than a decade still gets labelled ticks.
    return LogLocator(base=10.0, subs=(1.0, 2.0, 5.0), numticks=12)


def _ns_formatter() -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: format_ns(v))


# --------------------------------------------------------------------------- forest


@dataclass(frozen=True)
class ForestRow:
    """One case of a comparison: its change, interval, threshold and verdict."""

    case: str
    verdict: str
    label: str  # the verdict in words
    change: float | None  # fraction, +0.05 = 5 % slower
    lo: float | None
    hi: float | None
    threshold: float | None
    alert: float | None


def forest_order(rows: Sequence[ForestRow]) -> list[ForestRow]:
    """Rows with a change first, largest change (the worst regression) on top; the
    rows without one (failed, not comparable) after them, by name."""
    judged = [r for r in rows if r.change is not None]
    rest = [r for r in rows if r.change is None]
    return (sorted(judged, key=lambda r: (-(r.change or 0.0), r.case))
            + sorted(rest, key=lambda r: r.case))


@_drawing
def forest(name: str, rows: Sequence[ForestRow]) -> str:
    """Each case's change with its interval over its own ±t band, in the verdict's colour
    and marker; regressions on top. Rows without a change say why in words."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    rows = forest_order(rows)
    fig = _figure(7.6, 1.1 + 0.27 * len(rows))
    ax = fig.add_subplot()
    ax.grid(axis="y", visible=False)
    xs = _finite([v for r in rows for v in (r.lo, r.hi, r.change)])
    xs += _finite([s * v for r in rows if r.change is not None
                   for v in (r.threshold, r.alert) for s in (1, -1)])
    span = max((abs(v) for v in xs), default=0.05)
    for y, r in enumerate(rows):
        colour, marker = VERDICT_STYLE[r.verdict]
        if r.change is None:
            ax.text(0.0, y, f"no change measured: {r.label}", color=colour, va="center",
                    ha="center", fontsize=8, style="italic")
            continue
        if r.threshold is not None and math.isfinite(r.threshold):
            ax.barh(y, 2 * r.threshold, left=-r.threshold, height=0.72, color="#ececec",
                    zorder=1)
        if r.alert is not None and math.isfinite(r.alert):
            ax.plot([r.alert, r.alert], [y - 0.36, y + 0.36], color=VERDICT_STYLE["alert"][0],
                    linewidth=0.8, alpha=0.6, zorder=2)
        if r.lo is not None and r.hi is not None:
            ax.plot([r.lo, r.hi], [y, y], color=colour, linewidth=2.0, zorder=3)
        ax.plot([r.change], [y], marker=marker, markersize=7, color=colour,
                markeredgecolor="black", markeredgewidth=0.4, zorder=4)
    ax.axvline(0.0, color="#333333", linewidth=0.8, zorder=2)
    ax.set_xlim(-span * 1.15, span * 1.15)
    ax.set_yticks(range(len(rows)), [r.case for r in rows], family="monospace")
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_pct(v, 0 if span > 0.1
                                                                           else 1)))
    ax.set_xlabel("change of PR vs base (interval; grey band: ±t, red tick: alert level)")
    seen = [v for v in VERDICT_STYLE if any(r.verdict == v for r in rows)]
    labels = {r.verdict: r.label for r in rows}
    handles = [Line2D([], [], linestyle="none", marker=VERDICT_STYLE[v][1], markersize=7,
                      color=VERDICT_STYLE[v][0], markeredgecolor="black",
                      markeredgewidth=0.4, label=labels[v]) for v in seen]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(1.0, 0.0), borderaxespad=0)
    return _svg(fig, name)


# --------------------------------------------------------------------------- gate


@dataclass(frozen=True)
class GateRound:
    """One round's idle-gate readings: idle fractions are the worst core's, steal the most."""

    case: str
    idle_before: float | None  # the gate's look before the round
    idle_during: float | None  # the other cores while the round ran (and just before, if short)
    steal: float | None
    quiet: bool


@_drawing
def gate(name: str, rounds: Sequence[GateRound], threshold: float | None) -> str:
    """Idle before and during each round, and steal, in run order; unquiet rounds shaded."""
    import numpy as np
    from matplotlib.ticker import PercentFormatter

    fig = _figure(10.0, 4.4)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2.2, 1.0])
    x = np.arange(len(rounds))

    def series(attr: str) -> npt.NDArray[np.float64]:
        return np.array([getattr(r, attr) if getattr(r, attr) is not None else np.nan
                         for r in rounds], dtype=np.float64) * 100.0

    before, during, steal = series("idle_before"), series("idle_during"), series("steal")
    unquiet = np.array([not r.quiet for r in rounds])
    for ax in (top, bottom):
        for i in np.flatnonzero(unquiet):
            ax.axvspan(i - 0.5, i + 0.5, color=UNQUIET_COLOUR, alpha=0.13, linewidth=0, zorder=0)
    top.plot(x, before, linestyle="none", marker=".", markersize=4, color="#1f77b4",
             label="idle before the round (worst core)")
    top.plot(x, during, linestyle="none", marker=".", markersize=4, color="#ff7f0e",
             label="idle of the other cores during it")
    if unquiet.any():
        top.plot([], [], color=UNQUIET_COLOUR, alpha=0.35, linewidth=6, label="unquiet round")
    if threshold is not None:
        top.axhline(threshold * 100.0, color="#333333", linestyle="--", linewidth=0.8,
                    label=f"idle gate: {gate_threshold_text(threshold)}")
    low = np.nanmin(np.concatenate([before, during, [100.0]]))
    # Below 0 and above 100 a little, so readings of exactly 0 % or 100 % are not hidden
    # behind the axis lines.
    top.set_ylim(max(-4.0, min(low, (threshold or 1.0) * 100.0) - 5.0), 103.0)
    top.yaxis.set_major_formatter(PercentFormatter(decimals=0))
    top.set_ylabel("idle")
    fig.legend(loc="outside upper center", ncols=4)
    bottom.plot(x, steal, linestyle="none", marker=".", markersize=4, color="#8c564b")
    most = max(1.0, float(np.nanmax(np.concatenate([steal, [0.0]]))) * 1.2)
    bottom.set_ylim(-most * 0.06, most)
    bottom.yaxis.set_major_formatter(PercentFormatter(decimals=1))
    bottom.set_ylabel("steal")
    # Case boundaries: a thin line where each case's rounds start, its name under it.
    starts = [i for i in range(len(rounds)) if i == 0 or rounds[i].case != rounds[i - 1].case]
    for ax in (top, bottom):
        for i in starts[1:]:
            ax.axvline(i - 0.5, color="#bbbbbb", linewidth=0.6, zorder=0)
        ax.grid(axis="x", visible=False)
    ends = [*starts[1:], len(rounds)]
    bottom.set_xticks([(s + e - 1) / 2 for s, e in zip(starts, ends, strict=True)],
                      [rounds[s].case for s in starts], rotation=60, ha="right",
                      fontsize=7 if len(starts) > 12 else 8, family="monospace")
    bottom.tick_params(axis="x", length=0)
    bottom.set_xlim(-0.5, len(rounds) - 0.5)
    return _svg(fig, name)


# --------------------------------------------------------------------------- history


@dataclass(frozen=True)
class HistorySeries:
    """One tracked series in commit order: a case's arm as its ratio to the in-run control."""

    case: str
    arm: str
    commits: Sequence[str]
    ratio: Sequence[float]
    lo: Sequence[float | None] = field(default_factory=list)  # interval, per point
    hi: Sequence[float | None] = field(default_factory=list)
    # Instructions per Run, per point (None where the run did not count them).
    instructions: Sequence[float | None] = field(default_factory=list)


@dataclass(frozen=True)
class ChangePoint:
    """A step in a series: `index` is its first point after the change, so the change
    happened in the commits from commits[index - 1] (excluded) to commits[index]."""

    index: int
    change: float  # fraction, +0.04 = 4 % slower after it
    lo: float | None = None
    hi: float | None = None


def short_commit(commit: str) -> str:
    """A commit as people write it in a range: 7 hex digits; other names as they are."""
    return commit[:7] if re.fullmatch(r"[0-9a-fA-F]{8,40}", commit) else commit


@_drawing
def history(name: str, series: HistorySeries, change_points: Sequence[ChangePoint]) -> str:
    """The series over commits with its interval band; each change point shaded over its
    commit range, with the change and the range written beside it, and the level
    before and after each change drawn as dashed segments (medians of the segments)."""
    import numpy as np

    n = len(series.ratio)
    counted = (np.array([np.nan if v is None else v for v in series.instructions],
                        dtype=np.float64) if len(series.instructions) == n else np.full(n, np.nan))
    if np.isfinite(counted).any():
        # Time above, instructions below, on one commit axis: a step in both is code.
        fig = _figure(7.6, 4.2)
        ax, below = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.3])
    else:
        fig, below = _figure(7.6, 3.0), None
        ax = fig.add_subplot()
    x = np.arange(n)
    y = np.asarray(series.ratio, dtype=np.float64)
    if len(series.lo) == n and len(series.hi) == n:
        lo = np.array([v if v is not None else np.nan for v in series.lo], dtype=np.float64)
        hi = np.array([v if v is not None else np.nan for v in series.hi], dtype=np.float64)
        ax.fill_between(x, lo, hi, color="#1f77b4", alpha=0.18, linewidth=0,
                        label="interval of each run")
    ax.plot(x, y, marker="o", markersize=3.5, linewidth=1.0, color="#1f77b4",
            label=f"{series.arm} / control")
    cuts = sorted({cp.index for cp in change_points if 0 < cp.index < n})
    for start, end in zip([0, *cuts], [*cuts, n], strict=True):
        level = float(np.nanmedian(y[start:end]))
        ax.plot([start - 0.3, end - 0.7], [level, level], color="#333333", linestyle="--",
                linewidth=0.9)
    top = float(np.nanmax(y))
    for cp in change_points:
        if not 0 < cp.index < n:
            continue
        colour = VERDICT_STYLE["alert" if cp.change > 0 else "improvement"][0]
        ax.axvspan(cp.index - 1, cp.index, color=colour, alpha=0.18, linewidth=0)
        interval = (f" [{format_pct(cp.lo)}, {format_pct(cp.hi)}]"
                    if cp.lo is not None and cp.hi is not None else "")
        before, after = series.commits[cp.index - 1], series.commits[cp.index]
        text = (f"{format_pct(cp.change)}{interval}\n"
                f"{short_commit(before)}..{short_commit(after)}")
        ax.annotate(text, (cp.index - 0.5, top), xytext=(0, 4), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7.5, color=colour)
    ax.margins(y=0.28)
    if below is not None:
        below.plot(x, counted, marker="s", markersize=3.0, linewidth=1.0, color="#8c564b",
                   label="instructions per Run")
        below.set_ylabel("instructions\nper Run")
        below.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4), useOffset=False)
        below.legend(loc="lower left", bbox_to_anchor=(1.0, 0.0), borderaxespad=0)
    axis = ax if below is None else below
    step = max(1, math.ceil(n / 24))  # at most ~24 commit labels, else they overlap
    ticks = list(range(0, n, step))
    axis.set_xticks(ticks, [short_commit(series.commits[i]) for i in ticks], rotation=60,
                    ha="right", fontsize=7, family="monospace")
    ax.set_xlim(-0.5, n - 0.5)
    ax.yaxis.set_major_formatter(_times_formatter())
    ax.set_ylabel("ratio to control")
    ax.set_title(f"{series.case} · {series.arm}", family="monospace")
    ax.legend(loc="lower left", bbox_to_anchor=(1.0, 0.0), borderaxespad=0)
    return _svg(fig, name)
