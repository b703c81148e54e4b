"""The PR comment's body as GitHub takes it: within its length limit, marker kept.

fit_comment_body cuts an oversize body at a line, closes what the cut left open
(a code fence, <details>) and says where the full report is; reports.bot.sticky_comment
posts what it returns.
"""

from __future__ import annotations

import re

from epbench.reports.sticky import STICKY_MARKER

# GitHub refuses issue comments longer than this ("body is too long (maximum is
# 65536 characters)", HTTP 422).
COMMENT_LIMIT = 65536


def comment_length(text: str) -> int:
    """Length as counted against COMMENT_LIMIT.

    Counted in UTF-16 code units, which is never less than the number of code
    points: whichever of the two GitHub counts, a body within this length fits.
    """
    return len(text.encode("utf-16-le")) // 2


def _prefix_within(text: str, budget: int) -> str:
    used = 0
    for index, char in enumerate(text):
        used += 2 if ord(char) > 0xFFFF else 1
        if used > budget:
            return text[:index]
    return text


def _closers(text: str) -> str:
    """What must follow a cut so the rest of the markdown still renders."""
    in_fence = False
    for line in text.splitlines():
        if line.lstrip(" ").startswith("```"):
            in_fence = not in_fence
    # A <details> inside a code span (artifact text, shown inert) is no block to close.
    tags = re.sub(r"`[^`\n]*`", "", text)
    open_details = max(0, tags.count("<details") - tags.count("</details>"))
    return ("\n```" if in_fence else "") + "\n</details>" * open_details


def _artifact_pointer(artifact_hint: str | None) -> str:
    if not artifact_hint:
        return "in this workflow run's artifacts"
    if artifact_hint.startswith(("https://", "http://")):
        return f"in the [results artifact]({artifact_hint})"
    return artifact_hint


def fit_comment_body(
    body: str,
    *,
    marker: str = STICKY_MARKER,
    limit: int = COMMENT_LIMIT,
    artifact_hint: str | None = None,
) -> tuple[str, bool]:
    """Return (text to post, whether it was trimmed).

    The text always carries `marker` (prepended when the body lacks it, kept
    when a cut would lose it) and fits `limit`. An oversize body is cut at a
    line boundary, open code fences and <details> are closed, and a note says
    how much is shown and where the full report is. Never refuses a body.
    """
    if marker not in body:
        body = f"{marker}\n{body}"
    total = comment_length(body)
    if total <= limit:
        return body, False

    def note(shown: int) -> str:
        return (
            "\n\n---\n**Trimmed:** this comment was cut to fit GitHub's "
            f"{limit}-character limit ({shown} of {total} characters shown). "
            f"The full report is {_artifact_pointer(artifact_hint)}.\n"
        )

    budget = limit - comment_length(note(total)) - comment_length(marker) - 1
    while True:
        head = _prefix_within(body, max(0, budget))
        # Whole lines only: a line cut short could leave a code span open, and the
        # artifact's text after its backtick would render live (an oversize line is
        # dropped whole, however much that loses).
        newline = head.rfind("\n")
        head = head[: newline + 1] if newline >= 0 else ""
        head = head.rstrip("\n") + _closers(head)
        if marker not in head:
            head = f"{marker}\n{head}"
        text = head + note(comment_length(head))
        overshoot = comment_length(text) - limit
        if overshoot <= 0 or budget <= 0:
            return text, True
        budget -= overshoot  # the closers or the marker did not fit: cut that much more
