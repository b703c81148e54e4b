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
    DEPTH_TARGETS,
    HEADER,
    RENDER_COMMAND,
    RUN_COMMAND,
    TARGETS,
    decompose,
    evaluate,
    evaluate_depth,
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


def _bound(case: str, mode: str) -> float:
    """A target's bound as reports.benchmarks holds it (the tests never restate one)."""
    return next(t.bound for t in TARGETS if (t.case, t.mode) == (case, mode))


def _target_line(case: str, mode: str, measured: float, status: str) -> str:
    return f"| `{case}` | {mode} | ≤ {_bound(case, mode):.2f}× | {measured:.3f}× | {status} |"


FUSED = _bound("relu_d100_w8", "fused")
ORT_NS = (1000, 2000, 1000)  # the second round twice as slow: per-round ratios, not medians
# The fused engine at half, twice and 0.75 times its target in the three rounds: the
# median round (0.75x the target) meets it, the mean of the ratios would not.
ENGINE_NS = tuple(round(o * FUSED * k) for o, k in zip(ORT_NS, (0.5, 2.0, 0.75), strict=True))
ENGINE_RATIOS = [e / o for e, o in zip(ENGINE_NS, ORT_NS, strict=True)]
FUSED_MEASURED = sorted(ENGINE_RATIOS)[1]


def _doc() -> dict:
    # relu_d1_w8 and relu_d100_w8 alike: the fused engine as above (met in both), per_node
    # at 1.2x every round (relu_d1_w8's per_node target missed).
    rounds = [{"ort": [o] * 3, "engine": [e] * 3, "pn": [o * 6 // 5] * 3, "slow": [1] * 3,
               "plugin:nxrt_ep_cpu": [o * 9 // 10] * 3}
              for o, e in zip(ORT_NS, ENGINE_NS, strict=True)]
    counters = {"relu_d100_w8": {"engine": {"ort_api_calls": 5.0, "heap_allocs": 0.0},
                                 "pn": {"ort_api_calls": 500.0, "heap_allocs": 0.0}}}
    return _valid_doc({"relu_d1_w8": rounds, "relu_d100_w8": copy.deepcopy(rounds)}, counters)


def _report(*args: object) -> Result:
    return CliRunner().invoke(cli, ["report", *map(str, args)])


def test_round_ratios_are_medians_over_the_control() -> None:
    case = as_results(_doc()).cases["relu_d100_w8"]
    assert round_ratios(case, "engine", "ort") == ENGINE_RATIOS
    assert FUSED_MEASURED <= FUSED < sum(ENGINE_RATIOS) / 3


def test_targets_are_judged_by_the_median_round_and_knob_arms_are_ignored() -> None:
    rows = {(r.target.case, r.target.mode): r for r in evaluate(as_results(_doc()))}
    assert len(rows) == len(TARGETS)
    fused = rows[("relu_d100_w8", "fused")]
    assert (fused.measured, fused.rounds, fused.status, fused.reason) == (
        FUSED_MEASURED, 3, "met", None)
    per_node = rows[("relu_d1_w8", "per_node")]
    assert per_node.status == "missed" and per_node.measured == 1.2
    assert per_node.reason is not None and "plugin ABI" in per_node.reason
    assert rows[("relu_d1000_w8", "fused")].status == "not run"


def test_render_keeps_missed_targets_visible_with_their_reason() -> None:
    text = render(as_results(_doc()))
    assert _target_line("relu_d100_w8", "fused", FUSED_MEASURED, "✅ met") in text
    assert _target_line("relu_d1_w8", "per_node", 1.2, "❌ missed [1]") in text
    assert "[1] a one-node case is one partition in either mode" in text
    assert (f"| `relu_d100_w8` | 1.00 µs | {FUSED_MEASURED:.3f}× | 1.200× | 0.900× | "
            "5 / 0, 500 / 0 |") in text
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
    assert _target_line("relu_d100_w8", "fused", FUSED_MEASURED, "✅ met") in text
    assert (f"| `relu_d100_w8` | 1.00 µs | {FUSED_MEASURED:.3f}× | 1.200× | 0.900× | "
            "5 / 0, 500 / 0 |") in text


# -- a showcase only from quiet rounds -----------------------------------------------------

QUIET_CASES = ("relu_d1_w8", "relu_d10_w8", "relu_d100_w8")  # two targets, one grid case


# The fused engine at 0.5x and 1.0x relu_d100_w8's target in rounds 0 and 1 (the quiet
# median: 0.75x, met), 10x in rounds 2 and 3 (what a busy machine did to it).
QUIET_ENGINE_NS = tuple(round(1000 * FUSED * k) for k in (0.5, 1.0, 10, 10))
QUIET_MEASURED = (QUIET_ENGINE_NS[0] + QUIET_ENGINE_NS[1]) / 2000


def _quiet_doc(quiet: dict[str, list[bool]]) -> dict:
    """Four rounds per case, ORT at 1 µs, the engine as QUIET_ENGINE_NS; `quiet` per case
    and round."""
    per_case = {}
    for name in QUIET_CASES:
        per_case[name] = [{"ort": [1000] * 3, "engine": [engine] * 3, "pn": [1200] * 3,
                           "slow": [1] * 3, "plugin:nxrt_ep_cpu": [900] * 3}
                          for engine in QUIET_ENGINE_NS]
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
    # The median of the quiet rounds only; with the busy rounds, over 5x the target.
    assert _target_line("relu_d100_w8", "fused", QUIET_MEASURED, "✅ met") in text
    assert f"| `relu_d100_w8` | 1.00 µs | {QUIET_MEASURED:.3f}× | 1.200× | 0.900× | — |" in text
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


# -- the per-node cost along depth ---------------------------------------------------------


def _depth_doc() -> dict:
    """relu_w8 at depths 1, 100 and 1000, per-node costs (ns) at each depth per arm: ORT and
    kernel flat, per_node 30 ns a node up to depth 100, 40 at 1000."""
    per_node = {"ort": (10, 10), "engine": (1, 1), "pn": (30, 40), "kn": (20, 20)}
    arms = {key: ARMS[key] for key in ("ort", "engine", "pn", "plugin:nxrt_ep_cpu")}
    arms["kn"] = ("engine", "engine:partition=kernel,name=kn", {"partition": "kernel"})
    per_case = {}
    for depth, which in ((1, 0), (100, 0), (1000, 1)):
        per_case[f"relu_d{depth}_w8"] = [
            {arm: [500 + c[which] * (depth - 1)] * 3 for arm, c in per_node.items()}] * 2
    return _valid_doc(per_case, arms=arms)


def test_depth_targets_compare_the_per_node_cost_beyond_the_one_node_run() -> None:
    assert {(t.family, t.mode) for t in DEPTH_TARGETS} == {("relu_w8", "per_node"),
                                                          ("relu_w8", "kernel")}
    rows = {r.target.mode: r for r in evaluate_depth(as_results(_depth_doc()))}
    pn, kn = rows["per_node"], rows["kernel"]
    assert (pn.shallow_ns, pn.deep_ns, pn.ort_growth) == (30, 40, 1)
    assert pn.growth == 40 / 30 > pn.target.bound and pn.status == "missed"
    assert (kn.shallow_ns, kn.deep_ns, kn.growth, kn.status) == (20, 20, 1, "met")
    text = render(as_results(_depth_doc()))
    t = kn.target
    assert (f"| `relu_w8` | kernel | depth {t.deep} ≤ {t.bound:.2f}× depth {t.shallow} | "
            f"20 ns (d{t.shallow}) | 20 ns (d{t.deep}) | 1.000× | 1.000× | ✅ met |") in text
    assert "| 30 ns (d100) | 40 ns (d1000) | 1.333× | 1.000× | ❌ missed |" in text


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
