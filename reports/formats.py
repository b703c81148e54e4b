"""How a fraction is quoted as a percentage, in one place for every report and verdict.

A threshold t, an alert level and a steal share are computed figures, quoted with one
decimal (format_share: 2.3%); a setting (the floor, --alert, the noise assumed without a
measurement) is quoted as given (format_level: 1%, 0.5%). The verdicts' reasons
(reports.verdicts) and the reports (reports.render, html, the bot) import these, so a
threshold reads the same in a reason, a table, an annotation and the page.
"""

from __future__ import annotations

import math


def format_share(value: float | None, digits: int = 1) -> str:
    """A fraction that has no direction (a threshold, a steal share): 2.3%."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * 100:.{digits}f}%"


def format_growth(value: float) -> str:
    """How much longer or larger, as a share (30.0%); "∞%" when the other side was 0."""
    return "∞%" if value == math.inf else format_share(value)


def format_level(value: float) -> str:
    """A percentage as it was set (the floor, --alert, a default): 1%, 0.5%, 2.25%."""
    return f"{value * 100:g}%"
