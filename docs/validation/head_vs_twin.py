"""The head's change beside the in-run twin's, per case, in compare-commits runs.

    .venv/bin/python docs/validation/head_vs_twin.py RUN.json...

Each RUN.json is a run that validate kept (OUT/runs/NNNN-LOAD-rR-commits-WHAT.json, the
first pass of a command). Per case it prints the head's change against the base arm
`a` with its interval, threshold and verdict, then the twin's change (a copy of `a`'s
library, its own file) with its interval; then, over all the files, the median
half-width of each. A head that shares base's library file shares its mapping too, and
its interval shows it: narrower than the twin's, which does not.
"""

import statistics
import sys

from epbench.core.results import load_results
from epbench.reports import compare as cmp
from epbench.reports.comparison import Side
from epbench.reports.verdicts import Settings


def main(paths: list[str]) -> None:
    halves: dict[str, list[float]] = {"head": [], "twin": []}
    for path in paths:
        doc = load_results(path)
        base, head = (k for k in doc.arms if k != "ort" and not k.endswith("_twin"))
        out = cmp.compare(Side("base", doc, base), Side("pr", doc, head),
                          settings=Settings()).to_dict()
        twin = {case: v for info in out["twin"] for case, v in info["cases"].items()}
        name = path.rsplit("/", 1)[-1]
        for row in out["cases"]:
            lo, hi = row["ci"]
            tw = twin[row["case"]]
            halves["head"].append((hi - lo) / 2)
            halves["twin"].append((tw["ci"][1] - tw["ci"][0]) / 2)
            print(f"{name} {row['case']:16s} head {row['change']:+.2%} [{lo:+.2%}, {hi:+.2%}] "
                  f"t {row['threshold']:.2%} {row['emoji']}  twin {tw['change']:+.2%} "
                  f"[{tw['ci'][0]:+.2%}, {tw['ci'][1]:+.2%}]")
    for kind, values in halves.items():
        print(f"{kind}: median half-width {statistics.median(values):.2%} over {len(values)}, "
              f"range {min(values):.2%} to {max(values):.2%}")


if __name__ == "__main__":
    main(sys.argv[1:])
