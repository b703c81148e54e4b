"""GitHub Actions annotations for flagged cases: `::error` and `::warning` workflow commands.

A line `::warning title=T::MESSAGE` on a step's output becomes an annotation on the
run's summary page and on the pull request's "Checks" tab, so a regression is seen
without opening the log. Which verdict makes which annotation:

  🔴 alert, ❌ failed  -> ::error    (both make `--fail-on alert` fail the job)
  ⚠️ regression        -> ::warning
  every other verdict  -> nothing

Escaping follows GitHub's workflow-command format (as @actions/core writes it): in the
message `%`, CR and LF become %25, %0D, %0A; in a property value `:` and `,` become
%3A and %2C as well, since they separate the properties. Without it a case name like
`model:resnet` would end the title early, and a newline in a reason would end the
command and start an arbitrary new one.
"""

from __future__ import annotations

from epbench.reports.comparison import VERDICTS, Comparison
from epbench.reports.render import format_ci, format_pct, format_share

# verdict -> workflow command
COMMANDS: dict[str, str] = {"alert": "error", "failed": "error", "regression": "warning"}


def escape_data(text: str) -> str:
    """A workflow command's message: `%`, CR and LF escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: the message escapes plus `:` and `,`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **properties: str) -> str:
    """One `::command k=v,k=v::message` line, every part escaped."""
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{command}{' ' + props if props else ''}::{escape_data(message)}"


def annotation_lines(comparison: Comparison) -> list[str]:
    """One workflow command per flagged case of a comparison, worst first."""
    run_level = comparison.settings.confidence
    lines = []
    for row in comparison.cases:
        command = COMMANDS.get(row.verdict)
        if command is None:
            continue
        emoji, words = VERDICTS[row.verdict]
        if row.change is None:
            detail = row.reason or "no measurement"
        else:
            # A flagged case's interval is at its false-coverage-adjusted level (ci_level).
            confidence = f"{(row.ci_level or run_level) * 100:.4g} %"
            detail = (
                f"{format_pct(row.change)} ({confidence} CI {format_ci(row.ci)}), "
                f"threshold {format_share(row.threshold)}"
            )
        lines.append(workflow_command(
            command, f"{emoji} {row.case} {words}: {detail}",
            title=f"epbench: {row.case} {words}",
        ))
    return lines
