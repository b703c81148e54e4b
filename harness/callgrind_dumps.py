"""Callgrind's dump files from the instruction-count pass (harness.instructions).

The worker under valgrind reads only each dump's label (`dump_label`); the parent reads
the counts (`arm_counts`), natively, and deletes each dump once read. The worker runs the
EP under test, so a name it sends is read only as a regular file that callgrind names, in
the pass's own folder.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

_TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.MULTILINE)
_TRIGGER = "desc: Trigger: Client Request: "  # the header line that holds a dump's label
_DESC = re.compile("^" + re.escape(_TRIGGER) + "(.+)$", re.MULTILINE)
# A dump callgrind writes on request: callgrind.out.PID.N (ASCII digits only).
_DUMP_NAME = re.compile(r"callgrind\.out\.[0-9]+\.[0-9]+")
# Larger than any dump of one call (about 80 KB): a file the parent will not read whole.
DUMP_MAX_BYTES = 64 << 20


class DumpError(ValueError):
    """A dump that cannot be counted, or a name that is not a dump of the pass."""


def parse_dump(text: str, leave_out: str | None = None) -> tuple[str | None, int]:
    """(label of the dump, instructions) from one callgrind output file.

    ``leave_out``: an object file (as callgrind names it, its real path) whose own
    instructions are not counted: the interpreter's (see harness.instructions).
    """
    label = _DESC.search(text)
    totals = _TOTALS.findall(text)
    if not totals:
        raise DumpError("a callgrind dump without a totals line; rerun with valgrind >= 3.15")
    total = int(totals[-1])
    if leave_out is not None:
        total -= _own_instructions(text, leave_out)
    return (label.group(1).strip() if label else None), total


def _own_instructions(text: str, obj: str) -> int:
    """The instructions of the functions of object file ``obj`` itself (not their callees)
    in a dump written with --compress-strings=no --dump-instr=no."""
    current: str | None = None
    own = 0
    inclusive = False  # the line after calls= is the callee's cost, not the caller's
    for line in text.splitlines():
        if line.startswith("ob="):
            current = line[3:]
        elif line.startswith("calls="):
            inclusive = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if inclusive:
                inclusive = False
            elif current == obj:
                parts = line.split()
                own += int(parts[1]) if len(parts) > 1 else 0
    return own


def dump_label(path: Path) -> str | None:
    """The label a dump was written under, from its header (before its costs)."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith(_TRIGGER):
                return line[len(_TRIGGER):].rstrip("\n")
            if line.startswith(("events:", "ob=", "fn=")):
                return None
    return None


def arm_counts(dumps: dict[Any, Any], dump_dir: Path, leave_out: str) -> dict[str, float]:
    """Each arm's instructions per Run from the dumps named for it (arm -> session ->
    names), read from ``dump_dir`` and deleted; DumpError for anything malformed."""
    per_run = {}
    for key, sessions in dumps.items():
        totals: dict[str, list[int]] = {}
        for session, names in (sessions.items() if isinstance(sessions, dict) else ()):
            for name in (names if isinstance(names, list) else ()):
                text = read_dump(dump_dir, name)
                try:
                    total = parse_dump(text, leave_out)[1]
                except DumpError:
                    raise
                except ValueError as exc:  # a cost that is not a number
                    raise DumpError(f"callgrind dump {name}: {exc}") from None
                totals.setdefault(str(session), []).append(total)
        if not totals:
            raise DumpError(f"the callgrind pass named no dump for arm {key!r}")
        per_run[str(key)] = cheapest_session(totals)
    return per_run


def read_dump(dump_dir: Path, name: object) -> str:
    """One dump the worker named, read and deleted: only a regular file that callgrind
    names, in the pass's folder, not through a link, and not larger than DUMP_MAX_BYTES."""
    if not isinstance(name, str) or not _DUMP_NAME.fullmatch(name):
        raise DumpError(f"the callgrind pass named {name!r}, not one of its dumps")
    path = dump_dir / name
    try:
        # O_NONBLOCK: a FIFO in its place must not block the harness.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise DumpError(f"callgrind dump {name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > DUMP_MAX_BYTES:
            raise DumpError(f"callgrind dump {name} is not a regular file of at most "
                            f"{DUMP_MAX_BYTES} bytes")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(DUMP_MAX_BYTES + 1)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return data.decode("utf-8", "replace")


def cheapest_session(sessions: dict[str, list[int]]) -> float:
    """An arm's instructions per Run: its sessions' median calls, the least of them (see
    harness.instructions.COUNT_SESSIONS)."""
    return float(min(sorted(totals)[(len(totals) - 1) // 2] for totals in sessions.values()))
