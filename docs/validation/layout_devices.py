"""Do the processes of one run sample as much layout as separate runs differ by?

    python docs/validation/layout_devices.py OUT_DIR measure RUNS LABEL[,LABEL...]
    python docs/validation/layout_devices.py OUT_DIR summarize

`measure` makes RUNS runs per label, alternated (label 1 run 1, label 2 run 1, ...): the
quick grid, arms ORT, the bundled engine and nxrt-ep-cpu (plugin:nxrt_ep_cpu), 6
processes of 6 rounds each. A label names the layout devices the run was made with,
joined by `+` ("none" for none), at the commit being measured.

`summarize` reads every OUT_DIR/LABEL_N.json and, per label and arm, works out over the
cases a one-way analysis of variance of the process values (per process, the median of
its rounds' log(arm / ORT), the quantity a comparison between two runs rests on), with
the runs as groups:

- the within-run spread of the process values (their pooled standard deviation);
- F = P x (variance of the run means) / (pooled within-run variance): about 1 when the
  processes of a run sample all that separate runs differ by, larger when runs share
  something their processes do not (a library file's pages, say), which the two-run
  interval, built from the processes, would then not cover. It is pooled over cases
  (sums of squares and degrees of freedom added), with its 95 % critical value (which
  takes the cases as independent; they share each run's machine state, so it is too low).

Then, per arm and case, over every run of every label in the order they were made, the
lag-1 autocorrelation of the run means: when runs made next to each other in time (with
other devices) have alike means, what the runs share is the machine's state at the time,
which no layout device can sample.

The devices were measured with
docs/validation/summaries.tar.xz:layout_devices.patch applied (git apply, at
d15763c): a RunConfig field `layout_devices` the runner and worker read. They were not
kept (docs/design.md, "Variance model"), so `measure` needs that patch.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

ARMS = ("engine", "plugin:nxrt_ep_cpu")


def measure(out: Path, runs: int, labels: list[str]) -> None:
    from epbench.cases.grids import load_grid
    from epbench.core.results import write_results
    from epbench.harness.arms import parse_arm
    from epbench.harness.run_config import RunConfig
    from epbench.harness.runner import run

    out.mkdir(parents=True, exist_ok=True)
    arms = (parse_arm("engine"), parse_arm("plugin:nxrt_ep_cpu"))
    for i in range(1, runs + 1):
        for label in labels:
            devices = () if label == "none" else tuple(label.split("+"))
            doc = run(RunConfig(cases=tuple(load_grid("quick")), arms=arms, rounds=36,
                                processes=6, sessions=2, seed=i,
                                layout_devices=devices))  # type: ignore[call-arg]
            write_results(out / f"{label}_{i}.json", doc)
            print(f"{label} {i} done", flush=True)


def process_values(case: dict, arm: str) -> list[float]:
    by_process: dict[int, list[float]] = {}
    for rnd in case["rounds"]:
        ns = rnd["summary_ns"]
        by_process.setdefault(rnd["process"], []).append(
            math.log(ns[arm]["median"] / ns["ort"]["median"]))
    return [statistics.median(v) for v in by_process.values()]


def summarize(out: Path) -> None:
    from scipy import stats

    from epbench.core.results import load_results

    by_label: dict[str, list[dict]] = {}
    for path in sorted(out.glob("*_*.json")):
        label = path.stem.rsplit("_", 1)[0]
        by_label.setdefault(label, []).append(load_results(path).to_dict())
    for label, docs in by_label.items():
        for arm in ARMS:
            ss_between = ss_within = 0.0
            df_between = df_within = 0
            per_case = []
            for name in docs[0]["cases"]:
                groups = [process_values(d["cases"][name], arm) for d in docs
                          if d["cases"][name]["status"] == "ok"]
                p = min(len(g) for g in groups)
                groups = [g[:p] for g in groups]
                means = [statistics.mean(g) for g in groups]
                grand = statistics.mean(means)
                b = p * sum((m - grand) ** 2 for m in means)
                w = sum((x - m) ** 2 for g, m in zip(groups, means, strict=True) for x in g)
                db, dw = len(groups) - 1, len(groups) * (p - 1)
                ss_between, ss_within = ss_between + b, ss_within + w
                df_between, df_within = df_between + db, df_within + dw
                per_case.append(f"{name} {(b / db) / (w / dw):.2f}")
            f = (ss_between / df_between) / (ss_within / df_within)
            critical = stats.f.ppf(0.95, df_between, df_within)
            print(f"{label:6s} {arm:18s} runs {len(docs)}: within-run sd of process values "
                  f"{math.sqrt(ss_within / df_within):.3%}; F {f:.2f} (95 % critical "
                  f"{critical:.2f}, p {stats.f.sf(f, df_between, df_within):.3f}); per case: "
                  + ", ".join(per_case))


    print("lag-1 autocorrelation of the run means, all labels in the order they ran:")
    ordered = sorted((d for ds in by_label.values() for d in ds), key=lambda d: d["created"])
    for arm in ARMS:
        shown = []
        for name in ordered[0]["cases"]:
            means = [statistics.mean(process_values(d["cases"][name], arm)) for d in ordered
                     if d["cases"][name]["status"] == "ok"]
            m = statistics.mean(means)
            lag = sum((a - m) * (b - m) for a, b in zip(means[:-1], means[1:], strict=True))
            shown.append(f"{name} {lag / sum((x - m) ** 2 for x in means):+.2f}")
        print(f"  {arm}: " + ", ".join(shown))


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    if sys.argv[2] == "measure":
        measure(folder, int(sys.argv[3]), sys.argv[4].split(","))
    else:
        summarize(folder)
