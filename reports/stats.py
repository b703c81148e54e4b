"""Statistics over rounds: the one implementation behind summaries, verdicts and calibration.

The round is the unit of replication (samples inside one block are not
independent), so every statistic starts from the per-round median of a block
and treats rounds as the independent observations. Changes are ratios, handled
as logs internally:

- same run: per round, log(PR / base); the change is the median over rounds;
- separate runs: per round, log(arm / in-run control) in each file; the change
  is the difference of their medians (the double ratio), so machine speed
  cancels.

Intervals are distribution-free: the binomial order-statistic interval of a
median (coverage >= the nominal level for any continuous distribution, at any
round count), with the exact sign test as its p-value, so "significant" and
"the interval excludes no change" always agree. A percentile bootstrap of a
median is anti-conservative at small round counts (87.5 % coverage at 7 rounds),
which is why it is not used for verdicts. Everything is vectorized: cases with
the same round count are stacked into one array and go through one kernel call.
The family decomposition (fit_family) still bootstraps, because a slope over
depths has no order-statistic interval; it is a descriptive finding, not a
verdict.

Processes, the replication unit above rounds, and their t intervals: reports.nested.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epbench.core.model import Case
from epbench.reports import defaults

if TYPE_CHECKING:
    import numpy as np

# The RNG stream of the family bootstrap (kept apart from any future resampling job).
_STREAM_FAMILY = 2


@dataclass(frozen=True)
class Change:
    """A change as a ratio (1.0 = no change) with its interval and p-value for 'no change'."""

    ratio: float
    lo: float
    hi: float
    p: float
    n: int  # rounds behind it (paired) or the smaller side (two runs)
    processes: int = 1  # processes behind it (the smaller side for two runs)
    # Log-scale standard error and degrees of freedom of a t interval over processes
    # (NaN for the order-statistic intervals of a single process).
    se: float = math.nan
    df: float = math.nan

    @property
    def pct(self) -> float:
        return self.ratio - 1.0

    def to_dict(self) -> dict[str, float | int]:
        return {"ratio": self.ratio, "lo": self.lo, "hi": self.hi, "p": self.p, "n": self.n,
                "processes": self.processes}


NAN_CHANGE = Change(math.nan, math.nan, math.nan, math.nan, 0)


def finite(x: float | None) -> float | None:
    """x as a float, or None when it is missing, NaN or infinite (JSON has no NaN)."""
    return float(x) if x is not None and math.isfinite(x) else None


def min_rounds(confidence: float, sides: int = 1) -> int:
    """The fewest rounds whose exact interval at `confidence` is bounded (6 at 95 %; 7 per
    run for a double ratio, whose alpha is split between its two runs)."""
    alpha = (1.0 - confidence) / sides
    n = 1
    while order_statistic_rank(n, alpha) < 0:
        n += 1
    return n


def _bounded_exp(x: np.ndarray) -> np.ndarray:
    """exp of a log bound; an unbounded interval (too few rounds) becomes NaN, not 0 or inf."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(x), np.exp(np.where(np.isfinite(x), x, 0.0)), np.nan)


# --------------------------------------------------------------------------- rounds


def round_medians(case: Case, arm: str) -> np.ndarray:
    """Per-round median ns per Run of `arm` in one case of a results document (NaN if absent)."""

    return round_values(case, arm, "median")


def round_values(case: Case, arm: str, field: str) -> np.ndarray:
    """Per round, one figure of `arm`'s block summary (median, min, q1, q3, n); NaN if absent."""
    import numpy as np

    out = []
    for rnd in case.rounds:
        value = rnd.block_value(arm, field)
        out.append(np.nan if value is None else float(value))
    return np.asarray(out, dtype=np.float64)


def round_labels(case: Case, field: str) -> np.ndarray:
    """Per round, its `process` or `session` index (0 for files that predate them)."""
    import numpy as np

    if field not in ("process", "session"):
        raise ValueError(f"rounds are labelled by process or session, not {field!r}")
    return np.asarray([int(getattr(r, field)) for r in case.rounds], dtype=np.int64)


def quiet_mask(case: Case) -> np.ndarray:
    """Per round: did the idle gate pass (True) or was the round measured under load."""
    import numpy as np

    return np.array([bool(r.quiet) for r in case.rounds], dtype=bool)


def log_ratios(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """log(num / den) per round, keeping only rounds where both are positive numbers."""
    import numpy as np

    ok = np.isfinite(num) & np.isfinite(den) & (num > 0) & (den > 0)
    # One division then one log: a factor common to num and den cancels before rounding.
    return np.log(num[ok] / den[ok])


# --------------------------------------------------------------------------- kernels


def _rng(seed: int, stream: int, *shape: int) -> np.random.Generator:
    import numpy as np

    return np.random.default_rng([seed, stream, *shape])


def _quantiles(boot: np.ndarray, confidence: float, axis: int = -1) -> tuple[Any, Any]:
    import numpy as np

    alpha = 1.0 - confidence
    lo, hi = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0], axis=axis)
    return lo, hi


def sign_tail(n: int) -> np.ndarray:
    """P(Binomial(n, 1/2) <= j) for j = 0..n."""
    import numpy as np

    return np.array(_sign_tail(n))


@functools.lru_cache(maxsize=256)
def _sign_tail(n: int) -> tuple[float, ...]:
    # Exact integer counts while 2^n fits a float; beyond that, log-space terms
    # (the tails that matter are far from underflow at any realistic round count).
    if n <= 1000:
        counts = itertools.accumulate(math.comb(n, j) for j in range(n + 1))
        return tuple(min(1.0, c / 2**n) for c in counts)
    log_total = n * math.log(2.0)
    terms = (math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                      - log_total) for j in range(n + 1))
    return tuple(min(1.0, c) for c in itertools.accumulate(terms))


@functools.lru_cache(maxsize=1024)
def order_statistic_rank(n: int, alpha: float) -> int:
    """The 0-based rank k of the distribution-free interval [x_(k), x_(n-1-k)] for a median.

    The largest k whose interval misses the median with probability
    2 P(B <= k) <= alpha (B ~ Binomial(n, 1/2)), so coverage >= 1 - alpha for any
    continuous distribution. -1 when even [min, max] does not reach the level (an
    unbounded interval: with n = 5 rounds [min, max] covers only 93.75 %).
    """
    tail = _sign_tail(n)
    ok = [k for k in range(n // 2) if 2.0 * tail[k] <= alpha]
    return ok[-1] if ok else -1


def _order_interval(rows: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact interval of each sorted row's median at level 1 - alpha (+-inf when too short)."""
    import numpy as np

    k = order_statistic_rank(rows.shape[1], alpha)
    if k < 0:
        inf = np.full(rows.shape[0], np.inf)
        return -inf, inf
    return rows[:, k], rows[:, rows.shape[1] - 1 - k]


def _sign_test_p(rows: np.ndarray) -> np.ndarray:
    """Exact two-sided sign-test p-value for 'median 0', per row.

    Rounds equal to 0 count against rejection on both sides (min(#<=0, #>=0)), which
    makes p <= alpha exactly when the level-(1 - alpha) order-statistic interval
    excludes 0: the p-value and the interval can never disagree.
    """
    import numpy as np

    tail = sign_tail(rows.shape[1])
    fewer = np.minimum((rows <= 0.0).sum(axis=1), (rows >= 0.0).sum(axis=1))
    return np.minimum(1.0, 2.0 * tail[fewer])


def _paired_kernel(
    x: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row of x (cases x rounds): median, exact order-statistic CI and sign-test p."""
    import numpy as np

    rows = np.sort(x, axis=1)
    lo, hi = _order_interval(rows, 1.0 - confidence)
    return np.median(rows, axis=1), lo, hi, _sign_test_p(rows)


def _two_sample_kernel(
    a: np.ndarray, b: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: median(a) - median(b), with a distribution-free interval and p-value.

    The two runs are independent, so exact intervals for each median at level
    1 - alpha_a and 1 - alpha_b give an interval for their difference,
    [lo_a - hi_b, hi_a - lo_b], that covers with probability >= 1 - alpha_a - alpha_b
    (Bonferroni). We split alpha equally; conservative, but exact in the same
    distribution-free sense as the same-run interval. The p-value is the smallest
    alpha whose interval excludes 0, so it agrees with the interval at every level.
    """
    import numpy as np

    alpha = 1.0 - confidence
    rows_a, rows_b = np.sort(a, axis=1), np.sort(b, axis=1)
    lo_a, hi_a = _order_interval(rows_a, alpha / 2.0)
    lo_b, hi_b = _order_interval(rows_b, alpha / 2.0)
    point = np.median(rows_a, axis=1) - np.median(rows_b, axis=1)
    # p: the smallest alpha whose equal-split interval excludes 0. The interval only
    # narrows at the alphas where a side's rank steps up, 2 x its miss probability.
    miss1 = 2.0 * sign_tail(rows_a.shape[1])[: rows_a.shape[1] // 2]
    miss2 = 2.0 * sign_tail(rows_b.shape[1])[: rows_b.shape[1] // 2]
    p = np.ones(rows_a.shape[0])
    for level in sorted({float(v) for v in np.concatenate([2.0 * miss1, 2.0 * miss2])}):
        if level >= 1.0:
            break
        lo1, hi1 = _order_interval(rows_a, level / 2.0)
        lo2, hi2 = _order_interval(rows_b, level / 2.0)
        excludes = (lo1 - hi2 > 0.0) | (hi1 - lo2 < 0.0)
        p = np.where(excludes & (p == 1.0), level, p)
    return point, lo_a - hi_b, hi_a - lo_b, p


# --------------------------------------------------------------------------- changes


def paired_changes(
    per_case_log_ratios: Sequence[np.ndarray],
    *,
    confidence: float = defaults.CONFIDENCE,
) -> list[Change]:
    """Changes from per-round log ratios of one run (PR / base, or arm / control).

    Rows with the same round count go through one kernel call. Fewer than 2 rounds
    give NaN (the caller decides what too few rounds means).
    """
    import numpy as np

    out: list[Change] = [NAN_CHANGE] * len(per_case_log_ratios)
    groups: dict[int, list[int]] = {}
    for i, values in enumerate(per_case_log_ratios):
        if len(values) >= 2:
            groups.setdefault(len(values), []).append(i)
    for n, members in sorted(groups.items()):
        x = np.stack([np.asarray(per_case_log_ratios[i], dtype=np.float64) for i in members])
        point, lo, hi, p = _paired_kernel(x, confidence)
        lo, hi = _bounded_exp(lo), _bounded_exp(hi)
        for j, i in enumerate(members):
            out[i] = Change(
                float(np.exp(point[j])), float(lo[j]), float(hi[j]),
                float(p[j]), n,
            )
    return out


def double_ratio_changes(
    pr_vs_control: Sequence[np.ndarray],
    base_vs_control: Sequence[np.ndarray],
    *,
    confidence: float = defaults.CONFIDENCE,
) -> list[Change]:
    """Changes between two runs: (PR / its control) / (base / its control), per case.

    Inputs are per-round log(arm / control) of each run; a uniform machine slowdown
    of one run scales arm and control alike and cancels.
    """
    import numpy as np

    if len(pr_vs_control) != len(base_vs_control):
        raise ValueError("pr and base must list the same cases")
    out: list[Change] = [NAN_CHANGE] * len(pr_vs_control)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (a, b) in enumerate(zip(pr_vs_control, base_vs_control, strict=True)):
        if len(a) >= 2 and len(b) >= 2:
            groups.setdefault((len(a), len(b)), []).append(i)
    for (n1, n2), members in sorted(groups.items()):
        a = np.stack([np.asarray(pr_vs_control[i], dtype=np.float64) for i in members])
        b = np.stack([np.asarray(base_vs_control[i], dtype=np.float64) for i in members])
        point, lo, hi, p = _two_sample_kernel(a, b, confidence)
        lo, hi = _bounded_exp(lo), _bounded_exp(hi)
        for j, i in enumerate(members):
            out[i] = Change(
                float(np.exp(point[j])), float(lo[j]), float(hi[j]),
                float(p[j]), min(n1, n2),
            )
    return out


# --------------------------------------------------------------------------- multiple testing


def benjamini_hochberg(
    pvalues: Sequence[float], fdr: float = defaults.FDR
) -> tuple[list[bool], list[float]]:
    """Benjamini-Hochberg step-up: which hypotheses are rejected at `fdr`, and the q-values.

    NaN p-values (no test) are never rejected and do not count towards m.
    """
    import numpy as np

    p = np.asarray(pvalues, dtype=np.float64)
    tested = np.flatnonzero(np.isfinite(p))
    rejected = np.zeros(len(p), dtype=bool)
    q = np.full(len(p), np.nan)
    m = len(tested)
    if m == 0:
        return rejected.tolist(), q.tolist()
    order = tested[np.argsort(p[tested], kind="stable")]
    ranked = p[order]
    ranks = np.arange(1, m + 1)
    passing = np.flatnonzero(ranked <= ranks * fdr / m)
    if passing.size:
        rejected[order[: passing[-1] + 1]] = True
    # q_(i) = min over j >= i of p_(j) * m / j, capped at 1.
    adjusted = np.minimum.accumulate((ranked * m / ranks)[::-1])[::-1]
    q[order] = np.minimum(adjusted, 1.0)
    return rejected.tolist(), q.tolist()


# --------------------------------------------------------------------------- drift


# Fewer rounds than this give no drift estimate: a slope from a handful of rounds is
# mostly the noise of its two or three extreme rounds.
MIN_DRIFT_ROUNDS = 8


def control_drift(values: np.ndarray) -> float:
    """How much a series of per-round medians moved from the first round to the last.

    The Theil-Sen slope of log(value) over the round index (the median of the
    slopes between every pair of rounds), carried over the whole run: 0.03 means
    the control got 3 % slower from start to end. The median of all pairwise
    slopes ignores a few rounds hit by interference, even at either end.
    """
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    index = np.flatnonzero(np.isfinite(v) & (v > 0))
    if len(index) < MIN_DRIFT_ROUNDS:
        return math.nan
    logs = np.log(v[index])
    i, j = np.triu_indices(len(index), k=1)
    slope = float(np.median((logs[j] - logs[i]) / (index[j] - index[i])))
    moved = slope * (index[-1] - index[0])
    # A file's times may span 5e-324 to 1e308 ns: past exp's range the drift is infinite
    # (no drift is reported from it), not an OverflowError.
    return math.expm1(moved) if moved < _EXP_RANGE else math.inf


# math.exp overflows just above 709.78.
_EXP_RANGE = 709.0


# --------------------------------------------------------------------------- decomposition


def fit_lines(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope and intercept of y over x along the last axis (vectorized)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    xc = x - x.mean()
    slope = (y * xc).sum(axis=-1) / (xc * xc).sum()
    intercept = y.mean(axis=-1) - slope * x.mean()
    return slope, intercept


@dataclass(frozen=True)
class FamilyFit:
    """Per-node cost (slope, ns per node) and per-Run cost (intercept, ns) of one arm."""

    slope: float
    slope_ci: tuple[float, float]
    intercept: float
    intercept_ci: tuple[float, float]
    boot_slope: np.ndarray
    boot_intercept: np.ndarray


def fit_family(
    depths: Sequence[int],
    per_case_rounds: Sequence[Mapping[str, np.ndarray]],
    arms: Sequence[str],
    *,
    confidence: float = defaults.CONFIDENCE,
    resamples: int = defaults.RESAMPLES,
    seed: int = defaults.SEED,
    processes: Sequence[np.ndarray] | None = None,
) -> dict[str, FamilyFit]:
    """Fit p50 = intercept + slope x depth per arm over the cases of one chain family.

    `per_case_rounds[j][arm]` are the per-round medians of case j (depth depths[j]).
    Rounds are resampled per case with one index draw shared by all arms of the case,
    because the arms of one round ran side by side (paired). With `processes[j]` (the
    process of each round) and two or more processes, the resampling is hierarchical:
    processes with replacement, then rounds within each, so the interval carries what
    two processes differ by (the same discipline as the verdicts).
    """
    import numpy as np

    if len(set(depths)) < 2:
        raise ValueError("a family fit needs at least two distinct depths")
    d = np.asarray(depths, dtype=np.float64)
    rng = _rng(seed, _STREAM_FAMILY, len(depths))
    boot = {arm: np.empty((resamples, len(depths))) for arm in arms}
    point = {arm: np.empty(len(depths)) for arm in arms}
    for j, rounds in enumerate(per_case_rounds):
        n = min(len(rounds[arm]) for arm in arms)
        labels = None if processes is None else np.asarray(processes[j])[:n]
        idx = (_hierarchical_indices(labels, resamples, rng)
               if labels is not None and len(np.unique(labels)) >= 2
               else rng.integers(0, n, size=(resamples, n)))
        for arm in arms:
            values = np.asarray(rounds[arm], dtype=np.float64)[:n]
            point[arm][j] = np.median(values)
            boot[arm][:, j] = np.median(values[idx], axis=1)
    fits: dict[str, FamilyFit] = {}
    for arm in arms:
        slope, intercept = fit_lines(d, point[arm])
        b_slope, b_intercept = fit_lines(d, boot[arm])
        s_lo, s_hi = _quantiles(b_slope, confidence)
        i_lo, i_hi = _quantiles(b_intercept, confidence)
        fits[arm] = FamilyFit(
            float(slope), (float(s_lo), float(s_hi)), float(intercept),
            (float(i_lo), float(i_hi)), b_slope, b_intercept,
        )
    return fits


def _hierarchical_indices(labels: np.ndarray, resamples: int,
                          rng: np.random.Generator) -> np.ndarray:
    """Round indices of `resamples` two-stage resamples: P processes drawn with replacement,
    then each one's rounds with replacement (m per process, the smallest process's count)."""
    import numpy as np

    groups = [np.flatnonzero(labels == p) for p in np.unique(labels)]
    m = min(len(g) for g in groups)
    members = np.stack([g[:m] for g in groups])  # processes x m
    chosen = rng.integers(0, len(groups), size=(resamples, len(groups)))
    within = rng.integers(0, m, size=(resamples, len(groups), m))
    return members[chosen[..., None], within].reshape(resamples, len(groups) * m)


def ratio_with_ci(
    num: np.ndarray, den: np.ndarray, point: float, confidence: float = defaults.CONFIDENCE
) -> tuple[float, float, float]:
    """A ratio of two bootstrapped quantities: point and percentile CI (NaN if den crosses 0)."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        boot = num / den
    if not np.all(np.isfinite(boot)) or np.any(den <= 0):
        return point, math.nan, math.nan
    lo, hi = _quantiles(boot, confidence)
    return point, float(lo), float(hi)
