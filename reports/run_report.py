"""The report of one run (no comparison): what `epbench run` writes next to its results.

Numbers come from reports.summary (the same as `epbench summary`); the markdown
comes from templates/run_report.md.j2.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from epbench.core.model import Results
from epbench.core.results import atomic_write_text
from epbench.reports.render import (
    drift_sentence,
    environment,
    inert,
    render_summary_table,
    run_drifts,
)
from epbench.reports.summary import RunSummary, summarize

REPORT_NAME = "report.md"


def render_run_report(doc: Results, summary: RunSummary | None = None) -> str:
    """The run as markdown: per case p50 and ratio to ort, families, gate, host, arms."""

    summary = summary if summary is not None else summarize(doc)
    control = summary.control
    cases = []
    for name, case in summary.cases.items():
        arms = sorted(case.arms.items(), key=lambda item: item[0] != control)
        cases.append({"name": name, **asdict(case), "arm_rows": arms})
    return environment().get_template("run_report.md.j2").render(
        doc=doc, s=summary, cases=cases, control=control, cfg=doc.config,
        host=doc.host.to_dict(),
        drift=drift_sentence(run_drifts(summary), inert),
        failures=[c for c in cases if c["status"] != "ok" or not c["verified"]],
    )


def write_run_report(doc: Results, out_dir: str | Path) -> str:
    """Write OUT/report.md and return the summary table for the terminal."""

    summary = summarize(doc)
    path = Path(out_dir) / REPORT_NAME
    atomic_write_text(path, render_run_report(doc, summary))
    return render_summary_table(summary) + f"\nreport: {path}"
