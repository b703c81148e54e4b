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

    .venv/bin/python docs/validation/speed_shift.py --fit \
        docs/validation/archives/own_builds_same_separate.tar.xz

fits the speed-change allowance (reports/defaults.py, SPEED_SHIFT_VARIANCE) from this
script's own printed output, one per validate series: each argument a TXT, or an archive
whose members named speed_shift.txt are taken (their profile and --without-rule twins
are the same pairs). Of each series, the A/A lines' change d and
|log| of the controls' ratio x. Each series' pairs within CONTROL_SHIFT_LIMIT give its
baseline mean square (what its runs differ by anyway, which the comparison's interval
stands for); beyond the limit, d² less that baseline is fitted as a line through the
origin at the limit, a × (x - x_limit), by least squares, with a heteroscedasticity-
robust (sandwich) standard error; it prints a and its one-sided 95 % upper bound, the
constant the allowance uses, and how many pairs beyond the limit fall outside
±z × sqrt(baseline + bound × (x - x_limit)).
"""

import argparse
import json
import math
import re
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import NormalDist

from epbench.reports import calibrate, defaults
from epbench.reports import compare as cmp
from epbench.reports.comparison import VERDICTS
from epbench.reports.findings import beyond_speed_limit, longer_run, speed_allowance
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
                # AA_LINE reads this line back (--fit)
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


# An A/A line main printed: the run whose control took longer, by how much, the change.
AA_LINE = re.compile(r"^\S+ r\d+ \S+\s+aa\s+control\s+(?:PR|base)\s+(?P<by>[\d.]+)% longer "
                     r"change (?P<change>[+-][\d.]+)% ")


def aa_pairs(lines: Iterable[str]) -> list[tuple[float, float]]:
    """(|log of the controls' ratio|, A/A change) of each A/A line main printed."""
    pairs = []
    for line in lines:
        m = AA_LINE.match(line)
        if m:
            pairs.append((math.log1p(float(m["by"]) / 100.0), float(m["change"]) / 100.0))
    return pairs


def fit_allowance(series: Sequence[Sequence[tuple[float, float]]]) -> dict[str, float]:
    """The excess variance per unit of |log shift| beyond the limit, a, its standard error
    and one-sided 95 % upper bound, from each series' (|log shift|, A/A change) pairs."""
    x_limit = math.log1p(defaults.CONTROL_SHIFT_LIMIT)
    xs, ys, misses_at = [], [], []
    for pairs in series:
        within = [d * d for x, d in pairs if x <= x_limit]
        baseline = sum(within) / len(within)  # this series' own noise, host and load
        for x, d in pairs:
            if x > x_limit:
                xs.append(x - x_limit)
                ys.append(d * d - baseline)
                misses_at.append((x - x_limit, abs(d), baseline))
    sxx = sum(x * x for x in xs)
    a = sum(x * y for x, y in zip(xs, ys, strict=True)) / sxx
    se = math.sqrt(sum((x * (y - a * x)) ** 2 for x, y in zip(xs, ys, strict=True))) / sxx
    upper = a + NormalDist().inv_cdf(0.95) * se
    z = NormalDist().inv_cdf((1.0 + defaults.SPEED_ALLOWANCE_COVER) / 2.0)
    outside = sum(d > z * math.sqrt(b + upper * x) for x, d, b in misses_at)
    return {"pairs": float(sum(map(len, series))), "beyond": float(len(xs)), "a": a,
            "se": se, "upper": upper, "outside": float(outside)}


def printed_outputs(paths: Sequence[Path]) -> list[list[str]]:
    """The lines of each printed output: a TXT, or each speed_shift.txt in a tar archive."""
    outputs = []
    for path in paths:
        if path.name.endswith((".tar", ".tar.xz", ".tar.gz")):
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.isfile() and Path(member.name).name == "speed_shift.txt":
                        data = tar.extractfile(member)
                        assert data is not None  # a regular file
                        outputs.append(data.read().decode("utf-8").splitlines())
        else:
            outputs.append(path.read_text(encoding="utf-8").splitlines())
    return outputs


def print_fit(paths: Sequence[Path]) -> None:
    series = [aa_pairs(lines) for lines in printed_outputs(paths)]
    fit = fit_allowance(series)
    print(f"{fit['pairs']:.0f} A/A pairs in {len(series)} series, {fit['beyond']:.0f} beyond "
          f"{defaults.CONTROL_SHIFT_LIMIT:.0%}: excess variance a = {fit['a']:.5f} "
          f"(se {fit['se']:.5f}) per unit of |log shift| beyond the limit; upper 95 % "
          f"bound {fit['upper']:.5f} (SPEED_SHIFT_VARIANCE = "
          f"{defaults.SPEED_SHIFT_VARIANCE:.5f}); {fit['outside']:.0f} of "
          f"{fit['beyond']:.0f} beyond the limit outside the bound with their baseline")
    for shift in (0.05, 0.06, 0.1, 0.2, 0.5, 1.0):
        print(f"allowance at a control {shift:.0%} longer: {speed_allowance(shift):.2%}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="separate-runs verdicts beside the controls' "
                                     "speed shift")
    parser.add_argument("out", type=Path, nargs="+",
                        help="an `epbench validate` --out folder (with --fit: the "
                        "printed outputs to fit)")
    parser.add_argument("--fit", action="store_true",
                        help="fit the speed-change allowance from printed outputs")
    parser.add_argument("--without-rule", action="store_true",
                        help="judge as if compare had no rule for runs at different speeds")
    parser.add_argument("--profile", help="the calibration profile validate judged with too")
    args = parser.parse_args()
    if args.fit:
        print_fit(args.out)
        raise SystemExit(0)
    if len(args.out) != 1:
        parser.error("one validate --out folder, or --fit with printed outputs")
    if args.without_rule:
        defaults.CONTROL_SHIFT_LIMIT = math.inf  # this script's own process only
    main(args.out[0], calibrate.load_profile(args.profile) if args.profile else None)
