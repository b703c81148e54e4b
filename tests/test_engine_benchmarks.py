"""BENCHMARKS.md rendering: targets judged from per-round ratios to the in-run control."""

from __future__ import annotations

import copy
import json

import numpy as np

from epbench.cases.grids import load_grid
from epbench.core.model import Results
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
from tests.support import synthetic
from tests.support.synthetic import as_results

ARMS = {  # key: (kind, spec, options)
    "ort": ("ort", "ort", {}),
    "engine": ("engine", "engine", {}),
    "pn": ("engine", "engine:partition=per_node,name=pn", {"partition": "per_node"}),
    "slow": ("engine", "engine:inject_delay_ns_per_run=5", {"inject_delay_ns_per_run": "5"}),
    "plugin:nxrt_ep_cpu": ("plugin", "plugin:nxrt_ep_cpu", {}),
}


def _valid_doc(per_case: dict[str, list[dict[str, list[int]]]],
               counters: dict[str, dict[str, dict[str, float]]] | None = None,
               arms: dict[str, tuple[str, str, dict[str, str]]] = ARMS) -> dict:
    """A whole results document (tests.support.synthetic.results_doc) whose rounds carry
    exactly these samples: per case, per round, per arm the calls' ns."""
    rounds = {len(r) for r in per_case.values()}
    assert len(rounds) == 1
    doc = synthetic.results_doc({name: dict.fromkeys(arms, 1000.0) for name in per_case},
                                rounds=rounds.pop(), counters=counters)
    for key, (kind, spec, options) in arms.items():
        doc["arms"][key].update(kind=kind, spec=spec, options=dict(options))
    for name, per_round in per_case.items():
        for rnd, samples in zip(doc["cases"][name]["rounds"], per_round, strict=True):
            rnd["summary_ns"] = {arm: block_summary(v) for arm, v in samples.items()}
    doc["config"]["gate"]["policy"] = "wait"
    Results.from_dict(copy.deepcopy(doc))  # whole: the loader takes it as it is
    return doc


def _doc() -> dict:
    # relu_d100_w8: engine at 0.1x in one round, 0.3x in another, 0.15x in the third
    # (median 0.15: met); per_node at 1.2x every round (missed).
    rounds = [
        {"ort": [100, 100, 100], "engine": [10, 10, 10], "pn": [120, 120, 120],
         "slow": [1, 1, 1], "plugin:nxrt_ep_cpu": [90, 90, 90]},
        {"ort": [200, 200, 200], "engine": [60, 60, 60], "pn": [240, 240, 240],
         "slow": [1, 1, 1], "plugin:nxrt_ep_cpu": [180, 180, 180]},
        {"ort": [100, 100, 100], "engine": [15, 15, 15], "pn": [120, 120, 120],
         "slow": [1, 1, 1], "plugin:nxrt_ep_cpu": [90, 90, 90]},
    ]
    counters = {"relu_d100_w8": {"engine": {"ort_api_calls": 5.0, "heap_allocs": 0.0},
                                 "pn": {"ort_api_calls": 500.0, "heap_allocs": 0.0}}}
    return _valid_doc({"relu_d100_w8": rounds}, counters)


def test_round_ratios_are_medians_over_the_control() -> None:
    case = as_results(_doc()).cases["relu_d100_w8"]
    assert round_ratios(case, "engine") == [0.1, 0.3, 0.15]


def test_targets_are_judged_by_the_median_round_and_knob_arms_are_ignored() -> None:
    rows = {(r["case"], r["mode"]): r for r in evaluate(as_results(_doc()))}
    assert len(rows) == len(TARGETS)
    fused = rows[("relu_d100_w8", "fused")]
    assert (fused["measured"], fused["status"], fused["reason"]) == (0.15, "met", None)
    per_node = rows[("relu_d100_w8", "per_node")]
    assert per_node["status"] == "missed" and per_node["measured"] == 1.2
    assert "plugin ABI" in per_node["reason"]
    assert rows[("relu_d1_w8", "fused")]["status"] == "not run"


def test_render_keeps_missed_targets_visible_with_their_reason() -> None:
    text = render(as_results(_doc()))
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
    assert "pass the results.json of a run" in capsys.readouterr().err


def test_the_cli_refuses_a_newer_schema_instead_of_rendering_it(tmp_path, capsys) -> None:
    doc = _doc()
    doc["schema"] = "epbench.results/99"
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    out = tmp_path / "BENCHMARKS.md"
    assert main([str(results), "-o", str(out)]) == 1
    assert not out.exists()
    err = capsys.readouterr().err
    assert "newer than this epbench understands" in err and len(err.splitlines()) == 1


def test_the_cli_names_a_missing_key_in_one_line(tmp_path, capsys) -> None:
    doc = _doc()
    del doc["cases"]["relu_d100_w8"]["rounds"][1]["summary_ns"]
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    assert main([str(results)]) == 1
    err = capsys.readouterr().err
    assert f"{results}: case 'relu_d100_w8' round 1 has no 'summary_ns' key" in err
    assert len(err.splitlines()) == 1


def _as_schema_1(doc: dict) -> dict:
    """The document as epbench.results/1 wrote it: raw samples per round, no processes."""
    doc = copy.deepcopy(doc)
    doc["schema"] = "epbench.results/1"
    doc["floor"] = doc.pop("overhead")
    for key in ("processes", "sessions", "rounds_per_process", "keep_samples"):
        del doc["config"][key]
    del doc["twin"]
    for case in doc["cases"].values():
        case["floor"] = case.pop("overhead")
        del case["processes"], case["lost_rounds"]
        for rnd in case["rounds"]:
            summary = rnd.pop("summary_ns")
            del rnd["process"], rnd["session"]
            # block_summary of these constant blocks gives back their value
            rnd["samples_ns"] = {arm: [int(b["median"])] * b["n"] for arm, b in summary.items()}
    return doc


def test_a_schema_1_file_is_migrated_not_rendered_as_not_run(tmp_path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_as_schema_1(_doc())))
    out = tmp_path / "BENCHMARKS.md"
    assert main([str(results), "-o", str(out)]) == 0
    text = out.read_text()
    assert "| `relu_d100_w8` | fused | ≤ 0.20× | 0.150× | ✅ met |" in text
    assert "| `relu_d100_w8` | 100 ns | 0.150× | 1.200× | 0.900× | 5 / 0, 500 / 0 |" in text


def test_a_case_with_no_quiet_round_is_marked_where_its_numbers_are_shown() -> None:
    doc = _doc()
    assert "†" not in render(as_results(doc))
    for rnd in doc["cases"]["relu_d100_w8"]["rounds"]:
        rnd["quiet"] = False
    text = render(as_results(doc))
    assert "| `relu_d100_w8` | fused | ≤ 0.20× | 0.150× † | ✅ met |" in text
    assert "| `relu_d100_w8` † | 100 ns |" in text
    assert "† no round of this case passed the idle gate" in text


def _family_doc(kernel_per_node: float) -> dict:
    """relu_w8 at depths 1, 10, 100 with exact lines: time = per-Run + per-node x depth."""
    lines = {"ort": (1000, 10), "engine": (800, 1), "pn": (500, 30),
             "kn": (500, kernel_per_node)}
    calls = {"engine": lambda d: 4, "pn": lambda d: 4 * d, "kn": lambda d: 4 * d}
    arms = {key: ARMS[key] for key in ("ort", "engine", "pn", "plugin:nxrt_ep_cpu")}
    arms["kn"] = ("engine", "engine:partition=kernel,name=kn", {"partition": "kernel"})
    per_case, counters = {}, {}
    for depth in (1, 10, 100):
        name = f"relu_d{depth}_w8"
        per_case[name] = [{arm: [a + b * depth + jitter] * 3 for arm, (a, b) in lines.items()}
                          for jitter in (0, 0, 0, 0)]
        counters[name] = {arm: {"ort_api_calls": float(calls[arm](depth))} for arm in calls}
    # The plugin arm is in the run but has no blocks here (a column of "—").
    return _valid_doc(per_case, counters, arms)


def test_per_node_costs_come_from_the_family_fit_with_calls_per_node() -> None:
    (family,) = decompose(as_results(_family_doc(kernel_per_node=20)))
    assert family["family"] == "relu_w8" and family["depths"] == [1, 10, 100]
    rows = {r["label"]: r for r in family["rows"]}
    assert {k: round(r["slope"], 6) for k, r in rows.items()} == {
        "ort": 10, "engine (fused)": 1, "engine (per_node)": 30, "engine (kernel)": 20}
    assert round(rows["engine (kernel)"]["intercept"], 6) == 500
    assert rows["engine (per_node)"]["calls_per_node"] == 4
    assert rows["engine (fused)"]["calls_per_node"] == 0
    assert rows["ort"]["calls_per_node"] is None
    assert family["dispatch"]["met"] and round(family["dispatch"]["diff"], 6) == -10
    text = render(as_results(_family_doc(kernel_per_node=20)))
    assert "| kernel per-node cost ≤ per_node's (`relu_w8`) | 20 ns | 30 ns | -10 ns" in text
    assert "| engine (kernel) | 20 ns [20, 20] | 500 ns [500, 500] | 4 |" in text
    # The grid's columns and its call counts follow the same arm order.
    assert "| engine (fused) | engine (per_node) | engine (kernel) | plugin:nxrt_ep_cpu |" in text
    assert "| `relu_d10_w8` | 1.10 µs | 0.736× | 0.727× | 0.636× | — | 4 / 0, 40 / 0, 40 / 0 |" \
        in text


def test_a_slower_kernel_dispatch_is_a_visible_miss_with_its_reason() -> None:
    text = render(as_results(_family_doc(kernel_per_node=40)))
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
