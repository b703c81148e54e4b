"""One cache root: every folder epbench keeps between runs honours EPBENCH_CACHE_DIR.

The users are the noise profiles (reports/calibrate.py), ORT's headers (engine/build.py,
also loaded standalone by setup.py), the callgrind helper (harness/instructions.py) and
the two-commit libraries (harness/commits.py; their worktrees sit apart). Each is pointed
at a cache root while XDG_CACHE_HOME points elsewhere: nothing may land under XDG.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from epbench.core.paths import cache_dir
from epbench.engine import build as engine_build
from epbench.harness import instructions
from epbench.harness.commits import build_commit, resolve_revision
from epbench.harness.isolation import ENGINE_BUILD
from epbench.reports import calibrate
from tests.support.gitrepo import git, init_repo
from tests.support.staged import checkout_modules

ROOT = Path(__file__).resolve().parent.parent
HEADERS = f"{engine_build.NPM_PACKAGE}-{engine_build.NPM_VERSION}"


@pytest.fixture
def roots(tmp_path, monkeypatch) -> tuple[Path, Path]:
    cache, xdg = tmp_path / "epbench-cache", tmp_path / "xdg"
    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(cache))
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.delenv("ORT_INCLUDE_DIR", raising=False)
    return cache, xdg


def _fake_headers(cache: Path) -> Path:
    folder = cache / "ort-headers" / HEADERS
    folder.mkdir(parents=True)
    (folder / engine_build.MAIN_HEADER).write_text("/* stand-in */\n")
    return folder


def test_the_rule_itself(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("EPBENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir("a", "b") == tmp_path / "xdg" / "epbench" / "a" / "b"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "epbench"
    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir("x") == tmp_path / "mine" / "x"


def test_profiles(roots) -> None:
    cache, _ = roots
    assert calibrate.default_profile_path("host0001") == cache / "profiles" / "host0001.json"


def test_ort_headers(roots) -> None:
    cache, xdg = roots
    folder = _fake_headers(cache)
    assert engine_build.ort_include_dir() == folder
    assert not xdg.exists()


def test_ort_headers_when_setup_py_loads_the_build_by_path(roots) -> None:
    # As in setuptools' isolated build env: no site-packages (-S, so no editable epbench),
    # only the source tree that setup.py puts on sys.path.
    cache, _ = roots
    folder = _fake_headers(cache)
    code = ("import importlib.util, sys\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "spec = importlib.util.spec_from_file_location('b', "
            f"{str(ROOT / 'engine' / 'build.py')!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "print(m.ort_include_dir())\n")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         cwd=cache.parent, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(folder)


def test_ort_headers_when_another_commit_builds_its_engine(roots) -> None:
    # harness/isolation.py runs the engine's build in the commit's worktree, which nothing
    # installed (-S: no site-packages), with the worktree first on PYTHONPATH.
    cache, _ = roots
    folder = _fake_headers(cache)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-S", "-c", ENGINE_BUILD, "--headers-only"],
                         capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(folder)


@pytest.mark.skipif(shutil.which("cc") is None or not instructions.CALLGRIND_HEADER.is_file(),
                    reason="no C compiler or valgrind headers")
def test_callgrind_helper(roots) -> None:
    cache, xdg = roots
    assert instructions.helper_library().parent == cache / "callgrind"
    assert not xdg.exists()


def test_commit_worktrees_and_libraries(roots, tmp_path) -> None:
    cache, xdg = roots
    repo = init_repo(tmp_path / "repo")
    # The build says where it ran, and which cache it was given, in its "library".
    (repo / "build.sh").write_text(
        "set -e\ncp /bin/true lib.so\n"
        "printf '\\n%s\\n%s\\n' \"$PWD\" \"$EPBENCH_CACHE_DIR\" >> lib.so\necho lib.so\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    sha = resolve_revision(repo, "HEAD")
    side = build_commit(repo, "base", "HEAD", sha, build="bash build.sh")
    assert Path(side.library).parent.parent == cache / "commits" / "libs"
    # The worktree and the build's own cache sit in its folder apart (harness/isolation.py),
    # outside both roots.
    said = Path(side.library).read_bytes().decode(errors="replace")
    worktree, its_cache = said.split("\n")[-3:-1]
    assert Path(worktree).name == "src" and Path(its_cache) == Path(worktree).parent / "cache"
    assert cache not in Path(worktree).parents
    assert not xdg.exists()


def test_no_other_module_reads_the_cache_variables() -> None:
    # The rule lives in epbench/core/paths.py only; a second copy would drift from it.
    # A string that is exactly one of these names is a read (help texts only mention them).
    names = {"XDG_CACHE_HOME", "EPBENCH_CACHE_DIR", ".cache"}
    sources = list(checkout_modules().values())
    assert len(sources) > 90
    readers = sorted({str(p.relative_to(ROOT)) for p in sources
                      for node in ast.walk(ast.parse(p.read_text()))
                      if isinstance(node, ast.Constant) and node.value in names})
    assert readers == ["epbench/core/paths.py"]
