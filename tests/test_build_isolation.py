"""A commit's build runs apart from the harness that measures it (issue 45).

Each test builds a throw-away commit whose build misbehaves the way a hostile pull
request's could: it writes into epbench's installed package, the output folder or the
epbench cache, reads the harness's environment, runs the harness's Python, or leaves a
process behind. The "library" is any ELF file; where a test needs to see what the
build saw, the build appends it to that file, which comes back as data.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import tomllib
from click.testing import CliRunner

import epbench
from epbench.cli.main import cli
from epbench.core.errors import EXIT_USER_ERROR
from epbench.harness import isolation
from epbench.harness.commits import (
    CommitError,
    build_commit,
    stage_for_measuring,
)
from tests.support.gitrepo import git, init_repo

PACKAGE = Path(epbench.__file__).resolve().parent
# The build's output, in the build's own folder: any ELF will do for the plumbing.
BENIGN = "set -e\ncp /bin/true lib.so\necho lib.so\n"


def _commit(root: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", ".")
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return init_repo(tmp_path / "repo")


@pytest.fixture
def planted():
    """A file name in epbench's installed package that a hostile build tries to create;
    removed afterwards whatever happened, so a failing test leaves the package as it was.
    A test using it is `serial`: while the file exists, every build's guard refuses."""
    path = PACKAGE / f"_planted_by_a_build_{os.getpid()}.py"
    yield path
    path.unlink(missing_ok=True)


def _hostile_build(planted: Path, out: Path) -> str:
    # Each write may fail (as `nobody`): the script goes on and reports a library anyway.
    return (f"echo 'FORGED = True' > {planted} 2>/dev/null\n"
            f"mkdir -p {out} 2>/dev/null\n"
            f"echo forged > {out}/compare.json 2>/dev/null\n"
            + BENIGN)


@pytest.mark.serial  # plants a file in the package: other tests' builds would see it
def test_a_hostile_build_changes_neither_the_harness_nor_the_output_folder(
        repo, tmp_path, planted) -> None:
    """Whatever protects the harness here (`nobody` under root, else the guard), both writes
    fail, or the build is refused; what the folder held is kept either way."""
    out = tmp_path / "bench-out"
    out.mkdir()
    (out / "results.jsonl").write_text("{}\n")  # what a run had measured so far
    sha = _commit(repo, {"build.sh": _hostile_build(planted, out)}, "hostile")
    try:
        build_commit(repo, "head", "HEAD", sha, build="bash build.sh", out_dir=out)
    except isolation.BuildIsolationError as exc:
        assert "refusing to measure" in str(exc)
    else:
        assert not planted.exists()
        assert sorted(p.name for p in out.iterdir()) == ["results.jsonl"]
    assert (out / "results.jsonl").read_text() == "{}\n"


@pytest.mark.serial  # plants a file in the package: other tests' builds would see it
def test_as_root_the_build_runs_as_nobody_and_its_writes_fail(repo, tmp_path,
                                                              planted) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("not root, or no setpriv: builds run as the harness's user here")
    out = tmp_path / "bench-out"
    sha = _commit(repo, {"build.sh": _hostile_build(planted, out)
                         + "echo >> lib.so\nid -u >> lib.so\n"}, "hostile")
    side = build_commit(repo, "head", "HEAD", sha, build="bash build.sh", out_dir=out)
    assert Path(side.library).read_bytes().endswith(b"\n65534\n")  # nobody's uid
    assert not planted.exists() and not out.exists()


def test_the_build_gets_its_own_copy_of_ort_include_dir(repo, tmp_path, monkeypatch) -> None:
    # The harness's folder sits in a tmp_path closed to other users (`nobody`, under root).
    given = tmp_path / "include"
    given.mkdir()
    (given / "onnxruntime_c_api.h").write_text("/* headers */\n")
    monkeypatch.setenv("ORT_INCLUDE_DIR", str(given))
    sha = _commit(repo, {"build.sh": BENIGN.replace(
        "echo lib.so", 'echo "$ORT_INCLUDE_DIR" >> lib.so\n'
        'cat "$ORT_INCLUDE_DIR/onnxruntime_c_api.h" >> lib.so\n'
        'echo tampered > "$ORT_INCLUDE_DIR/onnxruntime_c_api.h"\necho lib.so')}, "include")
    side = build_commit(repo, "head", "HEAD", sha, build="bash build.sh",
                        out_dir=tmp_path / "out")
    seen, header = Path(side.library).read_bytes().decode(errors="replace").splitlines()[-2:]
    assert header == "/* headers */"
    assert Path(seen).name == isolation.INCLUDE_COPY and Path(seen).parent != given.parent
    assert (given / "onnxruntime_c_api.h").read_text() == "/* headers */\n"  # the harness's


@pytest.mark.serial  # plants a file in the package: other tests' builds would see it
def test_the_guard_refuses_a_build_that_wrote_into_the_harness(repo, tmp_path, planted,
                                                               monkeypatch) -> None:
    """A build running as the harness's own user (not root, as in GitHub's runners) can
    write; the guard sees it and refuses before anything is measured."""
    monkeypatch.setattr(isolation, "build_user", lambda: None)
    out = tmp_path / "bench-out"
    out.mkdir()
    sha = _commit(repo, {"build.sh": _hostile_build(planted, out)}, "hostile")
    with pytest.raises(isolation.BuildIsolationError) as info:
        build_commit(repo, "head", "HEAD", sha, build="bash build.sh", out_dir=out)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"head ({sha[:10]}): its build changed 2 file(s) it must not "
                              "touch (")
    assert str(planted) in message and str(out / "compare.json") in message
    assert message.endswith("fix the build and rerun")
    # Nothing of the refused build reached the cache.
    assert not list((tmp_path / "cache").glob("commits/libs/*/*.so"))


@pytest.mark.parametrize("target", ["cache", "hook"])
def test_the_guard_covers_the_cache_and_the_repository_hooks(repo, tmp_path, monkeypatch,
                                                             target) -> None:
    """Another commit's cached library, and a hook git would run as the harness's user."""
    monkeypatch.setattr(isolation, "build_user", lambda: None)
    first = _commit(repo, {"build.sh": BENIGN}, "benign")
    cached = build_commit(repo, "base", "HEAD", first, build="bash build.sh")
    victim = (Path(cached.library) if target == "cache"
              else repo / ".git" / "hooks" / "post-checkout")
    second = _commit(repo, {"build.sh": f"echo x >> {victim}\n" + BENIGN}, "hostile")
    with pytest.raises(isolation.BuildIsolationError, match=str(victim)):
        build_commit(repo, "head", "HEAD", second, build="bash build.sh")


def test_compare_commits_refuses_a_head_that_wrote_its_output_folder(repo, tmp_path,
                                                                     monkeypatch) -> None:
    monkeypatch.setattr(isolation, "build_user", lambda: None)
    out = tmp_path / "bench-out"
    _commit(repo, {"build.sh": BENIGN}, "base")
    _commit(repo, {"build.sh": f"mkdir -p {out}\necho forged > {out}/compare.json\n"
                   + BENIGN}, "head")
    result = CliRunner().invoke(cli, [
        "compare-commits", "HEAD~1", "HEAD", "--repo", str(repo), "--build", "bash build.sh",
        "--case", "relu_d10_w8", "--quiet", "--no-instructions", "--out", str(out)])
    assert result.exit_code == EXIT_USER_ERROR
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].startswith("Error: head (")
    assert "refusing to measure" in errors[0]
    assert "Traceback" not in result.output
    assert str(out) in errors[0]
    assert not (out / "results.json").exists()


def test_compare_commits_measures_copies_that_outlive_no_run(repo, tmp_path,
                                                            monkeypatch) -> None:
    """The arms name copies made after both builds, equal to what was built, in a folder
    removed when the comparison ends."""
    from epbench.cases.grids import case_by_name
    from epbench.harness.arms import file_sha256
    from epbench.harness.run_config import RunConfig
    from epbench.reports.verdicts import Settings
    from epbench.workflows import compare_commits as cc

    _commit(repo, {"build.sh": BENIGN}, "base")
    _commit(repo, {"build.sh": BENIGN.replace("/bin/true", "/bin/false")}, "head")
    seen = {}

    def fake_run(config):
        for arm in config.arms:
            seen[arm.name] = (arm.target, file_sha256(arm.target))
        raise KeyboardInterrupt  # enough: what the run was given is all this test needs

    monkeypatch.setattr(cc, "run", fake_run)
    config = RunConfig(cases=(case_by_name("relu_d10_w8"),), arms=(), rounds=2,
                       progress=False, out_dir=None)
    with pytest.raises(KeyboardInterrupt):
        cc.compare_commits(repo=repo, base_rev="HEAD~1", head_rev="HEAD",
                           build="bash build.sh", config=config, settings=Settings(),
                           profile_path=None, budget_s=0)
    cached = {p.read_bytes(): p for p in (tmp_path / "cache").glob("commits/libs/*/lib.so")}
    assert len(cached) == 2 and sorted(seen) == ["base", "head"]
    for name, source in (("base", "/bin/true"), ("head", "/bin/false")):
        target, digest = seen[name]
        assert digest == file_sha256(source)
        assert not Path(target).exists()  # the run's own copy, gone with the run
        assert Path(target) != cached[Path(source).read_bytes()]


def test_the_environment_loses_the_harness_python_and_every_credential(tmp_path) -> None:
    venv_bin = os.path.join(sys.prefix, "bin")
    environ = {
        "PATH": os.pathsep.join([venv_bin, "/usr/bin", "/bin"]), "HOME": "/home/me",
        "VIRTUAL_ENV": sys.prefix, "PYTHONPATH": "/harness", "PYTHONHOME": "/py",
        "GITHUB_TOKEN": "t", "ACTIONS_RUNTIME_TOKEN": "t", "ACTIONS_CACHE_URL": "u",
        "MY_SECRET": "s", "PGPASSWORD": "p", "AWS_SECRET_ACCESS_KEY": "k",
        "EPBENCH_DB": "postgresql://u:pw@h/db", "SSH_AUTH_SOCK": "/s", "CC": "gcc",
        "CFLAGS": "-O2", "ORT_INCLUDE_DIR": "/ort",
    }
    own = dict(home=tmp_path / "home", cache=tmp_path / "cache", tmp=tmp_path / "tmp")
    env = isolation.build_environment(environ, **own, own_home=False)
    expected_path = "/usr/bin:/bin" if sys.prefix != sys.base_prefix else environ["PATH"]
    assert env == {"PATH": expected_path, "HOME": "/home/me", "CC": "gcc", "CFLAGS": "-O2",
                   "ORT_INCLUDE_DIR": "/ort", "EPBENCH_CACHE_DIR": str(tmp_path / "cache"),
                   "TMPDIR": str(tmp_path / "tmp")}
    assert isolation.build_environment(environ, **own, own_home=True)["HOME"] == str(
        tmp_path / "home")


FAKE_ENGINE_BUILD = '''\
"""A stand-in for engine/build.py that reports what its interpreter saw."""
import json, os, sys
from pathlib import Path

out = Path(sys.argv[sys.argv.index("--out") + 1])
seen = {"prefix": sys.prefix, "path": sys.path, "env": dict(os.environ), "uid": os.getuid()}
library = out / "libfake.so"
library.write_bytes(Path("/bin/true").read_bytes() + b"\\nSEEN" + json.dumps(seen).encode())
print(library)
'''


def test_the_engine_build_runs_in_its_own_venv_with_nothing_of_the_harness(
        repo, monkeypatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "not for builds")
    sha = _commit(repo, {"engine/__init__.py": "", "engine/build.py": FAKE_ENGINE_BUILD},
                  "fake engine")
    side = build_commit(repo, "head", "HEAD", sha)
    seen = json.loads(Path(side.library).read_bytes().split(b"\nSEEN", 1)[1])
    assert seen["prefix"] not in (sys.prefix, sys.base_prefix)
    assert Path(seen["prefix"]).name == "venv"
    harness_dirs = {str(PACKAGE.parent), sys.prefix}
    assert not [p for p in seen["path"] if any(p.startswith(d) for d in harness_dirs)]
    assert seen["env"]["PYTHONPATH"] == str(Path(seen["prefix"]).parent / "src")
    assert "VIRTUAL_ENV" not in seen["env"] and "GITHUB_TOKEN" not in seen["env"]
    user = isolation.build_user()
    assert seen["uid"] == (user.uid if user else os.getuid())


def test_a_process_the_build_leaves_behind_is_killed(repo) -> None:
    """A daemon in a session of its own outlives the build's process group; it is killed
    all the same, before the guard's second look, so it cannot write after it."""
    daemon = ("setsid bash -c 'echo $$ > daemon.pid; exec sleep 300' "
              "</dev/null >/dev/null 2>&1 &\n"
              "while [ ! -s daemon.pid ]; do sleep 0.05; done\n"
              "cp /bin/true lib.so\necho >> lib.so\ncat daemon.pid >> lib.so\necho lib.so\n")
    sha = _commit(repo, {"build.sh": daemon}, "daemon")
    side = build_commit(repo, "head", "HEAD", sha, build="bash build.sh")
    pid = int(Path(side.library).read_bytes().rsplit(b"\n", 2)[1])
    try:
        assert not Path(f"/proc/{pid}").exists()
    finally:
        if Path(f"/proc/{pid}/cmdline").exists() and b"sleep" in Path(
                f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, 9)  # the daemon this test's build started


def test_what_is_measured_is_a_copy_checked_against_the_built_sha256(repo, tmp_path) -> None:
    sha = _commit(repo, {"build.sh": BENIGN}, "benign")
    side = build_commit(repo, "head", "HEAD", sha, build="bash build.sh")
    measured = stage_for_measuring(side, tmp_path / "measured")
    assert measured.library != side.library
    assert Path(measured.library).read_bytes() == Path(side.library).read_bytes()
    assert measured.sha256 == side.sha256
    # The cached file changed after its build: neither the copy nor the cache is trusted.
    shutil.copyfile("/bin/false", side.library)
    with pytest.raises(CommitError, match="changed after it was built"):
        stage_for_measuring(side, tmp_path / "again")
    with pytest.raises(CommitError, match="does not match the sha256 recorded"):
        build_commit(repo, "head", "HEAD", sha, build="bash build.sh")


@pytest.mark.serial  # plants a file in the package: other tests' builds would see it
def test_compare_commits_refuses_to_judge_after_the_libraries_changed_its_code(
        repo, tmp_path, monkeypatch, planted) -> None:
    """A library under test runs in the worker as the harness's user: should it (or what it
    left running) rewrite epbench's code, no verdict is written, and the run is kept."""
    from epbench.cases.grids import case_by_name
    from epbench.harness.run_config import RunConfig
    from epbench.reports.verdicts import Settings
    from epbench.workflows import compare_commits as cc
    from tests.support import synthetic

    _commit(repo, {"build.sh": BENIGN}, "base")
    _commit(repo, {"build.sh": BENIGN, "README": "head\n"}, "head")

    def hostile_run(config):
        planted.write_text("VERDICT = 'no_change'\n")  # as a loaded library could
        return synthetic.results_doc(
            {"relu_d10_w8": {"ort": 400.0, "base": 150.0, "head": 150.0}}, rounds=8, seed=3)

    monkeypatch.setattr(cc, "run", synthetic.typed_runner(hostile_run))
    out = tmp_path / "out"
    out.mkdir()
    config = RunConfig(cases=(case_by_name("relu_d10_w8"),), arms=(), rounds=8,
                       progress=False, out_dir=out)
    with pytest.raises(isolation.BuildIsolationError,
                       match=r"epbench's own code changed while the libraries ran "
                             r"\(1 file\(s\), e\.g\. .*_planted_by_a_build_.*refusing to judge"):
        cc.compare_commits(repo=repo, base_rev="HEAD~1", head_rev="HEAD",
                           build="bash build.sh", config=config, settings=Settings(),
                           profile_path=None, budget_s=0)
    assert (out / "results.json").is_file()
    assert not (out / "compare.json").exists() and not (out / "report.md").exists()


def test_the_code_snapshot_sees_code_and_templates_not_bytecode(tmp_path, monkeypatch) -> None:
    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "verdicts.py").write_text("A = 1\n")
    (package / "comment.md.j2").write_text("{{ x }}\n")
    monkeypatch.setattr(isolation, "_epbench_package", lambda: package)
    before = isolation.code_snapshot()
    (package / "__pycache__" / "verdicts.cpython-311.pyc").write_bytes(b"\0")
    (package / "notes.txt").write_text("not code")
    assert isolation.HarnessGuard.changes(before, isolation.code_snapshot()) == []
    (package / "comment.md.j2").write_text("{{ y }}\n")
    assert isolation.HarnessGuard.changes(before, isolation.code_snapshot()) == [
        str(package / "comment.md.j2")]


def test_the_guarded_code_is_every_part_where_it_really_lives() -> None:
    # In a checkout the parts are top-level folders mapped into the package by pyproject.toml.
    mapped = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-dir"]
    assert [f"epbench.{part}" for part in isolation.MAPPED_PARTS] == sorted(mapped)
    roots = isolation.package_roots()
    assert roots == sorted([PACKAGE, *(PACKAGE.parent / folder for folder in mapped.values())])
    snapshot = isolation.code_snapshot()
    assert str(PACKAGE.parent / "harness" / "runner.py") in snapshot
    assert str(PACKAGE.parent / "reports" / "templates" / "comment.md.j2") in snapshot


def test_the_worker_that_loads_the_libraries_gets_no_credential(monkeypatch) -> None:
    from epbench.harness import worker_process

    secrets = {"GITHUB_TOKEN": "ghs_x", "EPBENCH_DB": "postgresql://u:pw@h/db",
               "AWS_SECRET_ACCESS_KEY": "s", "DATABASE_URL": "postgres://u:pw@h/d",
               "NPM_AUTH": "a", "MY_API_KEY": "k"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    env = worker_process._worker_env()
    assert not set(secrets) & set(env)
    assert env["OMP_NUM_THREADS"] == "1" and env["PATH"] == os.environ["PATH"]
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(PACKAGE.parent)


def test_git_run_by_the_harness_ignores_a_planted_user_config(tmp_path, monkeypatch) -> None:
    # A build as the harness's own user (GitHub's hosted runners) can write ~/.gitconfig;
    # git would then run its core.fsmonitor, or a hook, as the harness.
    from epbench.harness.commits import repo_root
    from epbench.harness.host import read_git_state

    repo = init_repo(tmp_path / "repo")
    _commit(repo, {"f": "x"}, "one")
    home = tmp_path / "home"
    home.mkdir()
    pwned = tmp_path / "PWNED"
    (home / ".gitconfig").write_text(f'[core]\n\tfsmonitor = "touch {pwned}; echo"\n'
                                     f"\thooksPath = {tmp_path / 'hooks'}\n")
    monkeypatch.setenv("HOME", str(home))
    assert read_git_state(repo)["commit"] == git(repo, "rev-parse", "HEAD")
    assert repo_root(repo) == repo.resolve()
    assert not pwned.exists()


def test_the_build_loses_the_runners_job_files(tmp_path) -> None:
    # GITHUB_ENV and GITHUB_PATH would let a build set the environment of the job's
    # later steps (the upload).
    assert isolation.scrubbed("GITHUB_ENV") and isolation.scrubbed("GITHUB_PATH")
    assert isolation.scrubbed("GITHUB_STEP_SUMMARY")


def test_a_commit_without_the_bundled_engine_asks_for_a_build_command(repo) -> None:
    _commit(repo, {"README": "my EP\n"}, "no engine here")
    with pytest.raises(CommitError, match=r"has no bundled engine \(engine/build.py\) to "
                                          r"build: pass --build COMMAND"):
        build_commit(repo, "base", "HEAD", git(repo, "rev-parse", "HEAD"), None, out_dir=None)


def test_a_build_finds_the_seeded_headers_as_ort_include_dir(repo, tmp_path,
                                                            monkeypatch) -> None:
    # A build cannot import the harness: the headers it seeded are handed over by path.
    monkeypatch.delenv("ORT_INCLUDE_DIR", raising=False)
    headers = tmp_path / "cache" / "ort-headers" / "pkg-1"
    headers.mkdir(parents=True)
    (headers / "onnxruntime_c_api.h").write_text("/* stand-in */\n")
    script = ('set -e\ntest -f "$ORT_INCLUDE_DIR/onnxruntime_c_api.h"\n'
              'cp /bin/true lib.so\nprintf "%s" "$ORT_INCLUDE_DIR" >> lib.so\necho lib.so\n')
    _commit(repo, {"build.sh": script}, "a build that needs the headers")
    side = build_commit(repo, "head", "HEAD", git(repo, "rev-parse", "HEAD"), "bash build.sh",
                        out_dir=None)
    seen = Path(side.library).read_bytes().split(Path("/bin/true").read_bytes(), 1)[1].decode()
    assert seen.endswith("/cache/ort-headers/pkg-1") and not seen.startswith(str(tmp_path))


@pytest.mark.slow
def test_a_build_that_hangs_is_stopped_at_its_timeout(repo) -> None:
    """A build that never ends (here it waits on a child that sleeps, and a daemon in a
    session of its own) is stopped after its timeout with the processes it started, and
    the error names the option and shows what the build printed."""
    hang = ("setsid sleep 301 </dev/null >/dev/null 2>&1 &\necho \"daemon $!\" >&2\n"
            "sleep 300 &\necho \"child $!\" >&2\necho \"self $$\" >&2\nwait\n")
    sha = _commit(repo, {"build.sh": hang}, "a build that hangs")
    pids: list[int] = []
    try:
        with pytest.raises(CommitError) as raised:
            build_commit(repo, "head", "HEAD", sha, build="bash build.sh", timeout_s=3.0)
        message = str(raised.value)
        assert "was still running after --build-timeout 3 s and was stopped" in message
        pids = [int(p) for p in re.findall(r"^    (?:daemon|child|self) (\d+)$", message,
                                            re.M)]
        assert len(pids) == 3, message
        assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []
    finally:
        for pid in pids:  # what a failing kill left, if this test's build started it
            cmdline = Path(f"/proc/{pid}/cmdline")
            if cmdline.exists() and cmdline.read_bytes().startswith((b"sleep", b"bash")):
                os.kill(pid, 9)


def test_a_build_that_failed_saying_nothing_says_so(repo) -> None:
    _commit(repo, {"build.sh": "exit 3\n"}, "a silent failure")
    with pytest.raises(CommitError, match=r"status 3; last lines of its output:\n    "
                                          r"\(the build printed nothing\)"):
        build_commit(repo, "head", "HEAD", git(repo, "rev-parse", "HEAD"), "bash build.sh",
                     out_dir=None)
