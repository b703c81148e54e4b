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
from collections.abc import Callable, Sequence
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


def _excess(c: Change) -> tuple[bool, float] | None:
    """(one process?, y^2 - s^2) of an A/A change, None without a point or a standard
    error: a t interval's, or a one-process interval's normal-equivalent one."""
    if not (math.isfinite(c.ratio) and c.ratio > 0):
        return None
    one = c.processes < 2
    s = standard_error(c) if one else c.se
    return (one, math.log(c.ratio) ** 2 - s * s) if math.isfinite(s) else None


def _pooled(total: Sequence[float], count: Sequence[int], one: bool) -> float:
    """The moment estimate of a case's kind from per-kind sums of y^2 - s^2 and counts
    (index 0: over processes, 1: one process), 0 from fewer than 2 changes. A
    one-process case gets at least the processes' term."""
    multi = max(0.0, total[0] / count[0]) if count[0] >= 2 else 0.0
    if not one:
        return multi
    return max(multi, total[1] / count[1] if count[1] >= 2 else 0.0)


def pooled_unmodelled_variance(aa: Sequence[Change]) -> float:
    """The grid's pooled A/A variance no interval models (unmodelled_variances without
    any case's own bound): the larger of the processes' and the one-process pool."""
    total, count = [0.0, 0.0], [0, 0]
    for e in map(_excess, aa):
        if e is not None:
            total[e[0]] += e[1]
            count[e[0]] += 1
    return max(0.0, _pooled(total, count, True))


def unmodelled_variances(aa: Sequence[Change], *, own: bool = True) -> list[float]:
    """Per case, the A/A variance its interval does not model (log scale), from the
    grid's A/A changes `aa` (one per case; NaN where a case has none).

    - Pooled by kind (the moment estimator of unmodelled_variance): over the changes
      with a t interval over processes, and over one-process changes, whose
      order-statistic interval's normal-equivalent standard error covers the rounds
      only, so their pool also holds what processes differ by. A one-process case gets
      at least the processes' pooled term: an interval that cannot see its own spread
      is never narrower for it than one that can.
    - `own`: every case gets at least its own y^2 - s^2, a per-case lower bound, so a
      case whose copies differ more than the grid's typical one is not judged by the
      typical one (equal pooling under a bias that varies by case under-covers the
      biased cases). Without `own`: the pooled term of the other cases only
      (leave-one-out), what a case's own A/A change is to be judged against.
    """
    excess = [_excess(c) for c in aa]
    total, count = [0.0, 0.0], [0, 0]
    for e in excess:
        if e is not None:
            total[e[0]] += e[1]
            count[e[0]] += 1
    out = []
    for c, e in zip(aa, excess, strict=True):
        one = c.processes < 2
        if e is None:
            out.append(_pooled(total, count, one))
        elif own:
            out.append(max(_pooled(total, count, one), e[1], 0.0))
        else:
            t, n = list(total), list(count)
            t[e[0]] -= e[1]
            n[e[0]] -= 1
            out.append(_pooled(t, n, one))
    return out


def per_case(extra: float | Sequence[float], n: int) -> list[float]:
    """An extra variance given once for a grid, or per case, as one value per case."""
    if isinstance(extra, (int, float)):
        return [float(extra)] * n
    if len(extra) != n:
        raise ValueError("one extra variance per case")
    return [float(x) for x in extra]


def _widened(exact: Change, extra: float, extra_df: float, confidence: float) -> Change:
    """A one-process change (order-statistic interval over its rounds, at the default
    confidence) with `extra` added to its normal-equivalent squared standard error: a
    t interval at `confidence` around its point (Welch-Satterthwaite degrees of
    freedom, the rounds' n - 1 for the sampled part)."""
    s = standard_error(exact)
    if not (math.isfinite(s) and math.isfinite(exact.ratio) and exact.ratio > 0):
        return exact
    df = min(satterthwaite_df(s * s, max(exact.n - 1.0, 1.0), extra, extra_df), 1e6)
    return _t_change(math.log(exact.ratio), math.sqrt(s * s + extra), df, confidence,
                     exact.n, 1)


def nested_changes(samples: Sequence[ProcessSample], *,
                   confidence: float = defaults.CONFIDENCE,
                   extra_variance: float | Sequence[float] = 0.0,
                   extra_df: float = math.inf) -> list[Change]:
    """Changes of one run (PR / base, or arm / control), processes as the replication unit.

    Two or more processes: Student's t over the per-process medians, with
    `extra_variance` (log scale, one for the grid or one per case, e.g.
    `unmodelled_variances` of the run's twin) added to the squared standard error. One
    process: the exact order-statistic interval over its rounds (`paired_changes`);
    with an extra variance, a t interval around its point whose squared standard error
    is the exact interval's normal-equivalent one plus the extra (`_widened`), so a
    case that cannot see its processes is not judged narrower than one that can. The
    degrees of freedom of the sum are Welch-Satterthwaite's, `extra_df` those of the
    extra term (e.g. the number of cases it was pooled over).
    """
    import numpy as np

    extras = per_case(extra_variance, len(samples))
    out: list[Change] = [NAN_CHANGE] * len(samples)
    single = [i for i, s in enumerate(samples) if s.n_processes < 2]
    _one_process(out, single, extras, extra_df, confidence,
                 lambda level: paired_changes([samples[i].logs for i in single],
                                              confidence=level))
    for i, sample in enumerate(samples):
        if sample.n_processes < 2:
            continue
        values = sample.per_process()
        sampled = float(np.var(values, ddof=1)) / len(values)
        df = satterthwaite_df(sampled, len(values) - 1.0, extras[i], extra_df)
        out[i] = _t_change(float(np.mean(values)), math.sqrt(sampled + extras[i]),
                           min(df, 1e6), confidence, len(sample), len(values))
    return out


def _one_process(out: list[Change], single: Sequence[int], extras: Sequence[float],
                 extra_df: float, confidence: float,
                 exact: Callable[[float], list[Change]]) -> None:
    """Fill `out` at `single` with the exact intervals (`exact(level)`), widened by their
    extra variance where it is positive."""
    if not single:
        return
    plain = exact(confidence)
    widen = [k for k, i in enumerate(single) if extras[i] > 0.0]
    at_default = exact(defaults.CONFIDENCE) if widen else plain
    for k, i in enumerate(single):
        out[i] = (_widened(at_default[k], extras[i], extra_df, confidence)
                  if extras[i] > 0.0 else plain[k])


def nested_double_ratio_changes(pr: Sequence[ProcessSample], base: Sequence[ProcessSample],
                                *, confidence: float = defaults.CONFIDENCE,
                                extra_variance: float | Sequence[float] = 0.0,
                                extra_df: float = math.inf) -> list[Change]:
    """Changes between two runs, (PR / its control) / (base / its control), per case.

    When both runs have two or more processes: Welch's interval for the difference of
    the two runs' mean per-process log ratios (Welch-Satterthwaite degrees of freedom),
    so it covers what two processes really differ by; `extra_variance` (log scale: an
    A/A component no process spread shows, or what two runs differ by) is added to the
    squared standard error (Welch-Satterthwaite degrees of freedom, `extra_df` its
    own; one for the grid or one per case). Otherwise the order-statistic two-sample
    interval over rounds (`double_ratio_changes`), widened by the extra variance as a
    one-process case of `nested_changes` is.
    """
    import numpy as np

    if len(pr) != len(base):
        raise ValueError("pr and base must list the same cases")
    extras = per_case(extra_variance, len(pr))
    out: list[Change] = [NAN_CHANGE] * len(pr)
    single = [i for i in range(len(pr)) if min(pr[i].n_processes, base[i].n_processes) < 2]
    _one_process(out, single, extras, extra_df, confidence,
                 lambda level: double_ratio_changes([pr[i].logs for i in single],
                                                    [base[i].logs for i in single],
                                                    confidence=level))
    for i, (a, b) in enumerate(zip(pr, base, strict=True)):
        if min(a.n_processes, b.n_processes) < 2:
            continue
        va, vb = a.per_process(), b.per_process()
        sa = float(np.var(va, ddof=1)) / len(va)
        sb = float(np.var(vb, ddof=1)) / len(vb)
        se = math.sqrt(sa + sb + extras[i])
        df = ((sa + sb) ** 2 / (sa**2 / (len(va) - 1) + sb**2 / (len(vb) - 1))
              if sa + sb > 0 else float(len(va) + len(vb) - 2))
        df = min(satterthwaite_df(sa + sb, df, extras[i], extra_df), 1e6)
        out[i] = _t_change(float(np.mean(va) - np.mean(vb)), se, df, confidence,
                           min(len(a), len(b)), min(len(va), len(vb)))
    return out
