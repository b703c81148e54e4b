#!/usr/bin/env bash
# What the engine's inject_delay_ns_per_run knob really adds to a Run: one interleaved run
# of the quick grid at `run`'s defaults with the plain engine `a` and arms asking for
# NS_LIST nanoseconds per Run (default 17 34 51 85: about 1, 2, 3 and 5 % of a 1.7 us
# Run), and, for each other engine library given, the same requests to that library
# beside them (LABEL=LIB, LABEL of letters and underscores; a bare LIB is labelled "old",
# as when the only other library was one from before 5750bf4, whose knob waited on the
# clock); then each arm against `a`. With 0 in NS_LIST, delay_knob_summary.py pools runs.
#   docs/validation/delay_knob.sh OUT_DIR [[LABEL=]LIB ...]
# Prints per case: a's median Run, and per arm the change and the added ns.
# Env: NS_LIST, SEED (default 7), EPBENCH, PYTHON.
set -euo pipefail
out=${1:?output folder}; shift
libs=(); labels=" new "
for lib in "$@"; do
  if [[ $lib =~ ^[A-Za-z_]+= ]]; then label=${lib%%=*}; else label=old; lib="old=$lib"; fi
  if [[ $labels == *" $label "* ]]; then echo "label $label given twice" >&2; exit 2; fi
  labels+="$label "; libs+=("$lib")
done
ep=${EPBENCH:-.venv/bin/epbench}
py=${PYTHON:-.venv/bin/python}
ns_list=${NS_LIST:-17 34 51 85}
arms=(--arm engine:name=a); names=()
for ns in $ns_list; do
  arms+=(--arm "engine:name=new$ns,inject_delay_ns_per_run=$ns"); names+=("new$ns")
  for lib in ${libs[@]+"${libs[@]}"}; do
    label=${lib%%=*}
    arms+=(--arm "engine@${lib#*=}:name=$label$ns,inject_delay_ns_per_run=$ns")
    names+=("$label$ns")
  done
done
rm -f "$out"/cmp_*.json  # a reused OUT_DIR keeps no comparison of an earlier arm list
"$ep" run --grid quick "${arms[@]}" --seed "${SEED:-7}" --out "$out" --overwrite --quiet > /dev/null
for arm in "${names[@]}"; do
  "$ep" compare "$out/results.json" --base a --pr "$arm" --format json \
      --out "$out/cmp_$arm.json" --fail-on never --no-github-annotations > /dev/null
done
"$py" - "$out" "${names[@]}" <<'PY'
import json, sys

out, arms = sys.argv[1], sys.argv[2:]
rows = {}
for arm in arms:
    for r in json.load(open(f"{out}/cmp_{arm}.json"))["cases"]:
        rows.setdefault(r["case"], {})[arm] = r
print(f"{'case':17} {'a ns':>6} " + " ".join(f"{a:>16}" for a in arms))
for case, by in rows.items():
    cells = [f"{r['change'] * 100:+5.2f}% {r['pr_ns'] - r['base_ns']:+4.0f}ns"
             for r in (by[a] for a in arms)]
    print(f"{case:17} {next(iter(by.values()))['base_ns']:6.0f} "
          + " ".join(f"{c:>16}" for c in cells))
PY
