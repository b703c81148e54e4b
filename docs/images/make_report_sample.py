"""Write the sample run behind docs/images/report.png (`make report-screenshot`).

Synthetic and seeded (tests/support/synthetic.py), so that every plot of the HTML report has
something to show and the picture is the same on every machine: a two-commit run
(arms `base` and `head` beside the `ort` control, as compare-commits names them)
where head costs 10 % more per node on the relu_w8 chain family, is 6 % faster on
sigmoid, and three rounds of matmul_128x128 ran while another core was busy.

Usage: python docs/images/make_report_sample.py OUT_DIR  (writes OUT_DIR/results.json)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tests.support

from tests.support import synthetic  # noqa: E402

NOISE = synthetic.NoiseModel(machine_sigma=0.01, arm_sigma=0.01, spike_prob=0.03)


def main(out_dir: str) -> None:
    cases = {
        f"relu_d{d}_w8": {"ort": 800 + 210.0 * d, "base": 450 + 60.0 * d, "head": 450 + 66.0 * d}
        for d in (1, 10, 100)
    }
    cases["matmul_512x512"] = {"ort": 700000.0, "base": 640000.0, "head": 641000.0}
    cases["sigmoid_d10_w4096"] = {"ort": 90000.0, "base": 85000.0, "head": 80000.0}
    cases["matmul_128x128"] = {"ort": 52000.0, "base": 48000.0, "head": 48000.0}
    doc = synthetic.results_doc(cases, rounds=20, samples=3, seed=7, noise=NOISE,
                                unquiet_rounds={"matmul_128x128": [3, 4, 5]})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
