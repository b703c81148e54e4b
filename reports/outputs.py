"""The four files a comparison leaves in its output folder, written in one place.

results.json (the run, as core.results writes every results file), compare.json (the
verdicts, Comparison.to_json: reports/comparison.schema.json), report.md (the PR
comment's markdown) and report.html (the page with plots). `compare RUN.json --out-dir`,
`compare-commits` and the GitHub Action's join of slices (`epbench action --merge-from`)
write them through `write_outputs`; the action's measuring step runs compare-commits.
"""

from __future__ import annotations

from pathlib import Path

from epbench.core.errors import EpbenchError
from epbench.core.model import Results
from epbench.core.results import atomic_write_text, write_results
from epbench.reports import html, render
from epbench.reports.comparison import Comparison

RESULTS_FILE = "results.json"
COMPARE_FILE = "compare.json"  # the verdicts; the PR-comment job reads it from the artifact
REPORT_FILE = "report.md"
PAGE_FILE = "report.html"
OUTPUT_FILES = (RESULTS_FILE, COMPARE_FILE, REPORT_FILE, PAGE_FILE)


def prepare_outputs(out: str | Path, *, overwrite: bool = False) -> Path:
    """Create ``out`` for write_outputs; refuse when it already holds one of the four
    files (or a link by one of their names), unless ``overwrite``."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EpbenchError(f"cannot create {out}: {exc.strerror or exc}; choose another "
                           "--out-dir") from None
    for name in OUTPUT_FILES:
        path = out / name
        if path.is_symlink():  # an atomic replace would not follow it, but say so
            raise EpbenchError(f"{path} is a symbolic link; remove it or choose another "
                               "--out-dir")
        if path.exists() and not overwrite:
            raise EpbenchError(f"{path} already exists; choose another --out-dir or pass "
                               "--overwrite")
    return out


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
