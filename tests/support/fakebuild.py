"""A stand-in for harness.commits.build_commit, for tests that fake the runner too.

compare-commits measures a checked copy of each side's library (stage_for_measuring),
so a fake side needs a real file whose sha256 is recorded: a copy of /bin/true.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from epbench.harness.arms import file_sha256
from epbench.harness.commits import BuiltSide

# Removed when the test session's interpreter collects it.
_FOLDER = tempfile.TemporaryDirectory(prefix="epbench-test-libs-")


def fake_side(label: str, rev: str, sha: str) -> BuiltSide:
    """A cached side whose library is a copy of /bin/true, its sha256 recorded."""
    library = Path(_FOLDER.name) / f"{label}.so"
    shutil.copyfile("/bin/true", library)
    return BuiltSide(label, rev, sha, str(library), cached=True,
                     sha256=file_sha256(str(library)))


def fake_build_commit(repo: Path, label: str, rev: str, sha: str, build: str | None = None,
                      out_dir: Path | None = None, timeout_s: float | None = None) -> BuiltSide:
    """build_commit's signature, building nothing."""
    return fake_side(label, rev, sha)
