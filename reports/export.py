"""Export a results file to the formats other tools read.

- pyperf: one BenchmarkSuite per arm (one benchmark per case, one pyperf run per
  round whose single value is that round's median time per Run, in seconds), so
  `python -m pyperf compare_to OUT.ort.json OUT.<arm>.json` works. Rounds, not
  raw iterations, because the round is the unit of replication.
- CSV: a tidy table, one row per case x arm x round (pandas).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from epbench.core.errors import EpbenchError
from epbench.core.model import Results
from epbench.reports import stats

if TYPE_CHECKING:
    import pandas as pd


class ExportError(EpbenchError):
    """An export that cannot be written."""


# `--out -`: the CSV goes to standard output (pyperf's one file per arm cannot).
STDOUT = "-"


def _prepare(path: Path) -> None:
    """Create the folder `path` goes in, or say in one line why it cannot be."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create {path.parent}: {exc.strerror or exc}; "
                          "choose another --out") from None


def _cannot_write(path: Path, exc: OSError) -> ExportError:
    # pandas raises OSError with no strerror for some failures: say the message itself.
    return ExportError(f"cannot write {path}: {exc.strerror or exc}; choose another --out")


def arm_slug(arm: str) -> str:
    """A file-name-safe form of an arm key: plugin:/x/libep.so -> plugin_x_libep.so."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", arm).strip("_") or "arm"


def pyperf_paths(out: str | Path, arms: list[str]) -> dict[str, Path]:
    """OUT.json -> {arm: OUT.<slug>.json}; refuses two arms mapping to one file."""
    out = Path(out)
    stem = out.name[: -len(".json")] if out.name.endswith(".json") else out.name
    paths = {arm: out.with_name(f"{stem}.{arm_slug(arm)}.json") for arm in arms}
    if len(set(paths.values())) != len(paths):
        raise ExportError(
            "two arm keys give the same file name; give the arms distinct name= aliases"
        )
    return paths


def to_pyperf(
    doc: Results, out: str | Path, *, overwrite: bool = False
) -> dict[str, Path]:
    """Write one pyperf suite per arm; return {arm: path}. Cases without rounds are skipped."""
    import pyperf

    if str(out) == STDOUT:
        raise ExportError("pyperf export writes one file per arm and cannot go to standard "
                          "output; pass --out FILE.json (or --format csv --out -)")
    arms = list(doc.arms)
    paths = pyperf_paths(out, arms)
    existing = [p for p in paths.values() if p.exists()]
    if existing and not overwrite:
        raise ExportError(f"{existing[0]} already exists; pass --overwrite or choose another name")
    host = doc.host
    for arm, path in paths.items():
        benchmarks = []
        for name, case in doc.cases.items():
            medians = stats.round_medians(case, arm)
            runs = [
                pyperf.Run(
                    [float(v) / 1e9],
                    metadata={
                        "name": name, "unit": "second", "loops": 1,
                        "epbench_arm": arm, "epbench_round": i,
                        "cpu_model_name": str(host.cpu_model or "unknown"),
                        "hostname": str(host.key or "unknown"),
                    },
                    collect_metadata=False,
                )
                for i, v in enumerate(medians) if v == v and v > 0  # skip NaN rounds
            ]
            if runs:
                benchmarks.append(pyperf.Benchmark(runs))
        if not benchmarks:
            raise ExportError(f"arm {arm!r} has no measured rounds; nothing to export")
        _prepare(path)
        try:
            pyperf.BenchmarkSuite(benchmarks).dump(str(path), replace=True)
        except OSError as exc:
            raise _cannot_write(path, exc) from None
    return paths


def tidy_frame(doc: Results) -> pd.DataFrame:
    """One row per case x arm x round: median, sample count, position in the order, quiet."""
    import pandas as pd

    rows = []
    for name, case in doc.cases.items():
        for rnd in case.rounds:
            order = rnd.order
            for arm, summary in rnd.summary_ns.items():
                rows.append({
                    "case": name, "arm": arm, "round": rnd.index,
                    "process": rnd.process, "session": rnd.session,
                    "position": order.index(arm) if arm in order else None,
                    "quiet": bool(rnd.quiet),
                    "median_ns": summary.median, "min_ns": summary.min,
                    "samples": int(summary.n or 0),
                    "status": case.status,
                })
    columns = ["case", "arm", "round", "process", "session", "position", "quiet", "median_ns",
               "min_ns", "samples", "status"]
    return pd.DataFrame(rows, columns=columns)


def to_csv(doc: Results, out: str | Path, *, overwrite: bool = False) -> Path | None:
    """Write the tidy table to `out` (its folder created), or to stdout for `-` (None)."""
    if str(out) == STDOUT:
        tidy_frame(doc).to_csv(sys.stdout, index=False)
        return None
    out = Path(out)
    if out.exists() and not overwrite:
        raise ExportError(f"{out} already exists; pass --overwrite or choose another name")
    _prepare(out)
    try:
        tidy_frame(doc).to_csv(out, index=False)
    except OSError as exc:
        raise _cannot_write(out, exc) from None
    return out
