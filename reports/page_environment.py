"""The HTML page's jinja2 environment: its filters, and the verdict marks it draws.

reports.html renders the page through `environment()`; the filters are the markdown
reports' own number formats, so a figure reads the same on the page as in report.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from epbench.reports import plots, render
from epbench.reports.comparison import VERDICTS

if TYPE_CHECKING:
    import jinja2
    import markupsafe


def environment() -> jinja2.Environment:
    """jinja2 over reports/templates with HTML autoescaping and the reports' number formats."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).with_name("templates"))),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ns=render.format_ns, pct=render.format_pct, share=render.format_share,
        ci=render.format_ci, count=render.format_count, dash=_dash, ratio=_ratio_text,
        gate=render.gate_text, verdict_mark=verdict_mark,
        with_marks=with_marks, catch=render.format_detectable,
    )
    return env


# Inline SVG outlines of the forest plot's markers (plots.VERDICT_STYLE) in a 10x10 box:
# a verdict reads the same in the table as in the plot, with no emoji font needed.
_EMOJI_VERDICTS = {
    **{VERDICTS[v][0]: v for v in VERDICTS},
    **{VERDICTS[v][0].rstrip("\ufe0f"): v for v in VERDICTS},
}
_MARK_SHAPES = {
    "^": '<polygon points="5,0 10,10 0,10"/>',
    "v": '<polygon points="0,0 10,0 5,10"/>',
    "o": '<circle cx="5" cy="5" r="5"/>',
    "D": '<polygon points="5,0 10,5 5,10 0,5"/>',
    "s": '<rect width="10" height="10"/>',
    "X": '<path d="M0,2 2,0 5,3 8,0 10,2 7,5 10,8 8,10 5,7 2,10 0,8 3,5z"/>',
}


def with_marks(text: object) -> markupsafe.Markup:
    """`text`, escaped, with every verdict emoji in it drawn as its inline SVG mark."""
    import markupsafe

    out = markupsafe.escape(text)
    # Longest first: ⚠️ is ⚠ plus a variation selector, which text may omit.
    for emoji, verdict in sorted(_EMOJI_VERDICTS.items(), key=lambda kv: -len(kv[0])):
        out = out.replace(emoji, verdict_mark(verdict))
    return out


def verdict_mark(verdict: str) -> markupsafe.Markup:
    """The verdict's marker as inline SVG, its emoji as the accessible name.

    Without an emoji font a browser draws the verdict emoji as empty boxes; the marks are
    drawn by the page itself, in the forest plot's shapes and colours.
    """
    import markupsafe

    colour, marker = plots.VERDICT_STYLE[verdict]
    emoji = VERDICTS[verdict][0]
    return markupsafe.Markup(
        f'<svg class="mark" width="10" height="10" viewBox="0 0 10 10" role="img" '
        f'aria-label="{emoji}" fill="{colour}"><title>{emoji}</title>'
        f'{_MARK_SHAPES[marker]}</svg>')


def _dash(value: object) -> object:
    """Missing values as "-" (never "None" or "nan" on the page)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return value


def _ratio_text(value: float | None) -> str:
    return f"{value:.3f}×" if value is not None and math.isfinite(value) else "-"
