"""The report of one run (report.md beside results.json), rendered with jinja2.

Reads only the results document; the numbers come from reports.summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TEMPLATE = "run_report.md.j2"


def render_run_report(doc: dict[str, Any]) -> str:
    """Markdown: what was measured, per case per arm, the decomposition, the gate, the host."""
    import jinja2

    from reports.render import format_ns, format_ratio_ci
    from reports.summary import summarize

    summary = summarize(doc)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True, autoescape=False,
    )
    env.filters["ns"] = format_ns
    env.globals["ratio_ci"] = format_ratio_ci
    failed = {n: c for n, c in doc["cases"].items() if c["status"] != "ok"}
    return env.get_template(TEMPLATE).render(
        doc=doc, summary=summary, failed=failed,
        arms=list(doc["arms"]), control=doc.get("control", "ort"),
    )


def write_run_report(doc: dict[str, Any], out_dir: Path) -> str:
    """Write OUT/report.md and return the terminal summary table."""
    from harness.results import atomic_write_text
    from reports.summary import render_summary_table, summarize

    atomic_write_text(Path(out_dir) / "report.md", render_run_report(doc))
    return render_summary_table(summarize(doc))
