"""How much of the spread between a case's process values is the processes' own.

    python docs/validation/variance_components.py RESULTS.json... [--base base] [--pr head]

For every case of every file, the per-round log ratio PR / base; each process's value is
the median of its rounds (as `reports.stats.nested_changes` takes it). The variance of
those process values is compared with what it is when the rounds are dealt to the
processes at random (same number of rounds each, 400 shuffles): the round-to-round noise
alone. A ratio near 1 says the processes add nothing beyond their rounds' noise (layout
offsets are small next to it); a ratio well above 1 says a process carries an offset of
its own. The same is done for the sessions inside each process (labels shuffled within a
process, so a process's offset stays put).

Prints, per case, the median over files of the observed SD of process values, the SD
the shuffled rounds give, their variance ratio, and the sessions' variance ratio; then the
pooled ratios (sum of observed variances over sum of shuffled ones, over every case and
file). A file written with `--keep-samples` also gets, per case, the interquartile range
of log(PR block median / base block median) over its rounds beside that of log(second
half / first half) of the base block: noise that two halves of one block already show
lives at a millisecond scale, below what interleaving the arms' blocks can cancel.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
from pathlib import Path

import numpy as np

from epbench.core.results import load_results
from epbench.reports.stats import round_labels, round_medians

SHUFFLES = 400


def group_medians(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return np.array([np.median(values[labels == g]) for g in np.unique(labels)])


def shuffled_variance(values: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> float:
    """Mean variance of group medians when the labels are dealt to the values at random."""
    return float(np.mean([np.var(group_medians(values, rng.permutation(labels)), ddof=1)
                          for _ in range(SHUFFLES)]))


def session_variance(r: np.ndarray, proc: np.ndarray, sess: np.ndarray) -> float:
    """Mean over processes of the variance of that process's session medians."""
    vs = []
    for p in np.unique(proc):
        m = proc == p
        if len(np.unique(sess[m])) > 1:
            vs.append(np.var(group_medians(r[m], sess[m]), ddof=1))
    return float(np.mean(vs)) if vs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--base", default="base")
    ap.add_argument("--pr", default="head")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = collections.defaultdict(list)
    for f in args.files:
        block_halves(f, args.base, args.pr)
        for name, case in load_results(f).cases.items():
            r = np.log(round_medians(case, args.pr) / round_medians(case, args.base))
            proc, sess = round_labels(case, "process"), round_labels(case, "session")
            ok = np.isfinite(r)
            r, proc, sess = r[ok], proc[ok], sess[ok]
            if len(np.unique(proc)) < 2:
                continue
            obs = float(np.var(group_medians(r, proc), ddof=1))
            null = shuffled_variance(r, proc, rng)
            s_obs = session_variance(r, proc, sess)
            s_null = float(np.mean([session_variance(r, proc, _deal_within(proc, sess, rng))
                                    for _ in range(SHUFFLES // 4)]))
            rows[name].append((obs, null, s_obs, s_null))
    print(f"{'case':18s} {'files':>5s} {'SD obs':>7s} {'SD shuf':>7s} {'proc ratio':>10s} "
          f"{'sess ratio':>10s}")
    all_rows = []
    for name, v in sorted(rows.items()):
        all_rows += v
        print(f"{name:18s} {len(v):5d} {statistics.median(np.sqrt(x[0]) for x in v):7.2%} "
              f"{statistics.median(np.sqrt(x[1]) for x in v):7.2%} "
              f"{sum(x[0] for x in v) / sum(x[1] for x in v):10.2f} "
              f"{_ratio([x[2] for x in v], [x[3] for x in v]):10.2f}")
    print(f"pooled over {len(all_rows)} case runs: process variance ratio "
          f"{sum(x[0] for x in all_rows) / sum(x[1] for x in all_rows):.2f}, session "
          f"variance ratio {_ratio([x[2] for x in all_rows], [x[3] for x in all_rows]):.2f}")


def block_halves(results: str, base: str, pr: str) -> None:
    """From kept samples: IQR of PR vs base block medians, and of one block's two halves."""
    path = Path(results).with_name("results.samples.jsonl.gz")
    if not path.exists():
        return
    by_case = collections.defaultdict(lambda: ([], []))
    with gzip.open(path, "rt") as f:
        for line in f:
            row = json.loads(line)
            b, p = (np.asarray(row["samples_ns"][k], dtype=float) for k in (base, pr))
            half = len(b) // 2
            between, halves = by_case[row["case"]]
            between.append(np.log(np.median(p) / np.median(b)))
            halves.append(np.log(np.median(b[half:]) / np.median(b[:half])))
    print(f"{results}: IQR of log({pr} / {base}) block medians | of a {base} block's halves")
    for case, (between, halves) in sorted(by_case.items()):
        print(f"  {case:18s} {len(between):3d} rounds  {_iqr(between):6.2%} | {_iqr(halves):6.2%}")


def _iqr(values: list[float]) -> float:
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 - q1)


def _deal_within(proc: np.ndarray, sess: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Session labels shuffled inside each process."""
    dealt = sess.copy()
    for p in np.unique(proc):
        idx = np.flatnonzero(proc == p)
        dealt[idx] = rng.permutation(sess[idx])
    return dealt


def _ratio(obs: list[float], null: list[float]) -> float:
    pairs = [(a, b) for a, b in zip(obs, null, strict=True) if np.isfinite(a) and np.isfinite(b)]
    return sum(a for a, _ in pairs) / sum(b for _, b in pairs) if pairs else float("nan")


if __name__ == "__main__":
    main()
