"""The history's changes: series, change-point detection, and the base-commit report.

A series is one case and arm on one machine (or machine class) in commit order, read
from the store (reports.history.store); change points over it come from
reports.history.changepoints (e-divisive means, a permutation test), and a PR's base
commit is placed against them (base_report).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epbench.core.model import changed_counters
from epbench.reports import stats
from epbench.reports.comparison import BaseHistory, HistoryFinding, JsonValue
from epbench.reports.history import changepoints
from epbench.reports.history.db import (
    DB_ENV,
    POSTGRESQL,
    HistoryError,
    parse_db_url,
    redact,
)
from epbench.reports.history.instruction_series import (
    InstructionFinding,
    instruction_changes,
    instruction_series,
    is_exact,
)
from epbench.reports.history.store import HistoryStore, HistoryTooOld, StoredPoint

if TYPE_CHECKING:
    import pandas as pd


# --------------------------------------------------------------------------- series


@dataclass(frozen=True)
class SeriesPoint:
    """One commit of a series: the median ratio of its runs, with an interval."""

    commit: str
    created: str
    ratio: float
    lo: float | None
    hi: float | None
    runs: int
    counters: dict[str, float] | None

    @property
    def weight(self) -> float:
        """1 / half-width^2 of the log interval (NaN without an interval)."""
        if self.lo is None or self.hi is None or not (0 < self.lo < self.hi):
            return math.nan
        half = (math.log(self.hi) - math.log(self.lo)) / 2.0
        return 1.0 / (half * half)


def series(store: HistoryStore, case: str, arm: str, machine: str) -> list[SeriesPoint]:
    """One series in commit order: a point per commit (the median over its runs' ratios).

    Runs whose case failed or has no ratio are left out. A commit measured several
    times is merged by one rule (merge_runs): the median of its runs' ratios, and an
    interval from all of them.
    """

    by_commit: dict[str, list[StoredPoint]] = {}
    for row in store.points(case, arm, machine):
        if row.status == "ok" and row.ratio is not None and row.ratio > 0:
            by_commit.setdefault(row.commit, []).append(row)
    return [merge_runs(commit, rows) for commit, rows in by_commit.items()]  # run order


def merge_runs(commit: str, rows: Sequence[StoredPoint]) -> SeriesPoint:
    """One point from the runs of one commit (stored points, each with a ratio).

    The rule: the ratio is the median of the runs' ratios (in logs; of two runs, their
    geometric mean); the interval runs from the lowest of the runs' lower ends to the
    highest upper end, widened to the ratio if need be, so the point always lies
    inside its own interval (the interval of one run alone could exclude a median
    between two runs). Without an interval on any run, none. The counters are those
    of the run nearest the median.
    """
    import numpy as np

    logs = np.log([r.ratio for r in rows])
    mid = float(np.median(logs))
    ratio = math.exp(mid)
    nearest = rows[int(np.argmin(np.abs(logs - mid)))]
    los = [r.ratio_lo for r in rows if r.ratio_lo is not None]
    his = [r.ratio_hi for r in rows if r.ratio_hi is not None]
    return SeriesPoint(commit=commit, created=rows[0].created, ratio=ratio,
                       lo=min(*los, ratio) if los else None,
                       hi=max(*his, ratio) if his else None, runs=len(rows),
                       counters=nearest.counters)


def series_frame(store: HistoryStore, case: str, arm: str, machine: str) -> pd.DataFrame:
    """One series as a pandas DataFrame: commit, created, ratio, lo, hi, runs."""
    import pandas as pd

    rows = [{"commit": p.commit, "created": p.created, "ratio": p.ratio, "lo": p.lo,
             "hi": p.hi, "runs": p.runs} for p in series(store, case, arm, machine)]
    return pd.DataFrame(rows, columns=["commit", "created", "ratio", "lo", "hi", "runs"])


def all_points_frame(store: HistoryStore) -> pd.DataFrame:
    """Every stored point, one row per run x case x arm (for `history export`)."""
    import pandas as pd

    rows = []
    for case, arm, machine in store.series_keys(control=""):
        for p in store.points(case, arm, machine):
            rows.append({"case": case, "arm": arm, "series": machine, **{
                k: getattr(p, k) for k in ("commit", "branch", "created", "machine", "status",
                                           "ratio", "ratio_lo", "ratio_hi", "p50_ns",
                                           "instructions")},
                "counters": json.dumps(p.counters, sort_keys=True) if p.counters else None,
                "round_medians_ns": json.dumps(p.round_medians_ns)})
    columns = ["case", "arm", "series", "commit", "branch", "created", "machine", "status",
               "ratio", "ratio_lo", "ratio_hi", "p50_ns", "instructions", "counters",
               "round_medians_ns"]
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------- change points


@dataclass(frozen=True)
class Finding:
    """A change point of one series, as `history detect` reports it."""

    case: str
    arm: str
    machine: str
    before: str  # the last commit of the old level
    after: str  # the first commit of the new level
    index: int  # position of `after` in the series
    change: stats.Change  # the new level / the old level, with its interval
    p: float  # the permutation test's p-value
    counters_changed: dict[str, tuple[float | None, float | None]]
    commits_between: int | None = None  # commits in before..after, when git knows them
    # The interval was computed on the points that chose the split (too few without the
    # split's neighbours): narrower than it should be.
    selective: bool = False

    @property
    def regression(self) -> bool:
        return self.change.ratio > 1.0

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "case": self.case, "arm": self.arm, "machine": self.machine,
            "before": self.before, "after": self.after, "index": self.index,
            "change": stats.finite(self.change.ratio - 1.0),
            "lo": stats.finite(self.change.lo - 1.0), "hi": stats.finite(self.change.hi - 1.0),
            "p": self.p, "direction": "regression" if self.regression else "improvement",
            "commits_between": self.commits_between, "selective": self.selective,
            "counters_changed": {k: list(v) for k, v in self.counters_changed.items()},
        }


@dataclass(frozen=True)
class SeriesChanges:
    """A series and its change points: what a report plots."""

    case: str
    arm: str
    machine: str
    points: list[SeriesPoint]
    findings: list[Finding]


class SeriesTooShort(HistoryError):
    """A series with fewer points than a change-point test needs."""


def find_changes(points: Sequence[SeriesPoint], *, case: str = "", arm: str = "",
                 machine: str = "", weighted: bool = False,
                 significance: float = changepoints.SIGNIFICANCE,
                 permutations: int = changepoints.PERMUTATIONS) -> list[Finding]:
    """Change points of one series (log ratios) as findings: `find_many` of one series.

    `weighted` weighs each point by 1 / its interval's half-width^2. Off by default: on
    synthetic series whose points' noise follows their intervals it lowered detection
    (docs/history.md has the figures), so it is an option, not the method.
    """
    if len(points) < changepoints.MIN_POINTS:
        raise SeriesTooShort(_too_short(points, case, arm, machine))
    (found,) = find_many([(points, case, arm, machine)], weighted=weighted,
                         significance=significance, permutations=permutations)
    return found


def _too_short(points: Sequence[SeriesPoint], case: str, arm: str, machine: str) -> str:
    more = changepoints.MIN_POINTS - len(points)
    return (f"{case}, {arm} on {machine}: {len(points)} commit(s) in the series, a "
            f"change-point test needs at least {changepoints.MIN_POINTS} ({more} more); "
            "add more runs")


def find_many(series_list: Sequence[tuple[Sequence[SeriesPoint], str, str, str]], *,
              weighted: bool = False, significance: float = changepoints.SIGNIFICANCE,
              permutations: int = changepoints.PERMUTATIONS) -> list[list[Finding]]:
    """Change points of several series at once, (points, case, arm, machine) each, with
    the false-alarm rate held over all of them (changepoints.detect_many: pre-whitening,
    BH across the series, a minimum change).

    Each change is the new level over the old, the median of the points after it (to
    the next change) over the median before it (from the previous change), with the
    distribution-free interval of a difference of two medians (stats.double_ratio_changes;
    unbounded, shown as n/a, when a side has fewer than 7 points). The split's two
    neighbours (the last old and the first new point) are left out of that interval:
    they chose the split, and an interval on the data that chose it would be too narrow.
    When too few points are left for a bounded interval, all are used and the finding
    is marked `selective`.
    """
    import numpy as np

    logs = [np.log([p.ratio for p in points]) for points, *_ in series_list]
    weights = ([np.array([p.weight for p in points]) for points, *_ in series_list]
               if weighted else None)
    found = changepoints.detect_many(logs, weights, significance=significance,
                                     permutations=permutations)
    out = []
    for (points, case, arm, machine), z, cps in zip(series_list, logs, found, strict=True):
        edges = [0, *(c.index for c in cps), len(points)]
        findings = []
        for k, cp in enumerate(cps):
            before_logs = z[edges[k]:cp.index - 1]
            after_logs = z[cp.index + 1:edges[k + 2]]
            (change,) = stats.double_ratio_changes([after_logs], [before_logs])
            selective = not math.isfinite(change.lo)
            if selective:  # too few points left apart from the neighbours: all of them
                before_logs, after_logs = z[edges[k]:cp.index], z[cp.index:edges[k + 2]]
                (change,) = stats.double_ratio_changes([after_logs], [before_logs])
            if not math.isfinite(change.ratio):
                ratio = math.exp(float(np.median(z[cp.index:edges[k + 2]])
                                       - np.median(z[edges[k]:cp.index])))
                change = stats.Change(ratio, math.nan, math.nan, math.nan,
                                      min(len(after_logs), len(before_logs)))
            prev, nxt = points[cp.index - 1], points[cp.index]
            findings.append(Finding(
                case=case, arm=arm, machine=machine, before=prev.commit, after=nxt.commit,
                index=cp.index, change=change, p=cp.p,
                counters_changed=changed_counters(prev.counters, nxt.counters),
                selective=selective,
            ))
        out.append(findings)
    return out


def series_with_changes(store: HistoryStore, case: str, arm: str, machine: str | None = None,
                        *, weighted: bool = False) -> SeriesChanges:
    """A series and its change points, for a report (the HTML report's entry point).

    `machine` is a machine key or class; None takes the only one the case has (an
    error names them when there are several). A series too short to test comes back
    with no findings rather than an error.
    """
    if machine is None:
        machines = sorted({m for c, a, m in store.series_keys() if c == case and a == arm})
        if len(machines) != 1:
            raise HistoryError(
                f"{case}, {arm}: {len(machines)} machine series ({', '.join(machines) or 'none'}); "
                "pass the machine key or class"
            )
        machine = machines[0]
    points = series(store, case, arm, machine)
    try:
        findings = find_changes(points, case=case, arm=arm, machine=machine, weighted=weighted)
    except SeriesTooShort:
        findings = []
    return SeriesChanges(case, arm, machine, points, findings)


def read_series_with_changes(db_url: str | None, case: str, arm: str,
                             machine: str | None = None) -> SeriesChanges:
    """Open the store at `db_url` (None: $EPBENCH_DB or the default file), read one series
    and its change points, close the store: the one call a report needs."""
    with HistoryStore.open(db_url) as store:
        return series_with_changes(store, case, arm, machine)


def match_commit(commits: Sequence[str], rev: str) -> str | None:
    """The stored commit `rev` names (a full sha or an unambiguous prefix of 4+ characters)."""
    rev = rev.lower()
    if len(rev) < 4:
        return None
    hits = [c for c in commits if c.lower().startswith(rev)]
    if len(hits) > 1:
        raise HistoryError(f"revision {rev!r} matches {len(hits)} stored commits; give more of it")
    return hits[0] if hits else None


@dataclass(frozen=True)
class Detection:
    findings: list[Finding]
    tested: int  # series tested
    too_short: list[str]  # why series could not be tested
    # Instructions per Run, a series per case, arm and machine that counted them.
    instruction_findings: list[InstructionFinding] = field(default_factory=list)
    instruction_series: int = 0
    # The fewest more commits an untested series needs before it is tested (None: none).
    more_needed: int | None = None


def detect(store: HistoryStore, *, cases: Sequence[str] = (), arms: Sequence[str] = (),
           machines: Sequence[str] = (), since: str | None = None,
           weighted: bool = False) -> Detection:
    """Change points in every series asked for, kept when they lie after `since`.

    `since` is a stored commit (full or prefix, resolved by the caller when it is a
    git revision); the whole series is still tested (more context, more power), and a
    change is reported when its first new commit is `since` or later.
    """
    commits = store.commits()
    since_pos = None
    if since is not None:
        sha = match_commit(commits, since)
        if sha is None:
            raise HistoryError(
                f"--since {since!r}: no stored run has that commit; "
                "`epbench history list` shows the stored commits"
            )
        since_pos = commits.index(sha)
    order = {c: i for i, c in enumerate(commits)}
    keys = [k for k in store.series_keys()
            if (not cases or k[0] in cases) and (not arms or k[1] in arms)
            and (not machines or k[2] in machines)]
    if not keys:
        raise HistoryError(
            "no stored series matches --case/--arm/--machine; `epbench history list` shows them"
        )
    findings: list[Finding] = []
    too_short: list[str] = []
    more: list[int] = []
    testable = []
    counted: list[InstructionFinding] = []
    instruction_series_tested = 0
    for case, arm, machine in keys:
        # Exact counts: a series of two commits is already a test (others are not tested).
        ipoints = instruction_series(store, case, arm, machine)
        instruction_series_tested += len(ipoints) > 1 and is_exact(ipoints)
        counted.extend(f for f in instruction_changes(ipoints, case=case, arm=arm,
                                                      machine=machine)
                       if since_pos is None or order[f.after] >= since_pos)
        points = series(store, case, arm, machine)
        if len(points) < changepoints.MIN_POINTS:
            too_short.append(_too_short(points, case, arm, machine))
            more.append(changepoints.MIN_POINTS - len(points))
            continue
        testable.append((points, case, arm, machine))
    # One family: BH across the series, so a detect over many series is not many tests.
    for found in find_many(testable, weighted=weighted):
        findings.extend(f for f in found if since_pos is None or order[f.after] >= since_pos)
    return Detection(findings, len(testable), too_short, counted, instruction_series_tested,
                     min(more) if more else None)


# --------------------------------------------------------------------------- a PR's base


# How a change point touches a base commit.
BASE_INSIDE = "inside"  # the base is in the change's commit range: after `before`, up to `after`
BASE_AFTER = "after"  # the base is early on the new level of the last regression before it
BASE_UNKNOWN = "unknown"  # git could not place the base against the change (not a finding)
# How far into a new level a base still hears of the regression that started it: within the
# first commits of the level, as many as the detector needs on each side of a change point.
# Past them the new level is established (an accepted regression stops being mentioned).
BASE_AFTER_COMMITS = changepoints.MIN_SEGMENT

# (ancestor, descendant) -> True/False, or None when git cannot tell.
IsAncestor = Callable[[str, str], bool | None]


def existing_db_url(url: str) -> str:
    """`url` if it names a history that exists; a SQLite path that does not is refused.

    Opening a SQLite path creates the file; a command that only reads the history
    (`compare-commits --history`) must not leave an empty database behind a typo.
    """
    parsed = parse_db_url(url)
    if parsed.kind == POSTGRESQL:
        return url
    path = parsed.path
    assert path is not None
    if not path.is_file():
        raise HistoryError(
            f"no history database at {path}; pass the file `epbench history add` wrote "
            f"(--db or ${DB_ENV}), or leave --history out"
        )
    return url


def history_to_check(url: str | None) -> tuple[str | None, str | None]:
    """The history a read-only check uses, and a note when it skips one.

    The store is opened for reading (HistoryStore.open_for_reading: never migrated)
    and closed, so a bad one is found before anything is built. An explicit `url`
    must exist and be readable: a HistoryError otherwise, except an older schema,
    which is a note and no check (only `epbench history` commands upgrade a store).
    Without one, $EPBENCH_DB when it names a readable history, else none: the default
    file is not used (a check nobody asked for), and any error with $EPBENCH_DB (a
    missing file, never created; a newer or broken store; a server that does not
    answer) is a note and no check, never the end of the run.
    """
    given = url is not None
    url = url if given else os.environ.get(DB_ENV)
    if not url:
        return None, None
    try:
        with HistoryStore.open_for_reading(existing_db_url(url)):
            pass
    except HistoryTooOld as exc:
        return None, f"the base commit is not checked against the history: {exc}"
    except HistoryError as exc:
        if given:
            raise
        return None, (f"the base commit is not checked against the history: ${DB_ENV} "
                      f"names {redact(url)}, which cannot be read ({exc})")
    return url, None


def base_touches(points: Sequence[SeriesPoint], findings: Sequence[Finding], base: str,
                 is_ancestor: IsAncestor | None = None) -> list[tuple[str, Finding]]:
    """The change points of one series that touch commit `base`, as (kind, finding).

    A base with a point in the series is placed by the store's commit order (the runs'
    created times, as `series` orders points); between a change's last old-level
    commit and its first new-level commit the series holds nothing, so a measured base
    is inside a change point only when it is that first new-level commit. A base with
    no point is placed by `is_ancestor` (git), when given: inside when it descends from
    the last old-level commit and is an ancestor of (or is) the first new-level one.

    BASE_INSIDE: the base is in the change's commit range. BASE_AFTER: the most recent
    change point the base has reached is a regression it is not inside, and the base
    is among the first BASE_AFTER_COMMITS commits of its new level (by position, or
    for an unmeasured base: an ancestor of the last of them); later on, the level is
    established and the regression is not mentioned. BASE_UNKNOWN: git could not say
    where the base is against that change point (a shallow clone, commits of another
    fork): no claim either way.
    """
    commits = [p.commit for p in points]
    stored = match_commit(commits, base) if len(base) >= 4 else None
    if stored is not None:
        pos = commits.index(stored)

        def reached(f: Finding) -> bool | None:
            return pos >= f.index

        def inside(f: Finding) -> bool | None:
            return pos == f.index

        def early(f: Finding) -> bool | None:
            return pos < f.index + BASE_AFTER_COMMITS
    elif is_ancestor is not None:
        def reached(f: Finding) -> bool | None:
            return True if f.after == base else is_ancestor(f.after, base)

        def inside(f: Finding) -> bool | None:
            if base == f.before:
                return False
            after_before = is_ancestor(f.before, base)
            if not after_before:
                return after_before  # False, or None: git does not know
            return True if base == f.after else is_ancestor(base, f.after)

        def early(f: Finding) -> bool | None:
            last = commits[min(f.index + BASE_AFTER_COMMITS, len(commits)) - 1]
            return True if base == last else is_ancestor(base, last)
    else:
        return []
    out: list[tuple[str, Finding]] = []
    latest: Finding | None = None  # the most recent change point the base has reached
    latest_inside = False
    for f in sorted(findings, key=lambda g: g.index):
        here = inside(f)
        if here is None:
            out.append((BASE_UNKNOWN, f))
            continue
        if here:
            out.append((BASE_INSIDE, f))
            latest, latest_inside = f, True
            continue
        past = reached(f)
        if past is None:
            out.append((BASE_UNKNOWN, f))
        elif past:
            latest, latest_inside = f, False
    if latest is not None and latest.regression and not latest_inside:
        soon = early(latest)
        if soon is None:
            out.append((BASE_UNKNOWN, latest))
        elif soon:
            out.append((BASE_AFTER, latest))
    return out


def base_report(store: HistoryStore, base: str, *, cases: Sequence[str], machine: str,
                arms: Sequence[str] = (), is_ancestor: IsAncestor | None = None,
                ) -> BaseHistory:
    """Whether a PR's base commit sits in a known change point, for compare.json.

    Tests every series of `cases` on `machine` (a machine key or class; `arms`: only
    those, else every arm but the control) as `history detect` does, and keeps the
    change points `base_touches` finds. The form is comparison.schema.json's
    `base_history`: what the reports render, from typed fields only. `change_points`
    counts the change points of the series tested; `unplaced`, those git could not
    place an unmeasured base against; `placed_by_git` is true only when git placed
    it against at least one.
    """
    keys = [k for k in store.series_keys() if k[0] in cases and k[2] == machine
            and (not arms or k[1] in arms)]
    touching: list[HistoryFinding] = []
    measured = False
    tested = too_short = change_points = unplaced = 0
    git_placed = False
    for case, arm, key in keys:
        points = series(store, case, arm, key)
        here = match_commit([p.commit for p in points], base) is not None
        measured = measured or here
        try:
            found = find_changes(points, case=case, arm=arm, machine=key)
        except SeriesTooShort:
            too_short += 1
            continue
        tested += 1
        change_points += len(found)
        touches = base_touches(points, found, base, is_ancestor)
        unknown = {id(f) for kind, f in touches if kind == BASE_UNKNOWN}
        unplaced += len(unknown)
        git_placed = git_placed or (not here and is_ancestor is not None
                                    and len(found) > len(unknown))
        for kind, f in touches:
            if kind == BASE_UNKNOWN:
                continue
            touching.append(HistoryFinding(
                kind=kind, case=case, arm=arm, before=f.before, after=f.after,
                direction="regression" if f.regression else "improvement",
                change=stats.finite(f.change.ratio - 1.0),
                lo=stats.finite(f.change.lo - 1.0), hi=stats.finite(f.change.hi - 1.0),
                p=f.p,
            ))
    return BaseHistory(commit=base, machine=machine, measured=measured, series=len(keys),
                       tested=tested, too_short=too_short, change_points=change_points,
                       unplaced=unplaced, placed_by_git=not measured and git_placed,
                       findings=tuple(touching), min_points=changepoints.MIN_POINTS)


def base_report_error(base: str, machine: str, error: str) -> BaseHistory:
    """`base_history` when the history could not be read after the run: the reason, no claim."""
    return BaseHistory(commit=base, machine=machine, measured=False, series=0, tested=0,
                       too_short=0, change_points=0, unplaced=0, placed_by_git=False,
                       findings=(), min_points=changepoints.MIN_POINTS, error=error)
