"""Would cutting blocks into alternating slices cancel the machine's noise? A replay.

    python docs/validation/slice_replay.py RESULTS.samples.jsonl.gz...

Reads the kept samples of a run written with `--keep-samples --slices 1` (whole blocks;
a sliced run is refused, since its blocks' calls are not back to back).
Every block of at least 1 600 calls is one arm's calls back to back; its first 1 600 are
split two ways into two pretend arms of identical code:

- halves: the first 800 calls against the last 800, as two whole blocks run one after
  the other;
- slices of c calls: even-numbered slices against odd-numbered ones, as two arms whose
  blocks alternate in slices of c calls.

For each split, the spread over blocks of log(median of one / median of the other): how
far apart two arms that differ in nothing come out of one round. Printed as the SD and
as the interquartile range / 1.349 (the SD a normal spread with that IQR would have; the
per-call samples have long tails, so the two differ). Run switches between arms cost
nothing here (the calls are one arm's), so this bounds what slicing can gain; the real
gain is measured by runs (docs/validation/summaries.tar.xz:slices.txt).
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from epbench.core.results import load_results

CALLS = 1600
SLICE_CALLS = (400, 200, 100, 50, 25, 10)


def split_log_ratios(samples: list[int]) -> dict[str, float]:
    """log(median A / median B) of one block's first CALLS calls, split each way."""
    calls = samples[:CALLS]
    half = CALLS // 2
    out = {"halves": math.log(statistics.median(calls[:half]) / statistics.median(calls[half:]))}
    for c in SLICE_CALLS:
        even = [x for i in range(0, CALLS, c) if (i // c) % 2 == 0 for x in calls[i:i + c]]
        odd = [x for i in range(0, CALLS, c) if (i // c) % 2 == 1 for x in calls[i:i + c]]
        out[f"slices of {c}"] = math.log(statistics.median(even) / statistics.median(odd))
    return out


def main(paths: list[str]) -> None:
    by_split: dict[str, list[float]] = defaultdict(list)
    for path in paths:
        slices = load_results(Path(path).with_name("results.json")).config.block_slices
        if slices != 1:
            sys.exit(f"{path}: its blocks were cut into {slices} slices; replay a run "
                     "made with --slices 1")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                for samples in json.loads(line)["samples_ns"].values():
                    if len(samples) >= CALLS:
                        for split, value in split_log_ratios(samples).items():
                            by_split[split].append(value)
    for split, values in by_split.items():
        q = statistics.quantiles(values, n=4)
        print(f"{split:15s} SD {statistics.pstdev(values):6.2%}   IQR/1.349 "
              f"{(q[2] - q[0]) / 1.349:6.2%}   blocks {len(values)}")


if __name__ == "__main__":
    main(sys.argv[1:])
