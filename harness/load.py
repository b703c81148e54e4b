"""Background load that `epbench validate` creates itself, to measure verdicts under load.

The load runs as child processes in their own process group that die with the harness,
even on its SIGKILL. ``python -m epbench.harness.load KIND [SEED [PARENT_PID]]`` is the
child itself, for scripts that start a load.
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from epbench.core.errors import EpbenchError

# bursty: one process alternating busy and sleeping bursts of BURST_RANGE_S on whatever
# core it is given (a neighbour's builds and tests); sustained: one core kept busy (a
# neighbour's long job on a 2-core runner).
LOAD_KINDS = ("none", "bursty", "sustained")
# Bursts (busy, then asleep) last a random time in this range, in seconds.
BURST_RANGE_S = (0.050, 0.400)
# How long stop() lets the children exit on SIGTERM before it sends SIGKILL.
STOP_GRACE_S = 2.0
_PR_SET_PDEATHSIG = 1


def parse_loads(text: str) -> tuple[str, ...]:
    """``none,sustained`` -> ("none", "sustained"); one clear error for anything else."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in LOAD_KINDS]
    if not kinds or bad:
        raise EpbenchError(f"--load takes a comma list of {', '.join(LOAD_KINDS)}, not "
                           f"{text!r}; e.g. --load none,bursty,sustained")
    if len(set(kinds)) != len(kinds):
        raise EpbenchError(f"--load names a kind twice in {text!r}; name each once, e.g. "
                           "--load none,sustained")
    return kinds


def _child_setup() -> None:
    # Runs in the child between fork and exec: its own process group (a terminal's
    # Ctrl-C goes to the harness, which stops the load in order), and death with the parent.
    os.setpgid(0, 0)
    _die_with_parent()


def _die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent thread exits (so whatever
    starts a load must do it from a thread that outlives the load: epbench's main one)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0


class BackgroundLoad:
    """The load of one kind, as child processes; start() and stop() are idempotent."""

    def __init__(self, kind: str, seed: int = 0) -> None:
        if kind not in LOAD_KINDS:
            raise EpbenchError(f"unknown load {kind!r}; use one of {', '.join(LOAD_KINDS)}")
        self.kind = kind
        self.seed = seed
        self.children: list[subprocess.Popen[bytes]] = []
        # Exit codes of children that had ended before stop(): the load was not running
        # for all of what it was meant to load.
        self.died: list[int] = []

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self.children]

    def start(self) -> None:
        """Start the children; from a thread that outlives them (PR_SET_PDEATHSIG fires
        when the starting thread exits)."""
        if self.kind == "none" or self.children:
            return
        self.children.append(subprocess.Popen(
            [sys.executable, "-m", "epbench.harness.load", self.kind, str(self.seed),
             str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_child_setup, close_fds=True,
        ))

    def stop(self) -> None:
        """Kill every child's whole process group and reap it (no zombie, no orphan)."""
        children, self.children = self.children, []
        self.died += [rc for rc in (child.poll() for child in children) if rc is not None]
        for child in children:
            _signal_group(child.pid, signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(child.pid, signal.SIGKILL)
                # By pid too: should the child not lead its group, killpg reached nothing.
                child.kill()
                child.wait()


def _signal_group(pgid: int, sig: int) -> None:
    with suppress(ProcessLookupError):  # already gone
        os.killpg(pgid, sig)


@contextmanager
def background_load(kind: str, seed: int = 0) -> Iterator[BackgroundLoad]:
    """The load running for the duration of a ``with`` block, stopped however it ends."""
    load = BackgroundLoad(kind, seed)
    try:
        load.start()
        yield load
    finally:
        load.stop()


def _busy_until(deadline: float) -> None:
    x = 0
    while time.monotonic() < deadline:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def main(argv: Sequence[str]) -> None:
    """The child: loop until killed, or until whatever started it dies (a script that
    runs ``python -m epbench.harness.load`` itself gets the same guarantee as validate)."""
    usage = "python -m epbench.harness.load bursty|sustained [SEED [PARENT_PID]]"
    kind = argv[0] if argv else ""
    if kind not in LOAD_KINDS or kind == "none":
        sys.exit(f"epbench.harness.load: the kind is bursty or sustained, not {kind!r} "
                 f"({usage})")
    try:
        seed, parent = (int(a) for a in (list(argv[1:3]) + ["0", "0"])[:2])
    except ValueError:
        sys.exit(f"epbench.harness.load: SEED and PARENT_PID are integers, not "
                 f"{' '.join(argv[1:3])!r} ({usage})")
    if not _die_with_parent():
        sys.exit("epbench.harness.load: prctl(PR_SET_PDEATHSIG) failed, so this load could "
                 "outlive what started it; not starting")
    # PARENT_PID closes the race of a parent that died before the line above took effect.
    if parent and os.getppid() != parent:
        sys.exit(f"epbench.harness.load: its parent {parent} is gone; not starting")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness decides when the load stops
    rng = random.Random(seed)
    while True:
        if kind == "sustained":
            _busy_until(time.monotonic() + 1.0)
            continue
        _busy_until(time.monotonic() + rng.uniform(*BURST_RANGE_S))
        time.sleep(rng.uniform(*BURST_RANGE_S))


if __name__ == "__main__":
    main(sys.argv[1:])
