"""Where issue 46's no-bias power at +3 % went: each rule undone alone, in the sim's model.

    .venv/bin/python docs/validation/statistics_ablation.py             # the table, markdown
    .venv/bin/python docs/validation/statistics_ablation.py --trials 20 # rougher, quicker

It patches the importable epbench (this tree) in this process, one variant at a time,
and measures power at +2 % and +3 % with no per-copy bias with statistics_sim.power
(same model, seeds and grids). The variants stand in for the rules before issue 46 or
for candidates that were measured and not kept; see docs/validation/statistics.md. The
last row is this tree as it is: PR against the mean of base and its twin.

    .venv/bin/python docs/validation/statistics_ablation.py --bar --trials 300

measures the candidates for the per-copy bias that varies by case (BAR; no-bias power,
A/A false flags under a 1 % bias and under the bias by case), about 9 min.
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
from epbench.reports.defaults import CONFIDENCE  # noqa: E402

ORIGINAL = {
    "unmodelled_variances": nested.unmodelled_variances,
    "interval_tests": verdicts.interval_tests,
    "standard_error": nested.standard_error,
    "grid_init": verdicts.GridSamples.__init__,
    "judge": sim._judge,
    "twin_share": sim._twin_share,
    "pr_sample": sim._pr_sample,
    "changes": verdicts.GridSamples.changes,
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


def _own_whole(aa: Any, *, own: bool = True) -> list[float]:
    """(a) The grid's pool at the share, the case's own y^2 - s^2 whole (2 b^2, the
    twin's variance, bounds the mean's 1.5 b^2 from above). The sim multiplies what this
    returns by the share, so the own term is divided by it here."""
    if not own:
        return ORIGINAL["unmodelled_variances"](aa, own=False)
    share = ORIGINAL["twin_share"]() or 1.0
    excess = [nested._excess(c) for c in aa]
    total, count = _sums(excess)
    return [nested._pooled(total, count, c.processes < 2) if e is None
            else max(nested._pooled(total, count, c.processes < 2), e[1] / share, 0.0)
            for c, e in zip(aa, excess, strict=True)]


def _twin_within(change: Any) -> bool:
    """No evidence of a copy offset: the twin's own interval (over its processes) holds 0."""
    return change.lo <= 1.0 <= change.hi


def _pr_if_twin_within(new: Any, base: Any, twin: Any, labels: Any, keep: Any = None) -> Any:
    """(b) PR against the mean of base and twin only where the twin's interval holds 0,
    else against base alone."""
    y = nested.nested_changes([nested.ProcessSample(twin - base, labels)])[0]
    if _twin_within(y):
        return ORIGINAL["pr_sample"](new, base, twin, labels, keep)
    if keep is None:
        return nested.ProcessSample(new - base, labels)
    return nested.ProcessSample((new - base)[keep], labels[keep])


def _share_if_twin_within(aa: Any, *, own: bool = True) -> list[float]:
    """(b)'s τ²: the share where the PR is against the mean, the whole term where it is
    against base alone (the sim multiplies every case by the share)."""
    out = ORIGINAL["unmodelled_variances"](aa, own=own)
    if not own:
        return out
    share = ORIGINAL["twin_share"]() or 1.0
    return [v if _twin_within(c) else v / share for c, v in zip(aa, out, strict=True)]


# (c) Per case, the degrees of freedom of its extra term: 1 where its own y^2 - s^2 (one
# A/A change) sets it, the cases - 1 of the pool otherwise. Set by _own_df_variances for
# the grid about to be judged (the sim judges one grid at a time).
_EXTRA_DF: list[float] = []


def _own_df_variances(aa: Any, *, own: bool = True) -> list[float]:
    out = ORIGINAL["unmodelled_variances"](aa, own=own)
    if own:
        pooled = nested.pooled_unmodelled_variance(aa)
        _EXTRA_DF[:] = [1.0 if v > pooled else max(1.0, len(aa) - 1.0) for v in out]
    return out


def _changes_own_df(self: Any, shifts: Any = None, *, confidence: float = CONFIDENCE,
                    quiet: bool = False, cases: Any = None) -> Any:
    """GridSamples.changes (one run) with each case's extra term at its own degrees of
    freedom (_EXTRA_DF), case by case under the grid's variance prior."""
    index = list(self.quiet_index) if quiet else list(range(len(self.pr)))
    pr = list(self.quiet_pr if quiet else self.pr)
    if cases is not None:
        index, pr = [index[i] for i in cases], [pr[i] for i in cases]
    if shifts is not None:
        pr = [s.shifted(d) for s, d in zip(pr, shifts, strict=True)]
    extras = nested.per_case(self.extra_variance, len(self.pr))
    prior = nested.variance_prior(self.pr) if self.moderate else None
    return [nested.nested_changes([s], confidence=confidence, prior=prior,
                                  extra_variance=[extras[i]], extra_df=_EXTRA_DF[i])[0]
            for s, i in zip(pr, index, strict=True)]


# (d) Per grid, the rounds each case's PR sample was built from (_stash_pr_sample), and
# the cases the twin warning names (_judge_unless_warned), compared with base alone.
_ARMS: list[tuple[Any, ...]] = []
_ALONE: set[int] = set()


def _stash_pr_sample(new: Any, base: Any, twin: Any, labels: Any, keep: Any = None) -> Any:
    _ARMS.append((new, base, labels))
    return ORIGINAL["pr_sample"](new, base, twin, labels, keep)


def _judge_unless_warned(pr: Any, base: Any, twins: Any, *args: Any, **kwargs: Any) -> Any:
    """(d) The mean except for the cases whose twin the run's warning names
    (run_noise.doubtful_twins: beyond the floor against the other twins' pool,
    Bonferroni over the grid), which are compared with base alone and carry their whole
    τ²."""
    from epbench.reports.run_noise import doubtful_twins

    arms, _ARMS[:] = list(_ARMS), []
    samples = twins[0]
    names = [str(i) for i in range(len(samples))]
    named = doubtful_twins(samples, nested.nested_changes(samples), names,
                           verdicts.Settings())
    _ALONE.clear()
    _ALONE.update(int(n) for n in named)
    pr = [nested.ProcessSample(arms[i][0] - arms[i][1], arms[i][2]) if i in _ALONE else s
          for i, s in enumerate(pr)]
    return ORIGINAL["judge"](pr, base, twins, *args, **kwargs)


def _share_unless_warned(aa: Any, *, own: bool = True) -> list[float]:
    out = ORIGINAL["unmodelled_variances"](aa, own=own)
    if not own:
        return out
    share = ORIGINAL["twin_share"]() or 1.0
    return [v / share if i in _ALONE else v for i, v in enumerate(out)]


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
# Candidates for the per-copy bias that varies by case (statistics.md, the Done-when),
# measured with --bar; every one with moderated variances.
BAR = {
    "PR against base alone": BASE_ALONE,
    "PR against the mean of base and twin (kept)": {},
    "(a) the mean, the case's own y² − s² whole, the pool at 3/4":
        {"unmodelled_variances": _own_whole},
    "(b) the mean only where the twin's interval holds 0, else base alone":
        {"pr_sample": _pr_if_twin_within, "unmodelled_variances": _share_if_twin_within},
    "(c) the mean, the own y² − s² bound at 1 degree of freedom":
        {"unmodelled_variances": _own_df_variances, "changes": _changes_own_df},
    "(d) the mean except where the twin warning names the case, there base alone":
        {"pr_sample": _stash_pr_sample, "judge": _judge_unless_warned,
         "unmodelled_variances": _share_unless_warned},
}


def _apply(patches: dict[str, Any]) -> None:
    nested.unmodelled_variances = patches.get("unmodelled_variances",
                                              ORIGINAL["unmodelled_variances"])
    verdicts.interval_tests = patches.get("interval_tests", ORIGINAL["interval_tests"])
    verdicts.GridSamples.__init__ = patches.get("grid_init", ORIGINAL["grid_init"])
    sim._judge = patches.get("judge", ORIGINAL["judge"])
    sim._twin_share = patches.get("twin_share", ORIGINAL["twin_share"])
    sim._pr_sample = patches.get("pr_sample", ORIGINAL["pr_sample"])
    verdicts.GridSamples.changes = patches.get("changes", ORIGINAL["changes"])


def bar(trials: int, seed: int, only: str) -> None:
    """Each BAR candidate: no-bias power at +2 and +3 %, A/A false flags under a 1 %
    per-copy bias and under the bias that varies by case (per case / grids)."""
    print(f"| candidate ({trials} grids, seed {seed}) | +2 % | +3 % | bias 1 %: per case "
          "| grids | bias by case: per case | grids |")
    print("|---|---|---|---|---|---|---|")
    for name, patches in BAR.items():
        if only not in name:
            continue
        _apply(patches)
        cells = [sim.power(trials, seed, effect, 0.0) for effect in (0.02, 0.03)]
        cells += list(sim.false_flags(trials, seed, 0.01)[:2])
        cells += list(sim.mixed_bias(trials, seed)[:2])
        print(f"| {name} | " + " | ".join(f"{c:.1%}" for c in cells) + " |", flush=True)
    _apply({})
    for reference, (change, squares) in tracking(trials, seed).items():
        print(f"- bias by case, the 2 % cases, PR against {reference}: correlation of the "
              f"estimate with the twin's change {change:+.2f}, of their squares {squares:+.2f}")


def tracking(trials: int, seed: int) -> dict[str, tuple[float, float]]:
    """Under the bias by case, over its 2 % cases (mixed_bias's grids): how the PR's
    estimate (mean log ratio) tracks the twin's change y, whose y^2 - s^2 is the case's
    own bound, against base alone and against the mean of base and twin."""
    import numpy as np

    _apply({"pr_sample": _stash_pr_sample})
    est: dict[str, list[float]] = {"base alone": [], "the mean of base and twin": []}
    ys: list[float] = []
    for trial in range(trials):
        _ARMS.clear()
        pr, twins, _, _ = sim._same_run_grid(np.random.default_rng([seed, 7, trial]),
                                             bias=sim.MIXED)
        for i, (new, base, _labels) in enumerate(_ARMS):
            if sim.MIXED[i] == max(sim.MIXED):
                est["base alone"].append(float((new - base).mean()))
                est["the mean of base and twin"].append(float(pr[i].logs.mean()))
                ys.append(float(twins[i].logs.mean()))
    _apply({})
    y = np.array(ys)
    return {k: (float(np.corrcoef(e, y)[0, 1]), float(np.corrcoef(np.square(e), y * y)[0, 1]))
            for k, e in ((k, np.array(v)) for k, v in est.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60, help="grids per figure")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--bar", action="store_true",
                        help="the candidates for the bias by case, at --trials (300 in "
                             "statistics.md)")
    parser.add_argument("--only", default="", help="with --bar: candidates whose name has it")
    args = parser.parse_args()
    if args.bar:
        bar(args.trials, args.seed, args.only)
        return
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
