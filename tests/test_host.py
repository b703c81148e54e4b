"""The host fingerprint: what it reads, how it degrades when something is not
readable, and a key that changes with machine identity only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from epbench.harness.host import (
    IDENTITY_FIELDS,
    KEY_LENGTH,
    cpu_model_from_cpuinfo,
    fingerprint_key,
    host_fingerprint,
    read_git_state,
    read_governor,
    read_pyperf_system,
    read_smt,
    summarize_pyperf_system,
)

BASE_FP = {
    "allowed_cores": [0, 1],
    "cpu_model": "AMD EPYC 7763 64-Core Processor",
    "git_commit": "a" * 40,
    "git_dirty": False,
    "governor": "performance",
    "kernel": "6.8.0-1017-azure",
    "logical_cores": 2,
    "numpy": "2.1.0",
    "onnxruntime": "1.22.0",
    "pyperf": "2.8.0",
    "pyperf_system": {"state": ["ASLR: Full randomization"]},
    "python": "CPython 3.11.7",
    "smt": {"control": "on", "active": True},
}


# ---- the key -----------------------------------------------------------------


def test_key_is_short_hex_and_stable() -> None:
    key = fingerprint_key(BASE_FP)
    assert len(key) == KEY_LENGTH and int(key, 16) >= 0
    assert fingerprint_key(dict(BASE_FP)) == key


@pytest.mark.parametrize(
    "field, value",
    [
        ("git_commit", "b" * 40),
        ("git_dirty", True),
        ("allowed_cores", [1]),
        ("governor", "powersave"),
        ("numpy", "2.2.0"),
        ("pyperf", "2.9.0"),
        ("python", "CPython 3.12.1"),
        ("pyperf_system", None),
        ("smt", None),
        ("key", "whatever was stored"),
    ],
)
def test_key_ignores_everything_but_machine_identity(field: str, value: object) -> None:
    assert fingerprint_key({**BASE_FP, field: value}) == fingerprint_key(BASE_FP)


@pytest.mark.parametrize(
    "field, value",
    [
        ("onnxruntime", "1.23.0"),
        ("kernel", "6.8.0-1018-azure"),
        ("logical_cores", 4),
        ("cpu_model", "Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz"),
    ],
)
def test_key_changes_with_each_identity_field(field: str, value: object) -> None:
    assert field in IDENTITY_FIELDS
    assert fingerprint_key({**BASE_FP, field: value}) != fingerprint_key(BASE_FP)


def test_key_does_not_depend_on_field_order() -> None:
    reversed_fp = dict(reversed(list(BASE_FP.items())))
    assert fingerprint_key(reversed_fp) == fingerprint_key(BASE_FP)


# ---- the pieces ----------------------------------------------------------------

X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7763 64-Core Processor
stepping\t: 1

processor\t: 1
model name\t: AMD EPYC 7763 64-Core Processor
"""
ARM64_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
"""
ARMV7_CPUINFO = """Processor\t: ARMv7 Processor rev 10 (v7l)
processor\t: 0
BogoMIPS\t: 790.52
Hardware\t: Freescale i.MX 6Quad
"""


@pytest.mark.parametrize(
    "text, model",
    [
        (X86_CPUINFO, "AMD EPYC 7763 64-Core Processor"),
        (ARM64_CPUINFO, "implementer 0x41 part 0xd0c"),
        (ARMV7_CPUINFO, "ARMv7 Processor rev 10 (v7l)"),
        ("processor\t: 0\n", None),  # an index is not a model
    ],
)
def test_cpu_model_from_cpuinfo(text: str, model: str | None) -> None:
    assert cpu_model_from_cpuinfo(text) == model


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _governor(sys_root: Path, core: int, name: str) -> None:
    _write(sys_root / f"devices/system/cpu/cpu{core}/cpufreq/scaling_governor", name)


def test_governor_shared_mixed_and_absent(tmp_path: Path) -> None:
    assert read_governor([0, 1], tmp_path) is None  # no cpufreq, as in most VMs
    _governor(tmp_path, 0, "performance")
    _governor(tmp_path, 1, "performance")
    _governor(tmp_path, 2, "powersave")
    assert read_governor([0, 1], tmp_path) == "performance"
    assert read_governor([0, 1, 2], tmp_path) == "cpu0=performance,cpu1=performance,cpu2=powersave"


def test_smt_control_and_active(tmp_path: Path) -> None:
    assert read_smt(tmp_path) == {"control": None, "active": None}
    _write(tmp_path / "devices/system/cpu/smt/control", "on")
    _write(tmp_path / "devices/system/cpu/smt/active", "1")
    assert read_smt(tmp_path) == {"control": "on", "active": True}
    _write(tmp_path / "devices/system/cpu/smt/active", "0")
    assert read_smt(tmp_path)["active"] is False


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
    )


def test_git_state_of_a_work_tree(tmp_path: Path) -> None:
    assert read_git_state(tmp_path) == {"commit": None, "dirty": None}
    _git(tmp_path, "init", "-q")
    assert read_git_state(tmp_path) == {"commit": None, "dirty": None}  # no commit yet
    (tmp_path / "a.txt").write_text("one\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-q", "-m", "one")
    state = read_git_state(tmp_path)
    assert len(state["commit"]) == 40 and state["dirty"] is False
    (tmp_path / "untracked.txt").write_text("build output\n")
    assert read_git_state(tmp_path)["dirty"] is False
    (tmp_path / "a.txt").write_text("two\n")
    assert read_git_state(tmp_path)["dirty"] is True


def test_git_missing_or_hanging_gives_none(tmp_path: Path) -> None:
    def hanging(*args, **kwargs):
        raise subprocess.TimeoutExpired(cmd="git", timeout=0.5)

    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    for run in (hanging, missing):
        assert read_git_state(tmp_path, run=run) == {"commit": None, "dirty": None}


PYPERF_SHOW = """Show the system configuration

System state
============

CPU: use 2 logical CPUs: 0-1
ASLR: Full randomization

Advices
=======

Perf event: Set max sample rate to 1

Warnings
========

Turbo Boost (MSR): Try to load the msr kernel module: sudo modprobe msr

Run "python -m pyperf system tune" to tune the system configuration to run benchmarks
"""


def test_pyperf_system_summary_by_section() -> None:
    assert summarize_pyperf_system(PYPERF_SHOW) == {
        "state": ["CPU: use 2 logical CPUs: 0-1", "ASLR: Full randomization"],
        "advices": ["Perf event: Set max sample rate to 1"],
        "warnings": ["Turbo Boost (MSR): Try to load the msr kernel module: sudo modprobe msr"],
        "errors": [],
    }


def test_pyperf_system_is_time_bounded() -> None:
    seen = {}

    def slow(cmd, **kwargs):
        seen.update(kwargs)
        raise subprocess.TimeoutExpired(cmd=cmd, timeout=kwargs["timeout"])

    assert read_pyperf_system(run=slow, timeout_s=0.7) == {
        "error": "`pyperf system show` took longer than 0.7 s"
    }
    assert seen["timeout"] == 0.7


def test_pyperf_system_uses_its_output_despite_nonzero_exit() -> None:
    # pyperf exits 2 whenever it has advice: the findings still count.
    def show(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 2, stdout=PYPERF_SHOW, stderr="")

    assert read_pyperf_system(run=show)["advices"] == ["Perf event: Set max sample rate to 1"]

    def silent(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="boom")

    assert read_pyperf_system(run=silent) == {
        "error": "`pyperf system show` printed nothing (exit 1)"
    }


# ---- the whole fingerprint on this machine -----------------------------------


def test_host_fingerprint_on_this_machine(tmp_path: Path) -> None:
    fp = host_fingerprint(repo_dir=tmp_path, pyperf_system=False)
    for field in (
        *IDENTITY_FIELDS,
        "allowed_cores",
        "python",
        "numpy",
        "pyperf",
        "governor",
        "smt",
        "git_commit",
        "git_dirty",
        "pyperf_system",
    ):
        assert field in fp, field
    assert fp["logical_cores"] >= 1 and fp["allowed_cores"]
    assert set(fp["allowed_cores"]) <= set(range(fp["logical_cores"]))
    assert fp["onnxruntime"] and fp["numpy"] and fp["cpu_model"]
    assert fp["git_commit"] is None and fp["pyperf_system"] is None  # tmp_path: no repo
    assert len(fingerprint_key(fp)) == KEY_LENGTH


def test_host_fingerprint_reads_the_given_proc_and_sys(tmp_path: Path) -> None:
    _write(tmp_path / "proc/cpuinfo", X86_CPUINFO)
    for core in range(8):
        _governor(tmp_path / "sys", core, "schedutil")
    _write(tmp_path / "sys/devices/system/cpu/smt/control", "off")

    def fake_run(cmd, **kwargs):
        if cmd[0] == "git":
            return subprocess.CompletedProcess(cmd, 128, stdout="", stderr="not a repo")
        return subprocess.CompletedProcess(cmd, 0, stdout=PYPERF_SHOW, stderr="")

    fp = host_fingerprint(
        repo_dir=tmp_path, proc_root=tmp_path / "proc", sys_root=tmp_path / "sys", run=fake_run
    )
    assert fp["cpu_model"] == "AMD EPYC 7763 64-Core Processor"
    assert fp["governor"] == "schedutil"
    assert fp["smt"] == {"control": "off", "active": None}
    assert fp["pyperf_system"]["state"] == [
        "CPU: use 2 logical CPUs: 0-1",
        "ASLR: Full randomization",
    ]
    assert fp["git_commit"] is None
