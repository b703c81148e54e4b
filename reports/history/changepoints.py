"""Change points in a series, in commit order: e-divisive with means (Matteson & James, 2014).

The method, as used here:

- The statistic. For a segment z_0..z_{n-1} and a split tau, the energy distance
  between the left part X = z_<tau and the right part Y = z_>=tau, scaled by
  tau (n - tau) / n:

      Q(tau) = tau (n - tau) / n x (2 E|X - Y| - E|X - X'| - E|Y - Y'|)

  with exponent alpha = 1 (differences in means and in spread both count; alpha
  = 1 is the paper's default). All splits of a segment are evaluated at once from
  cumulative sums of the pairwise-distance matrix, O(n^2) per segment.
- Weights. A point may carry a weight (the history uses 1 / half-width^2 of its
  interval, so a run measured with a wide interval pulls less). Every mean above
  becomes a weighted mean over pairs (weight w_i w_j); with equal weights it is the
  unweighted statistic exactly. Weights are clipped to [1/4, 4] x their median so a
  single very tight point cannot decide a split alone.
- Bisection. Find the best split in every current segment, take the largest, and
  test it; if it is significant, keep it and repeat on the new segments; stop at the
  first split that is not.
- The test. Permutation: the segment's points (with their weights) are shuffled
  `permutations` times and the best split's Q recomputed each time; p = (1 + #Q_perm
  >= Q) / (1 + permutations). Under no change, points of a segment are exchangeable,
  so p is exact whatever the noise distribution. The RNG is seeded from the series,
  so the same series always gives the same answer.

Defaults (SIGNIFICANCE, PERMUTATIONS, MIN_SEGMENT) are measured on synthetic series
with the noise of this machine's runs: docs/history.md quotes the false-positive and
detection rates they give, and tests pin them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epbench.reports.stats import benjamini_hochberg

if TYPE_CHECKING:
    import numpy as np

# Significance of the permutation test of each split.
SIGNIFICANCE = 0.01
# Shuffles per test; the smallest attainable p is 1 / (1 + PERMUTATIONS).
PERMUTATIONS = 199
# Fewest points on either side of a change point: one odd run cannot make a segment.
MIN_SEGMENT = 4

def min_points(significance: float = SIGNIFICANCE) -> int:
    """The fewest points in which a clean step is significant for most shuffle seeds.

    A shuffle reproduces the split of n points into halves with probability about
    2 / C(n, n/2) (either order); with R shuffles p <= significance needs that well
    below the level: a quarter of it. 12 at the default 0.01, where a clean step is
    significant for 94 % of seeds. Fewer points are not impossible, only unreliable:
    9 points pass for about 1 seed in 5 (19 % of 300), so whether a short series
    shows its step would depend on the shuffles, not on the data.
    """
    n = 2 * MIN_SEGMENT
    while 2.0 / math.comb(n, n // 2) > significance / 4.0:
        n += 1
    return n


# A series shorter than this is not tested (callers say how many it needs).
MIN_POINTS = min_points()
# The exponent of the distances (0 < ALPHA < 2).
ALPHA = 1.0
# Weights are clipped to this factor around their median.
WEIGHT_CLIP = 4.0


@dataclass(frozen=True)
class ChangePoint:
    """A change at `index`: points index.. differ from the points before it."""

    index: int  # the first point after the change
    p: float  # the permutation test's p-value
    q: float  # the statistic


def _split_statistics(z: np.ndarray, w: np.ndarray, min_segment: int,
                      alpha: float = 1.0) -> np.ndarray:
    """Q(tau) for every split tau of each row of z (..., n), weighted by w (..., n).

    Returns (..., n + 1) with -inf where a split leaves fewer than min_segment points
    on a side. Works on a stack of permutations at once.
    """
    import numpy as np

    n = z.shape[-1]
    if n == 0:  # no point, so no split of min_segment a side (the running sums need one)
        return np.full((*z.shape[:-1], 1), -np.inf)
    # Prefix sums over the pairwise matrix M_ij = w_i w_j |z_i - z_j|, per split tau:
    # d_tt = sum over i, j < tau; d_tn = sum over i < tau, all j. Built from row sums
    # (and row sums below the diagonal) so no 2-D cumulative sum is needed.
    # In place, with no power for alpha 1 and no product for unit weights: the matrix is
    # (permutations, n, n), and these passes over it were most of a detect's time.
    m = z[..., :, None] - z[..., None, :]
    np.abs(m, out=m)
    if alpha != 1.0:
        np.power(m, alpha, out=m)
    if not np.all(w == 1.0):
        m *= w[..., :, None]
        m *= w[..., None, :]
    # One running sum along each row gives both: its last column is the row's sum, its
    # diagonal the sum below the diagonal (M_ii is 0).
    np.cumsum(m, axis=-1, out=m)
    zero = np.zeros((*z.shape[:-1], 1))
    d_tn = np.concatenate([zero, m[..., -1].cumsum(-1)], -1)
    d_tt = np.concatenate([zero, (2.0 * np.diagonal(m, axis1=-2, axis2=-1)).cumsum(-1)], -1)
    d_nn = d_tn[..., n:]
    # The same sums for the weights alone, in closed form: w_i w_j summed over the pairs.
    cw = np.concatenate([zero, w.cumsum(-1)], -1)
    w2 = np.concatenate([zero, (w * w).cumsum(-1)], -1)
    total, total2 = cw[..., n:], w2[..., n:]
    w_tt, w_tn, w_nn = cw * cw, cw * total, total * total
    taus = np.arange(n + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (d_tn - d_tt) / (w_tn - w_tt)
        # Within a side: pairs i != k (the diagonal is 0 in distance, w_i^2 in weight).
        left = d_tt / (w_tt - w2)
        right = (d_nn - 2.0 * d_tn + d_tt) / (w_nn - 2.0 * w_tn + w_tt - (total2 - w2))
        q = taus * (n - taus) / n * (2.0 * between - left - right)
    ok = (taus >= min_segment) & (taus <= n - min_segment)
    return np.where(ok, q, -np.inf)


def _clip_weights(weights: np.ndarray) -> np.ndarray:
    import numpy as np

    w = np.asarray(weights, dtype=np.float64)
    good = np.isfinite(w) & (w > 0)
    if not good.any():
        return np.ones_like(w)
    mid = float(np.median(w[good]))
    w = np.where(good, w, mid)
    return np.clip(w, mid / WEIGHT_CLIP, mid * WEIGHT_CLIP) / mid


def _seed(values: np.ndarray) -> int:
    # The same series always gets the same shuffles (and so the same p-values).
    digest = hashlib.sha256(values.tobytes()).digest()
    return int.from_bytes(digest[:8], "little")


def _best_split(z: np.ndarray, w: np.ndarray, bounds: Sequence[int], min_segment: int,
                alpha: float) -> tuple[float, int, int, int] | None:
    """The largest Q over every current segment's best split: (q, tau, start, end)."""
    import numpy as np

    best: tuple[float, int, int, int] | None = None
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        if end - start < 2 * min_segment:
            continue
        q = _split_statistics(z[start:end], w[start:end], min_segment, alpha)
        tau = int(np.argmax(q))
        if best is None or q[tau] > best[0]:
            best = (float(q[tau]), tau, start, end)
    return best


def _permutation_p(seg_z: np.ndarray, seg_w: np.ndarray, q_obs: float, permutations: int,
                   min_segment: int, alpha: float, rng: np.random.Generator) -> float:
    """p = (1 + #Q_perm >= Q) / (1 + permutations), shuffled in chunks (memory n^2)."""
    import numpy as np

    hits, done, chunk = 0, 0, 500
    while done < permutations:
        size = min(chunk, permutations - done)
        order = np.argsort(rng.random((size, len(seg_z))), axis=1)
        q_perm = _split_statistics(seg_z[order], seg_w[order], min_segment, alpha).max(axis=1)
        # A tiny tolerance: a permutation that reproduces the observed split exactly
        # must count as "as extreme" despite rounding in the cumulative sums.
        hits += int(np.count_nonzero(q_perm >= q_obs * (1.0 - 1e-12)))
        done += size
    return (1.0 + hits) / (1.0 + permutations)


def e_divisive(
    values: Sequence[float] | np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
    *,
    significance: float = SIGNIFICANCE,
    permutations: int = PERMUTATIONS,
    min_segment: int = MIN_SEGMENT,
    alpha: float = ALPHA,
    seed: int | None = None,
    max_changes: int | None = None,
) -> list[ChangePoint]:
    """The significant change points of `values`, sorted by index.

    `values` are in order (commit order for the history), finite; `weights` are
    relative precisions (None: all equal). A series shorter than 2 x min_segment
    has no testable split and gives [] (callers say so; see MIN_POINTS). With
    `max_changes`, bisection stops after that many.
    """
    import numpy as np

    z = np.asarray(values, dtype=np.float64)
    if z.ndim != 1 or not np.all(np.isfinite(z)):
        raise ValueError("values must be a 1-D series of finite numbers")
    w = np.ones_like(z) if weights is None else _clip_weights(np.asarray(weights))
    if w.shape != z.shape:
        raise ValueError("weights must match values")
    rng = np.random.default_rng(_seed(z) if seed is None else seed)
    found: list[ChangePoint] = []
    bounds = [0, len(z)]
    while max_changes is None or len(found) < max_changes:
        best = _best_split(z, w, bounds, min_segment, alpha)
        if best is None:
            break
        q_obs, tau, start, end = best
        p = _permutation_p(z[start:end], w[start:end], q_obs, permutations, min_segment,
                           alpha, rng)
        if p > significance:
            break
        found.append(ChangePoint(index=start + tau, p=float(p), q=q_obs))
        bounds = sorted({*bounds, start + tau})
    return sorted(found, key=lambda c: c.index)


# --------------------------------------------------------------------------- many series

# A change point must move the level by at least this much (a fraction), whatever p.
MIN_CHANGE = 0.01
# The largest lag-1 autocorrelation pre-whitening removes (beyond it the series is
# mostly drift, which no test over commit order can tell from change).
MAX_RHO = 0.8
# Shuffles are refined for a series whose first p is at most this many times the level
# (no larger p can pass BH at that level), to about 4 m / level shuffles (at most
# MAX_PERMUTATIONS), so the smallest p BH needs, level / m, is reachable.
REFINE = 2.0
MAX_PERMUTATIONS = 20000


# A difference this many robust sds from the others' median is a step's (lag1_rho).
OUTLYING = 3.0


def lag1_rho(values: np.ndarray, min_segment: int = MIN_SEGMENT) -> float:
    """The lag-1 autocorrelation of a series' noise, clipped to [0, MAX_RHO], from its
    first differences: for AR(1) noise corr(d_t, d_(t-1)) = -(1 - rho) / 2. A step moves
    one difference only, the one across the series' best split, which is left out (with
    its two lag products) when it stands out from the others by OUTLYING robust sds:
    kept, a step large against the noise made the differences
    look like a random walk and the estimate rose to the cap (0.8 for a 3 % step at
    0.64 % noise), whitening the step away (5 % of such steps missed). The residuals
    around a fitted split are not used instead: on a null series the split absorbs the
    wander and leaves rho 0.4 looking like 0.3, 13 % of detects false instead of 7 %."""
    import numpy as np

    z = np.asarray(values, dtype=np.float64)
    d = np.diff(z)
    if len(d) < 4:
        return 0.0
    skip = -1  # the difference across the best split (none in a series too short to split)
    if len(z) >= 2 * min_segment:
        k = int(np.argmax(_split_statistics(z, np.ones_like(z), min_segment))) - 1
        rest = np.delete(d, k)
        centre = float(np.median(rest))
        spread = 1.4826 * float(np.median(np.abs(rest - centre)))  # robust sd of the others
        # Left out only when it stands out: left out always, AR(1) noise at rho 0.4 was
        # estimated low and 17 of 120 null detects were false instead of 10.
        if abs(d[k] - centre) > OUTLYING * spread:
            skip = k
    kept = np.delete(d, skip) if skip >= 0 else d
    mean = float(kept.mean())
    den = float(np.mean((kept - mean) ** 2))
    if den <= 0.0:
        return 0.0
    products = (d[1:] - mean) * (d[:-1] - mean)
    if skip >= 0:  # products k-1 and k hold d[skip]
        products = np.delete(products, [k for k in (skip - 1, skip) if 0 <= k < len(products)])
    return min(MAX_RHO, max(0.0, 1.0 + 2.0 * float(products.mean()) / den))


def prewhiten(values: np.ndarray, rho: float) -> np.ndarray:
    """u_0 = sqrt(1 - rho^2) z_0, u_t = z_t - rho z_(t-1) (Prais-Winsten): AR(1) noise
    becomes independent, so shuffling it is fair again; a step of d stays a step of
    (1 - rho) d at the same place."""
    import numpy as np

    z = np.asarray(values, dtype=np.float64)
    if rho <= 0.0:
        return z
    return np.concatenate([[math.sqrt(1.0 - rho * rho) * z[0]], z[1:] - rho * z[:-1]])


def detect_many(
    series: Sequence[Sequence[float] | np.ndarray],
    weights: Sequence[Sequence[float] | np.ndarray | None] | None = None,
    *,
    significance: float = SIGNIFICANCE,
    permutations: int = PERMUTATIONS,
    min_segment: int = MIN_SEGMENT,
    alpha: float = ALPHA,
    min_change: float = MIN_CHANGE,
) -> list[list[ChangePoint]]:
    """The change points of every series of one `detect`, the false-alarm rate held per
    detect, not per point.

    1. Each series is pre-whitened for lag-1 autocorrelation (lag1_rho), so
       neighbouring commits' shared noise does not pass for a change.
    2. Its first split gets a permutation p-value; a series whose p is within REFINE x
       the level gets enough shuffles (4 m / significance) to be resolved at BH's level.
    3. Benjamini-Hochberg across the m series at `significance` picks the series with a
       change; in those, bisection goes on at BH's level.
    4. A change point whose level moves by less than `min_change` (medians of the
       original series either side) is dropped, however small its p.
    Series shorter than 2 x min_segment get []. The shuffles are seeded from each series.
    """
    import numpy as np

    zs = [np.asarray(v, dtype=np.float64) for v in series]
    ws = list(weights) if weights is not None else [None] * len(zs)
    white, firsts = [], []
    for z, w in zip(zs, ws, strict=True):
        if len(z) < 2 * min_segment:
            white.append(z)
            firsts.append(math.nan)
            continue
        u = prewhiten(z, lag1_rho(z, min_segment))
        white.append(u)
        (first,) = e_divisive(u, w, significance=1.0, permutations=permutations,
                              min_segment=min_segment, alpha=alpha, max_changes=1) or [None]
        firsts.append(first.p if first is not None else 1.0)
    m = sum(math.isfinite(p) for p in firsts)
    fine = max(permutations, min(MAX_PERMUTATIONS, math.ceil(4.0 * max(m, 1) / significance)))
    for i, p in enumerate(firsts):
        if math.isfinite(p) and p <= REFINE * significance and fine > permutations:
            (first,) = e_divisive(white[i], ws[i], significance=1.0, permutations=fine,
                                  min_segment=min_segment, alpha=alpha, max_changes=1)
            firsts[i] = first.p
    rejected, _ = benjamini_hochberg(firsts, significance)
    level = significance * sum(rejected) / m if m else 0.0
    out: list[list[ChangePoint]] = []
    for z, u, w, chosen in zip(zs, white, ws, rejected, strict=True):
        if not chosen:
            out.append([])
            continue
        cps = e_divisive(u, w, significance=level, permutations=fine, min_segment=min_segment,
                         alpha=alpha)
        edges = [0, *(c.index for c in cps), len(z)]
        kept = []
        for k, c in enumerate(cps):
            moved = float(np.median(z[c.index:edges[k + 2]]) - np.median(z[edges[k]:c.index]))
            if abs(math.expm1(moved)) >= min_change:
                kept.append(c)
        out.append(kept)
    return out
