"""How much of the spread between a case's process values is the processes' own.

    python docs/validation/variance_components.py RESULTS.json... [--base base] [--pr head]

For every case of every file, the process values are those the verdicts rest on
(`reports.nested.process_sample(...).per_process()`: per process, the median of its
rounds' log ratios PR / base). Their variance is compared with what it is when the
rounds are dealt to the processes at random (same number of rounds each, 400 shuffles):
the round-to-round noise alone. A ratio near 1 says the processes add nothing to their
rounds' noise; above 1, a process carries an offset of its own. A process runs its rounds
back to back, so such an offset is layout or a drift of the machine while it ran: the
ratio bounds the layout effect from above. The same is done for the sessions inside each
process (labels shuffled within a process, so a process's offset stays put); with one
round per session and process there is nothing to shuffle and the ratio is "-".

Prints, per case, the median over files of the observed SD of the process values and of
the SD the shuffled rounds give, and the ratio of summed variances (observed over
shuffled); then, over every case run, that pooled ratio with a 95 % bootstrap interval
(resampling whole files: a run's cases share its machine), the median of the
per-case-run ratios, and how many case runs beat 95 % of their own shuffles.

A file written with `--keep-samples` also gets, per case, the interquartile range of
log(PR block median / base block median) over its rounds beside that of log(second half /
first half) of the base block. With independent per-call noise the halves would differ
by about 1.4 times (sqrt 2) as much as two whole blocks; with only slow drift, hardly at
all.

Where a run's time goes: the summed idle-gate waits and in-round time of its rounds.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from epbench.core.results import load_results
from epbench.reports.nested import process_sample
from epbench.reports.stats import round_labels, round_medians

SHUFFLES = 400
BOOTSTRAP = 2000


@dataclass(frozen=True)
class CaseRun:
    """One case of one file: observed and shuffled variances of its process values."""

    file: int
    observed: float
    shuffled: float
    beyond_95: bool  # observed above the 95th percentile of its own shuffles
    sessions_observed: float
    sessions_shuffled: float


def group_medians(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return np.array([np.median(values[labels == g]) for g in np.unique(labels)])


def session_variance(r: np.ndarray, proc: np.ndarray, sess: np.ndarray) -> float:
    """Mean over processes of the variance of that process's session medians (NaN when
    no session of any process holds two rounds: nothing to shuffle)."""
    vs = []
    for p in np.unique(proc):
        m = proc == p
        labels = sess[m]
        if len(np.unique(labels)) > 1 and len(labels) > len(np.unique(labels)):
            vs.append(np.var(group_medians(r[m], labels), ddof=1))
    return float(np.mean(vs)) if vs else float("nan")


def deal_within(proc: np.ndarray, sess: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Session labels shuffled inside each process."""
    dealt = sess.copy()
    for p in np.unique(proc):
        idx = np.flatnonzero(proc == p)
        dealt[idx] = rng.permutation(sess[idx])
    return dealt


def case_run(file: int, num: np.ndarray, den: np.ndarray, proc: np.ndarray,
             sess: np.ndarray, rng: np.random.Generator) -> CaseRun | None:
    ok = np.isfinite(num) & np.isfinite(den) & (num > 0) & (den > 0)
    sample = process_sample(num, den, proc)
    if sample.n_processes < 2:
        return None
    r, proc, sess = sample.logs, sample.processes, sess[ok]
    observed = float(np.var(sample.per_process(), ddof=1))
    null = np.array([np.var(group_medians(r, rng.permutation(proc)), ddof=1)
                     for _ in range(SHUFFLES)])
    s_obs = session_variance(r, proc, sess)
    s_null = (float(np.mean([session_variance(r, proc, deal_within(proc, sess, rng))
                             for _ in range(SHUFFLES // 4)]))
              if np.isfinite(s_obs) else float("nan"))
    return CaseRun(file, observed, float(np.mean(null)), bool(observed > np.percentile(null, 95)),
                   s_obs, s_null)


def block_halves(results: str, base: str, pr: str) -> None:
    """From kept samples: IQR of PR vs base block medians, and of one block's two halves."""
    path = Path(results).with_name("results.samples.jsonl.gz")
    if not path.exists():
        return
    if load_results(results).config.block_slices != 1:
        # Sliced blocks interleave with the other arms: their halves are not two stretches
        # of time, so the comparison below would mean something else.
        print(f"{results}: blocks were cut into slices; block halves need --slices 1")
        return
    by_case: dict[str, tuple[list[float], list[float]]] = collections.defaultdict(
        lambda: ([], []))
    with gzip.open(path, "rt") as f:
        for line in f:
            row = json.loads(line)
            b, p = (np.asarray(row["samples_ns"][k], dtype=float) for k in (base, pr))
            half = len(b) // 2
            between, halves = by_case[row["case"]]
            between.append(float(np.log(np.median(p) / np.median(b))))
            halves.append(float(np.log(np.median(b[half:]) / np.median(b[:half]))))
    print(f"{results}: IQR of log({pr} / {base}) block medians | of a {base} block's halves")
    for case, (between, halves) in sorted(by_case.items()):
        print(f"  {case:18s} {len(between):3d} rounds  {_iqr(between):6.2%} | "
              f"{_iqr(halves):6.2%}  (ratio {_iqr(halves) / _iqr(between):.2f})")


def time_split(results: str) -> None:
    doc = load_results(results)
    rounds = [r for case in doc.cases.values() for r in case.rounds]
    gate = sum(float(r.gate.get("waited_s", 0.0)) for r in rounds)
    inside = sum(float(r.interference.get("elapsed_s", 0.0)) for r in rounds)
    procs = sum(len(case.processes) for case in doc.cases.values())
    print(f"{results}: {len(rounds)} rounds of {len(doc.arms)} arms in {procs} processes; "
          f"idle gate {gate:.1f} s, inside rounds {inside:.1f} s")


def _iqr(values: list[float]) -> float:
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 - q1)


def _ratio(obs: list[float], null: list[float]) -> float:
    pairs = [(a, b) for a, b in zip(obs, null, strict=True) if np.isfinite(a) and np.isfinite(b)]
    return sum(a for a, _ in pairs) / sum(b for _, b in pairs) if pairs else float("nan")


def _process_ratio(rows: list[CaseRun]) -> float:
    return _ratio([x.observed for x in rows], [x.shuffled for x in rows])


def _session_ratio(rows: list[CaseRun]) -> float:
    return _ratio([x.sessions_observed for x in rows], [x.sessions_shuffled for x in rows])


def _fmt(x: float) -> str:
    return f"{x:.2f}" if np.isfinite(x) else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--base", default="base")
    ap.add_argument("--pr", default="head")
    ap.add_argument("--times", action="store_true", help="also print where each run's time went")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows: dict[str, list[CaseRun]] = collections.defaultdict(list)
    for i, f in enumerate(args.files):
        block_halves(f, args.base, args.pr)
        if args.times:
            time_split(f)
        for name, case in load_results(f).cases.items():
            row = case_run(i, round_medians(case, args.pr), round_medians(case, args.base),
                           round_labels(case, "process"), round_labels(case, "session"), rng)
            if row is not None:
                rows[name].append(row)
    print(f"{'case':18s} {'files':>5s} {'SD obs':>7s} {'SD shuf':>7s} {'proc ratio':>10s} "
          f"{'sess ratio':>10s}")
    every: list[CaseRun] = []
    for name, v in sorted(rows.items()):
        every += v
        print(f"{name:18s} {len(v):5d} {statistics.median(np.sqrt(x.observed) for x in v):7.2%} "
              f"{statistics.median(np.sqrt(x.shuffled) for x in v):7.2%} "
              f"{_fmt(_process_ratio(v)):>10s} {_fmt(_session_ratio(v)):>10s}")
    obs = np.array([x.observed for x in every])
    null = np.array([x.shuffled for x in every])
    files = np.array([x.file for x in every])
    per_file = np.array([[obs[files == i].sum(), null[files == i].sum()]
                         for i in np.unique(files)])
    idx = rng.integers(0, len(per_file), size=(BOOTSTRAP, len(per_file)))
    boot = per_file[idx, 0].sum(axis=1) / per_file[idx, 1].sum(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    print(f"pooled over {len(every)} case runs of {len(per_file)} files: process variance ratio "
          f"{obs.sum() / null.sum():.2f} [{lo:.2f}, {hi:.2f}], median per case run "
          f"{np.median(obs / null):.2f}, {sum(x.beyond_95 for x in every)} of {len(every)} "
          f"beyond 95 % of their shuffles (5 % expected with no process offsets); session "
          f"variance ratio {_fmt(_session_ratio(every))}")


if __name__ == "__main__":
    main()
