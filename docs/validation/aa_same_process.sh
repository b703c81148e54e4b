#!/usr/bin/env bash
# A/A on the path a PR takes, many times: one run holds the engine as `base`, a copy of
# the same library file as `head` and an A/A twin of `base`, at compare-commits' default
# processes, sessions and rounds; `epbench compare --base base --pr head` judges it with
# the run's own twin noise (no profile), as compare-commits does. Identical code: any
# ⚠️/🔴/🟢 is a false verdict.
#   docs/validation/aa_same_process.sh RUNS OUT_DIR [GRID]
set -euo pipefail
runs=${1:?how many runs}; out=${2:?output folder}; grid=${3:-quick}
ep=${EPBENCH:-.venv/bin/epbench}
lib=$(.venv/bin/python -c 'from epbench.engine.library import library_path; print(library_path())')
mkdir -p "$out/head"
cp "$lib" "$out/head/"   # its own file, as the head commit's library would be
for i in $(seq 1 "$runs"); do
  "$ep" run --grid "$grid" --arm engine:name=base --arm "engine@$out/head/$(basename "$lib"):name=head" \
      --aa-twin base --processes 6 --rounds 48 --seed "$i" --quiet --out "$out/run$i" --overwrite
  "$ep" compare "$out/run$i/results.json" --base base --pr head --format json \
      --out "$out/run$i/compare.json" --fail-on never
  echo "run $i done $(date +%T)"
done
.venv/bin/python - "$out" "$runs" <<'PY'
import collections, json, sys
out, runs = sys.argv[1], int(sys.argv[2])
verdicts = collections.Counter()
for i in range(1, runs + 1):
    for row in json.load(open(f"{out}/run{i}/compare.json"))["cases"]:
        verdicts[row["verdict"]] += 1
print(json.dumps(dict(verdicts), sort_keys=True))
PY
