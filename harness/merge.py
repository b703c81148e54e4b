"""Join the shards of one grid (`run --shard K/N` on a runner matrix) into one results file.

Shards join only when they measured alike: the same machine, arms, configuration (but
for their cases and shard) and epbench version; `force` joins them anyway and the file
records what differed. `allow_paths_and_host` is the narrow override a runner matrix
needs: slices that differ only in their libraries' folders and their host join, any
other difference is still refused, and the file records what was tolerated
(`merge_warnings` words it for the report). A case present in two shards is always
refused: there is no honest way to choose between them. Each shard's own ORT control
is kept with its cases, so ratios stay within the shard that measured them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from epbench.core.errors import ArmError, EpbenchError
from epbench.core.model import Arm, Results
from epbench.harness.arms import _is_library_path, parse_arm

# Config keys that differ between the shards of one grid by design.
PER_SHARD_CONFIG = ("case_names", "shard")


# Every slice of a matrix stages its libraries in a folder of its own: recorded, not shown.
PATHS_ONLY = "the arms' library paths"


class MergeError(EpbenchError):
    """Shards that cannot be joined; the message says which and why."""


@dataclass(frozen=True)
class Shard:
    """One results file to merge, with the path it came from (for its messages)."""

    source: str
    results: Results


def _arm_without_paths(arm: Arm) -> tuple[Any, ...]:
    """What an arm is, its library's folder and file (each slice stages its own) left out."""
    try:
        spec = parse_arm(arm.spec)
        written: Any = (spec.kind, spec.options, spec.name,
                        None if spec.target is None or _is_library_path(spec.target)
                        else spec.target)
    except ArmError:
        written = arm.spec
    return (arm.key, arm.kind, written, dict(arm.options), arm.ep_name, arm.registration_name)


def _differences(first: Shard, other: Shard) -> tuple[list[str], list[str]]:
    """(What differs beyond paths and host, what differs only in those.)"""
    a, b = first.results, other.results
    found, tolerable = [], []
    if a.host.key != b.host.key:
        tolerable.append(f"machine {a.host.key} vs {b.host.key}")
    version_a, version_b = a.extra.get("epbench_version"), b.extra.get("epbench_version")
    if version_a != version_b:
        found.append(f"epbench {version_a} vs {version_b}")
    # The whole configuration as written, the keys this version does not model too.
    config_a = {k: v for k, v in a.config.to_dict().items() if k not in PER_SHARD_CONFIG}
    config_b = {k: v for k, v in b.config.to_dict().items() if k not in PER_SHARD_CONFIG}
    for key in sorted(set(config_a) | set(config_b)):
        if config_a.get(key) != config_b.get(key):
            found.append(f"config {key} {config_a.get(key)!r} vs {config_b.get(key)!r}")
    arms_a = {k: v.spec for k, v in a.arms.items()}
    arms_b = {k: v.spec for k, v in b.arms.items()}
    if ({k: _arm_without_paths(v) for k, v in a.arms.items()}
            != {k: _arm_without_paths(v) for k, v in b.arms.items()}):
        found.append(f"arms {sorted(arms_a)} vs {sorted(arms_b)}")
    elif arms_a != arms_b:
        tolerable.append(PATHS_ONLY)
    # Each slice builds the library on its own runner: a build that is not reproducible
    # differs in its bytes. Tolerated, but named (unlike a path, it can change the speed).
    rebuilt = sorted(k for k in set(a.arms) & set(b.arms)
                     if a.arms[k].sha256 != b.arms[k].sha256)
    if rebuilt:
        tolerable.append(f"the library bytes (sha256) of {', '.join(rebuilt)}")
    twin_a = a.twin.to_dict() if a.twin is not None else None
    twin_b = b.twin.to_dict() if b.twin is not None else None
    if (a.control, twin_a) != (b.control, twin_b):
        found.append("the control or the A/A twin")
    return found, tolerable


def _label(results: Results) -> Any:
    """The shard's `K/N` label (`run --shard`), or whatever else the file holds there."""
    return results.config.extra.get("shard")


def merge_shards(shards: Sequence[Shard], *, force: bool = False,
                 allow_paths_and_host: bool = False) -> Results:
    """One run holding every shard's cases, or MergeError in one line.

    ``allow_paths_and_host`` tolerates slices that differ only in their libraries' paths
    and their host (a runner matrix's); ``force`` tolerates every difference but a case
    measured twice. What was tolerated is recorded under extra `merge_forced`.
    """
    if len(shards) < 2:
        raise MergeError("merge needs at least two results files (the shards of one grid)")
    first = shards[0]
    forced = []
    for other in shards[1:]:
        found, tolerable = _differences(first, other)
        if not (force or allow_paths_and_host):
            found += tolerable
        if found and not force:
            raise MergeError(f"{other.source} was not measured like {first.source}: "
                             f"{'; '.join(found)}; merge only shards of one run on one machine "
                             "class, or pass --force (recorded in the merged file)")
        forced += [f"{other.source}: {f}" for f in found + tolerable]
    owner: dict[str, str] = {}
    for shard in shards:
        for name in shard.results.cases:
            if name in owner:
                raise MergeError(f"case {name} is in both {owner[name]} and {shard.source}; "
                                 "each case must come from one shard (drop one of the files)")
            owner[name] = shard.source
    labels = [_label(s.results) for s in shards]
    if all(isinstance(label, str) and "/" in label for label in labels):
        counts = {label.split("/")[1] for label in labels}
        if len(counts) == 1:
            count = int(counts.pop())
            missing = sorted(set(range(1, count + 1)) - {int(lb.split("/")[0]) for lb in labels})
            if missing:
                gap = ", ".join(f"{k}/{count}" for k in missing)
                if not force:
                    raise MergeError(f"shard(s) {gap} of this grid are missing: pass every "
                                     "shard's results file, or --force to merge the rest "
                                     "(recorded in the merged file)")
                forced.append(f"shard(s) {gap} missing")
    runs = [s.results for s in shards]
    base = runs[0]
    extra = {**base.extra,
             "shards": [{"source": s.source, "shard": _label(r), "machine": r.host.key,
                         "created": r.created, "cases": sorted(r.cases)}
                        for s, r in zip(shards, runs, strict=True)]}
    if forced:
        extra["merge_forced"] = forced
    return base.replaced(
        cases={name: case for r in runs for name, case in r.cases.items()},
        config=base.config.replaced(case_names=[n for r in runs for n in r.config.case_names or ()],
                                    extra={**base.config.extra, "shard": None}),
        interrupted=any(r.interrupted for r in runs),
        created=min(str(r.created or "") for r in runs) or None,
        extra=extra)


def merge_warnings(results: Results) -> list[str]:
    """The report's line for a join that tolerated differences (none for an exact one)."""
    forced = results.extra.get("merge_forced")
    if not isinstance(forced, list):
        return []
    forced = [f for f in forced if not str(f).endswith(f": {PATHS_ONLY}")]
    if not forced:
        return []
    shown = "; ".join(str(f) for f in forced[:3]) + ("; ..." if len(forced) > 3 else "")
    return [f"the shards were joined despite {len(forced)} difference(s) between them "
            f"({shown}): their results file lists each under merge_forced"]
