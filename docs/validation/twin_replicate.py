"""The twin as a second base replicate (issue 46): PR against base, or against the
geometric mean of base and its A/A twin, measured on real runs.

    .venv/bin/python docs/validation/twin_replicate.py RESULTS.json [...] --pr head --pr d2

Each RESULTS.json is one run holding base, its A/A twin (`run --aa-twin base`) and the
--pr arms, e.g. docs/validation/same_process_repeats.sh's runN/results.json. Per run and
PR arm, every case is judged twice with the project's own kernel (per-process medians,
Student's t, moderated variances, the twin's tau^2, interval nulls with BH):

- `base`: log(PR / base), compare()'s rule before the twin was a second replicate, and
  still where the PR arm loads base's own library file;
- `mean`: log(PR / sqrt(base x twin)), each round's PR against the geometric mean of
  the two copies of base. Its unmodelled variance is 3/4 of the twin's tau^2: tau^2
  estimates what two copies differ by (2 b^2 for a per-copy bias b), PR / base carries
  two copies' bias (2 b^2), PR / mean(base, twin) one and two halves (1.5 b^2).

The script checks that the rule compare() follows gives compare()'s verdicts. It
prints, per PR arm: the median ratio of the mean rule's standard error to the base
rule's, over processes alone and as the verdict uses it (with tau^2 and moderation);
under each rule the median standard error and detectable change, the cases flagged
(⚠️ or 🔴), the spread of the estimate across runs (deviations from the case's mean over
the runs: the honest standard error, whatever processes can or cannot see, where every
copy is drawn afresh each run: same_process_repeats.sh FRESH_COPIES=1; a library file
kept for the whole series hides its layout's bias in the mean), and the correlation of each
estimate with the twin's own A/A change (the twin sets t and tau^2 independently of the
estimate only when it is 0).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from epbench.core.results import load_results
from epbench.reports import compare as compare_mod
from epbench.reports import nested, stats
from epbench.reports.comparison import RoundMedians, Settings, Side
from epbench.reports.run_noise import twin_noise, with_twin
from epbench.reports.verdicts import GridSamples, grid_detectable, judge_samples, threshold_for

# Of the twin's tau^2 (two copies' bias), what PR / mean(base, twin) carries: 1 + 1/2
# copies' of 2 (compare's own constant where this tree has one).
MEAN_TAU_SHARE = getattr(compare_mod, "TWIN_REPLICATE_SHARE", 0.75)


@dataclass
class Judged:
    """One rule's figures for one case of one run."""

    log: float  # the estimate, log scale
    within_se: float  # over processes alone
    se: float  # as the verdict uses it
    detectable: float
    verdict: str


def _judge(samples: list[nested.ProcessSample], quiet: list[nested.ProcessSample],
           quiet_index: list[int], extra: list[float], thresholds: list, unquiet: list[int],
           rounds: list[int], settings: Settings) -> list[Judged]:
    grid = GridSamples(samples, [], True, quiet, [], quiet_index, extra_variance=extra,
                       extra_df=max(1.0, len(samples) - 1.0))
    changes = grid.changes(confidence=settings.confidence)
    within = nested.nested_changes(samples, confidence=settings.confidence)
    judgements, tests = judge_samples(grid, thresholds, unquiet, rounds, settings,
                                      changes=changes)
    mde = grid_detectable(changes, judgements, tests, [th.t for th in thresholds],
                          settings, True)
    return [Judged(math.log(c.ratio), nested.standard_error(w), nested.standard_error(c),
                   d, j.verdict)
            for c, w, j, d in zip(changes, within, judgements, mde, strict=True)]


def judge_run(path: str, pr_arm: str, settings: Settings
              ) -> tuple[dict[str, Judged], dict[str, Judged], dict[str, float], dict[str, str],
                         str]:
    """Per case: the base rule's and the mean rule's figures, the twin's A/A log change,
    compare()'s own verdict, and which rule compare() follows here ("base" or "mean")."""
    doc = load_results(path)
    if doc.twin is None:
        raise SystemExit(f"{path} has no A/A twin")
    base_arm, twin_arm = doc.twin.of, doc.twin.key
    medians = RoundMedians()
    names, by_base, by_mean, quiet_b, quiet_m, quiet_index = [], [], [], [], [], []
    unquiet, rounds = [], []
    for name, case in doc.cases.items():
        if not case.ok or pr_arm not in case.arms:
            continue
        p, b, t = medians(case, pr_arm), medians(case, base_arm), medians(case, twin_arm)
        mean = np.sqrt(b * t)  # NaN where either copy has no time: the round drops out
        proc, quiet = stats.round_labels(case, "process"), stats.quiet_mask(case)
        by_base.append(nested.process_sample(p, b, proc))
        by_mean.append(nested.process_sample(p, mean, proc))
        if not quiet.all():
            quiet_b.append(nested.process_sample(p, b, proc, quiet))
            quiet_m.append(nested.process_sample(p, mean, proc, quiet))
            quiet_index.append(len(names))
        names.append(name)
        unquiet.append(int((~quiet).sum()))
        rounds.append(len(case.rounds))
    twins = twin_noise([Side("base", doc, base_arm)], names, settings, medians)
    thresholds = []
    for name in names:
        noise, source = with_twin(None, "no profile", twins.noise.get(name))
        thresholds.append(threshold_for(noise, source, settings))
    base_rule = _judge(by_base, quiet_b, quiet_index, twins.extra, thresholds, unquiet,
                       rounds, settings)
    mean_rule = _judge(by_mean, quiet_m, quiet_index,
                       [MEAN_TAU_SHARE * v for v in twins.extra], thresholds, unquiet,
                       rounds, settings)
    twin_log = {name: math.log1p(aa.change) for name, aa in twins.info[0].cases.items()
                if aa.change is not None}
    sides = Side("base", doc, base_arm, path), Side("pr", doc, pr_arm, path)
    own = compare_mod.compare(*sides, settings=settings)
    # The rule compare() itself follows here (the base rule before second_replicate).
    chooser = getattr(compare_mod, "second_replicate", lambda *_: None)
    rule = "mean" if chooser(*sides) is not None else "base"
    verdicts = {row.case: row.verdict for row in own.cases}
    return (dict(zip(names, base_rule, strict=True)), dict(zip(names, mean_rule, strict=True)),
            twin_log, verdicts, rule)


def _spread(values: dict[str, list[float]]) -> tuple[float, int]:
    """The pooled sd of each case's estimates around their mean over runs, and its df."""
    ss, df = 0.0, 0
    for xs in values.values():
        if len(xs) >= 2:
            m = sum(xs) / len(xs)
            ss += sum((x - m) ** 2 for x in xs)
            df += len(xs) - 1
    return (math.sqrt(ss / df) if df else math.nan), df


def _corr(xs: list[float], ys: list[float]) -> float:
    return float(np.corrcoef(xs, ys)[0, 1]) if len(xs) >= 3 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="results.json of runs with an A/A twin")
    parser.add_argument("--pr", action="append", required=True, help="a PR arm (repeatable)")
    args = parser.parse_args()
    settings = Settings()
    mismatches = 0
    print("| PR arm | case-runs | se ratio, processes | se ratio, verdict | se, verdict, base → "
          "mean | detectable, base → mean | flagged, base → mean | sd over runs, base → mean "
          "| corr with twin, base → mean |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arm in args.pr:
        within, verdict_se, mde_b, mde_m, se_b, se_m = [], [], [], [], [], []
        flags: Counter[str] = Counter()
        logs: dict[str, dict[str, list[float]]] = {"base": defaultdict(list),
                                                   "mean": defaultdict(list)}
        twin_x, est = [], {"base": [], "mean": []}
        for path in args.results:
            b_rule, m_rule, twin_log, own, rule = judge_run(path, arm, settings)
            used = m_rule if rule == "mean" else b_rule
            for name, b in b_rule.items():
                m = m_rule[name]
                mismatches += own.get(name) != used[name].verdict
                within.append(m.within_se / b.within_se)
                verdict_se.append(m.se / b.se)
                se_b.append(b.se)
                se_m.append(m.se)
                mde_b.append(b.detectable)
                mde_m.append(m.detectable)
                flags["base"] += b.verdict in ("regression", "alert")
                flags["mean"] += m.verdict in ("regression", "alert")
                logs["base"][name].append(b.log)
                logs["mean"][name].append(m.log)
                if name in twin_log:
                    twin_x.append(twin_log[name])
                    est["base"].append(b.log)
                    est["mean"].append(m.log)
        sd_b, df = _spread(logs["base"])
        sd_m, _ = _spread(logs["mean"])
        print(f"| {arm} | {len(within)} | {statistics.median(within):.3f} | "
              f"{statistics.median(verdict_se):.3f} | "
              f"{statistics.median(se_b):.2%} → {statistics.median(se_m):.2%} | "
              f"{statistics.median(mde_b):.2%} → {statistics.median(mde_m):.2%} | "
              f"{flags['base']} → {flags['mean']} | "
              f"{sd_b:.2%} → {sd_m:.2%} ({df} df) | "
              f"{_corr(twin_x, est['base']):+.2f} → {_corr(twin_x, est['mean']):+.2f} |")
    if mismatches:
        print(f"the rule compare() follows gives another verdict in {mismatches} case-runs",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
