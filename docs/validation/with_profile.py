"""A validate run's same-process and separate-runs repeats judged with a calibration profile,
as validate judges them when the host has one at the time it runs.

    .venv/bin/python docs/validation/with_profile.py OUT PROFILE [MARKDOWN]

OUT is an `epbench validate` --out folder that ran without a profile. Its kept runs
(OUT/runs/NNNN-LOAD-rR-CASE-{same,base,again,pr}.json) are read back by validate's own
`kept_repeats` and passed to its `summarize` with PROFILE. Neither path re-runs
anything, so the verdicts are the ones validate would have stored with that profile.
The compare-commits path is left out: its re-runs were planned without one, and validate
never judges it with one either.

It checks first that the judging without a profile reproduces OUT/validation.json's, then
prints per path and load how many cases each comparison flagged with and without the
profile, and writes validation.md's text for both to MARKDOWN when given.
"""

import json
import sys
from pathlib import Path

from epbench.reports import compare as cmp
from epbench.reports.render import to_json
from epbench.reports.verdicts import Settings
from epbench.workflows.validate_judge import summarize
from epbench.workflows.validate_plan import COMMITS, level_arm
from epbench.workflows.validate_report import render_markdown
from epbench.workflows.validate_run import RUNS_DIR, kept_repeats


def flagged(entry: dict, what: str) -> tuple[int, int]:
    """(flagged, judged) of one comparison ("aa" or a level's arm key) over the cases."""
    found = [c["false_positives"] if what == "aa" else c["detection"][what]
             for c in entry["cases"].values()]
    return sum(f["hits"] for f in found), sum(f["n"] for f in found)


def main(out: Path, profile_path: str, markdown: Path | None) -> None:
    stored = json.loads((out / "validation.json").read_text(encoding="utf-8"))
    if any(p != COMMITS for p in stored["plan"]["paths"]) and stored["profile"]["used"]:
        sys.exit(f"{out} was judged with a profile already ({stored['profile']['path']})")
    engine_ns = {n: c["engine_ns"] for n, c in stored["cases"].items()}
    repeats = list(kept_repeats(out / RUNS_DIR, stored).values())
    profile = cmp.load_profile_for(stored["host"]["key"], profile_path)
    settings = Settings(**stored["settings"])
    loads = [load for load, n in stored["plan"]["repeats"].items() if n]  # as validate's
    judged = summarize(repeats, None, engine_ns, settings=settings, profile=profile,
                       loads=loads, levels=stored["plan"]["levels"])
    again = json.loads(to_json({"r": [e for e in judged["results"]
                                      if e["profile"] == "without"]}))["r"]
    if not again or again != [e for e in stored["results"] if e["path"] != COMMITS]:
        sys.exit("the judging without a profile does not reproduce validation.json's: "
                 "this checkout's rules differ from the ones that ran")
    print(f"{out}: {len(repeats)} repeats, profile {profile['path']}")
    whats = ["aa", *map(level_arm, stored["plan"]["levels"])]
    for entry in judged["results"]:
        counts = ", ".join(f"{w} {f}/{n}" for w, (f, n) in
                           ((w, flagged(entry, w)) for w in whats))
        print(f"{entry['path']}, {entry['load']} load, {entry['profile']} profile: {counts}")
    if markdown is not None:
        # The stored notes (validate's own, and the comparator's without a profile) and
        # what judging with the profile added, after a note of when that was done.
        when = (f"judged with the profile {profile['path']} (created {profile.get('created')}) "
                "afterwards, by docs/validation/with_profile.py, from the kept runs; "
                f"validate wrote its report at {stored['created']}, judged without a profile")
        notes = [when, *stored["notes"], *(n for n in judged["notes"]
                                          if n not in stored["notes"])]
        doc = {**stored, "results": judged["results"], "notes": notes,
               "profile": {"path": profile["path"], "used": True,
                           "judged": ["without", "with"]}}
        markdown.write_text(render_markdown(doc), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]) if len(sys.argv) == 4 else None)
