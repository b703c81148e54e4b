"""The one mapping from what a command produced to the exit code a CI job gates on.

The codes themselves live in epbench.core.errors (the README's table is checked
against them); here is only which outcome gets which.
"""

from __future__ import annotations

from epbench.core.errors import (
    EXIT_CASE_FAILED,
    EXIT_GATE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REGRESSION,
)
from epbench.core.model import Results
from epbench.reports.comparison import FAIL_ON, CompareError, Comparison


def exit_code_for(*, run: Results | None = None,
                  comparison: Comparison | None = None,
                  fail_on: str | None = None) -> tuple[int, str | None]:
    """The exit code and the line that explains it, for a run and/or a comparison.

    A run that was interrupted (130) or has a case that did not finish (3 when the
    idle gate stopped it, else 4) outranks the verdicts; then a verdict matching
    `fail_on` gives 5.
    """
    if run is not None:
        if run.interrupted:
            return EXIT_INTERRUPTED, "interrupted: everything measured so far is on disk"
        # A case whose process crashed kept the others' rounds, but the crash is the EP's.
        bad = [n for n, c in run.cases.items() if not c.ok or c.error_kind == "crash"]
        if bad:
            gated = any(run.cases[n].error_kind == "gate" for n in bad)
            return (EXIT_GATE if gated else EXIT_CASE_FAILED,
                    f"{len(bad)} case(s) did not finish: {', '.join(bad)}")
    if comparison is not None and fail_on is not None:
        if fail_on not in FAIL_ON:
            raise CompareError(f"--fail-on must be one of {', '.join(FAIL_ON)}")
        hits = [row.case for row in comparison.cases if row.verdict in FAIL_ON[fail_on]]
        if hits:
            return EXIT_REGRESSION, f"{len(hits)} case(s) matched --fail-on {fail_on}"
    return EXIT_OK, None
