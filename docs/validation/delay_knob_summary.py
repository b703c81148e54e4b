"""What the delay knob delivered over several delay_knob.sh runs, per library and delay.

    python docs/validation/delay_knob_summary.py OUT_DIR [OUT_DIR ...]

Each OUT_DIR is one `NS_LIST="0 ..." docs/validation/delay_knob.sh OUT_DIR [LABEL=LIB ...]`
run (every label needs its 0 ns arm). Per case, what an arm added is its change against `a`
less its own library's 0 ns arm's change (so an offset of that copy of the library
cancels; for `new` the 0 ns arm is `a` itself, so this only adds that arm's noise), times
a's Run. Prints, per library and delay, added / asked (1.00 is the delay asked, exactly):
the median over cases x runs and the quartiles; then per library a least-squares line
through every point, added ns = slope x asked ns + intercept.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

# delay_knob.sh names each arm LABEL + NS (labels are letters and underscores only).
ARM_FILE = re.compile(r"cmp_([A-Za-z_]+)(\d+)\.json")


def added_ns(out: Path) -> dict[tuple[str, int], list[float]]:
    """Per (label, ns asked): what each case's arm added, in ns, in the run in `out`."""
    changes: dict[tuple[str, int, str], tuple[float, float]] = {}
    for path in out.glob("cmp_*.json"):
        match = ARM_FILE.fullmatch(path.name)
        if match is None:
            sys.exit(f"{path}: not an arm delay_knob.sh names")
        label, ns = match.group(1), int(match.group(2))
        for row in json.loads(path.read_text())["cases"]:
            if row["change"] is not None and row["base_ns"] is not None:  # not a ➖ row
                changes[label, ns, row["case"]] = (row["change"], row["base_ns"])
    added: dict[tuple[str, int], list[float]] = {}
    for (label, ns, case), (change, base_ns) in changes.items():
        if ns == 0:
            continue
        if (label, 0, case) not in changes:
            sys.exit(f"{out}: no {label}0 arm for {case} (put 0 in NS_LIST)")
        added.setdefault((label, ns), []).append((change - changes[label, 0, case][0]) * base_ns)
    return added


def main(outs: list[str]) -> None:
    if not outs:
        sys.exit(__doc__)
    pooled: dict[tuple[str, int], list[float]] = {}
    for out in outs:
        for key, values in added_ns(Path(out)).items():
            pooled.setdefault(key, []).extend(values)
    print(f"{len(outs)} runs; added / asked, median [quartiles] over cases x runs; "
          "the median of added - asked, ns")
    for label, ns in sorted(pooled, key=lambda key: (key[1], key[0])):
        shares = [value / ns for value in pooled[label, ns]]
        spread = ""
        if len(shares) >= 2:
            q1, _, q3 = statistics.quantiles(shares, n=4)
            spread = f"[{q1:5.2f}, {q3:5.2f}]"
        short = statistics.median(value - ns for value in pooled[label, ns])
        print(f"{label:10} {ns:4} ns  {statistics.median(shares):5.2f}  {spread:14}"
              f"  {short:+6.1f} ns  n={len(shares)}")
    print("a line through every point: added ns = slope x asked + intercept")
    for label in sorted({label for label, _ in pooled}):
        asked = [ns for (lab, ns), values in pooled.items() if lab == label for _ in values]
        got = [value for (lab, _), values in pooled.items() if lab == label for value in values]
        if len(set(asked)) < 2:
            continue  # one delay: no line
        slope, intercept = statistics.linear_regression(asked, got)
        print(f"{label:10} slope {slope:5.2f}  intercept {intercept:+6.1f} ns")


if __name__ == "__main__":
    main(sys.argv[1:])
