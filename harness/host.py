"""The host fingerprint that goes into every results file.

Two kinds of facts are recorded. Machine identity (CPU model, logical core
count, kernel, onnxruntime version) decides whether two results files, or a
results file and a noise-calibration profile, came from the same kind of
machine: `fingerprint_key` hashes exactly those. Everything else (allowed
cores, governor, SMT, Python/numpy/pyperf versions, the git commit, pyperf's
view of the system's tuning) is context for a reader and stays out of the key,
so that a new commit or a different taskset does not make a host "new".

Reading is cheap and bounded: files under /proc and /sys, package metadata
(no onnxruntime import), `git` and `python -m pyperf system show` as
subprocesses with timeouts. Anything unreadable is recorded as None.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from epbench.core.gitcmd import git_argv, git_env

# The fields that identify a machine for comparison; one place, used by the key.
IDENTITY_FIELDS = ("cpu_model", "logical_cores", "kernel", "onnxruntime")
KEY_LENGTH = 16
# Bounds that keep `epbench host` under 2 s even when git or pyperf hang
# (normally they take ~10 ms and ~0.2 s).
GIT_TIMEOUT_S = 0.5
PYPERF_TIMEOUT_S = 1.0
# onnxruntime ships under several distribution names; the first installed wins.
_ORT_DISTRIBUTIONS = (
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-openvino",
    "onnxruntime-directml",
    "ort-nightly",
)
# Headings of `pyperf system show` and the keys they become in the summary.
_PYPERF_SECTIONS = {
    "System state": "state",
    "Advices": "advices",
    "Warnings": "warnings",
    "Errors": "errors",
}

Runner = Callable[..., subprocess.CompletedProcess]


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def cpu_model_from_cpuinfo(text: str) -> str | None:
    """The CPU's model name from a `/proc/cpuinfo` text (x86 `model name`;
    other architectures' `Processor`, `cpu model`, `Hardware`, `cpu`)."""
    wanted = ("model name", "processor", "cpu model", "hardware", "cpu")
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and value.strip() and key not in found:
            found[key] = value.strip()
    # "Processor" on old ARM kernels is a name; on x86 "processor" is an index.
    for key in wanted:
        if key in found and not found[key].isdigit():
            return found[key]
    # Modern arm64 kernels give only the vendor and part numbers.
    if "cpu implementer" in found and "cpu part" in found:
        return f"implementer {found['cpu implementer']} part {found['cpu part']}"
    return None


def _cpu_model(proc_root: Path) -> str:
    text = _read_text(proc_root / "cpuinfo")
    model = cpu_model_from_cpuinfo(text) if text else None
    return model or platform.processor() or platform.machine() or "unknown"


def _allowed_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def read_governor(cores: list[int], sys_root: Path = Path("/sys")) -> str | None:
    """The cpufreq governor of the given cores: one name when they agree,
    "cpu0=performance,cpu1=powersave" when they differ, None when unreadable
    (no cpufreq in most VMs)."""
    per_core = {}
    for core in cores:
        path = sys_root / f"devices/system/cpu/cpu{core}/cpufreq/scaling_governor"
        governor = _read_text(path)
        if governor:
            per_core[core] = governor
    if not per_core:
        return None
    if len(set(per_core.values())) == 1:
        return next(iter(per_core.values()))
    return ",".join(f"cpu{c}={g}" for c, g in sorted(per_core.items()))


def read_smt(sys_root: Path = Path("/sys")) -> dict[str, object]:
    """SMT control ("on", "off", "forceoff", "notsupported", ...) and whether
    sibling threads are active; None for what the kernel does not expose."""
    control = _read_text(sys_root / "devices/system/cpu/smt/control")
    active = _read_text(sys_root / "devices/system/cpu/smt/active")
    return {"control": control, "active": active == "1" if active in ("0", "1") else None}


def _package_version(*names: str) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def read_git_state(repo_dir: Path, run: Runner = subprocess.run) -> dict[str, object]:
    """Commit and dirtiness of the git work tree containing `repo_dir`;
    both None when it is not in a work tree or git is missing. Untracked files
    do not make a tree dirty (build outputs would, always)."""
    none: dict[str, object] = {"commit": None, "dirty": None}

    def git(*args: str) -> str | None:
        try:
            done = run(
                git_argv(repo_dir, *args),
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_S,
                check=False,
                env=git_env(),
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--verify", "HEAD")
    if not commit:
        return none
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def summarize_pyperf_system(text: str) -> dict[str, list[str]]:
    """The sections of `python -m pyperf system show` as lists of lines."""
    summary: dict[str, list[str]] = {key: [] for key in _PYPERF_SECTIONS.values()}
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or set(line) == {"="}:
            continue
        if line in _PYPERF_SECTIONS:
            section = _PYPERF_SECTIONS[line]
        elif line.startswith("Run ") or line.startswith("Show the system"):
            continue  # pyperf's banner and closing hint, not findings
        elif section is not None:
            summary[section].append(line)
    return summary


def read_pyperf_system(
    run: Runner = subprocess.run, timeout_s: float = PYPERF_TIMEOUT_S
) -> dict[str, object]:
    """pyperf's own inspection of the system's benchmark tuning (read-only,
    `system show`), bounded by `timeout_s`; on failure, {"error": why}."""
    try:
        done = run(
            [sys.executable, "-m", "pyperf", "system", "show"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"`pyperf system show` took longer than {timeout_s} s"}
    except OSError as exc:
        return {"error": f"`pyperf system show` did not start: {exc}"}
    summary: dict[str, object] = dict(summarize_pyperf_system(done.stdout))
    if not any(summary.values()):
        return {"error": f"`pyperf system show` printed nothing (exit {done.returncode})"}
    return summary


def host_fingerprint(
    *,
    repo_dir: str | os.PathLike | None = None,
    pyperf_system: bool = True,
    proc_root: Path = Path("/proc"),
    sys_root: Path = Path("/sys"),
    run: Runner = subprocess.run,
) -> dict:
    """The host facts recorded in every results file (see the module docstring).

    `repo_dir` is the directory whose git commit is recorded (default: the
    current directory, i.e. the checkout being benchmarked).
    """
    allowed = _allowed_cores()
    git = read_git_state(Path(repo_dir) if repo_dir is not None else Path.cwd(), run=run)
    fp = {
        "allowed_cores": allowed,
        "cpu_model": _cpu_model(proc_root),
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "governor": read_governor(allowed, sys_root),
        "kernel": platform.release(),
        "logical_cores": os.cpu_count(),
        "machine": platform.machine(),
        "numpy": _package_version("numpy"),
        "onnxruntime": _package_version(*_ORT_DISTRIBUTIONS),
        "os": platform.system(),
        "pyperf": _package_version("pyperf"),
        "pyperf_system": read_pyperf_system(run=run) if pyperf_system else None,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "smt": read_smt(sys_root),
    }
    return fp


def fingerprint_key(fp: dict) -> str:
    """A short stable hash of the machine-identity fields only.

    Missing fields hash as None, so an older fingerprint still gets a key.
    """
    identity = {field: fp.get(field) for field in IDENTITY_FIELDS}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:KEY_LENGTH]
