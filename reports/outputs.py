"""The four files a comparison leaves in its output folder, written in one place.

results.json (the run, as core.results writes every results file), compare.json (the
verdicts, Comparison.to_json: reports/comparison.schema.json), report.md (the PR
comment's markdown) and report.html (the page with plots). `compare-commits` writes
them, and the GitHub Action reads them from its folder.
"""

from __future__ import annotations

from pathlib import Path

from epbench.core.model import Results
from epbench.core.results import atomic_write_text, write_results
from epbench.reports import html, render
from epbench.reports.comparison import Comparison

RESULTS_FILE = "results.json"
COMPARE_FILE = "compare.json"  # the verdicts; the PR-comment job reads it from the artifact
REPORT_FILE = "report.md"
PAGE_FILE = "report.html"
OUTPUT_FILES = (RESULTS_FILE, COMPARE_FILE, REPORT_FILE, PAGE_FILE)


def write_outputs(out: str | Path, results: Results, comparison: Comparison) -> list[Path]:
    """Write the run, its comparison and both reports into ``out`` (which must exist);
    return the paths, in OUTPUT_FILES' order. Each file is replaced atomically."""
    out = Path(out)
    paths = [out / name for name in OUTPUT_FILES]
    write_results(paths[0], results.to_dict())
    atomic_write_text(paths[1], comparison.to_json())
    atomic_write_text(paths[2], render.render_markdown(comparison))
    atomic_write_text(paths[3], html.render_html(doc=results, comparison=comparison,
                                                 source=str(out)))
    return paths
