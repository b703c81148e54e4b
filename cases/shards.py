"""Deterministic slices of a grid (`run --shard K/N`), for a runner matrix.

A chain family (cases that differ only in depth) stays whole in one shard, so the
per-node fit of each family can still be made from one shard; the families and the
cases outside any family are dealt out largest first to the least-filled shard, ties
broken by name, so every runner computes the same slices from the same grid.
"""

from __future__ import annotations

import re

from epbench.cases.spec import CaseSpec
from epbench.core.errors import EpbenchError

_SHARD = re.compile(r"([1-9][0-9]*)/([1-9][0-9]*)")


def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` as (K, N) with 1 <= K <= N; one line with the remedy otherwise."""
    match = _SHARD.fullmatch(text.strip())
    if match is None or int(match.group(1)) > int(match.group(2)):
        raise EpbenchError(f"--shard {text!r}: write K/N with 1 <= K <= N, e.g. --shard 2/3")
    return int(match.group(1)), int(match.group(2))


def shard_cases(specs: list[CaseSpec], index: int, count: int) -> list[CaseSpec]:
    """The cases of shard `index` (1-based) of `count`, in the order they were given."""
    groups: dict[str, list[CaseSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.family or f"case:{spec.name}", []).append(spec)
    loads = [0] * count
    owner: dict[str, int] = {}
    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        target = min(range(count), key=lambda i: (loads[i], i))
        owner[key] = target
        loads[target] += len(groups[key])
    chosen = {s.name for key, members in groups.items() if owner[key] == index - 1
              for s in members}
    return [s for s in specs if s.name in chosen]
