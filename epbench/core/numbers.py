"""Small numeric helpers shared by every layer (no numpy: `epbench --help` stays instant)."""

from __future__ import annotations

from collections.abc import Iterable


def median(values: Iterable[float]) -> float | None:
    """The median (mean of the middle two for an even count); None for no values."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return None
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
