"""For tests that Ctrl-C a child process."""

from __future__ import annotations

import signal


def sigint_at_its_default() -> None:
    """A ``preexec_fn``: SIGINT at its default in the child, as a terminal's Ctrl-C finds it.

    A shell without job control starts a background job with SIGINT ignored, and an ignored
    signal stays ignored across exec: a suite run that way (`.ci/run &` in a script) saw
    these tests' children never interrupted.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
