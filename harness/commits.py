"""Build a plugin EP library from a git commit, in a throw-away worktree, cached by sha.

Never touches the user's working tree or index: each side is checked out with
``git worktree add --detach`` into the cache folder and removed afterwards, on
failure and on Ctrl-C too. A built library is copied out of its worktree and
kept under the commit's sha and a hash of the build command, so comparing
against the same base again costs nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from epbench.core.errors import EpbenchError
from epbench.core.paths import cache_dir

# Lines of a failed build's output shown to the user.
BUILD_TAIL_LINES = 25


class CommitError(EpbenchError):
    """A revision that cannot be resolved, checked out or built."""


@dataclass(frozen=True)
class BuiltSide:
    """One side of a comparison: its revision, sha and the built library."""

    label: str  # "base" or "head"
    revision: str  # as the user wrote it
    sha: str
    library: str
    cached: bool  # True when the library came from the cache


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def repo_root(repo: str | Path) -> Path:
    """The top of the git repository containing ``repo``."""
    proc = _git(Path(repo), "rev-parse", "--show-toplevel")
    if proc.returncode != 0:
        raise CommitError(f"{str(repo)!r} is not inside a git repository; pass --repo PATH")
    return Path(proc.stdout.strip())


def resolve_revision(repo: Path, revision: str) -> str:
    """The full sha of ``revision``; a clear error if git does not know it."""
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if proc.returncode != 0 or not proc.stdout.strip():
        raise CommitError(
            f"unknown revision {revision!r} in {repo}; check it with `git log --oneline` "
            "(a shallow clone may need `git fetch --unshallow`)"
        )
    return proc.stdout.strip()


def uncommitted_changes(repo: Path) -> bool:
    """True when the working tree has changes that a commit-based comparison will not see."""
    proc = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return proc.returncode == 0 and bool(proc.stdout.strip())


def default_build_command() -> list[str]:
    """The bundled engine's own build entry point, run inside the worktree."""
    return [sys.executable, "-m", "engine.build", "--out"]


def _cache_key(sha: str, build: str | None) -> str:
    recipe = build if build is not None else "engine.build"
    return f"{sha[:16]}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def _tail(text: str) -> str:
    lines = text.strip().splitlines()[-BUILD_TAIL_LINES:]
    return "\n".join("    " + line for line in lines)


def _run_build(label: str, sha: str, worktree: Path, build: str | None, out: Path) -> Path:
    """Run the build in ``worktree``; return the library path its last line names."""
    env = dict(os.environ)
    if build is None:
        # The worktree's own engine/ must win over the installed one.
        env["PYTHONPATH"] = str(worktree) + os.pathsep + env.get("PYTHONPATH", "")
        command: list[str] | str = [*default_build_command(), str(out)]
        shown = "python -m engine.build --out DIR"
    else:
        command = build
        shown = build
    proc = subprocess.run(command, cwd=worktree, env=env, capture_output=True, text=True,
                          shell=build is not None, executable="/bin/bash" if build else None)
    if proc.returncode != 0:
        raise CommitError(
            f"{label} ({sha[:10]}): the build `{shown}` failed with status {proc.returncode}; "
            f"last lines of its output:\n{_tail(proc.stderr + proc.stdout)}"
        )
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise CommitError(
            f"{label} ({sha[:10]}): the build `{shown}` printed nothing on stdout; its last "
            "line must be the library path (send build logs to stderr: `... >&2`)"
        )
    library = Path(lines[-1])
    if not library.is_absolute():
        library = worktree / library
    if not library.is_file():
        raise CommitError(
            f"{label} ({sha[:10]}): the build's last line {lines[-1]!r} is not a file; the "
            "last line printed must be the path of the built library"
        )
    with open(library, "rb") as fh:
        if fh.read(4) != b"\x7fELF":
            raise CommitError(
                f"{label} ({sha[:10]}): {lines[-1]!r} is not a shared library (no ELF header); "
                "the last line printed must be the path of the built library"
            )
    return library


def build_commit(repo: Path, label: str, revision: str, sha: str,
                 build: str | None = None) -> BuiltSide:
    """The library for commit ``sha``: from the cache, or built in a temporary worktree."""
    key = _cache_key(sha, build)
    lib_dir = cache_dir("commits", "libs", key)
    cached = sorted(lib_dir.glob("*.so")) if lib_dir.is_dir() else []
    if cached:
        return BuiltSide(label, revision, sha, str(cached[0]), cached=True)
    worktrees = cache_dir("commits", "worktrees")
    worktrees.mkdir(parents=True, exist_ok=True)
    lib_dir.parent.mkdir(parents=True, exist_ok=True)
    worktree = Path(tempfile.mkdtemp(prefix=f"{label}-{sha[:10]}-", dir=worktrees))
    worktree.rmdir()  # git creates it
    added = _git(repo, "worktree", "add", "--detach", str(worktree), sha)
    if added.returncode != 0:
        raise CommitError(f"{label}: `git worktree add` failed for {sha[:10]}: "
                          f"{added.stderr.strip()}")
    try:
        with tempfile.TemporaryDirectory(prefix="epbench-build-") as out:
            library = _run_build(label, sha, worktree, build, Path(out))
            staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=lib_dir.parent))
            shutil.copy2(library, staging / library.name)
            try:
                staging.rename(lib_dir)  # atomic: a cache entry is whole or absent
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)  # another build won the race
        return BuiltSide(label, revision, sha, str(next(lib_dir.glob("*.so"))), cached=False)
    finally:
        remove_worktree(repo, worktree)


def remove_worktree(repo: Path, worktree: Path) -> None:
    """Remove a worktree and its administrative entry; never raises."""
    _git(repo, "worktree", "remove", "--force", str(worktree))
    shutil.rmtree(worktree, ignore_errors=True)
    _git(repo, "worktree", "prune")


def is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool | None:
    """Whether commit `ancestor` is an ancestor of (or is) `descendant`; None when git
    cannot tell (an unknown commit, e.g. in a shallow clone)."""
    proc = _git(repo, "merge-base", "--is-ancestor", ancestor, descendant)
    return {0: True, 1: False}.get(proc.returncode)
