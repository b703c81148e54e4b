"""Re-judge stored compare-commits runs with this checkout's comparator.

    .venv/bin/python docs/validation/rejudge.py [--profile FILE] DIR...

Each DIR is a compare-commits --out folder that commits_repeats.sh wrote. For every
case, the first pass (DIR/results.jsonl) is judged here. A case this checkout would
not re-run keeps that verdict. A case it would re-run takes the verdict of the whole
run (DIR/results.json, the re-runs included, as they happened). The script prints
the verdict counts, stored (DIR/compare.json) against re-judged, and every case
whose verdict changed.

It is an estimate for a rule change only: the re-runs are the ones the stored run
made, not the ones this checkout would have planned.
"""

import collections
import json
import sys

from epbench.core.results import load_results
from epbench.reports import compare as cmp
from epbench.reports.comparison import Comparison, Side
from epbench.reports.findings import ambiguous_cases
from epbench.reports.verdicts import Settings


def judged(path: str, profile_path: str | None) -> Comparison:
    doc = load_results(path)
    profile = cmp.load_profile_for(doc.host.key, profile_path) if profile_path else None
    return cmp.compare(Side("base", doc, "base"), Side("pr", doc, "head"),
                       settings=Settings(), profile=profile)


def main(args: list[str]) -> None:
    profile_path = None
    if args[:1] == ["--profile"]:
        profile_path, args = args[1], args[2:]
    stored_counts, new_counts, changed = collections.Counter(), collections.Counter(), []
    for d in args:
        typed = judged(f"{d}/results.jsonl", profile_path)
        first = typed.to_dict()
        whole = {r["case"]: r for r in judged(f"{d}/results.json", profile_path).to_dict()["cases"]}
        with open(f"{d}/compare.json", encoding="utf-8") as fh:
            stored = {r["case"]: r for r in json.load(fh)["cases"]}
        rerun = set(ambiguous_cases(typed))
        for row in first["cases"]:
            name = row["case"]
            new = whole[name] if name in rerun else row
            old = stored[name]
            stored_counts[old["emoji"]] += 1
            new_counts[new["emoji"]] += 1
            if old["verdict"] != new["verdict"]:
                changed.append(f"{d.rstrip('/').rsplit('/', 1)[-1]} {name}: {old['emoji']} -> "
                               f"{new['emoji']} ({new['change']:+.2%}, t "
                               f"{new['threshold']:.2%}; {new['reason']})")
    print(f"{len(args)} runs: stored {dict(stored_counts)}; re-judged {dict(new_counts)}")
    for line in changed:
        print("  " + line)


if __name__ == "__main__":
    main(sys.argv[1:])
