#!/usr/bin/env bash
# The whole `epbench compare-commits`, repeated at its defaults (quick grid, no profile):
# the first pass, the instruction pass and the re-runs of inconclusive cases, as a PR's
# job runs it (the builds too, but libraries are cached by sha, so only the first run of
# a series builds: the seconds in progress.txt include a build only there).
# A scratch clone of this repository gets two branches off HEAD:
#   aa    a comment changed in the engine's source: identical code, so every flag is false;
#   slow  (with SLOW_ITERS) the engine counts a volatile loop SLOW_ITERS times more per Run:
#         every flag is true. A change to the code, as a PR makes, not the engine's
#         inject_delay knob (worked out when the EP is made, so no line to edit).
# Each run compares HEAD against one of them, alternating (slow, aa, slow, aa, ...), so
# the machine's drift spreads over both; KINDS="aa" or "slow" runs one only.
#   docs/validation/commits_repeats.sh RUNS OUT_DIR [SLOW_ITERS] [LOAD]
# LOAD (none, bursty or sustained; epbench.harness.load) runs for the whole series and dies
# with this script. Run it from the repository; OUT_DIR's clone is made once, for one
# HEAD and SLOW_ITERS (a later call with others stops). FIRST=N starts at run N, so a
# series stopped for time is finished into the same OUT_DIR. Writes OUT_DIR/{aa,slow}_N/
# (compare-commits' output, with first.json: the first pass alone, judged from its
# results.jsonl) and prints the summary below. `python - OUT_DIR RUNS` on the script's
# last part summarizes a partial series. PROFILE=FILE judges every run with that calibration
# profile (`--profile FILE`; made by `epbench calibrate`); without it, a run that found a
# cached profile for this host stops the summary, since the series is then not the CI
# situation it says.
set -euo pipefail
source "$(dirname "$0")/background_load.sh"
runs=${1:?how many runs}; out=${2:?output folder}; iters=${3:-}; load=${4:-none}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "RUNS is a positive number, not '$runs'" >&2; exit 2; }
[[ -z $iters || $iters =~ ^[1-9][0-9]*$ ]] || { echo "SLOW_ITERS is a positive number, not '$iters'" >&2; exit 2; }
case $load in none|bursty|sustained) ;; *) echo "LOAD is none, bursty or sustained, not '$load'" >&2; exit 2;; esac
out=$(realpath -m "$out")   # before the cd below: a relative OUT_DIR is the caller's
cd "$(git rev-parse --show-toplevel)"
ep=${EPBENCH:-.venv/bin/epbench}
py=${PYTHON:-.venv/bin/python}
kinds=${KINDS:-$([ -n "$iters" ] && echo "slow aa" || echo aa)}
repo=$out/repo
setup="head $(git rev-parse HEAD) slow_iters ${iters:-none}"
mkdir -p "$out"
if [ -d "$repo" ]; then
  [ "$(cat "$repo.setup" 2>/dev/null)" = "$setup" ] || {
    echo "$repo was made for another HEAD or SLOW_ITERS (or not finished): use a new OUT_DIR" >&2; exit 2; }
else
  git clone -q . "$repo"
  src=engine/src/ep.c
  wait_line='  ebe_probe_add(ep->counters, EBE_C_RUNS, 1);'
  grep -qxF "$wait_line" "$repo/$src" || { echo "$src has no line '$wait_line' to slow" >&2; exit 1; }
  git -C "$repo" checkout -q -b aa
  echo "/* A/A: this comment is the only change. */" >> "$repo/$src"
  git -C "$repo" commit -qam "A/A: a comment only"
  if [ -n "$iters" ]; then
    git -C "$repo" checkout -q -b slow HEAD~1
    sed -i "s|^$wait_line\$|&\\n  for (volatile unsigned slow = 0; slow < $iters; slow++) {\\n  }|" "$repo/$src"
    git -C "$repo" commit -qam "slow: $iters volatile loop iterations more per Run"
  fi
  git -C "$repo" checkout -q --detach HEAD~1
  echo "$setup" > "$repo.setup"
fi
base=$(git -C "$repo" rev-parse aa~1)
[ "$load" = none ] || load_start "$py" "$load" 0
first=${FIRST:-1}
[[ $first =~ ^[1-9][0-9]*$ ]] || { echo "FIRST is a positive number, not '$first'" >&2; exit 2; }
for i in $(seq "$first" "$runs"); do
  for kind in $kinds; do
    d=$out/${kind}_$i
    rm -rf "$d"   # nothing left from an earlier series (--overwrite keeps compare.json)
    start=$(date +%s)
    "$ep" compare-commits "$base" "$kind" --repo "$repo" --out "$d" --overwrite --quiet \
        --fail-on never ${PROFILE:+--profile "$PROFILE"} > "$d.log" 2>&1 || {
      echo "compare-commits failed: $d.log" >&2; exit 1; }
    echo "$kind $i $(( $(date +%s) - start )) s $(date +%T)" | tee -a "$out/progress.txt"
    "$ep" compare "$d/results.jsonl" --base base --pr head --format json --out "$d/first.json" \
        --fail-on never ${PROFILE:+--profile "$PROFILE"}
  done
  load_alive "the $load load died during run $i, so that run was not all under load; stopping"
done
"$py" - "$out" "$runs" "${PROFILE:-}" <<'PY'
# Per kind: how many runs had a twin warning, and the verdicts after re-runs and of the
# first pass alone; as rates with the Wilson 95 % interval: case comparisons flagged ⚠️ or
# 🔴, those failing the job at the default --fail-on (🔴 or ❌), for aa also any finding
# (a 🟢 on identical code is as false as a ⚠️), and runs with any flag (the cases of one
# run share the twin, the machine and the grid's FDR cut, so the case rate is not over
# independent trials); per case the changes, how often it was re-run; then every miss
# (slow) or false flag (aa) with its interval, threshold and reason.
import collections, glob, json, os, statistics, sys

from epbench.reports.compare import FAIL_ON
from epbench.reports.defaults import FAIL_ON as DEFAULT_FAIL_ON
from epbench.workflows.validate_judge import wilson_interval

out, runs = sys.argv[1], int(sys.argv[2])
with_profile = len(sys.argv) > 3 and bool(sys.argv[3])
FLAG = {"regression", "alert"}
FINDING = FLAG | {"improvement"}
FAILS = FAIL_ON[DEFAULT_FAIL_ON]


def pct(x):
    return "–" if x is None else f"{x:+.2%}"


def rate(name, hits, n):
    lo, hi = wilson_interval(hits, n)
    return f"{name} {hits}/{n} (95 % {lo:.1%}..{hi:.1%})"


for kind in ("slow", "aa"):
    dirs = [f"{out}/{kind}_{i}" for i in range(1, runs + 1)
            if os.path.exists(f"{out}/{kind}_{i}/compare.json")]
    if not dirs:
        continue
    rows, final, first = collections.defaultdict(list), collections.Counter(), collections.Counter()
    runs_flagged = runs_found = twin_warned = 0
    for d in dirs:
        doc = json.load(open(f"{d}/compare.json"))
        if bool(doc.get("profile")) != with_profile:
            sys.exit(f"{d} was judged {'without' if with_profile else 'with'} a profile: "
                     f"this series is for runs {'with' if with_profile else 'without'} one")
        twin_warned += any("A/A twin differs" in w for w in doc.get("warnings", []))
        runs_flagged += any(r["verdict"] in FLAG for r in doc["cases"])
        runs_found += any(r["verdict"] in FINDING for r in doc["cases"])
        alone = {}
        if os.path.exists(f"{d}/first.json"):
            alone = {r["case"]: r for r in json.load(open(f"{d}/first.json"))["cases"]}
        for r in doc["cases"]:
            final[r["emoji"]] += 1
            if r["case"] in alone:
                first[alone[r["case"]]["emoji"]] += 1
            rows[r["case"]].append((r, r["case"] in doc.get("reruns", {})))
    flat = [r for case in rows.values() for r, _ in case]
    n = len(flat)
    print(f"{kind}: {len(dirs)} runs, {n} case comparisons; runs with a twin warning {twin_warned}")
    print(f"  final {dict(final)}; first pass alone {dict(first)}")
    print("  " + "; ".join([rate("flagged ⚠️/🔴", sum(r["verdict"] in FLAG for r in flat), n),
                           rate("failing the job (🔴/❌)", sum(r["verdict"] in FAILS for r in flat), n)]
                          + ([rate("any finding (⚠️/🔴/🟢)",
                                   sum(r["verdict"] in FINDING for r in flat), n)]
                             if kind == "aa" else [])
                          + [rate("runs with a ⚠️/🔴", runs_flagged, len(dirs))]
                          + ([rate("runs with any finding", runs_found, len(dirs))]
                             if kind == "aa" else [])))
    for case in sorted(rows):
        changes = [r["change"] for r, _ in rows[case] if r["change"] is not None]
        spread = (f"change median {statistics.median(changes):+.2%} "
                  f"[{min(changes):+.2%}, {max(changes):+.2%}]" if changes else "no change measured")
        thresholds = [r["threshold"] for r, _ in rows[case] if r["threshold"] is not None]
        top = f"{max(thresholds):.2%}" if thresholds else "–"
        print(f"  {case:16s} flagged {sum(r['verdict'] in FLAG for r, _ in rows[case]):2d}/"
              f"{len(rows[case])}  {spread}  threshold max {top}  "
              f"re-run {sum(x for _, x in rows[case])}  "
              f"{''.join(r['emoji'] for r, _ in rows[case])}")
    for case in sorted(rows):
        for r, rerun in rows[case]:
            false = r["verdict"] in FINDING if kind == "aa" else r["verdict"] not in FLAG
            if false:
                ci = r.get("ci") or [None, None]
                t = "–" if r["threshold"] is None else f"{r['threshold']:.2%}"
                print(f"  {'miss' if kind == 'slow' else 'false'}: {case:16s} {r['emoji']} change "
                      f"{pct(r['change'])} [{pct(ci[0])}, {pct(ci[1])}] threshold {t} rounds "
                      f"{r['rounds']}{' (re-run)' if rerun else ''}: {r['reason']}")
PY
