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

fits the speed-change allowance (reports/defaults.py, SPEED_SHIFT_JUMP and
SPEED_SHIFT_VARIANCE) from this script's own printed output, one per validate series:
each argument a TXT, or an archive whose members named speed_shift.txt are taken (their
profile and --without-rule twins are the same pairs), each series' host from the
validation.json beside it. Of each series, the A/A lines' change d and |log| of the
controls' ratio x. Each series' pairs within CONTROL_SHIFT_LIMIT give its baseline mean
square (what its runs differ by anyway, which the comparison's interval stands for);
beyond the limit, d² less that baseline is fitted as c0 + a × (x - x_limit), a jump at
the limit and a slope, by least squares with heteroscedasticity-robust (sandwich)
standard errors; it prints c0 and a, each one's one-sided 95 % upper bound (at least 0:
the constants the allowance uses), and per host how many pairs beyond the limit lie
within ±z × sqrt(baseline + c0 + a × (x - x_limit)) at those bounds, in-sample.
"""

import argparse
import json
import math
import re
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

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


def fit_allowance(series: Sequence[tuple[str, Sequence[tuple[float, float]]]]
                  ) -> dict[str, Any]:
    """The excess variance a speed change adds beyond the limit, c0 + a × (x - x_limit),
    fitted to (host, (|log shift|, A/A change) pairs) series: c0, a, their standard errors
    and one-sided 95 % upper bounds (at least 0), and per host how many pairs beyond the
    limit lie within ±z × sqrt(baseline + c0 + a × (x - x_limit)) at those bounds."""
    x_limit = math.log1p(defaults.CONTROL_SHIFT_LIMIT)
    rows = []  # (host, x - x_limit, |change|, the series' baseline mean square)
    for host, pairs in series:
        within = [d * d for x, d in pairs if x <= x_limit]
        if not within:
            raise ValueError(f"a series of host {host} has no A/A pair within the limit, "
                             "so no baseline noise to subtract: fit it with more runs")
        baseline = sum(within) / len(within)  # this series' own noise, host and load
        rows += [(host, x - x_limit, abs(d), baseline) for x, d in pairs if x > x_limit]
    if len(rows) < 3 or len({u for _, u, _, _ in rows}) < 2:
        # Two pairs fit a jump and a slope exactly: zero residuals, no standard error.
        raise ValueError(f"{len(rows)} A/A pairs beyond the limit, at "
                         f"{len({u for _, u, _, _ in rows})} shifts: a jump, a slope and "
                         "their standard errors need 3 pairs at two shifts at least")
    design = np.array([[1.0, u] for _, u, _, _ in rows])
    excess = np.array([d * d - b for _, _, d, b in rows])
    bread = np.linalg.inv(design.T @ design)
    coef = bread @ design.T @ excess
    scores = design * (excess - design @ coef)[:, None]
    se = np.sqrt(np.diag(bread @ scores.T @ scores @ bread))  # sandwich (HC0)
    # Each coefficient at its own one-sided 95 % upper bound: the line lies above the
    # pointwise upper bound of the fitted one at every shift. Never below 0: a speed
    # change adds variance, and the allowance must not shrink as the shift grows.
    jump, slope = np.maximum(coef + NormalDist().inv_cdf(0.95) * se, 0.0)
    z = NormalDist().inv_cdf((1.0 + defaults.SPEED_ALLOWANCE_COVER) / 2.0)
    covered: dict[str, list[int]] = {}
    for host, u, d, b in rows:
        tally = covered.setdefault(host, [0, 0])
        tally[0] += d <= z * math.sqrt(b + jump + slope * u)
        tally[1] += 1
    return {"pairs": sum(len(pairs) for _, pairs in series), "beyond": len(rows),
            "c0": float(coef[0]), "c0_se": float(se[0]), "jump": float(jump),
            "a": float(coef[1]), "a_se": float(se[1]), "slope": float(slope),
            "covered": {host: tuple(n) for host, n in covered.items()}}


def _host(report: bytes | None) -> str:
    """The host key and CPU a validation.json beside a printed output names, else '?'."""
    if report is None:
        return "?"
    host = json.loads(report)["host"]
    return f"{host['key']} ({host['cpu_model']})"


def printed_outputs(paths: Sequence[Path]) -> list[tuple[str, list[str]]]:
    """The host and lines of each printed output: a TXT, or each speed_shift.txt in a tar
    archive, its host from the validation.json in the same folder."""
    outputs = []
    for path in paths:
        if path.name.endswith((".tar", ".tar.xz", ".tar.gz")):
            with tarfile.open(path) as tar:
                files = {}
                for member in tar.getmembers():
                    if member.isfile() and Path(member.name).name in (
                            "speed_shift.txt", "validation.json"):
                        data = tar.extractfile(member)
                        assert data is not None  # a regular file
                        files[member.name] = data.read()
            for name, data in sorted(files.items()):
                if Path(name).name == "speed_shift.txt":
                    report = files.get(str(Path(name).with_name("validation.json")))
                    outputs.append((_host(report), data.decode("utf-8").splitlines()))
        else:
            beside = path.with_name("validation.json")
            outputs.append((_host(beside.read_bytes() if beside.is_file() else None),
                            path.read_text(encoding="utf-8").splitlines()))
    return outputs


def print_fit(paths: Sequence[Path]) -> None:
    series = [(host, aa_pairs(lines)) for host, lines in printed_outputs(paths)]
    try:
        fit = fit_allowance(series)
    except ValueError as exc:
        raise SystemExit(f"speed_shift.py: cannot fit: {exc}") from None
    print(f"{fit['pairs']} A/A pairs in {len(series)} series, {fit['beyond']} beyond "
          f"{defaults.CONTROL_SHIFT_LIMIT:.0%}; their squared change less their series' mean "
          "square within it, by least squares on c0 + a × (x - x_limit):")
    print(f"  c0 = {fit['c0']:.6f} (se {fit['c0_se']:.6f}), upper 95 % bound {fit['jump']:.6f} "
          f"(SPEED_SHIFT_JUMP = {defaults.SPEED_SHIFT_JUMP:.6f})")
    print(f"  a = {fit['a']:.5f} (se {fit['a_se']:.5f}), upper 95 % bound {fit['slope']:.5f} "
          f"(SPEED_SHIFT_VARIANCE = {defaults.SPEED_SHIFT_VARIANCE:.5f})")
    for host, (inside, n) in fit["covered"].items():
        print(f"  host {host}: {inside} of {n} beyond the limit ({inside / n:.1%}) within "
              f"±z √(baseline + c0 + a × (x - x_limit)) at those bounds (in-sample)")
    for shift in (0.05, 0.0501, 0.06, 0.1, 0.2, 0.5, 1.0):
        print(f"allowance at a control {shift:.2%} longer: {speed_allowance(shift):.2%}")


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
