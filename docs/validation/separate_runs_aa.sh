#!/usr/bin/env bash
# Separate runs, A/A: PAIRS times, two separate `epbench run --grid GRID --arm engine` at
# `run`'s defaults, then `epbench compare first second` (the double ratio to each run's own
# ORT control; no twin, no profile, so the conservative threshold). Identical code on both
# sides: every flag is a false one. A background load (epbench.harness.load) runs during
# the first run of each pair (LOAD_RUNS=first, the default) or both (LOAD_RUNS=both);
# LOAD is sustained (one core kept busy, the default), bursty, or none.
#   [LOAD=none|bursty|sustained] [LOAD_RUNS=first|both] \
#   docs/validation/separate_runs_aa.sh PAIRS OUT_DIR [GRID]
# Writes OUT_DIR/pairN/{a,b}/results.json and OUT_DIR/pairN/compare.json and prints a
# summary (verdicts, flagged with the Wilson 95 % upper bound, the changes' range).
set -euo pipefail
source "$(dirname "$0")/background_load.sh"
pairs=${1:?how many pairs}; out=${2:?output folder}; grid=${3:-quick}
ep=${EPBENCH:-.venv/bin/epbench}
py=${PYTHON:-.venv/bin/python}
load=${LOAD:-sustained}; load_runs=${LOAD_RUNS:-first}
case "$load" in none|bursty|sustained) ;; *) echo "LOAD must be none, bursty or sustained" >&2; exit 2;; esac
case "$load_runs" in first|both) ;; *) echo "LOAD_RUNS must be first or both" >&2; exit 2;; esac
for i in $(seq 1 "$pairs"); do
  [ "$load" = none ] || load_start "$py" "$load" "$i"
  "$ep" run --grid "$grid" --arm engine --seed "$i" --quiet --out "$out/pair$i/a" --overwrite
  load_alive "the $load load died during pair $i"
  [ "$load_runs" = both ] || load_stop
  "$ep" run --grid "$grid" --arm engine --seed "$((i + 1000))" --quiet --out "$out/pair$i/b" \
      --overwrite
  load_alive "the $load load died during pair $i"
  load_stop
  "$ep" compare "$out/pair$i/a/results.json" "$out/pair$i/b/results.json" --base engine \
      --pr engine --format json --out "$out/pair$i/compare.json" --fail-on never
  echo "pair $i done $(date +%T)"
done
"$py" - "$out" "$pairs" <<'PY'
import collections, json, sys

from epbench.workflows.validate import wilson_interval

out, pairs = sys.argv[1], int(sys.argv[2])
verdicts, changes = collections.Counter(), []
for i in range(1, pairs + 1):
    for row in json.load(open(f"{out}/pair{i}/compare.json"))["cases"]:
        verdicts[row["emoji"]] += 1
        changes.append(row["change"])
n = sum(verdicts.values())
flagged = verdicts["⚠️"] + verdicts["🔴"]
print(f"{pairs} pairs, {n} comparisons, verdicts {dict(verdicts)}; flagged {flagged}/{n} "
      f"(Wilson 95 % upper {wilson_interval(flagged, n)[1]:.1%}); "
      f"changes {min(changes):+.2%} .. {max(changes):+.2%}")
PY
