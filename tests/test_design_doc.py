"""docs/design.md quotes the code: its numbers, its layers and its import-graph facts."""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import tomllib

from epbench.harness import gate
from epbench.harness.worker import COUNTER_RUNS, REWARM_CALLS
from epbench.reports import defaults
from epbench.reports.stats import MIN_DRIFT_ROUNDS, min_rounds
from tests.support.import_graph import cycles, hidden_imports

ROOT = Path(__file__).resolve().parent.parent
DESIGN = (ROOT / "docs" / "design.md").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_quoted_layers_are_the_contract():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    quoted = re.search(r"layers = (\[.*?\])", DESIGN, flags=re.S).group(1)
    assert re.findall(r'"([^"]+)"', quoted) == contract["layers"]


def test_the_quoted_numbers_are_the_code():
    text = _flat(DESIGN)
    quoted = [
        f"`--confidence` {defaults.CONFIDENCE:g}",
        f"`--fdr` {defaults.FDR:g}",
        f"floor {defaults.FLOOR:g}, k {defaults.K:g}",
        f"Without either the noise is {defaults.NOISE_WITHOUT_PROFILE:g}, so t = "
        f"{max(defaults.FLOOR, defaults.K * defaults.NOISE_WITHOUT_PROFILE):.0%}".replace(
            "%", " %"),
        f"`--alert` or {defaults.ALERT_FACTOR:g}t",
        f"over {defaults.CALIBRATION_REPEATS} repeats",
        f"{defaults.NOISE_PERCENTILE:g}th percentile",
        f"needs {min_rounds(defaults.CONFIDENCE)} usable rounds "
        f"({min_rounds(defaults.CONFIDENCE, sides=2)} per run for two runs)",
        f"never fewer than {defaults.MIN_ROUNDS}",
        f"default `{defaults.FAIL_ON}`",
        f"at least {gate.DEFAULT_THRESHOLD:g} idle",
        f"{gate.DEFAULT_WINDOW_S * 1000:g} ms window",
        f"up to {gate.DEFAULT_MAX_WAIT_S:g} s per round and {gate.DEFAULT_BUDGET_S:g} s per case",
        f"at least {gate.MIN_JUDGED_TICKS} ticks",
        f"over {COUNTER_RUNS} untimed runs",
        f"every arm makes {REWARM_CALLS} untimed calls",
        f"from {MIN_DRIFT_ROUNDS} rounds",
    ]
    missing = [q for q in quoted if q not in text]
    assert missing == []


def test_the_after_graph_is_as_described():
    graph = grimp.build_graph("epbench")
    assert cycles(graph) == []
    assert hidden_imports(["epbench"]) == []
    # The module count in the text is that of the restructuring; the zeros must hold on.
    assert "0 cycles, 0 hidden project imports" in _flat(DESIGN)
