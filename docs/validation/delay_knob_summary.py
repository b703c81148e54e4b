"""What the delay knob delivered over several delay_knob.sh runs, per library and delay.

    python docs/validation/delay_knob_summary.py OUT_DIR [OUT_DIR ...]

Each OUT_DIR is one `NS_LIST="0 ..." docs/validation/delay_knob.sh OUT_DIR [LABEL=LIB ...]`
run (every label needs its 0 ns arm). Per case, what an arm added is its change against `a`
less its own library's 0 ns arm's change (so an offset of that copy of the library
cancels), times a's Run, over the ns asked: 1.00 is the delay asked, exactly. Prints, per
library and delay, the median over cases x runs and the quartiles.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def delivered(out: Path) -> dict[tuple[str, int], list[float]]:
    changes: dict[tuple[str, int, str], tuple[float, float]] = {}
    for path in out.glob("cmp_*.json"):
        label, ns = re.fullmatch(r"cmp_([A-Za-z_]+?)(\d+)\.json", path.name).groups()
        for row in json.loads(path.read_text())["cases"]:
            changes[label, int(ns), row["case"]] = (row["change"], row["base_ns"])
    shares: dict[tuple[str, int], list[float]] = {}
    for (label, ns, case), (change, base_ns) in changes.items():
        if ns == 0:
            continue
        if (label, 0, case) not in changes:
            sys.exit(f"{out}: no {label}0 arm (put 0 in NS_LIST)")
        own_copy = changes[label, 0, case][0]
        shares.setdefault((label, ns), []).append((change - own_copy) * base_ns / ns)
    return shares


def main(outs: list[str]) -> None:
    if not outs:
        sys.exit(__doc__)
    pooled: dict[tuple[str, int], list[float]] = {}
    for out in outs:
        for key, values in delivered(Path(out)).items():
            pooled.setdefault(key, []).extend(values)
    print(f"{len(outs)} runs; added / asked, median [quartiles] over cases x runs")
    for label, ns in sorted(pooled, key=lambda key: (key[1], key[0])):
        values = pooled[label, ns]
        q1, _, q3 = statistics.quantiles(values, n=4)
        print(f"{label:10} {ns:4} ns  {statistics.median(values):5.2f}  [{q1:5.2f}, {q3:5.2f}]"
              f"  n={len(values)}")


if __name__ == "__main__":
    main(sys.argv[1:])
