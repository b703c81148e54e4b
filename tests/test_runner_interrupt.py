"""Ctrl-C stops a run cleanly: exit 130, everything measured so far on disk."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epbench.core.errors import EXIT_INTERRUPTED
from tests.support.signals import sigint_at_its_default

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent


def test_sigint_keeps_finished_cases_and_the_partial_one(tmp_path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "epbench.cli.main", "run", "--case", "relu_d1_w8",
         "--case", "relu_d1000_w8", "--arm", "ort:name=ort_b", "--rounds", "2000",
         "--block-ms", "5", "--max-block-iters", "50", "--warmup-ms", "1", "--gate", "off",
         "--quiet", "--processes", "1", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_at_its_default,
    )
    stream = out / "results.jsonl"
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    while time.monotonic() < deadline:
        if stream.exists() and len(stream.read_text().splitlines()) >= 2:
            break  # the first case has ended and is on disk
        time.sleep(0.05)
    # Let the second case (about 10 ms a round, 20 s in all) report some rounds: its
    # worker's start-up alone took more than 3 s on a loaded machine.
    while time.monotonic() < deadline and not _children(proc.pid):
        time.sleep(0.05)
    time.sleep(6)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    assert "Traceback" not in stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["interrupted"] is True
    assert doc["cases"]["relu_d1_w8"]["status"] == "ok"
    assert len(doc["cases"]["relu_d1_w8"]["rounds"]) == 2000
    second = doc["cases"]["relu_d1000_w8"]
    assert second["status"] == "interrupted"
    assert 0 < len(second["rounds"]) < 2000
    lines = stream.read_text().splitlines()
    assert [json.loads(x)["type"] for x in lines] == ["header", "process", "process", "end"]
    assert json.loads(lines[-1])["interrupted"] is True


def _alive(pid: int) -> bool:
    """Running (a zombie left for a non-reaping init does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


# The harness's CLI with a worker that stalls for the second case: a stuck EP
# writes nothing, so only the kernel's parent-death signal can stop it.
STALLING_HARNESS = (
    "import sys, epbench.harness.runner as r; r.WORKER_MODULE = 'tests.support.faulty_worker'; "
    "from epbench.cli.main import main; sys.argv[0] = 'epbench'; main()"
)


def test_a_killed_harness_leaves_no_worker_and_no_complete_looking_results(tmp_path) -> None:
    import os

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", STALLING_HARNESS, "run", "--case", "relu_d1_w8",
         "--case", "relu_d10_w8", "--arm", "ort:name=ort_b", "--rounds", "4",
         "--block-ms", "1", "--max-block-iters", "10", "--warmup-ms", "1", "--gate", "off",
         "--quiet", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # Its temporary folders in tmp_path: a SIGKILLed harness cannot remove them.
        env={**os.environ, "EPBENCH_TEST_FAULT": "stall:relu_d10_w8", "TMPDIR": str(tmp_path)},
    )
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    workers: list[int] = []
    while time.monotonic() < deadline:
        workers = _children(proc.pid)
        if (out / "results.json").exists() and workers:
            break  # case 1 is on disk and case 2's worker has started
        time.sleep(0.05)
    assert workers, "the second case's worker never started"
    proc.kill()  # SIGKILL: the harness gets no chance to clean up
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers), "a worker outlived the harness"
    from epbench.core.results import load_results

    for source in (out, out / "results.jsonl"):
        doc = load_results(source).to_dict()
        assert doc["interrupted"] is True  # never passes for a finished run
        assert doc["cases"]["relu_d1_w8"]["status"] == "ok"
