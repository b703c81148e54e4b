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

        if not np.all(np.isfinite(self.logs)):
            return np.array([float(np.median(self.logs[self.processes == p]))
                             for p in np.unique(self.processes)])
        # Every process's median from one sort, equal (==) to np.median's (the mean of the
        # middle two of an even count; a zero may differ in sign): a median call a process
        # was most of the time of the simulations that judge thousands of samples.
        _, group, counts = np.unique(self.processes, return_inverse=True, return_counts=True)
        ordered = self.logs[np.lexsort((self.logs, group))]
        starts = np.cumsum(counts) - counts
        return (ordered[starts + (counts - 1) // 2] + ordered[starts + counts // 2]) / 2.0

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
    # Two usable times can still overflow their ratio (1e300 / 5e-324): no usable round.
    with np.errstate(over="ignore", under="ignore"):
        ratio = np.divide(num, den, out=np.zeros(len(ok)), where=ok)
    ok &= np.isfinite(ratio) & (ratio > 0)
    return ProcessSample(np.log(ratio[ok]), np.asarray(processes)[ok])


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


def _digamma(x: float) -> float:
    """psi(x) for x > 0: the recurrence up to 6, then the asymptotic series."""
    out = 0.0
    while x < 6.0:
        out -= 1.0 / x
        x += 1.0
    x2 = 1.0 / (x * x)
    return out + math.log(x) - 0.5 / x - x2 * (1 / 12 - x2 * (1 / 120 - x2 / 252))


def _trigamma(x: float) -> float:
    """psi'(x) for x > 0."""
    out = 0.0
    while x < 6.0:
        out += 1.0 / (x * x)
        x += 1.0
    x2 = 1.0 / (x * x)
    return out + 1.0 / x + x2 / 2.0 + x2 / x * (1 / 6 - x2 * (1 / 30 - x2 * (1 / 42 - x2 / 30)))


def _tetragamma(x: float) -> float:
    """psi''(x) for x > 0."""
    out = 0.0
    while x < 6.0:
        out -= 2.0 / (x * x * x)
        x += 1.0
    x2 = 1.0 / (x * x)
    return out - x2 * (1.0 + 1.0 / x + x2 * (0.5 - x2 * (1 / 6 - x2 * (1 / 6 - x2 * 0.3))))


def _trigamma_inverse(y: float) -> float:
    """The x > 0 with psi'(x) = y (Newton's method from 0.5 + 1 / y, which approaches
    the root from below: psi' is convex and decreasing)."""
    if y > 1e7:
        return 1.0 / math.sqrt(y)
    if y < 1e-6:
        return 1.0 / y
    x = 0.5 + 1.0 / y
    for _ in range(50):
        tri = _trigamma(x)
        step = tri * (1.0 - tri / y) / _tetragamma(x)
        x += step
        if -step / x < 1e-8:
            break
    return x


@dataclass(frozen=True)
class VariancePrior:
    """What a grid's cases say about one case's process-level variance: a scaled
    inverse chi-square with `df` degrees of freedom around `s2` (log scale, the
    variance of one process value). df 0: no prior, each case on its own."""

    df: float = 0.0
    s2: float = 0.0

    def moderated(self, s2: float, df: float) -> tuple[float, float]:
        """A case's process-level variance `s2` (df `df`) shrunk toward the prior, with
        the degrees of freedom of the result."""
        if self.df <= 0.0:
            return s2, df
        if math.isinf(self.df):
            return self.s2, math.inf
        return (self.df * self.s2 + df * s2) / (self.df + df), self.df + df


# A prior needs this many cases with a process spread: the spread of fewer cases' log
# variances is too rough to tell how alike their variances are (its relative error is
# about sqrt(2 / (cases - 1)), a half at 10).
PRIOR_MIN_CASES = 10


def variance_prior(samples: Sequence[ProcessSample]) -> VariancePrior:
    """The empirical-Bayes prior of the cases' process-level variances (Smyth 2004,
    the moment fit of limma's moderated t): the log sample variances, corrected for
    their expected bias, have a spread of trigamma(d / 2) from sampling plus
    trigamma(d0 / 2) from the cases' true variances differing. Cases whose true
    variances are alike (d0 large) lend each other degrees of freedom; cases whose
    variances differ widely (d0 small) keep about their own; d0 is at most the cases'
    degrees of freedom together, from which the prior's variance is estimated. Only
    cases with two or more processes and a spread count; fewer than PRIOR_MIN_CASES
    give no prior."""
    import numpy as np

    logs, dfs = [], []
    for sample in samples:
        if sample.n_processes < 2:
            continue
        values = sample.per_process()
        s2 = float(np.var(values, ddof=1))
        if s2 > 0.0 and math.isfinite(s2):
            d = len(values) - 1.0
            logs.append(math.log(s2) - _digamma(d / 2.0) + math.log(d / 2.0))
            dfs.append(d)
    if len(logs) < PRIOR_MIN_CASES:
        return VariancePrior()
    mean = sum(logs) / len(logs)
    spread = (sum((e - mean) ** 2 for e in logs) / (len(logs) - 1)
              - sum(_trigamma(d / 2.0) for d in dfs) / len(dfs))
    # The prior's variance is itself estimated from the cases' degrees of freedom
    # together, so it can never be worth more than they are (not infinitely many).
    most = sum(dfs)
    d0 = most if spread <= 0.0 else min(2.0 * _trigamma_inverse(spread), most)
    return VariancePrior(d0, math.exp(mean + _digamma(d0 / 2.0) - math.log(d0 / 2.0)))


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
                   extra_df: float = math.inf,
                   prior: VariancePrior | None = None) -> list[Change]:
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
    `prior` (variance_prior of the grid): each case's process-level variance is
    shrunk toward it and gains its degrees of freedom (a moderated t interval).
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
        s2, own_df = (prior or VariancePrior()).moderated(float(np.var(values, ddof=1)),
                                                          len(values) - 1.0)
        sampled = s2 / len(values)
        df = satterthwaite_df(sampled, own_df, extras[i], extra_df)
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
