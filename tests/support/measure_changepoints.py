"""Seeded figures for e-divisive's settings: detection of 1/2/3 % steps with one run per
commit (200 series of 40 commits, step after 20) and false change points per 1000 points in
series without a step (1000 x 20, 400 x 50, 200 x 100 commits).

    python -m tests.support.measure_changepoints '[{}, {"significance": 0.02}]'

Each object (JSON) goes to reports.history.changepoints.e_divisive; docs/history.md quotes
the output.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from tests.support import synthetic


def row(**kw: Any) -> str:
    start = time.time()
    found = {step: synthetic.change_point_rates(200, 40, step=step, at=20, seed=13, **kw)
             for step in (0.03, 0.02, 0.01)}
    false = [synthetic.change_point_rates(rows, n, seed=11, **kw)["false_per_1000"]
             for rows, n in ((1000, 20), (400, 50), (200, 100))]
    return (f"{kw}: found 3 % {found[0.03]['found']:.3f}, 2 % {found[0.02]['found']:.3f}, "
            f"1 % {found[0.01]['found']:.3f}; other change points in the 3 % series "
            f"{found[0.03]['false_per_1000']:.2f}/1000; false per 1000 in 20/50/100-commit "
            f"series {false} ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    for settings in json.loads(sys.argv[1] if len(sys.argv) > 1 else "[{}]"):
        print(row(**settings), flush=True)
