#!/usr/bin/env bash
# Separate runs, A/A, loaded: PAIRS times, two separate `epbench run --grid GRID --arm
# engine` at `run`'s defaults, a one-core busy loop (epbench.harness.load sustained)
# running during the first run of each pair only, then `epbench compare first second`
# (the double ratio to each run's own ORT control; no twin, no profile, so the
# conservative threshold). Identical code on both sides: every flag is a false one.
#   docs/validation/separate_runs_aa.sh PAIRS OUT_DIR [GRID]
# Writes OUT_DIR/pairN/{a,b}/results.json and OUT_DIR/pairN/compare.json and prints a
# summary (verdicts, flagged with the Wilson 95 % upper bound, the changes' range).
set -euo pipefail
source "$(dirname "$0")/background_load.sh"
pairs=${1:?how many pairs}; out=${2:?output folder}; grid=${3:-quick}
ep=${EPBENCH:-.venv/bin/epbench}
py=${PYTHON:-.venv/bin/python}
for i in $(seq 1 "$pairs"); do
  load_start "$py" sustained "$i"
  "$ep" run --grid "$grid" --arm engine --seed "$i" --quiet --out "$out/pair$i/a" --overwrite
  load_alive "the busy loop died during pair $i"
  load_stop
  "$ep" run --grid "$grid" --arm engine --seed "$((i + 1000))" --quiet --out "$out/pair$i/b" \
      --overwrite
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
