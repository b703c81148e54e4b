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


def block_summary(samples: Iterable[float]) -> dict[str, float | int | None]:
    """What the results file keeps of one block: median, min, quartiles and count (ns).

    Reports use the median (the round's value) and the min; the raw samples, which
    made a default-grid results file 15-20 MB, go to a side file only when asked.
    """
    ordered = sorted(samples)
    n = len(ordered)

    def quantile(q: float) -> float:
        # Linear interpolation between order statistics (numpy's default method).
        pos = q * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))

    if n == 0:
        return {"n": 0, "median": None, "min": None, "q1": None, "q3": None}
    return {"n": n, "median": quantile(0.5), "min": float(ordered[0]),
            "q1": quantile(0.25), "q3": quantile(0.75)}
