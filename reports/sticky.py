"""The hidden first line of the PR comment, by which the bot finds its one comment.

It lives apart so that the renderer, which writes it, need not import the bot
(reports.bot.sticky_comment), which searches for it.
"""

from __future__ import annotations

STICKY_MARKER = "<!-- epbench:sticky-comment -->"
