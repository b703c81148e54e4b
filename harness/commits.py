"""Build a plugin EP library from a git commit, in a throw-away worktree, cached by sha.

Never touches the user's working tree or index: each side is checked out with
``git worktree add --detach`` into a temporary folder of its own and removed
afterwards, on failure and on Ctrl-C too. The build runs apart from the harness
(harness.isolation: own environment, interpreter and user; a guard on what it must
not touch). A built library is copied out of its worktree as data, with its sha256,
and kept under the commit's sha and a hash of the build command, so comparing
against the same base again costs nothing; what is measured is a further copy
(`stage_for_measuring`), checked against that sha256.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from epbench.core.errors import EpbenchError
from epbench.core.gitcmd import git_argv, git_env
from epbench.core.paths import cache_dir
from epbench.harness.arms import file_sha256
from epbench.harness.isolation import BuildRun, HarnessGuard, prepare_root, run_build

# Lines of a failed build's output shown to the user.
BUILD_TAIL_LINES = 25
# Beside each cached library: the sha256 of its bytes, recorded when it was copied out.
DIGEST_FILE = "SHA256"


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
    sha256: str  # of the library, recorded when it was built


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(git_argv(repo, *args), capture_output=True, text=True, env=git_env())


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


def _cache_key(sha: str, build: str | None) -> str:
    # "isolated/1": entries made before builds ran apart carry no recorded sha256; a new
    # key leaves them unused rather than trusted.
    recipe = "isolated/1 " + (build if build is not None else "engine.build")
    return f"{sha[:16]}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def _tail(text: str) -> str:
    lines = text.strip().splitlines()[-BUILD_TAIL_LINES:]
    return "\n".join("    " + line for line in lines)


def _library_from(label: str, sha: str, worktree: Path, build: str | None,
                  run: BuildRun) -> Path:
    """The library the build's last line names, checked to be a regular ELF file."""
    shown = build if build is not None else "python -m epbench.engine.build --out DIR"
    if run.timed_out_after_s is not None:
        tail = _tail(run.stderr + run.stdout) or "    (the build printed nothing)"
        raise CommitError(
            f"{label} ({sha[:10]}): the build `{shown}` (run as {run.user}) was still running "
            f"after --build-timeout {run.timed_out_after_s:.0f} s and was stopped, with the "
            "processes it started; raise --build-timeout if it is only slow; last lines of "
            f"its output:\n{tail}"
        )
    if run.returncode != 0:
        tail = _tail(run.stderr + run.stdout) or "    (the build printed nothing)"
        # As an unprivileged user, a build cannot reach tools installed in root's home.
        hint = ("; the build ran as an unprivileged user, so tools under /root (rustup, "
                "conda, pyenv) are out of its reach: install them where every user can run "
                "them" if run.user != "the harness's user" and run.returncode in (126, 127)
                else "")
        raise CommitError(
            f"{label} ({sha[:10]}): the build `{shown}` (run as {run.user}) failed with "
            f"status {run.returncode}{hint}; last lines of its output:\n{tail}"
        )
    lines = [line.strip() for line in run.stdout.splitlines() if line.strip()]
    if not lines:
        raise CommitError(
            f"{label} ({sha[:10]}): the build `{shown}` printed nothing on stdout; its last "
            "line must be the library path (send build logs to stderr: `... >&2`)"
        )
    library = Path(lines[-1])
    if not library.is_absolute():
        library = worktree / library
    # A regular file only: a FIFO or a device named by the build would hang the copy.
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


def _cached(label: str, revision: str, sha: str, lib_dir: Path) -> BuiltSide | None:
    """The cache entry's side, its library checked against the sha256 recorded with it."""
    libraries = sorted(lib_dir.glob("*.so")) if lib_dir.is_dir() else []
    if not libraries:
        return None
    recorded = lib_dir / DIGEST_FILE
    digest = recorded.read_text().strip() if recorded.is_file() else ""
    if file_sha256(str(libraries[0])) != digest:
        raise CommitError(
            f"{label} ({sha[:10]}): the cached library {libraries[0]} does not match the "
            f"sha256 recorded when it was built; remove {lib_dir} and rerun")
    return BuiltSide(label, revision, sha, str(libraries[0]), cached=True, sha256=digest)


def build_commit(repo: Path, label: str, revision: str, sha: str,
                 build: str | None = None, out_dir: Path | None = None,
                 timeout_s: float | None = None) -> BuiltSide:
    """The library for commit ``sha``: from the cache, or built apart from the harness.

    The build runs in a worktree inside its own temporary folder, through
    harness.isolation.run_build (own environment and interpreter, `nobody` under root),
    guarded: if it touched epbench's installation, the epbench cache, ``out_dir`` or the
    repository's hooks, it is refused before anything is measured. Its library is then
    copied out as data, with its sha256 recorded beside the copy. A build still running
    after ``timeout_s`` seconds is stopped (CommitError).
    """
    key = _cache_key(sha, build)
    lib_dir = cache_dir("commits", "libs", key)
    hit = _cached(label, revision, sha, lib_dir)
    if hit is not None:
        return hit
    lib_dir.parent.mkdir(parents=True, exist_ok=True)
    guard = HarnessGuard(out_dir=out_dir, repo=repo)
    # The system's temp folder, not the cache: a build as `nobody` must reach its folder,
    # and the cache may sit in a home that is closed to it.
    # A process the build left that outlived the kill (harness.isolation.KILL_ROUNDS) may
    # still write in the folder: its removal is best effort, so the build's own error stands.
    with tempfile.TemporaryDirectory(prefix=f"epbench-build-{label}-{sha[:10]}-",
                                     ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        worktree = root / "src"
        added = _git(repo, "worktree", "add", "--detach", str(worktree), sha)
        if added.returncode != 0:
            raise CommitError(f"{label}: `git worktree add` failed for {sha[:10]}: "
                              f"{added.stderr.strip()}")
        try:
            if build is None and not (worktree / "engine" / "build.py").is_file():
                raise CommitError(
                    f"{label} ({sha[:10]}) has no bundled engine (engine/build.py) to build: "
                    "pass --build COMMAND, whose last stdout line is your library's path")
            prepare_root(root, engine=build is None)
            run = run_build(root, worktree, build, guard, describe=f"{label} ({sha[:10]})",
                            timeout_s=timeout_s)
            library = _library_from(label, sha, worktree, build, run)
            staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=lib_dir.parent))
            shutil.copyfile(library, staging / library.name)  # bytes only: no mode, no owner
            digest = file_sha256(str(staging / library.name))
            (staging / DIGEST_FILE).write_text(digest + "\n")
            try:
                staging.rename(lib_dir)  # atomic: a cache entry is whole or absent
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)  # another build won the race
        finally:
            remove_worktree(repo, worktree)
    built = _cached(label, revision, sha, lib_dir)  # ours, or the one that won the race
    if built is None:
        raise CommitError(f"{label} ({sha[:10]}): could not keep the built library in "
                          f"{lib_dir}; check that the epbench cache is writable")
    return replace(built, cached=False)


def stage_for_measuring(side: BuiltSide, folder: Path) -> BuiltSide:
    """``side`` with its library copied into ``folder`` (the harness's own, which no build
    ran beside) and checked against the sha256 recorded at build time: the measured file."""
    target = folder / side.label / Path(side.library).name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(side.library, target)
    digest = file_sha256(str(target))
    if digest != side.sha256:
        raise CommitError(
            f"{side.label} ({side.sha[:10]}): the library {side.library} changed after it was "
            "built (its sha256 no longer matches); remove the epbench cache's commits/ "
            "folder and rerun")
    return replace(side, library=str(target))


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
