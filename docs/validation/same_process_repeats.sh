#!/usr/bin/env bash
# The path a PR takes, repeated: each run holds the engine as `base`, a copy of the same
# library file as `head` (A/A: identical code), the engine slowed by its inject_delay knob per
# Run (`d2`, `d3`: about 2 and 3 % of a quick-grid case's ~6 µs Run) and an A/A twin of
# `base`, at compare-commits' default processes, sessions and requested rounds (6 arms make
# 48 rounds 72: 12 per process, whole counterbalanced designs); `epbench compare
# --base base --pr ARM` judges each the way compare-commits does (thresholds from the
# run's own twin; no profile). Any flag of `head` is a false one (but see HEAD_DELAY_NS);
# `d2`/`d3` measure power.
#   docs/validation/same_process_repeats.sh RUNS OUT_DIR [GRID] [LOAD]
# LOAD (none, bursty or sustained; epbench.harness.load) runs in the background for the
# whole series and dies with this script, however it ends. POWER=0 leaves out d2 and d3:
# the arms and rounds are then exactly compare-commits' (ort, base, head, the twin; 48
# rounds), so a run is faster and measures A/A only.
# Writes OUT_DIR/runN/{results.json,head.json[,d2.json,d3.json]} and prints a summary
# (run `python - OUT_DIR [RUNS]` on the script's last part to summarize a partial set;
# RUNS: how many of the runs to count, from run1). RUN_ARGS: more `epbench run` options
# (split on spaces), e.g. RUN_ARGS="--slices 16". HEAD_DELAY_NS: `head` is then the engine
# slowed by that many ns per Run instead of a copy (with POWER=0: compare-commits' exact
# arms and rounds, measuring power: every flag of `head` is a true one). FRESH_COPIES=1:
# base and head load library files copied for each run (else one file for the series).
set -euo pipefail
source "$(dirname "$0")/background_load.sh"
runs=${1:?how many runs}; out=${2:?output folder}; grid=${3:-quick}; load=${4:-none}
case $load in none|bursty|sustained) ;; *) echo "LOAD is none, bursty or sustained, not '$load'" >&2; exit 2;; esac
ep=${EPBENCH:-.venv/bin/epbench}
py=${PYTHON:-.venv/bin/python}
lib=$("$py" -c 'from epbench.engine.library import library_path; print(library_path())')
mkdir -p "$out/head"
cp "$lib" "$out/head/"   # its own file, as the head commit's library would be
head_arm="engine@$out/head/$(basename "$lib"):name=head"
if [ -n "${HEAD_DELAY_NS:-}" ]; then
  head_arm="engine:name=head,inject_delay_ns_per_run=$HEAD_DELAY_NS"   # power, not A/A
fi
arms=(head); power=()
if [ "${POWER:-1}" != 0 ]; then
  arms+=(d2 d3)
  power=(--arm engine:name=d2,inject_delay_ns_per_run=122
         --arm engine:name=d3,inject_delay_ns_per_run=183)
fi
[ "$load" = none ] || load_start "$py" "$load" 0
for i in $(seq 1 "$runs"); do
  rm -f "$out/run$i"/{head,d2,d3}.json   # no verdicts left from an earlier series
  base_arm=engine:name=base
  if [ "${FRESH_COPIES:-0}" = 1 ]; then
    # base and head each load a file copied for this run only, as the twin's is: every
    # copy's layout is then drawn afresh each run (docs/validation/twin_replicate.py).
    mkdir -p "$out/run$i/base" "$out/run$i/head"
    cp "$lib" "$out/run$i/base/"; cp "$lib" "$out/run$i/head/"
    base_arm="engine@$out/run$i/base/$(basename "$lib"):name=base"
    [ -n "${HEAD_DELAY_NS:-}" ] || head_arm="engine@$out/run$i/head/$(basename "$lib"):name=head"
  fi
  "$ep" run --grid "$grid" --arm "$base_arm" --arm "$head_arm" ${power[@]+"${power[@]}"} \
      --aa-twin base --processes 6 --rounds 48 --seed "$i" --quiet --out "$out/run$i" --overwrite \
      ${RUN_ARGS:-}
  for arm in "${arms[@]}"; do
    "$ep" compare "$out/run$i/results.json" --base base --pr "$arm" --format json \
        --out "$out/run$i/$arm.json" --fail-on never
  done
  load_alive "the $load load died during run $i, so that run was not all under load; stopping"
  echo "run $i done $(date +%T)"
done
"$py" - "$out" "$runs" <<'PY'
# Per arm: verdicts, flagged (⚠️/🔴) with the Wilson 95 % upper bound, thresholds, and
# per case how often it was flagged and the change the comparator measured.
import collections, glob, json, re, statistics, sys

from epbench.workflows.validate_judge import wilson_interval

out, last = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10**6
for arm in ("head", "d2", "d3"):
    # every run of this series judged for this arm (not runs an earlier, longer one left)
    runs = [f for f in glob.glob(f"{out}/run*/{arm}.json")
            if (m := re.fullmatch(r"run(\d+)", f.split("/")[-2])) and int(m[1]) <= last]
    n = len(runs)
    if not n:
        continue
    verdicts, changes, flagged, thr = collections.Counter(), collections.defaultdict(list), collections.Counter(), []
    for f in runs:
        for row in json.load(open(f))["cases"]:
            verdicts[row["verdict"]] += 1
            changes[row["case"]].append(row["change"])
            flagged[row["case"]] += row["verdict"] in ("regression", "alert")
            thr.append(row["threshold"])
    tot = sum(verdicts.values())
    fl = verdicts["regression"] + verdicts["alert"]
    print(f"{arm}: {n} runs, {tot} comparisons, verdicts {dict(verdicts)}; flagged {fl}/{tot} "
          f"(upper 95 % {wilson_interval(fl, tot)[1]:.1%}); improvement {verdicts['improvement']}; "
          f"threshold median {statistics.median(thr):.2%} [{min(thr):.2%}, {max(thr):.2%}]")
    for case in sorted(changes):
        c = changes[case]
        print(f"  {case:16s} flagged {flagged[case]}/{len(c)}  median change "
              f"{statistics.median(c):+.2%}  range [{min(c):+.2%}, {max(c):+.2%}]")
PY
