"""Building each side of a two-commit comparison in throw-away worktrees."""

from __future__ import annotations

from pathlib import Path

import pytest

from epbench.harness.commits import (
    CommitError,
    build_commit,
    repo_root,
    resolve_revision,
    uncommitted_changes,
)
from tests.support.gitrepo import git, init_repo


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    root = init_repo(tmp_path / "repo")
    # A stand-in "library": any ELF file will do for the build plumbing.
    (root / "build.sh").write_text(
        "set -e\necho building >&2\ncp /bin/true lib.so\necho lib.so\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    (root / "note.txt").write_text("second")
    git(root, "add", ".")
    git(root, "commit", "-qm", "second")
    return root


def worktrees(repo: Path) -> list[str]:
    return [x for x in git(repo, "worktree", "list", "--porcelain").splitlines()
            if x.startswith("worktree ")]


def test_resolves_revisions_and_refuses_unknown_ones(repo) -> None:
    assert resolve_revision(repo, "HEAD~1") == git(repo, "rev-parse", "HEAD~1")
    with pytest.raises(CommitError, match="unknown revision 'nope'"):
        resolve_revision(repo, "nope")
    with pytest.raises(CommitError, match="not inside a git repository"):
        repo_root(repo.parent)


def test_builds_in_a_worktree_caches_by_sha_and_cleans_up(repo) -> None:
    sha = resolve_revision(repo, "HEAD")
    status_before = git(repo, "status", "--porcelain")
    first = build_commit(repo, "head", "HEAD", sha, build="bash build.sh")
    assert first.cached is False
    assert Path(first.library).read_bytes() == Path("/bin/true").read_bytes()
    assert worktrees(repo) == [f"worktree {repo}"]  # the temporary worktree is gone
    assert git(repo, "status", "--porcelain") == status_before  # user's tree untouched
    again = build_commit(repo, "head", "HEAD", sha, build="bash build.sh")
    assert again.cached is True and again.library == first.library
    # Another build command is another cache entry.
    other = build_commit(repo, "head", "HEAD", sha, build="bash build.sh >/dev/null; echo lib.so")
    assert other.cached is False and other.library != first.library


def test_failed_build_names_the_side_shows_the_tail_and_cleans_up(repo) -> None:
    sha = resolve_revision(repo, "HEAD")
    with pytest.raises(CommitError) as info:
        build_commit(repo, "base", "HEAD", sha, build="echo compiler exploded >&2; exit 3")
    message = str(info.value)
    assert message.startswith(f"base ({sha[:10]})")
    assert "status 3" in message and "compiler exploded" in message
    assert worktrees(repo) == [f"worktree {repo}"]


@pytest.mark.parametrize(
    ("build", "needle"),
    [("echo", "printed nothing"), ("echo no/such/lib.so", "is not a file"),
     ("echo build.sh", "not a shared library")],
)
def test_last_line_must_be_a_library(repo, build, needle) -> None:
    sha = resolve_revision(repo, "HEAD")
    with pytest.raises(CommitError, match=needle):
        build_commit(repo, "head", "HEAD", sha, build=build)
    assert worktrees(repo) == [f"worktree {repo}"]


def test_interrupt_during_the_build_removes_the_worktree(repo, monkeypatch) -> None:
    import epbench.harness.commits as commits

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(commits, "run_build", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_commit(repo, "head", "HEAD", resolve_revision(repo, "HEAD"), build="x")
    assert worktrees(repo) == [f"worktree {repo}"]


def test_uncommitted_changes_are_noticed(repo) -> None:
    assert uncommitted_changes(repo) is False
    (repo / "note.txt").write_text("edited")
    assert uncommitted_changes(repo) is True
