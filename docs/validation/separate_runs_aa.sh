#!/usr/bin/env bash
# Separate runs, A/A: PAIRS times, two separate `epbench run --grid GRID --arm ARM` at
# `run`'s defaults (ARM the bundled engine unless set, e.g. ARM=plugin:nxrt_ep_cpu), then
# `epbench compare first second` (the double ratio to each run's own
# ORT control; no twin and no profile, so the conservative threshold; a cached profile of
# this host stops the script, since the series is then not the situation it says).
# Identical code on both sides: every flag is a false one. A background load
# (epbench.harness.load) runs during the first run of each pair (LOAD_RUNS=first, the
# default) or both (LOAD_RUNS=both); LOAD is sustained (one core kept busy, the default),
# bursty, or none. PROFILE=FILE (made by `epbench calibrate --arm ARM --profile FILE`,
# outside the host's cache) judges every pair a second time with that profile, into
# compare-profile.json, and summarizes both: with a profile the threshold comes from the
# profile's separate-runs noise and can be below the conservative one.
#   [LOAD=none|bursty|sustained] [LOAD_RUNS=first|both] [PROFILE=FILE] [ARM=SPEC] \
#   docs/validation/separate_runs_aa.sh PAIRS OUT_DIR [GRID]
# Writes OUT_DIR/pairN/{a,b}/results.json, OUT_DIR/pairN/compare.json (and
# compare-profile.json) and prints a summary (verdicts, flagged with the Wilson 95 % upper
# bound, pairs with any finding, the changes' and thresholds' ranges); `python - OUT_DIR
# PAIRS [PROFILE]` on the script's last part summarizes a partial series.
set -euo pipefail
source "$(dirname "$0")/background_load.sh"
pairs=${1:?how many pairs}; out=${2:?output folder}; grid=${3:-quick}
ep=${EPBENCH:-.venv/bin/epbench}
py=${PYTHON:-.venv/bin/python}
load=${LOAD:-sustained}; load_runs=${LOAD_RUNS:-first}
case "$load" in none|bursty|sustained) ;; *) echo "LOAD must be none, bursty or sustained" >&2; exit 2;; esac
case "$load_runs" in first|both) ;; *) echo "LOAD_RUNS must be first or both" >&2; exit 2;; esac
profile=${PROFILE:-}
arm=${ARM:-engine}
[ -z "$profile" ] || [ -r "$profile" ] || { echo "PROFILE '$profile' is not a readable file" >&2; exit 2; }
for i in $(seq 1 "$pairs"); do
  [ "$load" = none ] || load_start "$py" "$load" "$i"
  "$ep" run --grid "$grid" --arm "$arm" --seed "$i" --quiet --out "$out/pair$i/a" --overwrite
  load_alive "the $load load died during pair $i"
  [ "$load_runs" = both ] || load_stop
  "$ep" run --grid "$grid" --arm "$arm" --seed "$((i + 1000))" --quiet --out "$out/pair$i/b" \
      --overwrite
  load_alive "the $load load died during pair $i"
  load_stop
  "$ep" compare "$out/pair$i/a/results.json" "$out/pair$i/b/results.json" --base "$arm" \
      --pr "$arm" --format json --out "$out/pair$i/compare.json" --fail-on never
  "$py" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["profile"] is not None)' \
      "$out/pair$i/compare.json" || {
    echo "pair $i was judged with this host's cached profile: move it away, or pass PROFILE" >&2
    exit 1; }
  [ -z "$profile" ] || "$ep" compare "$out/pair$i/a/results.json" "$out/pair$i/b/results.json" \
      --base "$arm" --pr "$arm" --profile "$profile" --format json \
      --out "$out/pair$i/compare-profile.json" --fail-on never
  echo "pair $i done $(date +%T)"
done
"$py" - "$out" "$pairs" "$profile" <<'PY'
import collections, json, os, sys

from epbench.workflows.validate_judge import wilson_interval

out, pairs = sys.argv[1], int(sys.argv[2])
profile = len(sys.argv) > 3 and bool(sys.argv[3])
for name, label in [("compare", "without a profile")] + (
        [("compare-profile", "with the profile")] if profile else []):
    verdicts, changes, thresholds, pairs_flagged, done = collections.Counter(), [], [], 0, 0
    for i in range(1, pairs + 1):
        path = f"{out}/pair{i}/{name}.json"
        if not os.path.exists(path):
            continue
        done += 1
        doc = json.load(open(path))
        if bool(doc.get("profile")) != (name == "compare-profile"):
            sys.exit(f"{path} was judged {'with' if doc.get('profile') else 'without'} a "
                     f"profile: this summary is for pairs judged {label}")
        rows = doc["cases"]
        # A finding is ⚠️, 🔴 or 🟢 (a 🟢 on identical code is as false as a ⚠️), as
        # commits_repeats.sh counts it; "flagged" below is ⚠️/🔴 only.
        pairs_flagged += any(r["emoji"] in ("⚠️", "🔴", "🟢") for r in rows)
        for row in rows:
            verdicts[row["emoji"]] += 1
            # None for a case that could not be judged (its verdict says why).
            changes += [row["change"]] if row["change"] is not None else []
            thresholds += [row["threshold"]] if row["threshold"] is not None else []
    n = sum(verdicts.values())
    if not n or not changes or not thresholds:
        print(f"{label}: {done} pairs, {n} comparisons, nothing judged to summarize")
        continue
    flagged = verdicts["⚠️"] + verdicts["🔴"]
    print(f"{label}: {done} pairs, {n} comparisons, verdicts {dict(verdicts)}; flagged "
          f"{flagged}/{n} (Wilson 95 % upper {wilson_interval(flagged, n)[1]:.1%}); pairs "
          f"with any finding {pairs_flagged}/{done} (upper "
          f"{wilson_interval(pairs_flagged, done)[1]:.1%}); changes {min(changes):+.2%} .. "
          f"{max(changes):+.2%}; thresholds {min(thresholds):.2%} .. {max(thresholds):.2%}")
PY
