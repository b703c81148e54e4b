"""The simulation behind docs/validation/statistics.md: verdict statistics, before and after.

    .venv/bin/python docs/validation/statistics_sim.py               # the table, markdown
    .venv/bin/python docs/validation/statistics_sim.py --trials 20   # a quicker, rougher one

It measures the same figures twice, each in a subprocess: on the tree at --before (a git
revision, extracted with `git archive` into a temporary directory) and on this tree, and
prints one markdown table. Every figure comes from the project's own functions
(reports.stats, reports.compare) on synthetic rounds with a known truth; the glue that
compare() puts around them (twin noise, thresholds, quiet rounds) is repeated here for
both versions, because compare() itself needs whole results documents, which are 100x
slower to build. tests/test_verdict_monotone.py checks the same rule through compare().
The twin as a second copy of base is compare()'s own in one run: whether it applies
(compare.second_replicate, asked of a run whose every arm loads its own library file,
as in this model), the reference (compare.replicate_reference) and the share of tau^2
(compare.TWIN_REPLICATE_SHARE); a tree without it compares PR with base alone.

The model (log scale, per case): every arm a copy of a library gets a bias N(0, bias)
fixed for the run (the per-copy bias the processes cannot see), per process an offset
N(0, 0.3 %), per round noise N(0, 1 %); 6 processes x 8 rounds; a grid is 20 cases.
In one run every case has three arms, each its own copy: base, its A/A twin, the PR.
Separate runs add to each run's arm / control ratio a run offset whose variance is
(F - 1) x the variance of a run's process values / 6, so the one-way ANOVA F of process
values between runs has expectation F. History: 20 series of 50 points, AR(1) noise
with lag-1 correlation rho and sd 2.4 %.

Seeds: numpy's default_rng([--seed, scenario number, ...parameters, trial]); --seed 46
and --trials 60 (grids per figure; a quarter of that for the quiet-rounds figures, half
and at most 25 detects for the history ones) give the committed table. --before names
the revisions measured beside this tree (default: d031736, before issue 46, 99080bb,
its first fixes, and 1d0638e, after the review, before moderated variances).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

GRID = 20
PROCESSES = 6
PER_PROCESS = 8
ROUND_SD = 0.01
PROCESS_SD = 0.003
HISTORY_SD = 0.024
# `detect` runs per history figure at most: each is 20 series of 50 points.
HISTORY_RUNS = 25


# --------------------------------------------------------------------------- data


def _arm(rng: Any, processes: int, per_process: int, bias: float, effect: float = 0.0,
         round_sd: float = ROUND_SD, process_sd: float = PROCESS_SD) -> Any:
    """Per round, the log time of one library copy (relative to the truth)."""
    import numpy as np

    labels = np.repeat(np.arange(processes), per_process)
    return (rng.normal(0.0, bias) + math.log1p(effect)
            + rng.normal(0.0, process_sd, processes)[labels]
            + rng.normal(0.0, round_sd, processes * per_process))


def _labels(processes: int, per_process: int) -> Any:
    import numpy as np

    return np.repeat(np.arange(processes), per_process)


# --------------------------------------------------------------------------- one version


@functools.cache
def _twin_share() -> float | None:
    """The share of the twins' tau^2 a case carries when compare() compares each round's
    PR with the mean of base and its twin, asked of compare.second_replicate for a run
    shaped like this model's (base, its twin and the PR each load a library file of their
    own); None where it would compare with base alone, or the tree has no such rule."""
    from epbench.reports import compare

    chooser = getattr(compare, "second_replicate", None)
    if chooser is None:
        return None
    from epbench.core.model import Results
    from epbench.core.results import SCHEMA
    from epbench.reports.comparison import Side

    arms = {key: {"key": key, "kind": "plugin", "spec": key, "library": f"/sim/{key}.so"}
            for key in ("base", "twin", "pr")}
    run = Results.from_dict({
        "schema": SCHEMA, "host": {"key": "sim"}, "config": {"rounds": PROCESSES * PER_PROCESS},
        "arms": arms, "control": "ort", "twin": {"of": "base", "key": "twin"}, "cases": {},
    }, source="the simulation's run")
    if chooser(Side("base", run, "base"), Side("pr", run, "pr")) is None:
        return None
    return float(compare.TWIN_REPLICATE_SHARE)


def _pr_sample(new, base, twin, labels, keep=None):
    """One run's PR sample of a case from its arms' per-round log times, as compare()
    builds it: against base, or (_twin_share) against compare.replicate_reference of
    base and twin; over the rounds `keep` selects (the quiet ones), or all."""
    nested = _nested()
    if _twin_share() is None:
        if keep is None:
            return nested.ProcessSample(new - base, labels)
        return nested.ProcessSample((new - base)[keep], labels[keep])
    import numpy as np

    from epbench.reports import compare

    # Trees a2daf34..bfc8f7a wrote the mean inline in compare(), with no function for it.
    mean = getattr(compare, "replicate_reference", lambda b, t: np.sqrt(b) * np.sqrt(t))
    ref = mean(np.exp(base), np.exp(twin))
    return nested.process_sample(np.exp(new), ref, labels, keep)


def _nested() -> Any:
    """reports.nested, or reports.stats before the nested model had a module of its own."""
    try:
        from epbench.reports import nested
    except ImportError:
        from epbench.reports import stats as nested
    return nested


def _new_api() -> bool:
    from epbench.reports import compare

    return hasattr(compare, "judge_samples")


def _per_case_api() -> bool:
    """Since the review of #46's first fixes: per-case unmodelled variances, one-process
    cases widened, the twin warning judged against the other twins' noise."""
    return hasattr(_nested(), "unmodelled_variances")


def _twin_warned(twin_samples, twin_changes, settings) -> bool:
    """Would compare() warn that the run's A/A twin differs from the arm it copies?"""
    if _per_case_api():
        try:  # since findings.py was split: the run's own noise in reports.run_noise
            from epbench.reports.run_noise import doubtful_twins
        except ImportError:
            from epbench.reports.findings import doubtful_twins

        names = [str(i) for i in range(len(twin_samples))]
        return bool(doubtful_twins(twin_samples, twin_changes, names, settings))
    # Before: a twin significant at the run's level whose interval clears the floor.
    alpha, floor = 1.0 - settings.confidence, settings.floor
    return any(c.p < alpha and (c.lo - 1.0 >= floor or c.hi - 1.0 <= -floor)
               for c in twin_changes)


def _judge(pr, base, twins, unquiet=None, quiet=None, between=None, same_run=True,
           warned=None):
    """Verdicts of a grid the way compare() reaches them, in any version.

    pr, base: per case ProcessSample (base empty for one run); twins: per run, per case
    the twin's ProcessSample; unquiet: per case the unquiet round count; quiet: per case
    (PR, base) quiet-round samples or None; between: separate runs' between-run
    variance (None: not known); warned: a list to append whether the twin warning
    fired."""
    from epbench.reports import compare, stats

    nested = _nested()

    try:  # since compare.py was split: judging in reports.verdicts, rules in findings
        from epbench.reports import findings, verdicts
    except ImportError:
        findings = verdicts = compare
    settings = verdicts.Settings()
    n = len(pr)
    unquiet = unquiet or [0] * n
    quiet = quiet or [None] * n
    rounds = [len(s) for s in pr]
    twin_changes = [nested.nested_changes(t) for t in twins]
    if warned is not None:
        warned.append(any(_twin_warned(t, c, settings)
                          for t, c in zip(twins, twin_changes, strict=True)))
    if _per_case_api():
        noise = [max(math.expm1(nested.standard_error(c[i])) for c in twin_changes)
                 for i in range(n)]
        per_run = [nested.unmodelled_variances(c) for c in twin_changes]
        # PR against the mean of base and its twin carries a share of their tau^2.
        share = (_twin_share() if same_run else None) or 1.0
        tau2 = [share * sum(v[i] for v in per_run) / len(per_run) + (between or 0.0)
                for i in range(n)]
    elif _new_api():
        noise = [max(math.expm1(nested.standard_error(c[i])) for c in twin_changes)
                 for i in range(n)]
        tau2 = (sum(nested.unmodelled_variance(c) for c in twin_changes) / len(twin_changes)
                + (between or 0.0))
    else:
        noise = [max(abs(c[i].ratio - 1.0) for c in twin_changes) for i in range(n)]
        tau2 = 0.0
    thresholds = [verdicts.threshold_for(x, "twin", settings) for x in noise]
    index = [i for i in range(n) if quiet[i] is not None]
    if _new_api():
        grid = verdicts.GridSamples(pr, base, same_run, [quiet[i][0] for i in index],
                                   [quiet[i][1] for i in index] if not same_run else [],
                                   index, extra_variance=tau2,
                                   extra_df=max(1.0, n - 1.0))
        js, _ = verdicts.judge_samples(grid, thresholds, unquiet, rounds, settings)
        changes = grid.changes(confidence=settings.confidence)
        if not same_run and between is None:
            js = [findings.within_run_only(j, j.shown or c, settings)
                  for j, c in zip(js, changes, strict=True)]
        return [j.verdict for j in js], changes
    changes = (nested.nested_changes(pr) if same_run
               else nested.nested_double_ratio_changes(pr, base))
    quiet_changes: list[Any] = [None] * n
    if index:
        qs = (nested.nested_changes([quiet[i][0] for i in index]) if same_run else
              nested.nested_double_ratio_changes([quiet[i][0] for i in index],
                                                [quiet[i][1] for i in index]))
        for i, c in zip(index, qs, strict=True):
            quiet_changes[i] = c
    needed = stats.min_rounds(settings.confidence, 1 if same_run else 2)
    js = verdicts.judge_grid(changes, thresholds, unquiet, rounds, settings.fdr, quiet_changes,
                            needed=needed, shared_load=same_run)
    return [j.verdict for j in js], changes


FLAGS = ("alert", "regression")


def _same_run_grid(rng, *, bias=0.0, effects=None, processes=PROCESSES,
                   round_sd=ROUND_SD, process_sd=PROCESS_SD, unquiet_processes=(),
                   per_process=PER_PROCESS, twin_off=None):
    """One run's grid: per case PR / base (or / the mean of base and twin, as compare()
    does: _pr_sample) and twin / base. `bias`: the per-copy bias's sd, one for every case
    or one per case; `twin_off`: per case a fixed offset of the twin (a twin that really
    differs)."""
    import numpy as np

    nested = _nested()

    effects = effects if effects is not None else [0.0] * GRID
    biases = list(bias) if isinstance(bias, (list, tuple)) else [bias] * len(effects)
    offs = twin_off or [0.0] * len(effects)
    labels = _labels(processes, per_process)
    pr, twins, unquiet, quiet = [], [], [], []
    keep = ~np.isin(labels, list(unquiet_processes))
    for effect, b, off in zip(effects, biases, offs, strict=True):
        kw = {"round_sd": round_sd, "process_sd": process_sd}
        base = _arm(rng, processes, per_process, b, **kw)
        twin = _arm(rng, processes, per_process, b, off, **kw)
        new = _arm(rng, processes, per_process, b, effect, **kw)
        pr.append(_pr_sample(new, base, twin, labels))
        twins.append(nested.ProcessSample(twin - base, labels))
        unquiet.append(int((~keep).sum()))
        quiet.append((_pr_sample(new, base, twin, labels, keep), None)
                     if unquiet_processes else None)
    return pr, twins, unquiet, quiet


def coverage(trials: int, seed: int, processes: int) -> float:
    import numpy as np

    covered = total = 0
    for trial in range(trials):
        rng = np.random.default_rng([seed, 1, processes, trial])
        pr, twins, _, _ = _same_run_grid(rng, processes=processes, effects=[0.02] * GRID)
        _, changes = _judge(pr, [], [twins])
        for c in changes:
            covered += c.lo <= 1.02 <= c.hi
            total += 1
    return covered / total


def false_flags(trials: int, seed: int, bias: float, processes: int = PROCESSES,
                per_process: int = PER_PROCESS) -> tuple[float, float, float]:
    """A/A grids: share of cases ⚠️ or 🔴, of grids with one, of grids whose twin
    warning fired."""
    import numpy as np

    per_case, grids, warned = 0, 0, []
    for trial in range(trials):
        rng = np.random.default_rng([seed, 2, int(bias * 1e4), processes, trial])
        pr, twins, _, _ = _same_run_grid(rng, bias=bias, processes=processes,
                                         per_process=per_process)
        verdicts, _ = _judge(pr, [], [twins], warned=warned)
        flagged = sum(v in FLAGS for v in verdicts)
        per_case += flagged
        grids += flagged > 0
    return per_case / (trials * GRID), grids / trials, sum(warned) / trials


# Per-case bias that varies by case: a fifth of the cases' copies differ by sd 2 %, the
# rest by 0.5 % (the mean variance is that of a 1 % bias).
MIXED = [0.02 if i % 5 == 0 else 0.005 for i in range(GRID)]


def mixed_bias(trials: int, seed: int) -> tuple[float, float, float]:
    """false_flags under MIXED."""
    import numpy as np

    per_case, grids, warned = 0, 0, []
    for trial in range(trials):
        rng = np.random.default_rng([seed, 7, trial])
        pr, twins, _, _ = _same_run_grid(rng, bias=MIXED)
        verdicts, _ = _judge(pr, [], [twins], warned=warned)
        flagged = sum(v in FLAGS for v in verdicts)
        per_case += flagged
        grids += flagged > 0
    return per_case / (trials * GRID), grids / trials, sum(warned) / trials


def twin_off(trials: int, seed: int, off: float) -> float:
    """Share of grids (per-copy bias 1 %) whose twin warning fires when one case's twin
    really sits `off` away from its arm."""
    import numpy as np

    warned: list[bool] = []
    for trial in range(trials):
        rng = np.random.default_rng([seed, 8, int(off * 1e4), trial])
        offs = [0.0] * GRID
        offs[trial % GRID] = off
        pr, twins, _, _ = _same_run_grid(rng, bias=0.01, twin_off=offs)
        _judge(pr, [], [twins], warned=warned)
    return sum(warned) / trials


# Round noise that differs by case (process offsets 0.3 x it): what moderated
# variances (cases lending each other degrees of freedom) must survive.
NOISY = [0.005, 0.01, 0.02, 0.03]


def noise_by_case(trials: int, seed: int) -> tuple[float, float]:
    """Coverage (at +2 %) and share of A/A grids with a false flag when each case's round
    noise is one of NOISY (no per-copy bias)."""
    import numpy as np

    nested = _nested()
    labels = _labels(PROCESSES, PER_PROCESS)
    covered = total = grids = 0
    for trial in range(trials):
        rng = np.random.default_rng([seed, 9, trial])
        for effect in (0.02, 0.0):
            pr, twins = [], []
            for i in range(GRID):
                kw = {"round_sd": NOISY[i % len(NOISY)],
                      "process_sd": 0.3 * NOISY[i % len(NOISY)]}
                base = _arm(rng, PROCESSES, PER_PROCESS, 0.0, **kw)
                twin = _arm(rng, PROCESSES, PER_PROCESS, 0.0, **kw)
                new = _arm(rng, PROCESSES, PER_PROCESS, 0.0, effect, **kw)
                pr.append(_pr_sample(new, base, twin, labels))
                twins.append(nested.ProcessSample(twin - base, labels))
            verdicts, changes = _judge(pr, [], [twins])
            if effect:
                covered += sum(c.lo <= 1.0 + effect <= c.hi for c in changes)
                total += len(changes)
            else:
                grids += any(v in FLAGS for v in verdicts)
    return covered / total, grids / trials


def power(trials: int, seed: int, effect: float, bias: float) -> float:
    import numpy as np

    hits = 0
    for trial in range(trials):
        rng = np.random.default_rng([seed, 3, int(effect * 1e4), int(bias * 1e4), trial])
        effects = [0.0] * GRID
        effects[trial % GRID] = effect
        pr, twins, _, _ = _same_run_grid(rng, bias=bias, effects=effects)
        verdicts, _ = _judge(pr, [], [twins])
        hits += verdicts[trial % GRID] in FLAGS
    return hits / trials


def separate_runs(trials: int, seed: int, f_ratio: float, common_arm: bool) -> tuple[float, float]:
    """Coverage of the double-ratio interval and share of A/A grids with a false flag."""
    import numpy as np

    nested = _nested()

    labels = _labels(PROCESSES, PER_PROCESS)
    # The variance of one run's process values of log(arm / control): two arms' process
    # offsets and the medians of their rounds.
    process_var = 2.0 * (PROCESS_SD**2 + (1.2533 * ROUND_SD) ** 2 / PER_PROCESS)
    run_sd = math.sqrt((f_ratio - 1.0) * process_var / PROCESSES)
    covered = grids = 0
    for trial in range(trials):
        rng = np.random.default_rng([seed, 4, int(f_ratio * 100), trial])
        runs = []
        for _ in range(2):
            pr_side, twin_side, common_side = [], [], []
            for _ in range(GRID):
                control = _arm(rng, PROCESSES, PER_PROCESS, 0.0)
                arm = _arm(rng, PROCESSES, PER_PROCESS, 0.0) + rng.normal(0.0, run_sd)
                twin = _arm(rng, PROCESSES, PER_PROCESS, 0.0)
                other = _arm(rng, PROCESSES, PER_PROCESS, 0.0) + rng.normal(0.0, run_sd)
                pr_side.append(nested.ProcessSample(arm - control, labels))
                twin_side.append(nested.ProcessSample(twin - arm, labels))
                common_side.append(nested.ProcessSample(other - control, labels))
            runs.append((pr_side, twin_side, common_side))
        (base, base_twin, base_common), (pr, pr_twin, pr_common) = runs
        between = None
        if common_arm and _new_api():
            between = nested.unmodelled_variance(
                nested.nested_double_ratio_changes(pr_common, base_common))
        verdicts, changes = _judge(pr, base, [base_twin, pr_twin], between=between,
                                   same_run=False)
        covered += sum(c.lo <= 1.0 <= c.hi for c in changes)
        grids += any(v in FLAGS for v in verdicts)
    return covered / (trials * GRID), grids / trials


def quiet_rounds(trials: int, seed: int, effect: float) -> tuple[float, float]:
    """The issue's case: 6 processes, rounds of 4 unquiet, 3 % noise, 1 % process offsets,
    every case `effect` slower. Share of verdicts ⚠️ or 🔴, and share ❔."""
    import numpy as np

    flagged = unsure = 0
    for trial in range(max(1, trials // 4)):
        rng = np.random.default_rng([seed, 5, int(effect * 1e4), trial])
        pr, twins, unquiet, quiet = _same_run_grid(
            rng, effects=[effect] * GRID, round_sd=0.03, process_sd=0.01,
            unquiet_processes=(0, 1, 2, 3))
        verdicts, _ = _judge(pr, [], [twins], unquiet, quiet)
        flagged += sum(v in FLAGS for v in verdicts)
        unsure += sum(v == "inconclusive" for v in verdicts)
    n = max(1, trials // 4) * GRID
    return flagged / n, unsure / n


def history(trials: int, seed: int, rho: float) -> float:
    """Share of `detect` runs over 20 null series of 50 points that report a change."""
    import numpy as np

    try:  # since the history became a wing of reports
        from epbench.reports.history import changepoints
    except ImportError:
        from epbench.reports import changepoints

    many = getattr(changepoints, "detect_many", None)
    hits = 0
    runs = min(HISTORY_RUNS, max(1, trials // 2))
    for trial in range(runs):
        rng = np.random.default_rng([seed, 6, int(rho * 100), trial])
        eps = rng.normal(0.0, HISTORY_SD * math.sqrt(1.0 - rho * rho), (20, 50))
        z = np.empty_like(eps)
        z[:, 0] = rng.normal(0.0, HISTORY_SD, 20)
        for t in range(1, 50):
            z[:, t] = rho * z[:, t - 1] + eps[:, t]
        if many is not None:
            found = any(many(list(z)))
        else:
            found = any(changepoints.e_divisive(row) for row in z)
        hits += found
    return hits / runs


def measure(trials: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in (3, 6):
        out[f"coverage, one run, P = {p}"] = coverage(trials, seed, p)
    for bias in (0.0, 0.01):
        case, grid, warned = false_flags(trials, seed, bias)
        out[f"A/A false flags per case, per-copy bias {bias:.0%}"] = case
        out[f"A/A grids with a false flag, per-copy bias {bias:.0%}"] = grid
        out[f"A/A grids with the twin warning, per-copy bias {bias:.0%}"] = warned
    case, grid, warned = false_flags(trials, seed, 0.01, processes=1, per_process=16)
    out["one process (16 rounds), per-copy bias 1%: A/A false flags per case"] = case
    out["one process (16 rounds), per-copy bias 1%: A/A grids with a false flag"] = grid
    case, grid, warned = mixed_bias(trials, seed)
    out["per-copy bias by case (2% or 0.5%): A/A false flags per case"] = case
    out["per-copy bias by case (2% or 0.5%): A/A grids with a false flag"] = grid
    out["per-copy bias by case (2% or 0.5%): A/A grids with the twin warning"] = warned
    out["one twin 6% off its arm, per-copy bias 1%: grids with the twin warning"] = twin_off(
        trials, seed, 0.06)
    cov, grid = noise_by_case(trials, seed)
    out["round noise by case (0.5% to 3%): coverage"] = cov
    out["round noise by case (0.5% to 3%): A/A grids with a false flag"] = grid
    for bias in (0.0, 0.01):
        for effect in (0.01, 0.02, 0.03):
            out[f"power at +{effect:.0%}, per-copy bias {bias:.0%}"] = power(
                trials, seed, effect, bias)
    for f_ratio in (1.65, 2.66):
        for common in (False, True):
            cov, grid = separate_runs(trials, seed, f_ratio, common)
            how = "an arm in both runs" if common else "no between-run estimate"
            out[f"separate runs F = {f_ratio}, {how}: coverage"] = cov
            out[f"separate runs F = {f_ratio}, {how}: A/A grids flagged"] = grid
    for effect in (0.03, 0.05, 0.08, 0.12):
        flagged, unsure = quiet_rounds(trials, seed, effect)
        out[f"4 of 6 processes unquiet, +{effect:.0%}: ⚠️ or 🔴"] = flagged
        out[f"4 of 6 processes unquiet, +{effect:.0%}: ❔"] = unsure
    for rho in (0.0, 0.2, 0.4):
        out[f"history detect, 20 null series, rho = {rho}: runs with a change"] = history(
            trials, seed, rho)
    return out


# --------------------------------------------------------------------------- ceiling


def within_se(processes: int = PROCESSES, per_process: int = PER_PROCESS) -> float:
    """The standard error of one run's PR / base change in this model, over processes:
    per process the median of `per_process` rounds of two arms' noise (1.2533 x sd /
    sqrt(n)) and two process offsets."""
    per = 2.0 * (PROCESS_SD**2 + (1.2533 * ROUND_SD) ** 2 / per_process)
    return math.sqrt(per / processes)


def power_ceiling(effect: float, bias: float, *, processes: int = PROCESSES,
                  copies: int = 1, tested: int = GRID, threshold: float = 0.01,
                  fdr: float = 0.05) -> float:
    """The power of an oracle that knows every variance, testing "change <= threshold"
    for the one slowed case of a grid: its doubled one-sided p must reach BH's smallest
    cut-off fdr / tested. The copies' bias does not shrink with processes (they share
    the copy), only with `copies` per arm averaged."""
    from statistics import NormalDist

    sd = math.sqrt(2.0 * bias**2 / copies + within_se(processes) ** 2)
    z = NormalDist().inv_cdf(1.0 - fdr / tested / 2.0)
    return NormalDist().cdf((math.log1p(effect) - math.log1p(threshold)) / sd - z)


def ceiling_lines() -> list[str]:
    """The power ceilings statistics.md quotes."""
    out = []
    for processes in (3, 6, 1000):
        out.append(f"ceiling, +3 %, per-copy bias 1 %, P = {processes}, BH over {GRID}: "
                   f"{power_ceiling(0.03, 0.01, processes=processes):.1%}")
    out.append(f"ceiling, +3 %, per-copy bias 1 %, P = 6, one case alone: "
               f"{power_ceiling(0.03, 0.01, tested=1):.1%}")
    out.append(f"ceiling, +3 %, no bias, P = 6, BH over {GRID}: "
               f"{power_ceiling(0.03, 0.0):.1%}")
    need = next(n for n in range(1, 10_000) if power_ceiling(0.03, 0.01, copies=n) >= 0.99)
    out.append(f"copies per arm for a 99 % ceiling at +3 %, per-copy bias 1 %: {need}")
    return out


# --------------------------------------------------------------------------- both


def _tree_at(rev: str, into: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    archive = subprocess.run(["git", "-C", str(root), "archive", rev, "epbench", "reports",
                              "harness", "cases", "engine", "tests"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for part in ("cases", "engine", "harness", "reports"):
        # Since the parts are mapped by setuptools package-dir, not linked: link them.
        if (into / part).is_dir() and not (into / "epbench" / part).exists():
            (into / "epbench" / part).symlink_to(into / part, target_is_directory=True)


# Run this script on an extracted tree: the editable install's finder (which maps
# epbench to this checkout, ahead of PYTHONPATH) is taken off first.
_ISOLATED = ("import runpy, sys; "
             "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]; "
             "sys.path_hooks[:] = [h for h in sys.path_hooks if '__editable__' not in repr(h)]; "
             "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def _run(tree: Path | None, trials: int, seed: int) -> dict[str, Any]:
    """Measure on an extracted tree, or (None) on the importable epbench."""
    args = [str(Path(__file__).resolve()), "--measure", "--trials", str(trials),
            "--seed", str(seed)]
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        args = ["-c", _ISOLATED, *args]
    out = subprocess.run([sys.executable, *args], check=True, capture_output=True,
                         text=True, env=env, cwd=tree)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="d031736,99080bb,1d0638e",
                        help="git revisions to measure before this tree, comma-separated")
    parser.add_argument("--trials", type=int, default=60, help="grids per figure")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--measure", action="store_true",
                        help="measure the importable epbench only, print JSON")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.trials, args.seed)))
        return
    revs = [r for r in args.before.split(",") if r]
    before = []
    for rev in revs:
        with tempfile.TemporaryDirectory() as tmp:
            _tree_at(rev, Path(tmp))
            before.append(_run(Path(tmp), args.trials, args.seed))
    after = _run(None, args.trials, args.seed)
    print(f"| figure ({args.trials} grids of {GRID} cases a figure, seed {args.seed}) | "
          + "".join(f"{rev} | " for rev in revs) + "after |")
    print("|---|" + "---|" * (len(revs) + 1))
    for key in after:
        cells = "".join(f"{b.get(key, float('nan')):.1%} | " for b in before)
        print(f"| {key} | {cells}{after[key]:.1%} |")
    print()
    for line in ceiling_lines():
        print(f"- {line}")


if __name__ == "__main__":
    main()
