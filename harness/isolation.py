"""Run a commit's build apart from the harness that will measure it.

A pull request's build is code the harness must not trust: run as the harness's own
user with the harness's interpreter, it could rewrite epbench's installed code, the
epbench cache (another commit's library, the ORT headers) or the output folder before
anything is measured. `run_build` is the one way a build runs (the bundled engine's
`engine/build.py` and a user's `--build COMMAND` alike):

- in its own folder (worktree, output, HOME, cache, TMPDIR) in the system's temp folder;
- with an environment scrubbed of the harness's Python (`VIRTUAL_ENV`, `PYTHON*`, the
  venv's `bin` on PATH) and of anything that looks like a credential;
- the bundled engine's build with its own interpreter: a fresh venv with no packages;
- as `nobody` when epbench runs as root and `setpriv` exists (file permissions cannot
  stop a root build), owning only its own folder;
- watched: `HarnessGuard` hashes what the build must not touch right before it starts
  and right after it and its leftover processes have been killed; any change refuses
  the build with one line, before anything is measured.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import epbench
from epbench.core.errors import EpbenchError
from epbench.core.gitcmd import git_argv, git_env
from epbench.core.paths import CACHE_DIR_ENV, DB_ENV, cache_dir
from epbench.engine.build import EngineBuildError, ort_include_dir
from epbench.harness.arms import file_sha256

# The unprivileged account a root harness runs builds as.
BUILD_USER = "nobody"
# Environment names dropped before a build: the harness's Python and epbench's own
# settings (EPBENCH_DB may hold a database password) by prefix, credentials by word.
SCRUBBED_PREFIXES = ("PYTHON", "EPBENCH_", "GIT_", "ACTIONS_", "GITHUB_")
SCRUBBED_NAMES = frozenset({"VIRTUAL_ENV", "CONDA_PREFIX"})
SCRUBBED_WORDS = ("TOKEN", "SECRET", "PASS", "KEY", "CREDENTIAL", "AUTH", "COOKIE")
# Names that hold secrets without saying so.
SECRET_NAMES = frozenset({"DATABASE_URL", "SSH_AUTH_SOCK", DB_ENV})
# The build's own copy of $ORT_INCLUDE_DIR, in its folder.
INCLUDE_COPY = "ort-include"
# Changed paths a refusal names; the rest are counted.
NAMED_CHANGES = 3
# Rounds of killing a build's leftover processes (a process forking as fast as it is
# killed must not hold the harness forever).
KILL_ROUNDS = 50
# prctl(2): orphaned descendants are re-parented to this process, not to init.
PR_SET_CHILD_SUBREAPER = 36


class BuildIsolationError(EpbenchError):
    """A build that touched what it must not, or that could not be run apart."""


@dataclass(frozen=True)
class BuildUser:
    """The account a build runs as, when it is not the harness's own."""

    name: str
    uid: int
    gid: int

    def prefix(self) -> list[str]:
        """The command prefix that runs a program as this user, with no capability left."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


@functools.lru_cache(maxsize=1)
def build_user() -> BuildUser | None:
    """`nobody` when the harness runs as root and can drop to it; else None (the build
    then runs as the harness's own user, and only the guard stands between them)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    try:
        entry = pwd.getpwnam(BUILD_USER)
    except KeyError:
        return None
    user = BuildUser(BUILD_USER, entry.pw_uid, entry.pw_gid)
    # A container may forbid the switch (no CAP_SETUID): then there is nothing to drop to.
    probe = subprocess.run([*user.prefix(), "true"], capture_output=True)
    return user if probe.returncode == 0 else None


def _harness_venv_bins() -> set[str]:
    """The harness's own venv's bin folder(s): a build must not find its Python first."""
    bins = set()
    if sys.prefix != sys.base_prefix:
        bins.add(os.path.realpath(os.path.join(sys.prefix, "bin")))
    if os.environ.get("VIRTUAL_ENV"):
        bins.add(os.path.realpath(os.path.join(os.environ["VIRTUAL_ENV"], "bin")))
    return bins


def credential(name: str) -> bool:
    """Whether the variable ``name`` may hold a secret: kept from a build and from the
    worker that loads the libraries under test."""
    upper = name.upper()
    return upper in SECRET_NAMES or any(word in upper for word in SCRUBBED_WORDS)


def scrubbed(name: str) -> bool:
    """Whether the variable ``name`` is kept from a build (see SCRUBBED_*)."""
    upper = name.upper()
    return (upper in SCRUBBED_NAMES or upper.startswith(SCRUBBED_PREFIXES)
            or credential(name))


def build_environment(environ: Mapping[str, str], *, home: Path, cache: Path, tmp: Path,
                      own_home: bool) -> dict[str, str]:
    """``environ`` without the harness's Python or credentials, pointed at the build's own
    cache and temp folder (and HOME, with ``own_home``: a build as `nobody`)."""
    env = {k: v for k, v in environ.items() if not scrubbed(k)}
    venv_bins = _harness_venv_bins()
    path = [p for p in environ.get("PATH", os.defpath).split(os.pathsep)
            if p and os.path.realpath(p) not in venv_bins]
    env["PATH"] = os.pathsep.join(path)
    env[CACHE_DIR_ENV] = str(cache)
    env["TMPDIR"] = str(tmp)
    if own_home:
        env["HOME"] = str(home)
    return env


# --- the guard --------------------------------------------------------------------------

Fingerprint = dict[str, tuple[object, ...]]


def _stat_key(st: os.stat_result) -> tuple[object, ...]:
    # ctime moves on every write, chmod and utime, and no caller can set it back.
    return (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
            st.st_ino)


def _walk(root: Path, *, contents: bool, skip: frozenset[Path], into: Fingerprint) -> None:
    """Fingerprint ``root`` and everything under it into ``into``: files by sha256 with
    ``contents``, else by their stat; a missing root is recorded as missing."""
    top = str(root)
    try:
        st = os.stat(top)  # a root given as a link is the folder it names
        link = os.readlink(top) if os.path.islink(top) else None
        into[top] = ("top", link, st.st_mode, st.st_uid)
        if not stat.S_ISDIR(st.st_mode):  # one file (a hook, the interpreter)
            regular = contents and stat.S_ISREG(st.st_mode)  # never open a FIFO
            into[top] += (file_sha256(top),) if regular else _stat_key(st)
            return
    except OSError as exc:
        into[top] = ("missing", exc.errno)
        return
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if Path(folder, d) not in skip]
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    key: tuple[object, ...] = ("link", os.readlink(path))
                elif stat.S_ISDIR(st.st_mode):
                    key = ("dir", st.st_mode, st.st_uid)
                elif contents and stat.S_ISREG(st.st_mode):
                    key = ("file", st.st_mode, st.st_uid, st.st_size, file_sha256(path))
                else:
                    key = ("stat", *_stat_key(st))
            except OSError as exc:  # unreadable: its error is its fingerprint
                key = ("error", exc.errno)
            into[path] = key


def _git_common_dir(repo: Path) -> Path | None:
    proc = subprocess.run(git_argv(repo, "rev-parse", "--git-common-dir"),
                          capture_output=True, text=True, env=git_env())
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return (repo / proc.stdout.strip()).resolve()


def _epbench_package() -> Path:
    return Path(epbench.__file__).parent


# The parts that a checkout maps into `epbench` from its top-level folders (`package-dir`
# in pyproject.toml; tests/test_build_isolation.py holds the two lists equal).
MAPPED_PARTS = ("cases", "engine", "harness", "reports")


def package_roots() -> list[Path]:
    """The real folders of epbench's code, each once: the package's own and, in a checkout,
    the top-level folders its parts are mapped from, as importlib finds them."""
    package = _epbench_package()
    found = {package.resolve()}
    for part in MAPPED_PARTS:
        # The part's spec, not the part: finding it runs none of the part's code.
        spec = importlib.util.find_spec(f"{epbench.__name__}.{part}")
        if spec is not None and spec.submodule_search_locations:
            found |= {Path(p).resolve() for p in spec.submodule_search_locations}
    # A folder inside another (all of them, in a wheel install) is walked once.
    return sorted(r for r in found if not any(o != r and o in r.parents for o in found))


# What judges and renders a run: epbench's code, templates and schemas.
CODE_SUFFIXES = (".py", ".j2", ".json", ".toml")


def code_snapshot() -> dict[str, str]:
    """epbench's own code, templates and schemas by content (no caches), path -> sha256.

    Taken before the libraries under test run and compared before the verdicts: a library
    (or what it left running) that rewrote the code that judges it is caught.
    """
    marks: dict[str, str] = {}
    for root in package_roots():
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(CODE_SUFFIXES):
                    path = os.path.join(folder, name)
                    try:
                        marks[path] = file_sha256(path)
                    except OSError as exc:
                        marks[path] = f"error {exc.errno}"
    return marks


class HarnessGuard:
    """What a build must leave as it was, and a way to tell that it did.

    By content (sha256): epbench's installed package (and, in a checkout, the folders its
    parts are mapped from), the epbench cache (other commits' libraries, ORT's headers,
    profiles), the output folder, and the repository's hooks and config (which git runs
    and reads as the harness's user). By stat (mode, owner, size, mtime and ctime, inode: cheap
    enough for the tens of thousands of files of a venv): the interpreter's prefix and
    every folder on the harness's sys.path (ORT, numpy, the standard library), which
    the measuring processes import from.
    """

    def __init__(self, *, out_dir: Path | None, repo: Path | None) -> None:
        self.by_content: list[Path] = [*package_roots(), cache_dir()]
        if out_dir is not None:
            self.by_content.append(Path(out_dir).absolute())
        git_dir = _git_common_dir(repo) if repo is not None else None
        if git_dir is not None:
            self.by_content += [git_dir / "hooks", git_dir / "config", git_dir / "info"]
        roots = {Path(sys.prefix).resolve()}
        roots |= {Path(p).resolve() for p in sys.path if p and os.path.isabs(p)
                  and os.path.isdir(p)}
        roots.add(Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable))))
        # A root inside another is walked once.
        self.by_stat = sorted(r for r in roots if not any(o != r and o in r.parents
                                                          for o in roots))
        # A site-packages under the standard library that is not on sys.path (the base
        # interpreter's, beside a venv's) is never imported from: tens of thousands of
        # files not worth a look.
        on_path = {Path(p).resolve() for p in sys.path if p and os.path.isabs(p)}
        self.unused = frozenset(
            d for r in self.by_stat if r.is_dir()
            for d in (r / "site-packages", r / "dist-packages") if d not in on_path)

    def snapshot(self, skip: Path | None = None) -> Fingerprint:
        """The fingerprint of everything guarded; ``skip``: the build's own folder, should
        it lie inside a guarded one."""
        marks: Fingerprint = {}
        own = frozenset({skip.resolve()}) if skip is not None else frozenset()
        for root in self.by_stat:
            _walk(root, contents=False, skip=own | self.unused, into=marks)
        for root in self.by_content:
            _walk(root, contents=True, skip=own, into=marks)
        return marks

    @staticmethod
    def changes(before: Fingerprint, after: Fingerprint) -> list[str]:
        """The paths added, removed or changed between two snapshots, sorted."""
        return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


# --- running the build --------------------------------------------------------------------

def _children(parent: int) -> set[int]:
    """The pids whose parent is ``parent`` (from /proc; empty where there is none)."""
    found = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 1 and int(fields[1]) == parent:
            found.add(int(entry))
    return found


def _set_subreaper(on: bool) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _kill_leftovers(group: int, known_children: set[int]) -> None:
    """Kill what the build left running: its process group, and every process that became
    this process's child during the build (a daemon that left the group is re-parented
    here while the subreaper flag is on). Only those: this process's other children are
    in ``known_children``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    me = os.getpid()
    for _ in range(KILL_ROUNDS):
        left = _children(me) - known_children
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass


def _chown_tree(root: Path, user: BuildUser) -> None:
    for folder, dirs, files in os.walk(root):
        os.lchown(folder, user.uid, user.gid)
        for name in [*dirs, *files]:
            os.lchown(os.path.join(folder, name), user.uid, user.gid)


def _seed_headers(cache: Path, fetch: bool) -> None:
    """Copy the harness's ORT headers into the build's own cache: data the build may read
    and change without touching the harness's copy. With ``fetch`` (the bundled engine's
    build), the harness first fetches them as its own engine build would, once for every
    later build; a failed fetch is left to the build, which says what to do."""
    headers = cache_dir("ort-headers")
    if fetch and not headers.is_dir() and not os.environ.get("ORT_INCLUDE_DIR"):
        with contextlib.suppress(EngineBuildError):
            ort_include_dir()
    if headers.is_dir():
        shutil.copytree(headers, cache / "ort-headers", symlinks=False)


def _seed_include_dir(root: Path) -> None:
    """A copy of $ORT_INCLUDE_DIR (the ORT headers the harness was given, e.g. by the GitHub
    Action's `ort-headers`) in the build's own folder, which run_build hands to the build as
    its ORT_INCLUDE_DIR: the folder given may be closed to the build's user (root's home
    is, to `nobody`), and a build must not change the harness's copy."""
    given = os.environ.get("ORT_INCLUDE_DIR")
    if given and os.path.isdir(given):
        shutil.copytree(given, root / INCLUDE_COPY, symlinks=False)


def _own_python(user: BuildUser | None, env: Mapping[str, str], root: Path) -> str:
    """A fresh venv with no packages for the build, made from an interpreter its user can
    run: the harness's base interpreter, else a python3 on the build's PATH (a root
    harness's interpreter may sit in root's own home, closed to `nobody`)."""
    prefix = user.prefix() if user else []
    candidates = [os.path.realpath(getattr(sys, "_base_executable", sys.executable))]
    found = shutil.which("python3", path=env.get("PATH"))
    if found:
        candidates.append(found)
    venv = root / "venv"
    for python in candidates:
        made = subprocess.run([*prefix, python, "-m", "venv", "--without-pip", str(venv)],
                              cwd=root, env=dict(env), capture_output=True, text=True)
        if made.returncode == 0 and (venv / "bin" / "python").exists():
            return str(venv / "bin" / "python")
        shutil.rmtree(venv, ignore_errors=True)
    who = f"user {user.name}" if user else "the build"
    raise BuildIsolationError(
        f"no Python interpreter that {who} can run to make the build's venv (tried "
        f"{', '.join(candidates)}); install python3 where every user can run it")


@dataclass(frozen=True)
class BuildRun:
    """What a build printed and how it ended."""

    returncode: int
    stdout: str
    stderr: str
    user: str  # who it ran as
    # The seconds it was allowed when it ran past them and was killed (None: it ended).
    timed_out_after_s: float | None = None


def prepare_root(root: Path, *, engine: bool) -> None:
    """Make the build's own folders under ``root`` (its worktree ``root/src`` exists);
    ``engine``: the bundled engine's build, which needs ORT's headers."""
    for name in ("out", "home", "cache", "tmp"):
        (root / name).mkdir(exist_ok=True)
    _seed_headers(root / "cache", fetch=engine)
    _seed_include_dir(root)


# The bundled engine's build, `python -m epbench.engine.build`, from a commit's worktree
# that nothing installed. Its `epbench/` folder holds no `engine`: pyproject.toml maps the
# top-level `engine/` in, so the worktree joins the package's search path, as an editable
# install's finder would map it (a tree from when the parts were links finds `epbench/engine`
# first). A tree from before the one package has only a top-level `engine`.
ENGINE_BUILD = """
import os, runpy
try:
    import epbench
except ImportError:
    runpy.run_module("engine.build", run_name="__main__", alter_sys=True)
else:
    epbench.__path__.append(os.getcwd())
    runpy.run_module("epbench.engine.build", run_name="__main__", alter_sys=True)
"""


def run_build(root: Path, worktree: Path, build: str | None, guard: HarnessGuard,
              describe: str, timeout_s: float | None = None) -> BuildRun:
    """Run one build apart from the harness; refuse when it touched a guarded file.

    ``root`` is the build's own folder (from `prepare_root`), ``worktree`` the commit's
    checkout inside it, ``build`` a shell command run in the worktree (None: the bundled
    engine's ``python -m epbench.engine.build --out ROOT/out`` with the build's own venv).
    ``describe`` opens the refusal ("head (abc1234567)"). A build still running after
    ``timeout_s`` seconds is killed with everything it started (``timed_out_after_s``).
    """
    user = build_user()
    env = build_environment(os.environ, home=root / "home", cache=root / "cache",
                            tmp=root / "tmp", own_home=user is not None)
    if (root / INCLUDE_COPY).is_dir():
        env["ORT_INCLUDE_DIR"] = str(root / INCLUDE_COPY)
    elif (root / "cache" / "ort-headers").is_dir():
        # The headers the harness seeded into the build's cache: a build that does not run
        # epbench (it cannot import the harness) finds them as $ORT_INCLUDE_DIR.
        found = sorted(root.joinpath("cache", "ort-headers").glob("*/onnxruntime_c_api.h"))
        if found:
            env["ORT_INCLUDE_DIR"] = str(found[0].parent)
    if user is not None:
        # The build owns its folder and nothing else; the harness (root) can still remove it.
        _chown_tree(root, user)
    if build is None:
        python = _own_python(user, env, root)
        # The worktree's own engine/ and epbench/ come first; nothing of the harness's.
        env["PYTHONPATH"] = str(worktree)
        env["PATH"] = str(Path(python).parent) + os.pathsep + env["PATH"]
        command = [python, "-c", ENGINE_BUILD, "--out", str(root / "out")]
    else:
        command = ["/bin/bash", "-c", build]
    if user is not None:
        command = [*user.prefix(), *command]
    before = guard.snapshot(skip=root)
    known = _children(os.getpid())
    reaping = _set_subreaper(True)
    # Files, not pipes: a leftover process holding a pipe open would hang the harness.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc, timed_out_after_s = None, None
        try:
            proc = subprocess.Popen(command, cwd=worktree, env=env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                # A hung build must not hang the harness: killed and reaped here, what it
                # started below with its group.
                proc.kill()
                proc.wait()
                returncode, timed_out_after_s = -signal.SIGKILL, timeout_s
        finally:
            if proc is not None:
                _kill_leftovers(proc.pid, known)
            if reaping:
                _set_subreaper(False)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    changed = HarnessGuard.changes(before, guard.snapshot(skip=root))
    if changed:
        named = ", ".join(changed[:NAMED_CHANGES])
        more = f" and {len(changed) - NAMED_CHANGES} more" if len(changed) > NAMED_CHANGES else ""
        raise BuildIsolationError(
            f"{describe}: its build changed {len(changed)} file(s) it must not touch "
            f"({named}{more}); refusing to measure: a build may write only inside its own "
            "worktree, so fix the build and rerun")
    return BuildRun(returncode, stdout, stderr, user.name if user else "the harness's user",
                    timed_out_after_s)
