"""Write the sample history behind docs/images/history.png (`make history-screenshot`).

Synthetic and seeded (tests/support/synthetic.py), so the picture is the same on every
machine: 36 commits measured on two machine classes, two cases; at the 21st commit
relu_d10_w8 gets 5 % slower on the engine arm and runs 3 % more instructions (a code
change, so both series step), while add_d10_w8 stays flat.

Usage: python docs/images/make_history_sample.py OUT_DIR
  writes OUT_DIR/<class>/<NN>/results.json; `epbench history import OUT_DIR/<class>
  --machine-class <class>` adds each class.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tests.support

from epbench.core.results import write_results  # noqa: E402
from tests.support import synthetic  # noqa: E402

COMMITS = 36
STEP_AT = 20  # the first slower commit (0-based)
CLASSES = {"github-ubuntu-latest": 1.0, "github-ubuntu-24.04-arm": 1.3}
NOISE = synthetic.NoiseModel(machine_sigma=0.01, arm_sigma=0.02, spike_prob=0.0)


def sha(i: int) -> str:
    return hashlib.sha1(f"sample commit {i}".encode()).hexdigest()


def main(out_dir: str) -> None:
    out = Path(out_dir)
    for c, (machine_class, speed) in enumerate(CLASSES.items()):
        for i in range(COMMITS):
            slower = i >= STEP_AT
            cases = {
                "relu_d10_w8": {"ort": 400.0 * speed,
                                "engine": 150.0 * speed * (1.05 if slower else 1.0)},
                "add_d10_w8": {"ort": 420.0 * speed, "engine": 210.0 * speed},
            }
            counters = {
                "relu_d10_w8": {"engine": {"api_calls": 3.0,
                                           "instructions": 2100.0 * (1.03 if slower else 1.0)}},
                "add_d10_w8": {"engine": {"api_calls": 3.0, "instructions": 2600.0}},
            }
            doc = synthetic.results_doc(cases, rounds=8, samples=3, seed=1000 * c + i,
                                        noise=NOISE, counters=counters,
                                        host_key=f"{machine_class[-3:]}-vm")
            doc["host"]["git_commit"] = sha(i)
            doc["created"] = f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00Z"
            folder = out / machine_class / f"{i:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            write_results(folder / "results.json", doc)


if __name__ == "__main__":
    main(sys.argv[1])
