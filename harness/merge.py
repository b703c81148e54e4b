"""Join the shards of one grid (`run --shard K/N` on a runner matrix) into one results file.

Shards join only when they measured alike: the same machine, arms, configuration (but
for their cases and shard) and epbench version; `force` joins them anyway and the file
records what differed. A case present in two shards is always refused: there is no
honest way to choose between them. Each shard's own ORT control is kept with its cases,
so ratios stay within the shard that measured them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from epbench.core.errors import EpbenchError
from epbench.core.model import Results

# Config keys that differ between the shards of one grid by design.
PER_SHARD_CONFIG = ("case_names", "shard")


class MergeError(EpbenchError):
    """Shards that cannot be joined; the message says which and why."""


@dataclass(frozen=True)
class Shard:
    """One results file to merge, with the path it came from (for its messages)."""

    source: str
    results: Results


def _differences(first: Shard, other: Shard) -> list[str]:
    a, b = first.results, other.results
    found = []
    if a.host.key != b.host.key:
        found.append(f"machine {a.host.key} vs {b.host.key}")
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
    if arms_a != arms_b:
        found.append(f"arms {sorted(arms_a)} vs {sorted(arms_b)}")
    twin_a = a.twin.to_dict() if a.twin is not None else None
    twin_b = b.twin.to_dict() if b.twin is not None else None
    if (a.control, twin_a) != (b.control, twin_b):
        found.append("the control or the A/A twin")
    return found


def _label(results: Results) -> Any:
    """The shard's `K/N` label (`run --shard`), or whatever else the file holds there."""
    return results.config.extra.get("shard")


def merge_shards(shards: Sequence[Shard], *, force: bool = False) -> Results:
    """One run holding every shard's cases, or MergeError in one line."""
    if len(shards) < 2:
        raise MergeError("merge needs at least two results files (the shards of one grid)")
    first = shards[0]
    forced = []
    for other in shards[1:]:
        found = _differences(first, other)
        if found and not force:
            raise MergeError(f"{other.source} was not measured like {first.source}: "
                             f"{'; '.join(found)}; merge only shards of one run on one machine "
                             "class, or pass --force (recorded in the merged file)")
        forced += [f"{other.source}: {f}" for f in found]
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
