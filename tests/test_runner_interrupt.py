"""Ctrl-C stops a run cleanly: exit 130, everything measured so far on disk."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import EXIT_INTERRUPTED

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent


def test_sigint_keeps_finished_cases_and_the_partial_one(tmp_path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", "--case", "relu_d1_w8",
         "--case", "relu_d1000_w8", "--arm", "ort:name=ort_b", "--rounds", "2000",
         "--block-ms", "5", "--max-block-iters", "50", "--warmup-ms", "1", "--gate", "off",
         "--quiet", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    stream = out / "results.jsonl"
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    while time.monotonic() < deadline:
        if stream.exists() and len(stream.read_text().splitlines()) >= 2:
            break  # the first case has ended and is on disk
        time.sleep(0.05)
    # Let the second case (about 10 ms a round, 20 s in all) report some rounds.
    time.sleep(3)
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
    assert [json.loads(x)["type"] for x in lines] == ["header", "case", "case", "end"]
    assert json.loads(lines[-1])["interrupted"] is True
