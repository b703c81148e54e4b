"""The statistical defaults of epbench, in one place.

The README quotes these numbers and a test checks the quotation against this
module, so the docs cannot drift from the code (criterion's docs once said 1 %
where its code used 2 %).
"""

from __future__ import annotations

# Two-sided confidence of every interval we print (`--confidence`).
CONFIDENCE = 0.95
# Bootstrap resamples of the per-node vs per-Run decomposition (`--resamples`; the
# verdicts' intervals are exact and do not resample). At least MIN_RESAMPLES so the
# 2.5 % and 97.5 % percentiles rest on ~50 resamples each.
MIN_RESAMPLES = 2000
RESAMPLES = MIN_RESAMPLES
# Seed of every resampling RNG: the same inputs give the same intervals.
SEED = 0
# Smallest threshold a change is judged against (`--floor`). Part of the A/A spread
# does not shrink with rounds (offsets of a process or a session, drift: 0.3 % to 1.5 %
# seen on a shared 2-core host); calibration measures it per host
# (reports.calibrate.scaled_noise keeps it at any round count), and this floor is what
# is left when a profile saw smaller offsets.
FLOOR = 0.01
# Threshold multiplier on the calibrated A/A noise: t = max(FLOOR, K * noise).
K = 2.0
# Without a calibration profile we assume this much noise, so t = max(FLOOR, K * 2 %)
# = 4 %: conservative on purpose, and the report says the profile was missing.
NOISE_WITHOUT_PROFILE = 0.02
# A regression of at least ALERT_FACTOR * t is an alert (🔴) unless `--alert` is given.
ALERT_FACTOR = 2.0
# Benjamini-Hochberg false-discovery rate across a grid (`--fdr`).
FDR = 0.05
# A case's detectable change is the smallest slowdown it would have flagged (⚠️ or 🔴)
# with this probability (verdicts.detectable_change).
DETECT_POWER = 0.95
# Fewer rounds than this cannot give a verdict (➖); the exact interval may need more
# (6 at 95 % in one run, 7 per run for two runs: reports.stats.min_rounds).
MIN_ROUNDS = 5
# `--fail-on` default: exit 5 when any case is an alert (🔴) or failed.
FAIL_ON = "alert"
# Calibration: A/A repeats and the percentile of |A/A change| taken as the noise.
CALIBRATION_REPEATS = 5
# Between two runs, when one run's ORT control took more than this much longer a Run
# than the other's, the machine ran at another speed, and the double ratio cancels that
# only for a case that slows exactly as the control does: such a case is ❔ unless its
# interval clears the threshold by the speed-change allowance its own shift gives
# (findings.speed_allowance). Measured on VM G over 126 A/A pairs of separate runs
# (docs/validation/README.md, "separate runs across a speed change"): within 5 % (77
# pairs) the change's rms was 0.99 %, the largest 3.1 %; from 5 to 10 % (16) 2.1 % and
# 4.6 %; beyond 10 % (33: 31 of them 39-92 %) 2.7 % and 6.1 %, both false 🔴 of the 126
# among them.
CONTROL_SHIFT_LIMIT = 0.05
# The allowance at x = |log(1 + shift)| beyond x_limit = log(1 + CONTROL_SHIFT_LIMIT) is
# z × sqrt(SPEED_SHIFT_JUMP + SPEED_SHIFT_VARIANCE × (x - x_limit)), z the two-sided
# normal quantile of SPEED_ALLOWANCE_COVER: a jump at the limit (2.5 %; the flat 7 % it
# replaces, issue 46, was a step too), then growing with the shift (3.2 % at a control
# 10 % longer, 6.0 % at 50 %). Fitted on the 504 A/A pairs of
# docs/validation/archives/own_builds_same_separate.tar.xz (82 beyond the limit: 48 on
# VM G, 34 on VM H): each series' squared A/A change less its own mean square within the
# limit, by least squares on c0 + a × (x - x_limit) (c0 0.000069, se 0.000055; a 0.00143,
# se 0.00044; sandwich), each constant its coefficient's one-sided 95 % upper bound.
# In-sample, with each series' baseline added back, ±z sqrt(baseline + c0 + a(x -
# x_limit)) holds 46 of VM G's 48 pairs beyond the limit (95.8 %, only just 95 %) and 34
# of VM H's 34. The jump: on VM G a change of speed state moves a case at once, whatever
# the shift; a line through the origin at the limit, fitted first, left 8 of the 82
# outside (6 on VM G, all at 5-10 %). Not out-of-sample: no other archive holds A/A
# pairs across speed changes, so not a proven 95 %/95 % tolerance bound.
# Pooled over cases, not per case: a case's own slope (the quick grid's six on VM G:
# -0.069 to +0.021 per unit of log shift, both signs) needs its own pairs across speed
# changes, which a calibration profile does not keep (a noise per case, not the pairs'
# shifts) and a user's new case never has. Reproduce:
#   .venv/bin/python docs/validation/speed_shift.py --fit \
#       docs/validation/archives/own_builds_same_separate.tar.xz
SPEED_SHIFT_JUMP = 0.000159
SPEED_SHIFT_VARIANCE = 0.00216
SPEED_ALLOWANCE_COVER = 0.95
# A change in instructions per Run at or above this gets its own mark (never a 🔴 alone).
INSTRUCTIONS_THRESHOLD = 0.01
# `history detect`: a commit whose instructions per Run moved more than this from the
# series' level starts a new level. Counts are exact (two copies of one library agree
# within 0.05 %), so this is the smallest move that is never the harness's.
HISTORY_INSTRUCTIONS_CHANGE = 0.001
NOISE_PERCENTILE = 95.0


def documented() -> dict[str, str]:
    """The defaults as the README states them, `--option` -> value, for a docs check."""
    return {
        "--confidence": f"{CONFIDENCE:g}",
        "--resamples": str(RESAMPLES),
        "--floor": f"{FLOOR:g}",
        "--k": f"{K:g}",
        "--fdr": f"{FDR:g}",
        "--fail-on": FAIL_ON,
        "--repeats": str(CALIBRATION_REPEATS),
        "alert": f"{ALERT_FACTOR:g}t",
        "no-profile noise": f"{NOISE_WITHOUT_PROFILE:g}",
    }
