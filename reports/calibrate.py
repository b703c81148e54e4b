"""A/A noise calibration: how much a case's change moves when nothing changed.

`calibrate` runs the same arm twice under two registration names (for `ort`: the
control against a second ORT session), interleaved exactly like a real run,
`repeats` times, and writes a noise profile keyed by the host fingerprint key.
Per case it keeps, for both comparison shapes `compare` uses,

- same run: the A/A change (arm B / arm A, paired rounds) of each repeat;
- separate runs: the A/A double ratio between every pair of repeats (with a
  single repeat, sqrt(2) x the same-run noise, marked "estimated");

and the noise = max(95th percentile of |change|, median CI half-width). At judging
time only its within-run sampling part (the CI half-width) is scaled by
sqrt(profile rounds / compared rounds); the rest is an offset (of a process or a session)
that more rounds do not remove (see `scaled_noise`). A last run with a fixed
arm order (the position-bias self-test) shows what counterbalancing removes.

Profile format history (bump PROFILE_VERSION and migrate on change):
  1 -- first version.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from epbench.core.errors import EpbenchError
from epbench.core.model import Results
from epbench.core.paths import cache_dir
from epbench.core.results import atomic_write_text, schema_version
from epbench.reports import defaults, stats
from epbench.reports.comparison import JsonValue, Profile

if TYPE_CHECKING:
    import numpy as np

PROFILE_NAME = "epbench.noise-profile"
PROFILE_VERSION = 1
PROFILE_SCHEMA = f"{PROFILE_NAME}/{PROFILE_VERSION}"
# Registration names of the two A/A arms when the calibrated arm is not `ort`.
AA_NAMES = ("aa_a", "aa_b")
MODES = ("same-run", "separate-runs")


class ProfileError(EpbenchError):
    """A noise profile that cannot be read or used."""


def default_profile_dir() -> Path:
    """Where this host's noise profiles live: the epbench cache root's profiles/."""
    return cache_dir("profiles")


def default_profile_path(host_key: str) -> Path:
    return default_profile_dir() / f"{host_key}.json"


def noise_of(changes: Sequence[stats.Change]) -> dict[str, JsonValue]:
    """Spread of A/A changes: p95 of |change|, median CI half-width, and the noise (their max)."""
    import numpy as np

    usable = [c for c in changes if math.isfinite(c.ratio)]
    if not usable:
        return {"changes": [], "p95_abs": None, "ci_half_width": None, "noise": None}
    abs_change = np.abs(np.array([c.ratio - 1.0 for c in usable]))
    half = np.array([(c.hi - c.lo) / 2.0 for c in usable])
    p95 = float(np.percentile(abs_change, defaults.NOISE_PERCENTILE))
    width = float(np.median(half))
    return {
        "changes": [c.ratio - 1.0 for c in usable],
        "p95_abs": p95,
        "ci_half_width": width,
        "noise": max(p95, width),
    }


def _guess_separate(same_run: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """With one repeat there is no pair of runs: assume two independent runs' worth of
    noise, sqrt(2) x the same-run noise, and say it is a guess."""
    noise = same_run["noise"]
    return {
        "changes": [], "p95_abs": None, "ci_half_width": None,
        "noise": None if noise is None else noise * math.sqrt(2.0), "estimated": True,
    }


def profile_from_runs(
    runs: Sequence[Results],
    fixed_order_run: Results | None,
    arm_a: str,
    arm_b: str,
    *,
    arm_spec: str,
    confidence: float = defaults.CONFIDENCE,
    resamples: int = defaults.RESAMPLES,
    seed: int = defaults.SEED,
) -> dict[str, JsonValue]:
    """Build the noise profile from the A/A results documents of the repeats."""
    import numpy as np

    if not runs:
        raise ProfileError("calibration needs at least one A/A run; pass --repeats 1 or more")
    opts = {"confidence": confidence}
    first = runs[0]
    control = first.control
    names = [n for n, c in first.cases.items() if c.ok]
    if not names:
        errors = sorted({f"{n}: {c.error}" for n, c in first.cases.items()})
        raise ProfileError(
            "no case ran in the A/A runs, so there is no noise to measure ("
            + ("; ".join(errors[:3]) or "no cases") + "); fix the cases or the arm and rerun"
        )

    def aa_log(doc: Results, name: str, num: str, den: str) -> np.ndarray:
        case = doc.cases.get(name)
        if case is None or not case.ok:
            return np.array([])
        return stats.log_ratios(stats.round_medians(case, num), stats.round_medians(case, den))

    cases: dict[str, dict[str, JsonValue]] = {}
    for name in names:
        same = stats.paired_changes([aa_log(doc, name, arm_b, arm_a) for doc in runs], **opts)
        # Separate runs: arm B against the in-run control, between every pair of repeats.
        vs_control = [aa_log(doc, name, arm_b, control) for doc in runs]
        pairs = list(itertools.combinations(range(len(runs)), 2))
        separate = stats.double_ratio_changes(
            [vs_control[j] for _, j in pairs], [vs_control[i] for i, _ in pairs], **opts
        ) if pairs else []
        same_noise = noise_of(same)
        entry: dict[str, JsonValue] = {
            "definition_sha256": first.cases[name].definition_sha256,
            "same-run": same_noise,
            "separate-runs": noise_of(separate) if separate else _guess_separate(noise_of(same)),
        }
        if fixed_order_run is not None:
            (fixed,) = stats.paired_changes([aa_log(fixed_order_run, name, arm_b, arm_a)], **opts)
            balanced = same_noise["changes"]
            entry["position_bias"] = {
                "fixed_order_change": fixed.ratio - 1.0 if math.isfinite(fixed.ratio) else None,
                "counterbalanced_change": float(np.median(balanced)) if balanced else None,
            }
        cases[name] = entry
    host = first.host.to_dict()
    return {
        "schema": PROFILE_SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": host,
        "host_key": first.host.key,
        "arm": arm_spec,
        "rounds": int(first.config.rounds or 0),
        # How the calibration runs were timed: noise measured with whole blocks is larger
        # than with slices (compare warns when the results were timed otherwise).
        "block_slices": first.config.block_slices,
        "repeats": len(runs),
        "confidence": confidence,
        "cases": cases,
        "position_bias": _position_bias_summary(cases),
    }


def _position_bias_summary(cases: Mapping[str, Mapping[str, JsonValue]]
                           ) -> dict[str, JsonValue] | None:
    import numpy as np

    fixed = [abs(c["position_bias"]["fixed_order_change"]) for c in cases.values()
             if c.get("position_bias") and c["position_bias"]["fixed_order_change"] is not None]
    balanced = [abs(c["position_bias"]["counterbalanced_change"]) for c in cases.values()
                if c.get("position_bias")
                and c["position_bias"]["counterbalanced_change"] is not None]
    if not fixed:
        return None
    return {
        "median_abs_fixed_order": float(np.median(fixed)),
        "median_abs_counterbalanced": float(np.median(balanced)) if balanced else None,
        "cases": len(fixed),
    }


def write_profile(path: str | Path, profile: Profile) -> Path:
    """Write the profile atomically (sorted keys), creating the folder."""
    import json


    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfileError(
            f"cannot create {str(path.parent)!r}: {exc.strerror}; pass --profile FILE elsewhere"
        ) from None
    atomic_write_text(path, json.dumps(profile, sort_keys=True, indent=1, allow_nan=False))
    return path


def load_profile(path: str | Path) -> dict[str, JsonValue]:
    """Read a noise profile; refuse other files and newer versions with a remedy."""
    import json

    path = Path(path)
    if not path.is_file():
        raise ProfileError(
            f"no noise profile at {str(path)!r}; run `epbench calibrate` or pass --profile FILE"
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(
            f"{path} is not valid JSON ({exc}); re-run `epbench calibrate`"
        ) from None

    schema = doc.get("schema") if isinstance(doc, dict) else None
    schema_version(schema, PROFILE_NAME, PROFILE_VERSION, path, "noise profile",
                   error=ProfileError, remedy=" or re-run `epbench calibrate`")
    doc["path"] = str(path)
    return doc


def profile_noise(
    profile: Profile, case: str, definition: str | None, rounds: int, mode: str
) -> tuple[float | None, str]:
    """The calibrated noise of `case` at `rounds` rounds, or None and why not."""
    entry = (profile.get("cases") or {}).get(case)
    if entry is None:
        return None, "profile lacks this case"
    if definition is not None and entry.get("definition_sha256") not in (None, definition):
        return None, "profile measured another definition of this case"
    noise = (entry.get(mode) or {}).get("noise")
    if noise is None:
        return None, "profile has no noise for this case"
    mode_entry = entry.get(mode) or {}
    return scaled_noise(
        float(noise), mode_entry.get("ci_half_width"), int(profile.get("rounds") or rounds),
        rounds, pooled_offset(profile, mode),
    ), "profile"


def pooled_offset(profile: Profile, mode: str) -> float:
    """The offset part of the host's A/A noise, pooled over every case of the profile.

    A case's own 5 repeats can all land on small offsets by chance; the offset is a
    property of the host and ORT, so its 95th percentile over all cases' A/A changes
    (less the sampling part) is a floor under every case's offset.
    """
    import numpy as np

    entries = [(c.get(mode) or {}) for c in (profile.get("cases") or {}).values()]
    changes = [abs(x) for e in entries for x in (e.get("changes") or [])]
    halves = [e["ci_half_width"] for e in entries if e.get("ci_half_width") is not None]
    if not changes or not halves:
        return 0.0
    spread = float(np.percentile(changes, defaults.NOISE_PERCENTILE))
    sampling = float(np.median(halves))
    return math.sqrt(max(0.0, spread * spread - sampling * sampling))


def scaled_noise(
    noise: float, sampling: float | None, profile_rounds: int, rounds: int,
    offset_floor: float = 0.0,
) -> float:
    """The calibrated noise at `rounds` rounds.

    Two parts: the within-run sampling error of a median over rounds (estimated by
    the A/A intervals' half-width `sampling`), which shrinks like 1 / sqrt(rounds),
    and an offset (of a process or a session, or a drift), which more rounds do not
    shrink. The offset is what the A/A
    spread holds beyond sampling: sqrt(noise^2 - sampling^2). Without a sampling
    estimate all of the noise is treated as offset (never scaled down).
    """
    ratio = profile_rounds / max(1, rounds)
    if sampling is None or not math.isfinite(sampling):
        return noise * math.sqrt(max(1.0, ratio))
    sampling = min(float(sampling), noise)
    offset_sq = max(noise * noise - sampling * sampling, offset_floor * offset_floor)
    return math.sqrt(offset_sq + sampling * sampling * ratio)
