"""Where issue 46's no-bias power at +3 % went: each rule undone alone, in the sim's model.

    .venv/bin/python docs/validation/statistics_ablation.py             # the table, markdown
    .venv/bin/python docs/validation/statistics_ablation.py --trials 20 # rougher, quicker

It patches the importable epbench (this tree) in this process, one variant at a time,
and measures power at +2 % and +3 % with no per-copy bias with statistics_sim.power
(same model, seeds and grids). The variants stand in for the rules before issue 46 or
for candidates that were measured and not kept; see docs/validation/statistics.md. The
last row is this tree as it is: PR against the mean of base and its twin.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import statistics_sim as sim  # noqa: E402  (beside this file)

from epbench.reports import nested, verdicts  # noqa: E402

ORIGINAL = {
    "unmodelled_variances": nested.unmodelled_variances,
    "interval_tests": verdicts.interval_tests,
    "standard_error": nested.standard_error,
    "grid_init": verdicts.GridSamples.__init__,
    "judge": sim._judge,
    "twin_share": sim._twin_share,
}


def _sums(excess: list[Any]) -> tuple[list[float], list[int]]:
    total, count = [0.0, 0.0], [0, 0]
    for e in excess:
        if e is not None:
            total[e[0]] += e[1]
            count[e[0]] += 1
    return total, count


def _pooled_only(aa: Any, *, own: bool = True) -> list[float]:
    if not own:
        return ORIGINAL["unmodelled_variances"](aa, own=False)
    return [nested.pooled_unmodelled_variance(aa)] * len(aa)


def _no_tau(aa: Any, *, own: bool = True) -> list[float]:
    return [0.0] * len(aa)


def _shrunk(aa: Any, *, own: bool = True) -> list[float]:
    """Each case's y^2 - s^2 shrunk toward the pool by the share of the excesses' spread
    that sampling does not explain (Var(y^2) = 2 (s^2 + tau^2)^2 for a normal y), never
    below the pool."""
    if not own:
        return ORIGINAL["unmodelled_variances"](aa, own=False)
    excess = [nested._excess(c) for c in aa]
    total, count = _sums(excess)
    values = [(e[1], c.se) for c, e in zip(aa, excess, strict=True)
              if e is not None and not e[0]]
    if len(values) < 3:
        return ORIGINAL["unmodelled_variances"](aa)
    mean = sum(v for v, _ in values) / len(values)
    spread = sum((v - mean) ** 2 for v, _ in values) / (len(values) - 1)
    tau2 = max(0.0, mean)
    sampling = sum(2.0 * (s * s + tau2) ** 2 for _, s in values) / len(values)
    signal = max(0.0, spread - sampling)
    weight = signal / (signal + sampling) if signal + sampling > 0 else 0.0
    out = []
    for c, e in zip(aa, excess, strict=True):
        pool = nested._pooled(total, count, c.processes < 2)
        out.append(pool if e is None else max(pool, pool + weight * (e[1] - pool), 0.0))
    return out


def _old_null(grid: Any, thresholds: Any, confidence: float = 0.95) -> Any:
    tests = ORIGINAL["interval_tests"](grid, thresholds, confidence)
    changes = grid.changes(confidence=confidence)
    return verdicts.IntervalTests([c.p for c in changes], tests.alert, tests.quiet_alert, None)


def _no_fcr(grid: Any, thresholds: Any, confidence: float = 0.95) -> Any:
    tests = ORIGINAL["interval_tests"](grid, thresholds, confidence)
    return verdicts.IntervalTests(tests.beyond, tests.alert, tests.quiet_alert, None)


def _grid_with(**forced: Any) -> Callable[..., None]:
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        ORIGINAL["grid_init"](self, *args, **{**kwargs, **forced})
    return init


def _point_threshold(*args: Any, **kwargs: Any) -> Any:
    """The threshold from k x |twin's change| (standard_error is read for it only, in
    the sim's glue, for cases over processes)."""
    nested.standard_error = lambda c: abs(math.log(c.ratio)) if c.ratio > 0 else math.nan
    try:
        return ORIGINAL["judge"](*args, **kwargs)
    finally:
        nested.standard_error = ORIGINAL["standard_error"]


def _base_alone() -> None:
    """PR against base alone, as before the twin was a second copy of base."""
    return None


# name: {patch target: replacement}; every variant but the last four runs without
# moderated variances (the rules of 1d0638e), and all but the last compare the PR with
# base alone (before compare.second_replicate).
BASE_ALONE = {"twin_share": _base_alone}
UNMODERATED = {"grid_init": _grid_with(moderate=False), **BASE_ALONE}
VARIANTS: dict[str, dict[str, Any]] = {
    "nothing undone": {},
    "BH on \"no change\" and the interval's bound vs t (the old null)":
        {"interval_tests": _old_null},
    "the old null, no τ², threshold k × \\|twin point\\|":
        {"interval_tests": _old_null, "unmodelled_variances": _no_tau,
         "judge": _point_threshold},
    "no per-case y² − s² bound (the pooled τ² only)":
        {"unmodelled_variances": _pooled_only},
    "no τ² at all": {"unmodelled_variances": _no_tau},
    "the judged interval shown (no Benjamini–Yekutieli level)": {"interval_tests": _no_fcr},
    "threshold k × \\|twin point\\| instead of k × twin SE": {"judge": _point_threshold},
    "τ²'s degrees of freedom infinite instead of cases − 1":
        {"grid_init": _grid_with(moderate=False, extra_df=math.inf)},
    "τ² shrunk toward the pool (empirical Bayes on y² − s²)":
        {"unmodelled_variances": _shrunk},
}
MODERATED = {
    "moderated variances": BASE_ALONE,
    "moderated variances, pooled τ² only": {"unmodelled_variances": _pooled_only,
                                            **BASE_ALONE},
    "moderated variances, τ² shrunk toward the pool": {"unmodelled_variances": _shrunk,
                                                       **BASE_ALONE},
    "**moderated variances, PR against the mean of base and twin (kept)**": {},
}


def _apply(patches: dict[str, Any]) -> None:
    nested.unmodelled_variances = patches.get("unmodelled_variances",
                                              ORIGINAL["unmodelled_variances"])
    verdicts.interval_tests = patches.get("interval_tests", ORIGINAL["interval_tests"])
    verdicts.GridSamples.__init__ = patches.get("grid_init", ORIGINAL["grid_init"])
    sim._judge = patches.get("judge", ORIGINAL["judge"])
    sim._twin_share = patches.get("twin_share", ORIGINAL["twin_share"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60, help="grids per figure")
    parser.add_argument("--seed", type=int, default=46)
    args = parser.parse_args()
    print("| 1d0638e with … | +2 % | +3 % |")
    print("|---|---|---|")
    rows = [(name, {**UNMODERATED, **p}) for name, p in VARIANTS.items()]
    rows += list(MODERATED.items())
    for name, patches in rows:
        _apply(patches)
        cells = [sim.power(args.trials, args.seed, effect, 0.0) for effect in (0.02, 0.03)]
        print(f"| {name} | " + " | ".join(f"{c:.1%}" for c in cells) + " |", flush=True)
    _apply({})


if __name__ == "__main__":
    main()
