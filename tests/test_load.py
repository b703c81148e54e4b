"""The background load validate creates: started, stopped, and never left behind.

Liveness is read from /proc: a pid whose /proc entry is gone (or a zombie, which
runs nothing) is not a stray process. Waits are bounded polls for an event, never
assertions about how long something took.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from epbench.core.errors import EpbenchError
from epbench.harness import load as bg
from tests.support.signals import sigint_at_its_default

# Upper bound on waiting for an event that normally takes milliseconds (not a timing test).
WAIT_S = 30.0


def running(pid: int) -> bool:
    """Is ``pid`` a live (non-zombie) process?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def load_children_of(parent: int) -> list[int]:
    """Live processes whose parent is ``parent`` and that run the load module."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(stat_fields(int(entry.name))[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == parent and b"epbench.harness.load" in cmdline and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["bursty", "sustained"])
def test_start_runs_children_in_their_own_group_and_stop_leaves_none(kind):
    load = bg.BackgroundLoad(kind, seed=1)
    try:
        load.start()
        load.start()  # idempotent: still one child
        [pid] = load.pids
        assert running(pid)
        assert load_children_of(os.getpid()) == [pid]
        # Its own process group (pgid == its pid), not ours: a terminal's Ctrl-C misses it.
        assert int(stat_fields(pid)[2]) == pid != os.getpgid(0)
    finally:
        load.stop()
    assert not running(pid)
    assert load_children_of(os.getpid()) == []
    assert load.pids == []
    load.stop()  # idempotent


def test_none_starts_nothing():
    with bg.background_load("none") as load:
        assert load.pids == []
        assert load_children_of(os.getpid()) == []


def test_context_manager_stops_the_load_when_the_block_raises():
    pids: list[int] = []
    with pytest.raises(KeyboardInterrupt), bg.background_load("sustained") as load:
        pids.extend(load.pids)
        raise KeyboardInterrupt
    assert len(pids) == 1 and not running(pids[0])
    assert load_children_of(os.getpid()) == []


DRIVER = """
import sys, time
from epbench.harness.load import background_load
with background_load(sys.argv[1], 3) as load:
    print(*load.pids, flush=True)
    time.sleep(600)
"""


def start_driver(kind: str) -> tuple[subprocess.Popen[str], int]:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, kind], stdout=subprocess.PIPE,
                              text=True, preexec_fn=sigint_at_its_default)
    assert driver.stdout is not None
    pid = int(driver.stdout.readline())
    wait_until(lambda: load_children_of(driver.pid) == [pid], "the load to start")
    return driver, pid


@pytest.mark.parametrize("kind", ["bursty", "sustained"])
def test_ctrl_c_of_the_harness_leaves_no_stray_load(kind):
    driver, pid = start_driver(kind)
    try:
        driver.send_signal(signal.SIGINT)
        driver.wait(timeout=WAIT_S)
        assert driver.returncode != 0  # it was interrupted, not finished
        # The driver's finally reaped its child before it exited: nothing left over.
        assert not running(pid)
        assert load_children_of(driver.pid) == []
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_a_killed_harness_takes_its_load_along():
    # SIGKILL runs no finally: PR_SET_PDEATHSIG is what kills the orphaned busy loop.
    driver, pid = start_driver("sustained")
    driver.kill()
    driver.wait()
    try:
        wait_until(lambda: not running(pid), "the orphaned load to die")
    finally:
        kill_if_load(pid)  # a failing run must not leave a busy loop behind


def test_parse_loads():
    assert bg.parse_loads("none,bursty, sustained") == ("none", "bursty", "sustained")
    with pytest.raises(EpbenchError, match="--load takes a comma list"):
        bg.parse_loads("none,heavy")
    with pytest.raises(EpbenchError, match="names a kind twice"):
        bg.parse_loads("none,none")
    with pytest.raises(EpbenchError, match="--load"):
        bg.parse_loads(" , ")


@pytest.mark.parametrize("kind", ["none", "sustaned", ""])
def test_the_child_refuses_a_kind_it_would_not_run(kind):
    # Anything but "sustained" used to run the bursty loop: a misspelt kind was a
    # mislabelled measurement.
    argv = [sys.executable, "-m", "epbench.harness.load"] + ([kind] if kind else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"epbench.harness.load: the kind is bursty or sustained, not {kind!r} "
        "(python -m epbench.harness.load bursty|sustained [SEED [PARENT_PID]])"]


def test_a_load_started_by_hand_dies_with_the_process_that_started_it():
    # `python -m epbench.harness.load` run by a script (docs/validation) has no
    # BackgroundLoad around it: the child asks for PR_SET_PDEATHSIG itself.
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import os, subprocess, sys, time\n"
         "c = subprocess.Popen([sys.executable, '-m', 'epbench.harness.load', 'sustained',\n"
         "                      '0', str(os.getpid())])\n"
         "print(c.pid, flush=True)\n"
         "time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        # Past its start-up checks (it catches SIGTERM only after them): from here on
        # only PR_SET_PDEATHSIG can end it when its parent dies.
        wait_until(lambda: catches_sigterm(pid), "the load to start")
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    try:
        wait_until(lambda: not running(pid), "the orphaned load to die")
    finally:
        kill_if_load(pid)  # a failing run must not leave a busy loop behind


def test_a_load_whose_parent_is_gone_before_it_starts_does_not_run():
    # The race PARENT_PID closes: a parent that died before the child's prctl took
    # effect. Here the named parent is a process that has already exited.
    gone = subprocess.Popen(["true"])
    gone.wait()
    child = subprocess.Popen([sys.executable, "-m", "epbench.harness.load", "sustained",
                              "0", str(gone.pid)], stderr=subprocess.PIPE, text=True)
    try:
        assert child.wait(timeout=WAIT_S) != 0
        assert child.stderr is not None
        assert child.stderr.read().strip().splitlines() == [
            f"epbench.harness.load: its parent {gone.pid} is gone; not starting"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_child_refuses_a_seed_that_is_not_a_number():
    done = subprocess.run([sys.executable, "-m", "epbench.harness.load", "bursty", "x"],
                          capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1
    assert "SEED and PARENT_PID are integers, not 'x'" in done.stderr


def kill_if_load(pid: int) -> None:
    try:
        if running(pid) and b"epbench.harness.load" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError):
        pass


def catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


@contextmanager
def started_load(kind: str) -> Iterator[tuple[bg.BackgroundLoad, subprocess.Popen[bytes]]]:
    """A BackgroundLoad past its child's start-up checks; stopped however the block ends."""
    load = bg.BackgroundLoad(kind)
    load.start()
    try:
        [child] = load.children
        wait_until(lambda: catches_sigterm(child.pid), "the load to start")
        yield load, child
    finally:
        load.stop()


def test_stop_records_a_child_that_had_died_before_it():
    with started_load("sustained") as (load, child):
        os.kill(child.pid, signal.SIGKILL)
        wait_until(lambda: child.poll() is not None, "the load to die")
    assert load.died == [-signal.SIGKILL]


def test_stop_of_a_running_load_records_no_death():
    with started_load("bursty") as (load, child):
        pass
    assert load.died == []
    assert not running(child.pid)
