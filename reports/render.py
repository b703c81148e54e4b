"""Rendering: the PR comment (markdown), the terminal text and JSON, from one comparison dict.

Templates live in reports/templates/*.j2; this module only supplies the
environment and the number formats, so wording changes are template diffs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def sticky_marker() -> str:
    """The hidden line that lets the GitHub client find and update its one comment."""
    from reports.github import STICKY_MARKER

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
    """A fractional change as a signed percentage: +5.2 %, -0.3 %."""
    if change is None or not math.isfinite(change):
        return "-"
    return f"{change * 100:+.{digits}f} %"


def format_ratio_ci(ratio: float | None, ci: list[float | None] | None) -> tuple[str, str]:
    """A ratio and its interval as text: ('1.023x', '[0.998, 1.047]')."""
    if ratio is None or not math.isfinite(ratio):
        return "-", "-"
    if not ci or ci[0] is None or ci[1] is None:
        return f"{ratio:.3f}x", "-"
    return f"{ratio:.3f}x", f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def to_json(doc: Mapping[str, Any]) -> str:
    """Stable JSON (sorted keys; NaN becomes null) for machines."""
    return json.dumps(_clean(doc), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
