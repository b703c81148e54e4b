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

if TYPE_CHECKING:
    import numpy as np

# Significance of the permutation test of each split.
SIGNIFICANCE = 0.01
# Shuffles per test; the smallest attainable p is 1 / (1 + PERMUTATIONS).
PERMUTATIONS = 199
# Fewest points on either side of a change point: one odd run cannot make a segment.
MIN_SEGMENT = 4

def min_points(significance: float = SIGNIFICANCE) -> int:
    """The fewest points in which even a clean step can be significant.

    A shuffle reproduces the split of n points into halves with probability about
    2 / C(n, n/2) (either order); with R shuffles p <= significance needs that well
    below the level: a quarter of it. 12 at the default 0.01 (9 points could never pass).
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
    # Prefix sums over the pairwise matrix M_ij = w_i w_j |z_i - z_j|, per split tau:
    # d_tt = sum over i, j < tau; d_tn = sum over i < tau, all j. Built from row sums
    # (and row sums below the diagonal) so no 2-D cumulative sum is needed.
    m = np.abs(z[..., :, None] - z[..., None, :]) ** alpha * (w[..., :, None] * w[..., None, :])
    below = np.tril(np.ones((n, n), dtype=bool), -1)
    zero = np.zeros((*z.shape[:-1], 1))
    d_tn = np.concatenate([zero, m.sum(-1).cumsum(-1)], -1)
    d_tt = np.concatenate([zero, (2.0 * np.where(below, m, 0.0).sum(-1)).cumsum(-1)], -1)
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


def e_divisive(
    values: Sequence[float] | np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
    *,
    significance: float = SIGNIFICANCE,
    permutations: int = PERMUTATIONS,
    min_segment: int = MIN_SEGMENT,
    alpha: float = ALPHA,
    seed: int | None = None,
) -> list[ChangePoint]:
    """The significant change points of `values`, sorted by index.

    `values` are in order (commit order for the history), finite; `weights` are
    relative precisions (None: all equal). A series shorter than 2 x min_segment
    has no testable split and gives [] (callers say so; see MIN_POINTS).
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
    while True:
        best: tuple[float, int, int, int] | None = None  # (q, tau, start, end)
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            if end - start < 2 * min_segment:
                continue
            q = _split_statistics(z[start:end], w[start:end], min_segment, alpha)
            tau = int(np.argmax(q))
            if best is None or q[tau] > best[0]:
                best = (float(q[tau]), tau, start, end)
        if best is None:
            break
        q_obs, tau, start, end = best
        seg_z, seg_w = z[start:end], w[start:end]
        order = np.argsort(rng.random((permutations, end - start)), axis=1)
        q_perm = _split_statistics(seg_z[order], seg_w[order], min_segment, alpha).max(axis=1)
        # A tiny tolerance: a permutation that reproduces the observed split exactly
        # must count as "as extreme" despite rounding in the cumulative sums.
        p = (1.0 + np.count_nonzero(q_perm >= q_obs * (1.0 - 1e-12))) / (1.0 + permutations)
        if p > significance:
            break
        found.append(ChangePoint(index=start + tau, p=float(p), q=q_obs))
        bounds = sorted({*bounds, start + tau})
    return sorted(found, key=lambda c: c.index)
