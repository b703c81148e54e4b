"""BENCHMARKS.md rendering: targets judged from per-round ratios to the in-run control."""

from __future__ import annotations

import json

import numpy as np

from epbench.cases.grids import case_by_name, load_grid
from epbench.core.numbers import block_summary
from epbench.engine.benchmarks import (
    TARGETS,
    decompose,
    evaluate,
    family_of,
    fit_family,
    main,
    render,
    round_ratios,
)
from epbench.reports import stats


def _round(samples: dict[str, list[int]], quiet: bool = True) -> dict:
    return {"summary_ns": {arm: block_summary(v) for arm, v in samples.items()}, "quiet": quiet}


def _doc() -> dict:
    arms = {
        "ort": {"kind": "ort", "spec": "ort", "options": {}},
        "engine": {"kind": "engine", "spec": "engine", "options": {}},
        "pn": {"kind": "engine", "spec": "engine:partition=per_node,name=pn",
               "options": {"partition": "per_node"}},
        "slow": {"kind": "engine", "spec": "engine:inject_delay_ns_per_run=5",
                 "options": {"inject_delay_ns_per_run": "5"}},
        "plugin:nxrt_ep_cpu": {"kind": "plugin", "spec": "plugin:nxrt_ep_cpu", "options": {}},
    }
    # relu_d100_w8: engine at 0.1x in one round, 0.3x in another, 0.15x in the third
    # (median 0.15: met); per_node at 1.2x every round (missed).
    rounds = [
        _round({"ort": [100, 100, 100], "engine": [10, 10, 10], "pn": [120, 120, 120],
                "slow": [1, 1, 1], "plugin:nxrt_ep_cpu": [90, 90, 90]}),
        _round({"ort": [200, 200, 200], "engine": [60, 60, 60], "pn": [240, 240, 240],
                "slow": [1, 1, 1], "plugin:nxrt_ep_cpu": [180, 180, 180]}),
        _round({"ort": [100, 100, 100], "engine": [15, 15, 15], "pn": [120, 120, 120],
                "slow": [1, 1, 1], "plugin:nxrt_ep_cpu": [90, 90, 90]}),
    ]
    case = {"status": "ok", "rounds": rounds,
            "arms": {"engine": {"counters_per_run": {"ort_api_calls": 5.0, "heap_allocs": 0.0}},
                     "pn": {"counters_per_run": {"ort_api_calls": 500.0, "heap_allocs": 0.0}}}}
    return {"arms": arms, "cases": {"relu_d100_w8": case},
            "config": {"rounds": 3, "threads": 1, "gate": {"policy": "wait"}},
            "host": {"cpu_model": "Test CPU", "logical_cores": 2, "onnxruntime": "1.32.0"},
            "created": "2026-01-01T00:00:00+00:00"}


def test_round_ratios_are_medians_over_the_control() -> None:
    case = _doc()["cases"]["relu_d100_w8"]
    assert round_ratios(case, "engine") == [0.1, 0.3, 0.15]


def test_targets_are_judged_by_the_median_round_and_knob_arms_are_ignored() -> None:
    rows = {(r["case"], r["mode"]): r for r in evaluate(_doc())}
    assert len(rows) == len(TARGETS)
    fused = rows[("relu_d100_w8", "fused")]
    assert (fused["measured"], fused["status"], fused["reason"]) == (0.15, "met", None)
    per_node = rows[("relu_d100_w8", "per_node")]
    assert per_node["status"] == "missed" and per_node["measured"] == 1.2
    assert "plugin ABI" in per_node["reason"]
    assert rows[("relu_d1_w8", "fused")]["status"] == "not run"


def test_render_keeps_missed_targets_visible_with_their_reason() -> None:
    text = render(_doc())
    assert "| `relu_d100_w8` | fused | ≤ 0.20× | 0.150× | ✅ met |" in text
    assert "| `relu_d100_w8` | per_node | ≤ 1.00× | 1.200× | ❌ missed [1] |" in text
    assert "[1] every partition is one trip through ORT's plugin ABI" in text
    assert "| `relu_d100_w8` | 100 ns | 0.150× | 1.200× | 0.900× | 5 / 0, 500 / 0 |" in text
    assert "python -m engine.benchmarks bench-out/results.json -o BENCHMARKS.md" in text


def test_cli_writes_the_file_and_reports_a_bad_input(tmp_path, capsys) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_doc()))
    out = tmp_path / "BENCHMARKS.md"
    assert main([str(results), "-o", str(out)]) == 0
    assert out.read_text().startswith("# Benchmarks")
    assert main([str(tmp_path / "missing.json")]) == 1
    assert "pass an epbench results.json" in capsys.readouterr().err


def test_a_case_with_no_quiet_round_is_marked_where_its_numbers_are_shown() -> None:
    doc = _doc()
    assert "†" not in render(doc)
    for rnd in doc["cases"]["relu_d100_w8"]["rounds"]:
        rnd["quiet"] = False
    text = render(doc)
    assert "| `relu_d100_w8` | fused | ≤ 0.20× | 0.150× † | ✅ met |" in text
    assert "| `relu_d100_w8` † | 100 ns |" in text
    assert "† no round of this case passed the idle gate" in text


def _family_doc(kernel_per_node: float) -> dict:
    """relu_w8 at depths 1, 10, 100 with exact lines: time = per-Run + per-node x depth."""
    lines = {"ort": (1000, 10), "engine": (800, 1), "pn": (500, 30),
             "kn": (500, kernel_per_node)}
    calls = {"engine": lambda d: 4, "pn": lambda d: 4 * d, "kn": lambda d: 4 * d}
    doc = _doc()
    doc["arms"]["kn"] = {"kind": "engine", "spec": "engine:partition=kernel,name=kn",
                         "options": {"partition": "kernel"}}
    doc["cases"] = {}
    for depth in (1, 10, 100):
        name = f"relu_d{depth}_w8"
        rounds = [_round({arm: [a + b * depth + jitter] * 3 for arm, (a, b) in lines.items()})
                  for jitter in (0, 0, 0, 0)]
        doc["cases"][name] = {
            "status": "ok", "spec": case_by_name(name).to_dict(), "rounds": rounds,
            "arms": {arm: {"counters_per_run": {"ort_api_calls": float(calls[arm](depth))}
                           if arm in calls else None} for arm in lines}}
    return doc


def test_per_node_costs_come_from_the_family_fit_with_calls_per_node() -> None:
    (family,) = decompose(_family_doc(kernel_per_node=20))
    assert family["family"] == "relu_w8" and family["depths"] == [1, 10, 100]
    rows = {r["label"]: r for r in family["rows"]}
    assert {k: round(r["slope"], 6) for k, r in rows.items()} == {
        "ort": 10, "engine (fused)": 1, "engine (per_node)": 30, "engine (kernel)": 20}
    assert round(rows["engine (kernel)"]["intercept"], 6) == 500
    assert rows["engine (per_node)"]["calls_per_node"] == 4
    assert rows["engine (fused)"]["calls_per_node"] == 0
    assert rows["ort"]["calls_per_node"] is None
    assert family["dispatch"]["met"] and round(family["dispatch"]["diff"], 6) == -10
    text = render(_family_doc(kernel_per_node=20))
    assert "| kernel per-node cost ≤ per_node's (`relu_w8`) | 20 ns | 30 ns | -10 ns" in text
    assert "| engine (kernel) | 20 ns [20, 20] | 500 ns [500, 500] | 4 |" in text
    # The grid's columns and its call counts follow the same arm order.
    assert "| engine (fused) | engine (per_node) | engine (kernel) | plugin:nxrt_ep_cpu |" in text
    assert "| `relu_d10_w8` | 1.10 µs | 0.736× | 0.727× | 0.636× | — | 4 / 0, 40 / 0, 40 / 0 |" \
        in text


def test_a_slower_kernel_dispatch_is_a_visible_miss_with_its_reason() -> None:
    text = render(_family_doc(kernel_per_node=40))
    assert "| +10 ns [+10, +10] | ❌ missed [k] |" in text
    assert "[k] a registered plugin kernel is still called through ORT's plugin ABI" in text


def test_the_restated_family_rule_is_the_cases_own() -> None:
    for spec in load_grid("full"):
        assert family_of(spec.to_dict()) == spec.family, spec.name


def test_the_restated_fit_is_epbenchs_fit() -> None:
    """Same points as reports.stats.fit_family, intervals within bootstrap noise."""
    rng = np.random.default_rng(1)
    depths = [1, 10, 100, 1000]
    rounds = [{arm: 500 + slope * d + rng.normal(0, 40, 30)
               for arm, slope in (("a", 20.0), ("b", 31.0))} for d in depths]
    ours = fit_family(depths, rounds, ["a", "b"])
    theirs = stats.fit_family(depths, rounds, ["a", "b"])
    for arm in ("a", "b"):
        assert ours[arm]["slope"] == np.float64(theirs[arm].slope)
        assert ours[arm]["intercept"] == np.float64(theirs[arm].intercept)
        width = theirs[arm].slope_ci[1] - theirs[arm].slope_ci[0]
        assert np.allclose(ours[arm]["slope_ci"], theirs[arm].slope_ci, atol=0.2 * width)
