"""BENCHMARKS.md rendering (reports.benchmarks, `epbench report --benchmarks`): targets
judged from per-round ratios to the in-run control, over quiet rounds only."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from click.testing import CliRunner, Result

from epbench.cli.main import cli
from epbench.core.errors import EXIT_USER_ERROR, EpbenchError
from epbench.core.model import Results
from epbench.core.numbers import block_summary
from epbench.reports.benchmarks import (
    HEADER,
    RENDER_COMMAND,
    RUN_COMMAND,
    TARGETS,
    decompose,
    evaluate,
    render,
    round_ratios,
)
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


def _report(*args: object) -> Result:
    return CliRunner().invoke(cli, ["report", *map(str, args)])


def test_round_ratios_are_medians_over_the_control() -> None:
    case = as_results(_doc()).cases["relu_d100_w8"]
    assert round_ratios(case, "engine", "ort") == [0.1, 0.3, 0.15]


def test_targets_are_judged_by_the_median_round_and_knob_arms_are_ignored() -> None:
    rows = {(r.target.case, r.target.mode): r for r in evaluate(as_results(_doc()))}
    assert len(rows) == len(TARGETS)
    fused = rows[("relu_d100_w8", "fused")]
    assert (fused.measured, fused.rounds, fused.status, fused.reason) == (0.15, 3, "met", None)
    per_node = rows[("relu_d100_w8", "per_node")]
    assert per_node.status == "missed" and per_node.measured == 1.2
    assert per_node.reason is not None and "plugin ABI" in per_node.reason
    assert rows[("relu_d1_w8", "fused")].status == "not run"


def test_render_keeps_missed_targets_visible_with_their_reason() -> None:
    text = render(as_results(_doc()))
    assert "| `relu_d100_w8` | fused | ≤ 0.20× | 0.150× | ✅ met |" in text
    assert "| `relu_d100_w8` | per_node | ≤ 1.00× | 1.200× | ❌ missed [1] |" in text
    assert "[1] every partition is one trip through ORT's plugin ABI" in text
    assert "| `relu_d100_w8` | 100 ns | 0.150× | 1.200× | 0.900× | 5 / 0, 500 / 0 |" in text
    assert RENDER_COMMAND in text.splitlines()
    assert "engine.benchmarks" not in text and "†" not in text


def test_the_command_writes_the_file_and_reports_a_bad_input(tmp_path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_doc()))
    out = tmp_path / "BENCHMARKS.md"
    written = _report("--benchmarks", results, "--out", out)
    assert written.exit_code == 0, written.output
    assert out.read_text() == render(as_results(_doc()))
    printed = _report("--benchmarks", results)  # no --out: stdout, like `compare`
    assert printed.exit_code == 0 and printed.stdout == out.read_text()
    missing = _report("--benchmarks", tmp_path / "missing.json")
    assert missing.exit_code == EXIT_USER_ERROR
    assert "pass the results.json of a run" in missing.output


def test_the_command_refuses_a_newer_schema_instead_of_rendering_it(tmp_path) -> None:
    doc = _doc()
    doc["schema"] = "epbench.results/99"
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    out = tmp_path / "BENCHMARKS.md"
    result = _report("--benchmarks", results, "--out", out)
    assert result.exit_code == EXIT_USER_ERROR
    assert not out.exists()
    assert "newer than this epbench understands" in result.output
    assert len(result.output.splitlines()) == 1


def test_the_command_names_a_missing_key_in_one_line(tmp_path) -> None:
    doc = _doc()
    del doc["cases"]["relu_d100_w8"]["rounds"][1]["summary_ns"]
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    result = _report("--benchmarks", results)
    assert result.exit_code == EXIT_USER_ERROR
    assert f"{results}: cases.relu_d100_w8.rounds[1].summary_ns: missing;" in result.output
    assert len(result.output.splitlines()) == 1


def test_benchmarks_and_the_html_page_do_not_mix(tmp_path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_doc()))
    both = _report("--benchmarks", results, "--html", tmp_path / "html")
    assert both.exit_code == EXIT_USER_ERROR
    assert "--benchmarks RESULTS takes no INPUT, --history or --html" in both.output
    stray = _report(results, "--html", tmp_path / "html", "--out", tmp_path / "x.md")
    assert stray.exit_code == EXIT_USER_ERROR
    assert "--out is where --benchmarks writes BENCHMARKS.md" in stray.output
    no_html = _report(results)
    assert no_html.exit_code == 2 and "Missing option '--html'" in no_html.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


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
    assert _report("--benchmarks", results, "--out", out).exit_code == 0
    text = out.read_text()
    assert "| `relu_d100_w8` | fused | ≤ 0.20× | 0.150× | ✅ met |" in text
    assert "| `relu_d100_w8` | 100 ns | 0.150× | 1.200× | 0.900× | 5 / 0, 500 / 0 |" in text


# -- a showcase only from quiet rounds -----------------------------------------------------

QUIET_CASES = ("relu_d1_w8", "relu_d10_w8", "relu_d100_w8")  # two targets, one grid case


def _quiet_doc(quiet: dict[str, list[bool]]) -> dict:
    """Four rounds per case: the engine at 0.1x and 0.2x in rounds 0 and 1, at 1.0x in
    rounds 2 and 3 (what a busy machine did to it); `quiet` per case and round."""
    per_case = {}
    for name in QUIET_CASES:
        per_case[name] = [{"ort": [100] * 3, "engine": [engine] * 3, "pn": [120] * 3,
                           "slow": [1] * 3, "plugin:nxrt_ep_cpu": [90] * 3}
                          for engine in (10, 20, 100, 100)]
    doc = _valid_doc(per_case)
    for name, flags in quiet.items():
        for rnd, flag in zip(doc["cases"][name]["rounds"], flags, strict=True):
            rnd["quiet"] = flag
    return doc


HALF = [True, True, False, False]


def test_figures_come_from_quiet_rounds_and_half_quiet_is_enough(tmp_path) -> None:
    doc = _quiet_doc({"relu_d1_w8": HALF, "relu_d100_w8": HALF,
                      "relu_d10_w8": [True, False, False, False]})
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    out = tmp_path / "BENCHMARKS.md"
    result = _report("--benchmarks", results, "--out", out)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    # 0.15x: the median of the quiet rounds' 0.1x and 0.2x; with the busy rounds, 0.6x.
    assert "| `relu_d100_w8` | fused | ≤ 0.20× | 0.150× | ✅ met |" in text
    assert "| `relu_d100_w8` | 100 ns | 0.150× | 1.200× | 0.900× | — |" in text
    # A grid case under half quiet shows no figures, and its family fit leaves it out.
    assert "| `relu_d10_w8` | not shown: 1 of 4 rounds quiet, fewer than half |" in text
    assert "### `relu_w8` (depths 1, 100)" in text
    assert "Left out: `relu_d10_w8`, fewer than half their rounds quiet." in text
    assert "†" not in text


def test_a_target_case_mostly_busy_is_refused_by_name_and_nothing_is_written(tmp_path) -> None:
    doc = _quiet_doc({"relu_d1_w8": [False] * 4, "relu_d100_w8": [True, False, False, False],
                      "relu_d10_w8": [False] * 4})
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    out = tmp_path / "BENCHMARKS.md"
    result = _report("--benchmarks", results, "--out", out)
    assert result.exit_code == EXIT_USER_ERROR
    assert not out.exists()
    # The two target cases, each with its count; relu_d10_w8 is no target's case.
    assert result.output == (
        "Error: BENCHMARKS.md shows targets from quiet rounds only, and fewer than half the "
        "rounds of relu_d1_w8 (0 of 4 rounds quiet), relu_d100_w8 (1 of 4 rounds quiet) "
        "passed the idle gate (the machine was busy); rerun `make benchmarks` on a quiet "
        "machine\n")
    try:
        render(as_results(doc))
    except EpbenchError as exc:  # the library raises; it never prints or exits
        assert exc.message in result.output
    else:
        raise AssertionError("render() wrote a page from busy rounds")


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
    assert family.family == "relu_w8" and family.depths == (1, 10, 100)
    assert family.left_out == ()
    rows = {r.label: r for r in family.rows}
    assert {k: round(r.fit.slope, 6) for k, r in rows.items()} == {
        "ort": 10, "engine (fused)": 1, "engine (per_node)": 30, "engine (kernel)": 20}
    assert round(rows["engine (kernel)"].fit.intercept, 6) == 500
    assert rows["engine (per_node)"].calls_per_node == 4
    assert rows["engine (fused)"].calls_per_node == 0
    assert rows["ort"].calls_per_node is None
    assert family.dispatch is not None
    assert family.dispatch.met and round(family.dispatch.diff, 6) == -10
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


ROOT = Path(__file__).resolve().parent.parent


def test_make_benchmarks_and_the_committed_page_name_the_one_command() -> None:
    page = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").splitlines()
    assert page[:len(HEADER)] == list(HEADER)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = " ".join(makefile.split("\nbenchmarks:", 1)[1].split("\n\n", 1)[0]
                      .replace("\\\n", " ").split())
    run = " ".join(" ".join(RUN_COMMAND).replace("\\", " ").split())
    assert run.replace("--out bench-out", "--out $(OUT)/benchmarks --overwrite") in recipe
    assert ("epbench report --benchmarks $(OUT)/benchmarks/results.json --out BENCHMARKS.md"
            in recipe)
