"""Is a worker's warm-up long enough? Compares runs made at two `--warmup-ms` values.

    python docs/validation/warmup.py LABEL=DIR[,DIR...] LABEL=DIR[,DIR...]

Each DIR is an `epbench run` output folder of compare-commits' shape (arms `base`,
`head`, the twin `base_twin`, and the control `ort`). Per label it prints:

- how far each process's first round strays from the process's other rounds, against
  how far a later round strays from the rest (leave-one-out, both as the absolute log
  ratio head/base and base_twin/base to the median of the others): a warm-up too short
  leaves the first round the odd one out;
- the first round's time minus the median of the rest, per arm (mean and median of the
  log difference): an arm still warming up is slower in it;
- the A/A interval's half-width (head against base, `epbench compare`'s own rules, the
  run's twin setting the threshold), median and mean over the case comparisons.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from epbench.core.results import load_results

PAIRS = (("head", "base"), ("base_twin", "base"))
ARMS = ("ort", "base", "head", "base_twin")


def first_round_figures(doc: dict) -> tuple[list[float], list[float], dict[str, list[float]]]:
    first, later, bias = [], [], {arm: [] for arm in ARMS}
    for case in doc["cases"].values():
        processes: dict[int, list[dict]] = {}
        for rnd in case["rounds"]:
            processes.setdefault(rnd["process"], []).append(rnd)
        for rounds in processes.values():
            rounds.sort(key=lambda r: r["index"])

            def median_ns(rnd: dict, arm: str) -> float:
                return rnd["summary_ns"][arm]["median"]

            for a, b in PAIRS:
                values = [math.log(median_ns(r, a) / median_ns(r, b)) for r in rounds]
                rest = values[1:]
                first.append(abs(values[0] - statistics.median(rest)))
                for i in range(len(rest)):
                    others = rest[:i] + rest[i + 1:]
                    later.append(abs(rest[i] - statistics.median(others)))
            for arm in ARMS:
                times = [math.log(median_ns(r, arm)) for r in rounds]
                bias[arm].append(times[0] - statistics.median(times[1:]))
    return first, later, bias


def aa_half_widths(results: Path, epbench: str) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "compare.json"
        subprocess.run([epbench, "compare", str(results), "--base", "base", "--pr", "head",
                        "--format", "json", "--fail-on", "never", "--out", str(out)],
                       check=True, capture_output=True)
        rows = json.loads(out.read_text())["cases"]
    return [(row["ci"][1] - row["ci"][0]) / 2 for row in rows]


def main(argv: list[str]) -> None:
    epbench = str(Path(sys.executable).parent / "epbench")
    for arg in argv:
        label, _, dirs = arg.partition("=")
        first, later, widths = [], [], []
        bias: dict[str, list[float]] = {arm: [] for arm in ARMS}
        folders = [Path(d) for d in dirs.split(",")]
        for folder in folders:
            f, lt, b = first_round_figures(load_results(folder).to_dict())
            first += f
            later += lt
            for arm in ARMS:
                bias[arm] += b[arm]
            widths += aa_half_widths(folder / "results.json", epbench)
        print(f"{label} ({len(folders)} runs): first round's |log ratio - median of the rest| "
              f"mean {statistics.mean(first):.3%} (n={len(first)}), a later round's "
              f"{statistics.mean(later):.3%} (n={len(later)}): ratio "
              f"{statistics.mean(first) / statistics.mean(later):.2f}")
        print("  first round's time minus the rest's median, mean / median: " + ", ".join(
            f"{arm} {statistics.mean(v):+.2%} / {statistics.median(v):+.2%}"
            for arm, v in bias.items()))
        print(f"  A/A half-width over {len(widths)} case comparisons: median "
              f"{statistics.median(widths):.2%}, mean {statistics.mean(widths):.2%}")


if __name__ == "__main__":
    main(sys.argv[1:])
