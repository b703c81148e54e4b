"""Why a validate level was missed: per kept command of `epbench validate --path
compare-commits`, each case's change, interval, threshold and verdict at one level, judged as
validate judged it (no profile: run with XDG_CACHE_HOME pointing at an empty folder).

    python docs/validation/level_misses.py OUT [LEVEL_ARM]     # e.g. OUT d2

A case not flagged is marked with * and its verdict. Reads OUT/runs only.
"""

import glob
import sys

from epbench.core.results import load_results
from epbench.reports import compare as cmp
from epbench.reports.comparison import Side
from epbench.reports.verdicts import Settings

out, arm = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "d2")
for path in sorted(glob.glob(f"{out}/runs/*-commits-{arm}.json")):
    doc = load_results(path)
    judged = cmp.compare(Side("base", doc, "a"), Side("pr", doc, arm),
                         settings=Settings()).to_dict()
    cells = [f"{r['case']}:{r['change']:+.1%}[{r['ci'][0]:+.1%},{r['ci'][1]:+.1%}]"
             f"t{r['threshold']:.1%}"
             + ("" if r["verdict"] in ("regression", "alert") else "*" + r["verdict"])
             for r in judged["cases"]]
    print(path.rsplit("/", 1)[1], " ".join(cells))
