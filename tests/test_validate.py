"""`epbench validate` logic against a fake runner with known effects (no timing, no engine).

The fake turns each arm's engine options into its true time per Run (base +
inject_delay_ns_per_run + nodes x inject_delay_ns_per_node) and its counters
(ort_api_calls = 5 + inject_api_calls_per_run), then draws rounds from
reports.synthetic with very little noise, so every verdict is known in advance:
without a profile t = max(1 %, 2 x 2 %) = 4 %, so 1-3 % stay within noise,
5 % is a regression and 10 % an alert.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from epbench.cases.grids import case_by_name
from epbench.reports.synthetic import NoiseModel, results_doc
from epbench.workflows import validate as val

CASES = ("relu_d1_w8", "relu_d10_w8", "matmul_64x64")
BASE_NS = {"relu_d1_w8": 3000.0, "relu_d10_w8": 4000.0, "matmul_64x64": 9000.0}
QUIET = NoiseModel(machine_sigma=0.0, arm_sigma=0.002, spike_prob=0.0)


@dataclass
class FakeRunner:
    """A stand-in for harness.runner.run: known effects, a fake clock that each run advances."""

    seconds_per_run: float = 10.0
    ignore_delay: frozenset[str] = frozenset()  # cases whose EP ignores the injected delay
    twin_bias: dict[str, float] = field(default_factory=dict)  # A/A twin slower by this
    fixed_order_bias: float = 0.0  # the second arm's penalty when the order is fixed
    miscount: dict[tuple[str, int], int] = field(default_factory=dict)  # (case, call) -> calls
    unquiet: dict[str, list[int]] = field(default_factory=dict)  # case -> rounds failing the gate
    now: float = 0.0
    configs: list[Any] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def __call__(self, config: Any) -> dict[str, Any]:
        self.now += self.seconds_per_run
        self.configs.append(config)
        call = len(self.configs) - 1
        cases, counters = {}, {}
        for spec in config.cases:
            base = BASE_NS[spec.name]
            nodes = spec.depth or 1
            true = {"ort": base * 0.8}
            counters[spec.name] = {}
            for arm in config.arms:
                opts = {k: float(v) for k, v in arm.options}
                ns = base
                if spec.name not in self.ignore_delay:
                    ns += opts.get("inject_delay_ns_per_run", 0.0)
                    ns += nodes * opts.get("inject_delay_ns_per_node", 0.0)
                if arm.key == val.TWIN_ARM:
                    ns *= 1.0 + self.twin_bias.get(spec.name, 0.0)
                    if config.fixed_order:
                        ns *= 1.0 + self.fixed_order_bias
                true[arm.key] = ns
                extra = opts.get("inject_api_calls_per_run", 0.0)
                if extra:
                    extra = self.miscount.get((spec.name, call), extra)
                counters[spec.name][arm.key] = {"ort_api_calls": 5.0 + extra,
                                                "heap_allocs": 0.0}
            cases[spec.name] = true
        doc = results_doc(cases, rounds=config.rounds, seed=config.seed, noise=QUIET,
                          counters=counters, unquiet_rounds=self.unquiet)
        doc["floor"] = {"timer_ns": 50.0, "noop_call_ns": 70.0, "ort_trivial_run_ns": 2000.0,
                        "case": "relu_d1_w8", "loop": "python"}
        return doc


@pytest.fixture(autouse=True)
def _no_host_profile(tmp_path, monkeypatch):
    # The comparator looks for this host's calibration profile in the user cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def plan(**kw: Any) -> val.Plan:
    return val.Plan(cases=tuple(case_by_name(n) for n in CASES), **{
        "budget_s": 200.0, "rounds": 20, **kw})


def test_known_effects_give_known_rates_and_mde():
    fake = FakeRunner(ignore_delay=frozenset({"matmul_64x64"}))
    result = val.validate(plan(), run=fake, clock=fake.clock)
    s = result["summary"]
    n = s["repeats"]
    assert n == 5
    assert s["false_positive_rate"]["hits"] == 0
    assert s["false_positive_rate"]["n"] == 3 * n
    assert s["mde"] == {"relu_d1_w8": 0.05, "relu_d10_w8": 0.05, "matmul_64x64": None}
    relu = result["cases"]["relu_d1_w8"]
    assert [relu["detection"][val.level_arm(v)]["hits"] for v in val.LEVELS] == [0, 0, 0, n, n]
    assert relu["detection"]["d5"]["verdicts"] == ["regression"] * n
    assert relu["detection"]["d10"]["verdicts"] == ["alert"] * n
    assert relu["detection"]["d5"]["measured_change"] == pytest.approx(0.05, abs=0.003)
    # The per-node arm spreads 5 % over 10 nodes of relu_d10_w8 and is seen like d5.
    assert result["cases"]["relu_d10_w8"]["per_node"]["hits"] == n
    assert result["cases"]["relu_d10_w8"]["per_node"]["measured_change"] == pytest.approx(
        0.05, abs=0.003)
    assert result["cases"]["matmul_64x64"]["detection"]["d10"]["hits"] == 0
    assert s["detection"]["d10"]["hits"] == 2 * n and s["detection"]["d10"]["n"] == 3 * n
    assert s["counters"] == {"exact": 3 * n, "n": 3 * n, "all_exact": True}


def test_delays_are_the_levels_of_the_pilot_time():
    fake = FakeRunner()
    val.validate(plan(max_repeats=1, position_test=False), run=fake, clock=fake.clock)
    # The pilot, then one run per case with every arm.
    assert len(fake.configs) == 1 + len(CASES)
    pilot = fake.configs[0]
    assert [a.key for a in pilot.arms] == [val.BASE_ARM]
    by_case = {c.cases[0].name: {a.key: dict(a.options) for a in c.arms}
               for c in fake.configs[1:]}
    relu10 = by_case["relu_d10_w8"]
    assert list(relu10) == ["a", "a2", "d1", "d2", "d3", "d5", "d10", "n5", "c"]
    got = {k: int(v["inject_delay_ns_per_run"]) for k, v in relu10.items()
           if "inject_delay_ns_per_run" in v}
    # The pilot measured ~4000 ns (synthetic noise of 0.2 %).
    for key, level in (("d1", 0.01), ("d2", 0.02), ("d3", 0.03), ("d5", 0.05), ("d10", 0.10)):
        assert got[key] == pytest.approx(level * 4000, rel=0.01)
    assert int(relu10["n5"]["inject_delay_ns_per_node"]) == pytest.approx(0.05 * 4000 / 10,
                                                                          rel=0.01)
    assert relu10["c"] == {"inject_api_calls_per_run": str(val.API_CALLS)}
    assert relu10["a"] == {} and relu10["a2"] == {}


def test_false_positives_counted_per_case_and_per_grid():
    fake = FakeRunner(twin_bias={"relu_d1_w8": 0.06})
    result = val.validate(plan(), run=fake, clock=fake.clock)
    s = result["summary"]
    n = s["repeats"]
    assert result["cases"]["relu_d1_w8"]["false_positives"]["hits"] == n
    assert result["cases"]["relu_d10_w8"]["false_positives"]["hits"] == 0
    assert s["false_positive_rate"]["hits"] == n and s["false_positive_rate"]["n"] == 3 * n
    assert s["familywise_false_positive_rate"]["hits"] == n
    assert s["familywise_false_positive_rate"]["n"] == n


def test_budget_decides_the_repeats():
    # Pilot 10 s, a repeat is 3 runs = 30 s, the position test 10 s, 5 s reserved:
    # 10 + 30 + 10 + 4 x 30 = 170, and a sixth repeat would end at 200 > 195.
    fake = FakeRunner()
    result = val.validate(plan(budget_s=200.0), run=fake, clock=fake.clock)
    # Seconds on FakeRunner's clock (no real time passes): the budget accounting, exactly.
    expected_plan = {"repeats": 5, "elapsed_s": 170.0}
    assert {key: result["plan"][key] for key in expected_plan} == expected_plan
    assert result["plan"]["runs"] == 1 + 5 * 3 + 1
    assert not any("over budget" in note for note in result["notes"])
    fake = FakeRunner()
    small = val.validate(plan(budget_s=30.0), run=fake, clock=fake.clock)
    assert small["plan"]["repeats"] == 1
    # The position test comes right after the first repeat, so even this budget keeps it.
    assert small["plan"]["position_test"] is True
    assert small["summary"]["position_bias"] is not None
    assert any("over budget" in note for note in small["notes"])


def test_position_bias_shows_what_counterbalancing_removes():
    fake = FakeRunner(fixed_order_bias=0.03)
    result = val.validate(plan(max_repeats=3), run=fake, clock=fake.clock)
    fixed_runs = [c for c in fake.configs if c.fixed_order]
    assert len(fixed_runs) == 1
    assert [a.key for a in fixed_runs[0].arms] == ["a", "a2"]
    bias = result["cases"]["relu_d1_w8"]["position_bias"]
    assert bias["fixed_order_change"] == pytest.approx(0.03, abs=0.003)
    assert abs(bias["counterbalanced_change"]) < 0.003
    summary = result["summary"]["position_bias"]
    assert summary["median_abs_fixed_order"] == pytest.approx(0.03, abs=0.003)


def test_counter_miscount_is_reported_not_hidden():
    # Run 2 is the second case (relu_d10_w8) of the first repeat: it reports 4 calls, not 5.
    fake = FakeRunner(miscount={("relu_d10_w8", 2): 4.0})
    result = val.validate(plan(max_repeats=2), run=fake, clock=fake.clock)
    counters = result["cases"]["relu_d10_w8"]["counters"]
    assert counters["exact"] == 1 and counters["n"] == 2 and not counters["all_exact"]
    assert any("expected +5" in d for d in counters["details"])
    assert result["cases"]["relu_d1_w8"]["counters"]["all_exact"]
    assert result["summary"]["counters"]["all_exact"] is False


def test_counter_check_rules():
    row = {"case": "x", "counter": "ort_api_calls", "base": 5.0, "pr": 10.0}
    assert val.counter_check([row], "x") == (True, "ort_api_calls/Run 5 -> 10")
    assert not val.counter_check([], "x")[0]
    assert not val.counter_check([{**row, "pr": 11.0}], "x")[0]
    other = {"case": "x", "counter": "heap_allocs", "base": 0.0, "pr": 1.0}
    assert val.counter_check([row, other], "x") == (False,
                                                    "other counters changed too: heap_allocs")


def test_wilson_interval():
    assert val.wilson_interval(0, 0) == [None, None]
    lo, hi = val.wilson_interval(0, 30)
    assert lo == 0.0 and hi == pytest.approx(0.1135, abs=1e-3)
    lo, hi = val.wilson_interval(30, 30)
    assert hi == 1.0 and lo == pytest.approx(0.8865, abs=1e-3)
    lo, hi = val.wilson_interval(5, 100)
    assert (lo, hi) == (pytest.approx(0.0215, abs=1e-3), pytest.approx(0.1118, abs=1e-3))


def test_outputs_written_and_rendered(tmp_path):
    fake = FakeRunner(ignore_delay=frozenset({"matmul_64x64"}))
    result = val.validate(plan(max_repeats=2), run=fake, clock=fake.clock)
    json_path, md_path = val.write_outputs(result, tmp_path / "out")
    doc = json.loads(json_path.read_text())
    assert doc["schema"] == val.VALIDATION_SCHEMA
    assert doc["summary"]["mde"]["matmul_64x64"] is None
    md = md_path.read_text()
    assert "| False-positive rate (A/A, per case and repeat) | 0.0% (0/6) |" in md
    assert "| Detection of a 5% slowdown (per case and repeat) | 66.7% (4/6) |" in md
    assert "| `relu_d1_w8` | 3.00 µs | 0.16% | 4.0% | 5% (+4.9%) | 0/2 | 0/2 (+1.0%) |" in md
    assert "| `matmul_64x64` | 9.00 µs | 0.18% | 4.0% | > 10 % | 0/2 |" in md
    assert "| Counter table exact (+5 ORT calls/Run) | 6/6 | |" in md
    assert "without a calibration profile" in md
    assert "that means in every one of them" in md


def test_a_case_the_engine_cannot_run_is_left_out_with_a_note():
    fake = FakeRunner()

    def run(config: Any) -> dict[str, Any]:
        doc = fake(config)
        if "matmul_64x64" in doc["cases"]:
            doc["cases"]["matmul_64x64"]["status"] = "failed"
            doc["cases"]["matmul_64x64"]["error"] = "not claimed"
        return doc

    result = val.validate(plan(max_repeats=1), run=run, clock=fake.clock)
    assert set(result["cases"]) == {"relu_d1_w8", "relu_d10_w8"}
    assert any(n.startswith("matmul_64x64 left out") for n in result["notes"])


def test_plan_refuses_nonsense():
    from epbench.core.errors import EpbenchError

    with pytest.raises(EpbenchError, match="--budget"):
        plan(budget_s=0)
    with pytest.raises(EpbenchError, match="no cases"):
        val.Plan(cases=())


def test_a_would_be_alert_on_a_loaded_machine_is_inconclusive_not_detected():
    # 17 of relu_d1_w8's 20 rounds failed the idle gate, too many for the quiet ones alone to
    # make an alert: its 10 % slowdown (>= 2t) becomes ❔ by the comparator's rule, while
    # 5 % (a regression) is still detected.
    fake = FakeRunner(unquiet={"relu_d1_w8": list(range(17))})
    result = val.validate(plan(max_repeats=2), run=fake, clock=fake.clock)
    d = result["cases"]["relu_d1_w8"]["detection"]
    assert (d["d10"]["hits"], d["d10"]["inconclusive"]) == (0, 2)
    assert (d["d5"]["hits"], d["d5"]["inconclusive"]) == (2, 0)
    assert result["summary"]["detection"]["d10"]["inconclusive"] == 2
    assert "| Detection of a 10% slowdown (per case and repeat) | 66.7% (4/6; ❔ 2) |" in (
        val.render_markdown(result))
