"""docs/design.md quotes the code: its numbers, its layers and its import-graph facts."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

from epbench.harness import gate
from epbench.harness.interference import MIN_JUDGED_TICKS, longest_window_one_busy_tick_fails
from epbench.harness.worker import COUNTER_RUNS, REWARM_CALLS
from epbench.reports import defaults
from epbench.reports.stats import MIN_DRIFT_ROUNDS, min_rounds
from epbench.workflows.compare_commits import COMMITS_GATE_MAX_WAIT_S
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
        f"at least {MIN_JUDGED_TICKS} ticks",
        f"but never beyond {longest_window_one_busy_tick_fails(gate.DEFAULT_THRESHOLD)} "
        "ticks on any judged core",
        f"compare-commits {COMMITS_GATE_MAX_WAIT_S:g}: it looks but does not wait",
        f"Once {gate.FUTILE_ROUNDS_BEFORE_NO_WAIT} rounds in a row",
        f"over {COUNTER_RUNS} untimed runs",
        f"every arm makes {REWARM_CALLS} untimed calls",
        f"from {MIN_DRIFT_ROUNDS} rounds",
    ]
    missing = [q for q in quoted if q not in text]
    assert missing == []


def test_the_after_graph_is_as_described(package_graph, staged_package):
    assert cycles(package_graph) == []
    assert hidden_imports(["epbench"], root=staged_package) == []
    # The module count in the text is that of the restructuring; the zeros must hold on.
    assert "0 cycles, 0 hidden project imports" in _flat(DESIGN)


# Every module that parses JSON itself, and what it parses: none of them a results file,
# which only epbench/core/results.py reads (load_results; the rest read the model).
JSON_READERS = {
    "epbench/core/results.py": "results files: the one loader, and its JSON Schema",
    "harness/worker.py": "the request on its stdin",
    "harness/worker_process.py": "the worker's events",
    "reports/history/store.py": "the store's own JSON columns",
    "reports/calibrate.py": "noise profiles",
    "reports/bot/artifact.py": "compare artifacts and their schema",
    "epbench/workflows/action.py": "the pull_request event GitHub writes ($GITHUB_EVENT_PATH)",
    "reports/bot/github.py": "GitHub API responses",
    "engine/__init__.py": "the engine library's info string",
    "docs/validation/variance_components.py": "kept samples (results.samples.jsonl.gz), "
                                              "which no command reads",
    "docs/validation/slice_replay.py": "kept samples (results.samples.jsonl.gz), which no "
                                       "command reads",
    "docs/validation/statistics_sim.py": "its own measuring child's figures, before and "
                                         "after (it reads no results file)",
    "docs/validation/rejudge.py": "the stored comparisons (compare.json), set beside their "
                                  "re-judgement (results files go through load_results)",
    "docs/validation/speed_shift.py": "validate's report (validation.json), set beside the "
                                      "re-judgement (results files go through load_results)",
    "docs/validation/level_by_speed.py": "validate's report (validation.json), for the "
                                         "pilot's times and the settings (results "
                                         "files go through load_results)",
    "docs/validation/warmup.py": "the comparison `epbench compare --format json` writes "
                                 "(results files go through load_results)",
    "docs/validation/delay_knob_summary.py": "the comparisons `epbench compare --format "
                                             "json` writes (results files go through "
                                             "load_results)",
    "docs/validation/with_profile.py": "validate's report (validation.json), set beside the "
                                       "re-judgement (results files go through load_results)",
}


def test_no_module_but_the_loader_parses_a_results_file():
    """design.md: "No reader of a results file indexes the JSON: load_results is the one
    reader" -- so a module that calls json.load(s) must be one of the known few."""
    parsing = set()
    for path in sorted(ROOT.glob("*/**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("tests/", ".venv/")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.Attribute) and node.attr in ("load", "loads")
               and isinstance(node.value, ast.Name) and node.value.id == "json"
               for node in ast.walk(tree)):
            parsing.add(rel)
    assert parsing == set(JSON_READERS)
    flat = _flat(DESIGN)
    assert "`load_results` is the one reader of results files" in flat
    assert "`reports/benchmarks.py`" in flat


def test_the_results_file_is_rewritten_after_every_process():
    # The runner writes results.json after each process of each case (harness/runner.py).
    readme = _flat((ROOT / "README.md").read_text())
    for text in (_flat(DESIGN), readme):
        assert "rewritten atomically after every process" in text
        assert "after every case" not in text
