"""The user's mistakes, as one family of plain exceptions that carry their exit code.

Library code raises these; only the command layer (epbench.cli) turns them into
click's error output, once. Every message ends with what to do about it. Exit codes
live here, once, and the README's table is checked against them by a test.
"""

from __future__ import annotations

# Exit codes a CI job can gate on.
EXIT_OK = 0
EXIT_USER_ERROR = 1  # bad input: unknown case, unloadable library, bad file...
EXIT_USAGE = 2  # click's own usage errors (unknown option, missing argument)
EXIT_GATE = 3  # the idle gate did not pass (`epbench gate`, `--gate strict`)
EXIT_CASE_FAILED = 4  # a case failed verification or its worker crashed
EXIT_REGRESSION = 5  # `compare --fail-on` matched a verdict, `history detect` a change point
EXIT_INTERRUPTED = 130  # Ctrl-C; everything measured so far is on disk

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_USER_ERROR: "bad input (the message says what to fix)",
    EXIT_USAGE: "command-line usage error",
    EXIT_GATE: "the idle gate did not pass (machine busy)",
    EXIT_CASE_FAILED: "a case failed verification or crashed (results kept)",
    EXIT_REGRESSION: ("compare: a verdict matched --fail-on; "
                      "history detect: a regression change point"),
    EXIT_INTERRUPTED: "interrupted (results so far kept)",
}


def disk_full(exc: OSError) -> bool:
    """Whether ``exc`` says the disk (or the user's quota on it) is full."""
    import errno

    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def scratch_remedy(exc: OSError, otherwise: str) -> str:
    """What to do when a file under the temp folder could not be written: make room
    when it is full, else ``otherwise``."""
    import tempfile

    if disk_full(exc):
        return f"free space in {tempfile.gettempdir()} or point TMPDIR at a folder with room"
    return otherwise


class EpbenchError(Exception):
    """A mistake the user can fix; the message says how."""

    exit_code = EXIT_USER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Interrupted(EpbenchError):
    """A Ctrl-C stopped the work before it had anything to report; what ran is kept."""

    exit_code = EXIT_INTERRUPTED


class ResultsError(EpbenchError):
    """A results file that cannot be read or written."""


class GateError(EpbenchError):
    """The idle gate refused to let a round run (policy `strict`)."""

    exit_code = EXIT_GATE


class CaseError(EpbenchError):
    """A case cannot run as specified (bad model, missing dim, unsupported type)."""


class ArmError(EpbenchError):
    """An arm cannot be set up (bad spec, unloadable library, not a plugin EP)."""
