"""The nested model: processes as the replication unit above rounds, t intervals.

Processes are the replication unit above rounds. A process's memory layout (library
load addresses, allocation alignment, the sessions' arenas) can shift an arm's speed
by an offset fixed for the process's life, so rounds of one process are not independent
draws of what a new process would show. With rounds from two or more processes, a
change is estimated per process (the median of its rounds' log ratios, sessions
rotated inside it) and the interval is Student's t over those per-process values:
the mean of P independent process-level values, P - 1 degrees of freedom, or Welch's
interval for the difference of two runs' means (the double ratio). This is the
standard estimator for a balanced nested design (rounds within sessions within
processes): the process-level values are independent and identically distributed
whatever the within-process variance, so their spread carries every component,
between-process, between-session and round-to-round, with the right weight. A
hierarchical bootstrap was rejected: with 3-8 processes it underestimates the
between-process term by a factor (P - 1) / P and its percentiles are coarse. A run
with a single process (or a file of schema 1) falls back to the exact order-statistic
interval over rounds, which covers only what that process measured and says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epbench.reports import defaults
from epbench.reports.stats import NAN_CHANGE, Change, double_ratio_changes, paired_changes

if TYPE_CHECKING:
    import numpy as np


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (continued fraction, Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below the mean
        return 1.0 - _betainc(b, a, 1.0 - x)
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * f / a


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _t_pdf(t: float, df: float) -> float:
    log_c = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1.0) / 2.0 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t, q in (0.5, 1): Newton's method on t_sf, kept inside
    a bracket that bisection narrows whenever a Newton step would leave it."""
    target = 1.0 - q
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > target:
        lo, hi = hi, hi * 2.0
    t = (lo + hi) / 2.0
    for _ in range(100):
        err = t_sf(t, df) - target  # decreasing in t
        if err > 0:
            lo = t
        else:
            hi = t
        step = err / _t_pdf(t, df)
        nxt = t + step
        if not lo < nxt < hi:
            nxt = (lo + hi) / 2.0
        if abs(nxt - t) <= 1e-14 * max(1.0, abs(t)):
            return nxt
        t = nxt
    return t


@dataclass(frozen=True)
class ProcessSample:
    """One case's per-round log ratios and the process each round ran in."""

    logs: np.ndarray
    processes: np.ndarray

    def per_process(self) -> np.ndarray:
        """The median log ratio of each process (the process-level values)."""
        import numpy as np

        return np.array([float(np.median(self.logs[self.processes == p]))
                         for p in np.unique(self.processes)])

    @property
    def n_processes(self) -> int:
        import numpy as np

        return len(np.unique(self.processes))

    def __len__(self) -> int:
        return len(self.logs)

    def shifted(self, by: float) -> ProcessSample:
        """The same rounds with `by` subtracted from every log ratio: testing the shifted
        sample against 'no change' tests the original against a change of exp(by)."""
        return ProcessSample(self.logs - by, self.processes)


def process_sample(num: np.ndarray, den: np.ndarray, processes: np.ndarray,
                   keep: np.ndarray | None = None) -> ProcessSample:
    """log(num / den) per round with its process label, over rounds where both are usable
    (and `keep` is True, e.g. the quiet rounds)."""
    import numpy as np

    ok = np.isfinite(num) & np.isfinite(den) & (num > 0) & (den > 0)
    if keep is not None:
        ok &= keep
    return ProcessSample(np.log(num[ok] / den[ok]), np.asarray(processes)[ok])


def _t_change(point: float, se: float, df: float, confidence: float, n: int,
              processes: int) -> Change:
    """A change from a log-scale point, its standard error and degrees of freedom."""
    if not (math.isfinite(se) and se > 0.0 and df >= 1.0):
        if math.isfinite(se) and se == 0.0 and df >= 1.0:  # identical processes
            return Change(math.exp(point), math.exp(point), math.exp(point),
                          0.0 if point != 0.0 else 1.0, n, processes, 0.0, df)
        return NAN_CHANGE
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * se
    p = min(1.0, 2.0 * t_sf(abs(point) / se, df))
    return Change(math.exp(point), math.exp(point - half), math.exp(point + half), p, n,
                  processes, se, df)


def satterthwaite_df(sampled: float, df: float, extra: float, extra_df: float) -> float:
    """The degrees of freedom of a variance sum `sampled` (df `df`) + `extra` (df
    `extra_df`; inf when known), by Welch-Satterthwaite."""
    if extra <= 0.0 or sampled + extra <= 0.0:
        return df
    tail = (sampled * sampled / df if sampled > 0.0 else 0.0) + (
        extra * extra / extra_df if math.isfinite(extra_df) else 0.0)
    return math.inf if tail <= 0.0 else (sampled + extra) ** 2 / tail


def one_sided_p(change: Change, upper: bool = True) -> float:
    """The one-sided p-value of H0: ratio <= 1 (`upper`) or ratio >= 1, from the change's
    two-sided p. Every interval here is symmetric in its tails (t, sign test, the
    equal-split two-run interval), so the tail the point lies in holds half of p."""
    if not (math.isfinite(change.p) and math.isfinite(change.ratio)):
        return math.nan
    toward = change.ratio > 1.0 if upper else change.ratio < 1.0
    return change.p / 2.0 if toward else 1.0 - change.p / 2.0


def standard_error(change: Change) -> float:
    """The log-scale standard error of a change: its t interval's, or for an
    order-statistic interval the normal-equivalent half-width / 1.96 (NaN if unbounded)."""
    if math.isfinite(change.se):
        return change.se
    if change.lo > 0 and math.isfinite(change.lo) and math.isfinite(change.hi):
        return math.log(change.hi / change.lo) / (2.0 * 1.959963984540054)
    return math.nan


def unmodelled_variance(aa: Sequence[Change]) -> float:
    """The A/A variance no interval models, pooled over a grid (method of moments).

    Each A/A change y_i (log scale) has E[y_i^2] = s_i^2 + tau^2 when its own standard
    error s_i covers only what its processes show and a component tau^2 (a bias of one
    library copy, the same in every process) adds on top; the true change is 0. So
    tau^2 = mean(y_i^2) - mean(s_i^2), truncated at 0: DerSimonian-Laird's moment
    estimator with the mean known (0) and equal weights. Equal, not inverse-variance,
    weights: s_i from 3-8 processes is itself noisy (y/s is t with 2-7 df, whose second
    moment is df/(df-2), not 1), and weights 1/s_i^2 would bias tau^2 upwards.
    Only t intervals over processes count (an order-statistic interval of one process
    says nothing of what processes differ by); fewer than 2 such changes give 0.
    """
    pairs = [(math.log(c.ratio), c.se) for c in aa
             if math.isfinite(c.ratio) and c.ratio > 0 and math.isfinite(c.se)]
    if len(pairs) < 2:
        return 0.0
    return max(0.0, sum(y * y - s * s for y, s in pairs) / len(pairs))


def nested_changes(samples: Sequence[ProcessSample], *,
                   confidence: float = defaults.CONFIDENCE,
                   extra_variance: float = 0.0, extra_df: float = math.inf) -> list[Change]:
    """Changes of one run (PR / base, or arm / control), processes as the replication unit.

    Two or more processes: Student's t over the per-process medians, with
    `extra_variance` (log scale, e.g. `unmodelled_variance` of the run's twin) added to
    the squared standard error. One process: the exact order-statistic interval over
    its rounds (`paired_changes`), which has no standard error to add it to. The degrees
    of freedom of the sum are Welch-Satterthwaite's, `extra_df` those of the extra term
    (e.g. the number of cases it was pooled over).
    """
    import numpy as np

    out: list[Change] = [NAN_CHANGE] * len(samples)
    single = [i for i, s in enumerate(samples) if s.n_processes < 2]
    for i, change in zip(single, paired_changes([samples[i].logs for i in single],
                                                confidence=confidence), strict=True):
        out[i] = change
    for i, sample in enumerate(samples):
        if sample.n_processes < 2:
            continue
        values = sample.per_process()
        sampled = float(np.var(values, ddof=1)) / len(values)
        df = satterthwaite_df(sampled, len(values) - 1.0, extra_variance, extra_df)
        out[i] = _t_change(float(np.mean(values)), math.sqrt(sampled + extra_variance),
                           min(df, 1e6), confidence, len(sample), len(values))
    return out


def nested_double_ratio_changes(pr: Sequence[ProcessSample], base: Sequence[ProcessSample],
                                *, confidence: float = defaults.CONFIDENCE,
                                extra_variance: float = 0.0,
                                extra_df: float = math.inf) -> list[Change]:
    """Changes between two runs, (PR / its control) / (base / its control), per case.

    When both runs have two or more processes: Welch's interval for the difference of
    the two runs' mean per-process log ratios (Welch-Satterthwaite degrees of freedom),
    so it covers what two processes really differ by; `extra_variance` (log scale: an
    A/A component no process spread shows, or what two runs differ by) is added to the
    squared standard error (Welch-Satterthwaite degrees of freedom, `extra_df` its
    own). Otherwise the
    order-statistic two-sample interval over rounds (`double_ratio_changes`).
    """
    import numpy as np

    if len(pr) != len(base):
        raise ValueError("pr and base must list the same cases")
    out: list[Change] = [NAN_CHANGE] * len(pr)
    single = [i for i in range(len(pr)) if min(pr[i].n_processes, base[i].n_processes) < 2]
    fallback = double_ratio_changes([pr[i].logs for i in single], [base[i].logs for i in single],
                                    confidence=confidence)
    for i, change in zip(single, fallback, strict=True):
        out[i] = change
    for i, (a, b) in enumerate(zip(pr, base, strict=True)):
        if min(a.n_processes, b.n_processes) < 2:
            continue
        va, vb = a.per_process(), b.per_process()
        sa = float(np.var(va, ddof=1)) / len(va)
        sb = float(np.var(vb, ddof=1)) / len(vb)
        se = math.sqrt(sa + sb + extra_variance)
        df = ((sa + sb) ** 2 / (sa**2 / (len(va) - 1) + sb**2 / (len(vb) - 1))
              if sa + sb > 0 else float(len(va) + len(vb) - 2))
        df = min(satterthwaite_df(sa + sb, df, extra_variance, extra_df), 1e6)
        out[i] = _t_change(float(np.mean(va) - np.mean(vb)), se, df, confidence,
                           min(len(a), len(b)), min(len(va), len(vb)))
    return out
