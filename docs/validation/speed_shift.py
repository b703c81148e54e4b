"""Separate-runs comparisons of a validate run, re-judged by this checkout, beside the
shift of the ORT control between the two runs.

    .venv/bin/python docs/validation/speed_shift.py OUT [--without-rule] [--profile FILE]

OUT is an `epbench validate` --out folder that ran the separate-runs path: its runs
(OUT/runs/NNNN-LOAD-rR-CASE-{base,again,pr}.json, read back by validate's own
`kept_repeats`) and its OUT/validation.json. Each repeat is compared as validate compares it
(`comparisons`, the settings validation.json records, no profile unless --profile names the
one validate judged with too): the A/A pair (the base
run's `a` against the again run's) and each level (`a` against the pr run's slowed arm).
Per case it prints how much longer one run's control took a Run than the other's, the
change, and the verdict validate stored beside this checkout's. Then, per comparison, how
many were flagged (⚠️/🔴) stored and now, and the A/A changes' root mean square with the
controls within and beyond CONTROL_SHIFT_LIMIT.

With --without-rule, "now" is judged as if compare had no rule for two runs at different
speeds (CONTROL_SHIFT_LIMIT lifted): set beside the plain output, it shows which verdicts
that rule changed, and so whether it removed a would-be false alarm.
"""

import argparse
import json
import math
from pathlib import Path

from epbench.reports import calibrate, defaults
from epbench.reports import compare as cmp
from epbench.reports.comparison import VERDICTS
from epbench.reports.findings import beyond_speed_limit, longer_run
from epbench.reports.verdicts import Settings
from epbench.workflows.validate_judge import FLAGGED, comparisons
from epbench.workflows.validate_plan import SEPARATE_RUNS
from epbench.workflows.validate_run import RUNS_DIR, kept_repeats


def main(out: Path, profile: dict | None = None) -> None:
    report = json.loads((out / "validation.json").read_text(encoding="utf-8"))
    settings = Settings(**report["settings"])
    levels = report["plan"]["levels"]
    stored = {(entry["load"], case): found for entry in report["results"]
              if entry["path"] == SEPARATE_RUNS
              and entry["profile"] == ("with" if profile else "without")
              for case, found in entry["cases"].items()}
    counts: dict[str, list[int]] = {}
    aa: dict[bool, list[float]] = {False: [], True: []}
    for (load, repeat), rep in kept_repeats(out / RUNS_DIR, report).items():
        for what, base, pr in comparisons(rep, SEPARATE_RUNS, levels):
            for row in cmp.compare(base, pr, settings=settings, profile=profile).to_dict()["cases"]:
                found = stored[(load, row["case"])]
                was = (found["false_positives"] if what == "aa"
                       else found["detection"][what])["verdicts"][repeat - 1]
                shift, change = row["control_shift"], row["change"]
                longer = longer_run(shift)
                if what == "aa" and change is not None and longer is not None:
                    aa[beyond_speed_limit(shift)].append(change)
                tally = counts.setdefault(what, [0, 0, 0])
                tally[0] += 1
                tally[1] += was in FLAGGED
                tally[2] += row["verdict"] in FLAGGED
                moved = f"{longer[0]:>4s} {longer[1]:6.1%} longer" if longer else "-"
                shown = f"{change:+6.2%}" if change is not None else "-"
                print(f"{load} r{repeat:02d} {row['case']:16s} {what:3s} control {moved} "
                      f"change {shown} stored {VERDICTS[was][0]} now {row['emoji']}")
    for what, (n, was, now) in counts.items():
        print(f"{what}: flagged {was} of {n} stored, {now} of {n} now")
    limit = defaults.CONTROL_SHIFT_LIMIT
    for beyond, changes in aa.items():
        if changes:
            rms = math.sqrt(sum(c * c for c in changes) / len(changes))
            largest = max(map(abs, changes))
            which = ("all, the rule lifted" if math.isinf(limit)
                     else f"the controls {'beyond' if beyond else 'within'} {limit:.0%}")
            print(f"A/A with {which}: "
                  f"{len(changes)} pairs, change rms {rms:.2%}, largest {largest:.2%}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="separate-runs verdicts beside the controls' "
                                     "speed shift")
    parser.add_argument("out", type=Path, help="an `epbench validate` --out folder")
    parser.add_argument("--without-rule", action="store_true",
                        help="judge as if compare had no rule for runs at different speeds")
    parser.add_argument("--profile", help="the calibration profile validate judged with too")
    args = parser.parse_args()
    if args.without_rule:
        defaults.CONTROL_SHIFT_LIMIT = math.inf  # this script's own process only
    main(args.out, calibrate.load_profile(args.profile) if args.profile else None)
