#!/usr/bin/env bash
# The path a PR takes, repeated: each run holds the engine as `base`, a copy of the same
# library file as `head` (A/A: identical code), the engine slowed by a fixed busy-wait per
# Run (`d2`, `d3`: about 2 and 3 % of a quick-grid case's ~6 µs Run) and an A/A twin of
# `base`, at compare-commits' default processes, sessions and rounds; `epbench compare
# --base base --pr ARM` judges each the way compare-commits does (thresholds from the
# run's own twin; no profile). Any flag of `head` is a false one; `d2`/`d3` measure power.
#   docs/validation/same_process_repeats.sh RUNS OUT_DIR [GRID]
# Writes OUT_DIR/runN/{results.json,head.json,d2.json,d3.json} and prints a summary.
set -euo pipefail
runs=${1:?how many runs}; out=${2:?output folder}; grid=${3:-quick}
ep=${EPBENCH:-.venv/bin/epbench}
py=${PYTHON:-.venv/bin/python}
lib=$("$py" -c 'from epbench.engine.library import library_path; print(library_path())')
mkdir -p "$out/head"
cp "$lib" "$out/head/"   # its own file, as the head commit's library would be
for i in $(seq 1 "$runs"); do
  "$ep" run --grid "$grid" --arm engine:name=base \
      --arm "engine@$out/head/$(basename "$lib"):name=head" \
      --arm engine:name=d2,inject_delay_ns_per_run=122 \
      --arm engine:name=d3,inject_delay_ns_per_run=183 \
      --aa-twin base --processes 6 --rounds 48 --seed "$i" --quiet --out "$out/run$i" --overwrite
  for arm in head d2 d3; do
    "$ep" compare "$out/run$i/results.json" --base base --pr "$arm" --format json \
        --out "$out/run$i/$arm.json" --fail-on never
  done
  echo "run $i done $(date +%T)"
done
"$py" - "$out" "$runs" <<'PY'
import collections, json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
for arm in ("head", "d2", "d3"):
    verdicts, changes, flagged = collections.Counter(), collections.defaultdict(list), collections.Counter()
    for i in range(1, runs + 1):
        for row in json.load(open(f"{out}/run{i}/{arm}.json"))["cases"]:
            verdicts[row["verdict"]] += 1
            changes[row["case"]].append(row["change"])
            flagged[row["case"]] += row["verdict"] in ("regression", "alert")
    print(arm, json.dumps(dict(verdicts), sort_keys=True))
    for case in sorted(changes):
        print(f"  {case}: flagged {flagged[case]}/{len(changes[case])}, median change "
              f"{statistics.median(changes[case]):+.2%}")
PY
