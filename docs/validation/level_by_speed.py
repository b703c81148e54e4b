"""How a validate level's detection depends on the machine's speed when it ran: per
comparison of a level, each case's base-arm time per Run against the pilot's (which sized
the level's delay), the change the delay really made, and whether it was flagged (judged as
validate judged it: its recorded settings, no profile).

    python docs/validation/level_by_speed.py OUT [LEVEL_ARM] [SLOW_FACTOR]   # e.g. OUT d2 1.25

OUT is an `epbench validate` --out folder. Its compare-commits path (the kept commands,
OUT/runs/*-commits-LEVEL_ARM.json) and its same-process path (the per-case runs
OUT/runs/NNNN-LOAD-rR-CASE-same.json, read back by validate's own `kept_repeats`: the
repeats it counted, merged as it merged them) are split apart, per load. A case is
"slow" when its base arm took more than SLOW_FACTOR times the pilot's time a Run. The
split is by the base arm's speed, not by the measured change, so it does not select on
the outcome; but the pilot ran with no load, so under a load "slow" mixes the load with
the machine's state. Reads OUT/validation.json (the pilot's times, the settings) and
OUT/runs; the separate-runs path is not covered.
"""

import json
import re
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

from epbench.core.results import load_results
from epbench.reports import compare as cmp
from epbench.reports.comparison import Side
from epbench.reports.verdicts import Settings
from epbench.workflows.validate_judge import FLAGGED, comparisons
from epbench.workflows.validate_plan import COMMITS, SAME_PROCESS
from epbench.workflows.validate_run import RUNS_DIR, kept_repeats

COMMANDS = re.compile(r"^\d{4}-(?P<load>[a-z]+)-r\d+-commits-")


def level_comparisons(runs: Path, arm: str,
                      report: dict) -> Iterator[tuple[str, str, Side, Side]]:
    """(path and load, label, base side, PR side) for every comparison of the level ``arm``."""
    for path in sorted(runs.glob(f"*-commits-{arm}.json")):
        doc = load_results(path)
        load = COMMANDS.match(path.name)["load"]
        yield f"{COMMITS}, {load}", path.name, Side("base", doc, "a"), Side("pr", doc, arm)
    if SAME_PROCESS not in report["plan"]["paths"]:
        return
    for (load, repeat), rep in kept_repeats(runs, report).items():
        for what, base, pr in comparisons(rep, SAME_PROCESS, report["plan"]["levels"]):
            if what == arm:
                yield f"{SAME_PROCESS}, {load}", f"repeat {repeat}", base, pr


def main(out: Path, arm: str, slow_factor: float) -> int:
    report = json.loads((out / "validation.json").read_text(encoding="utf-8"))
    pilot_ns = {name: case["engine_ns"] for name, case in report["cases"].items()}
    settings = Settings(**report["settings"])
    states: dict[tuple[str, str], list[tuple[bool, float]]] = {}
    failed = 0
    for path, label, base, pr in level_comparisons(out / RUNS_DIR, arm, report):
        cells = []
        for row in cmp.compare(base, pr, settings=settings).to_dict()["cases"]:
            if row["case"] not in pilot_ns or row["change"] is None or not row["base_ns"]:
                failed += 1  # a case that failed in the run: no change to split
                continue
            ratio = row["base_ns"] / pilot_ns[row["case"]]
            flagged = row["verdict"] in FLAGGED
            state = "slow" if ratio > slow_factor else "fast"
            states.setdefault((path, state), []).append((flagged, row["change"]))
            cells.append(f"{row['case']}:{ratio:.2f}x:{row['change']:+.1%}"
                         + ("" if flagged else "*" + row["verdict"]))
        print(f"{path} {label}", " ".join(cells))
    for (path, state), seen in sorted(states.items()):
        print(f"{path}, {state} (base > {slow_factor}x the pilot: {state == 'slow'}): "
              f"flagged {sum(f for f, _ in seen)} of {len(seen)}, "
              f"median change {statistics.median(c for _, c in seen):+.2%}")
    if failed:
        print(f"left out: {failed} failed case comparison(s)")
    if not states:
        print(f"no compare-commits or same-process comparison of {arm} in {out}/runs",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "d2",
                  float(sys.argv[3]) if len(sys.argv) > 3 else 1.25))
