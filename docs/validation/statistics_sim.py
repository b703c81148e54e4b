"""The simulation behind docs/validation/statistics.md: verdict statistics, before and after.

    PYTHONPATH=. python docs/validation/statistics_sim.py            # the table, markdown
    PYTHONPATH=. python docs/validation/statistics_sim.py --trials 20  # a quicker, rougher one

It measures the same figures twice, each in a subprocess: on the tree at --before (a git
revision, extracted with `git archive` into a temporary directory) and on this tree, and
prints one markdown table. Every figure comes from the project's own functions
(reports.stats, reports.compare) on synthetic rounds with a known truth; the glue that
compare() puts around them (twin noise, thresholds, quiet rounds) is repeated here for
both versions, because compare() itself needs whole results documents, which are 100x
slower to build. tests/test_verdict_monotone.py checks the same rule through compare().

The model (log scale, per case): every arm a copy of a library gets a bias N(0, bias)
fixed for the run (the per-copy bias the processes cannot see), per process an offset
N(0, 0.3 %), per round noise N(0, 1 %); 6 processes x 8 rounds; a grid is 20 cases.
Separate runs add to each run's arm / control ratio a run offset whose variance is
(F - 1) x the variance of a run's process values / 6, so the one-way ANOVA F of process
values between runs has expectation F. History: 20 series of 50 points, AR(1) noise
with lag-1 correlation rho and sd 2.4 %.

Seeds: numpy's default_rng([--seed, scenario number, ...parameters, trial]); --seed 46
and --trials 100 (grids per figure; a quarter of that for the quiet-rounds and history
figures) give the committed table, in about 6 minutes on a busy 2-core machine.
"""

from __future__ import annotations

import argparse
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


def _judge(pr, base, twins, unquiet=None, quiet=None, between=None, same_run=True):
    """Verdicts of a grid the way compare() reaches them, in either version.

    pr, base: per case ProcessSample (base empty for one run); twins: per run, per case
    the twin's ProcessSample; unquiet: per case the unquiet round count; quiet: per case
    (PR, base) quiet-round samples or None; between: separate runs' between-run
    variance (None: not known)."""
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
    if _new_api():
        noise = [max(math.expm1(nested.standard_error(c[i])) for c in twin_changes)
                 for i in range(n)]
        tau2 = sum(nested.unmodelled_variance(c) for c in twin_changes) / len(twin_changes)
    else:
        noise = [max(abs(c[i].ratio - 1.0) for c in twin_changes) for i in range(n)]
        tau2 = 0.0
    thresholds = [verdicts.threshold_for(x, "twin", settings) for x in noise]
    index = [i for i in range(n) if quiet[i] is not None]
    if _new_api():
        grid = verdicts.GridSamples(pr, base, same_run, [quiet[i][0] for i in index],
                                   [quiet[i][1] for i in index] if not same_run else [],
                                   index, extra_variance=tau2 + (between or 0.0),
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
                   round_sd=ROUND_SD, process_sd=PROCESS_SD, unquiet_processes=()):
    import numpy as np

    nested = _nested()

    effects = effects if effects is not None else [0.0] * GRID
    labels = _labels(processes, PER_PROCESS)
    pr, twins, unquiet, quiet = [], [], [], []
    keep = ~np.isin(labels, list(unquiet_processes))
    for effect in effects:
        kw = {"round_sd": round_sd, "process_sd": process_sd}
        base = _arm(rng, processes, PER_PROCESS, bias, **kw)
        twin = _arm(rng, processes, PER_PROCESS, bias, **kw)
        new = _arm(rng, processes, PER_PROCESS, bias, effect, **kw)
        pr.append(nested.ProcessSample(new - base, labels))
        twins.append(nested.ProcessSample(twin - base, labels))
        unquiet.append(int((~keep).sum()))
        quiet.append((nested.ProcessSample((new - base)[keep], labels[keep]), None)
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


def false_flags(trials: int, seed: int, bias: float) -> tuple[float, float]:
    import numpy as np

    per_case, grids = 0, 0
    for trial in range(trials):
        rng = np.random.default_rng([seed, 2, int(bias * 1e4), trial])
        pr, twins, _, _ = _same_run_grid(rng, bias=bias)
        verdicts, _ = _judge(pr, [], [twins])
        flagged = sum(v in FLAGS for v in verdicts)
        per_case += flagged
        grids += flagged > 0
    return per_case / (trials * GRID), grids / trials


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
    runs = max(1, trials // 4)
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
        case, grid = false_flags(trials, seed, bias)
        out[f"A/A false flags per case, per-copy bias {bias:.0%}"] = case
        out[f"A/A grids with a false flag, per-copy bias {bias:.0%}"] = grid
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


# --------------------------------------------------------------------------- both


def _tree_at(rev: str, into: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    archive = subprocess.run(["git", "-C", str(root), "archive", rev, "epbench", "reports",
                              "harness", "cases", "engine", "tests"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def _run(tree: Path, trials: int, seed: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure",
                          "--trials", str(trials), "--seed", str(seed)],
                         check=True, capture_output=True, text=True, env=env, cwd=tree)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="d031736", help="git revision of 'before'")
    parser.add_argument("--trials", type=int, default=100, help="grids per figure")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--measure", action="store_true",
                        help="measure the importable epbench only, print JSON")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.trials, args.seed)))
        return
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        _tree_at(args.before, Path(tmp))
        before = _run(Path(tmp), args.trials, args.seed)
    after = _run(root, args.trials, args.seed)
    print(f"| figure ({args.trials} grids of {GRID} cases a figure, seed {args.seed}) | "
          f"before ({args.before}) | after |")
    print("|---|---|---|")
    for key in after:
        print(f"| {key} | {before.get(key, float('nan')):.1%} | {after[key]:.1%} |")


if __name__ == "__main__":
    main()
