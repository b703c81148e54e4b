"""--target-mde: the floor follows the target, a twin that moved beyond it leaves ❔, the
cases short of it are named with why, and compare-commits adds worker processes to them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.model import Results
from epbench.reports import compare
from epbench.reports.comparison import CaseRow, Comparison, Side
from epbench.reports.findings import (
    TARGET_MISSED,
    target_misses,
    target_warnings,
    twin_over_target,
)
from epbench.reports.verdicts import Judgement, Settings, target_settings
from tests.support.synthetic import NoiseModel, results_doc, typed_runner
from tests.test_compare_commits import _fake_commits

TWIN = {"of": "base", "key": "base_twin"}
NAMES = ("relu_d1_w8", "relu_d10_w8")


def _doc(sigma: float, seed: int = 1, rounds: int = 24, processes: int = 6,
         names: tuple[str, ...] = NAMES, head: str = "pr") -> dict[str, Any]:
    truth = {"ort": 1000.0, "base": 800.0, "base_twin": 800.0, head: 800.0}
    return results_doc(dict.fromkeys(names, truth), rounds=rounds, seed=seed,
                       processes=processes, twin=TWIN,
                       noise=NoiseModel(arm_sigma=0.001, machine_sigma=0.0, spike_prob=0.0,
                                        process_sigma=sigma))


def _compare(doc: dict[str, Any], target: float | None) -> Comparison:
    results = Results.from_dict(doc, source="a test")
    return compare.compare(Side("base", results, "base"), Side("pr", results, "pr"),
                           settings=target_settings(Settings(), target))


def test_the_floor_follows_the_target_and_the_cases_short_of_it_are_named() -> None:
    plain = _compare(_doc(0.003), None)
    aimed = _compare(_doc(0.003), 0.01)
    assert [r.threshold for r in plain.cases] == [0.01, 0.01]  # the floor
    assert [r.threshold for r in aimed.cases] == [0.005, 0.005]  # target / 2
    assert aimed.settings.target_mde == 0.01
    # PR against the mean of base and its twin (compare.second_replicate).
    assert [round(r.detectable, 4) for r in aimed.cases] == [0.0122, 0.0115]
    assert target_misses(aimed.cases, 0.01) == dict.fromkeys(NAMES, "processes")
    # A judged case with no estimate is short of any target.
    unknown = CaseRow(case="x", verdict="no_change", emoji="✅", reason="", base_ns=None,
                      pr_ns=None, change=None, ci=(None, None), threshold=0.005, rounds=24,
                      unquiet=0, control_drift=None, detectable=None)
    assert target_misses([unknown], 0.01) == {"x": "processes"}
    assert target_misses([replace(unknown, unquiet=3)], 0.01) == {"x": "load"}
    # No profile and no twin: the default t, which no re-run lowers.
    default = replace(unknown, threshold=0.04, noise_source="no profile")
    assert target_misses([default], 0.01) == {"x": "no measured noise"}
    from epbench.workflows.compare_commits import short_of_target

    assert short_of_target(replace(aimed, cases=(default,))) == []  # no re-run lowers it
    assert short_of_target(replace(aimed, cases=(unknown,))) == ["x"]
    # One warning per reason, each naming its cases.
    rows = [unknown, replace(unknown, case="y", unquiet=3, detectable=0.02),
            replace(unknown, case="z", threshold=0.008, detectable=0.03)]
    assert target_warnings(rows, 0.01, budget=False) == [
        "1 case(s) short of the target detectable change of 1.0%, for A/A noise (k × the "
        "noise sets t above half the target; more processes narrow a twin's noise too): "
        "z (≥ 3.0%)",
        "1 case(s) short of the target detectable change of 1.0%, for load (rounds failed "
        "the idle gate; rerun on a quieter machine): y (≥ 2.0%)",
        "1 case(s) short of the target detectable change of 1.0%, for too few processes "
        "(rerun with more --processes): x (no estimate)"]
    missed = [w for w in aimed.warnings if TARGET_MISSED in w]
    assert missed == [
        "2 case(s) short of the target detectable change of 1.0%, for too few processes "
        "(rerun with more --processes): relu_d10_w8 (≥ 1.2%), relu_d1_w8 (≥ 1.1%)"]
    assert not any(TARGET_MISSED in w for w in plain.warnings)
    # Quieter processes reach it: nothing named.
    assert not any(TARGET_MISSED in w for w in _compare(_doc(0.001), 0.01).warnings)
    # A twin whose noise sets t above half the target is the reason, not the processes.
    noisy = _compare(_doc(0.01), 0.01)
    assert target_misses(noisy.cases, 0.01) == dict.fromkeys(NAMES, "A/A noise")


def test_a_twin_that_moved_beyond_the_target_leaves_a_case_inconclusive() -> None:
    fine = Judgement("no_change", "the whole interval lies within ±0.5%", False, 1.0)
    aimed = target_settings(Settings(), 0.01)
    assert twin_over_target(fine, 0.008, aimed) is fine
    assert twin_over_target(fine, 0.012, Settings()) is fine  # no target
    moved = twin_over_target(fine, -0.012, aimed)
    assert moved.verdict == "inconclusive"
    assert moved.reason == ("the whole interval lies within ±0.5%, but the A/A twin itself "
                            "differed by -1.2%, more than the target 1.0%; rerun with more "
                            "--processes, on a quieter machine")
    flagged = Judgement("regression", "slower", True, 0.01)
    assert twin_over_target(flagged, 0.05, aimed) is flagged  # only a ✅ is held


def _commits(monkeypatch, tmp_path, *, sigmas: list[float], budget_s: float,
             target: float | None) -> tuple[Any, list[list[str]]]:
    """compare_commits over NAMES with a fake runner whose n-th pass has process
    offsets of sd ``sigmas[n]`` (the last one for the passes beyond)."""
    from epbench.cases.grids import case_by_name
    from epbench.harness.run_config import RunConfig
    from epbench.workflows import compare_commits as cc

    calls: list[list[str]] = []

    def fake_run(config: Any) -> dict[str, Any]:
        calls.append([c.name for c in config.cases])
        sigma = sigmas[min(len(calls), len(sigmas)) - 1]
        return _doc(sigma, seed=len(calls), rounds=config.rounds,
                    processes=config.processes, names=tuple(calls[-1]), head="head")

    _fake_commits(monkeypatch, fake_run)
    config = RunConfig(cases=tuple(case_by_name(n) for n in NAMES), arms=(), rounds=24,
                       processes=6)
    result = cc.compare_commits(repo=tmp_path, base_rev="a", head_rev="b", build=None,
                                config=config, settings=target_settings(Settings(), target),
                                profile_path=None, budget_s=budget_s)
    return result, calls


def test_compare_commits_adds_processes_until_the_target_is_met(tmp_path,
                                                                monkeypatch) -> None:
    result, calls = _commits(monkeypatch, tmp_path, sigmas=[0.0025, 0.001], budget_s=3600,
                             target=0.01)
    # The first pass leaves relu_d1_w8 ❔ and relu_d10_w8 ✅ but able to catch only 1.2 %:
    # both are re-run, and 6 more processes each bring them to the target.
    assert calls == [list(NAMES), list(NAMES)]
    cases = result.results.cases
    assert [len(cases[n].processes) for n in NAMES] == [12, 12]
    assert all(r.detectable <= 0.01 for r in result.comparison.cases)
    assert not any(TARGET_MISSED in w for w in result.comparison.warnings)
    # Without a target the first pass is all ✅ at the 1 % floor: nothing is re-run.
    _, calls = _commits(monkeypatch, tmp_path, sigmas=[0.0025, 0.001], budget_s=3600,
                        target=None)
    assert calls == [list(NAMES)]


def test_compare_commits_names_the_cases_the_budget_left_short(tmp_path,
                                                               monkeypatch) -> None:
    result, calls = _commits(monkeypatch, tmp_path, sigmas=[0.003], budget_s=0, target=0.01)
    assert calls == [list(NAMES)]
    missed = [w for w in result.comparison.warnings if TARGET_MISSED in w]
    assert missed == [
        "2 case(s) short of the target detectable change of 1.0%, for budget (the re-runs' "
        "budget ran out before more processes reached it; pass a larger --budget): "
        "relu_d10_w8 (≥ 1.2%), relu_d1_w8 (≥ 1.1%)"]


@pytest.mark.parametrize(("given", "floor"), [("1%", 0.005), ("0.5", 0.0025)])
def test_compare_takes_a_target_in_percent(tmp_path, given: str, floor: float) -> None:
    import json

    path = tmp_path / "run.json"
    path.write_text(json.dumps(_doc(0.001)))
    got = CliRunner().invoke(cli, ["compare", str(path), "--base", "base", "--pr", "pr",
                                   "--format", "json", "--target-mde", given])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output)
    assert doc["settings"]["floor"] == pytest.approx(floor)
    assert [r["threshold"] for r in doc["cases"]] == [pytest.approx(floor)] * len(NAMES)


@pytest.mark.parametrize("given", ["0", "100%", "x%", "nan"])
def test_a_target_that_is_no_percentage_is_one_line(tmp_path, given: str) -> None:
    got = CliRunner().invoke(cli, ["compare", str(tmp_path / "x.json"), "--base", "a",
                                   "--pr", "b", "--target-mde", given])
    assert got.exit_code == 2
    assert "is not a percentage between 0 and 100; write e.g. 1% or 0.5" in got.output
    assert "Traceback" not in got.output


def test_run_adds_processes_to_the_cases_short_of_the_target() -> None:
    from epbench.cases.grids import case_by_name
    from epbench.harness.run_config import RunConfig
    from epbench.workflows.run_target import run_to_target

    calls: list[list[str]] = []
    sigmas = [0.0025, 0.001]

    def fake_run(config: Any) -> dict[str, Any]:
        calls.append([c.name for c in config.cases])
        return _doc(sigmas[min(len(calls), 2) - 1], seed=len(calls), rounds=config.rounds,
                    processes=config.processes, names=tuple(calls[-1]))

    config = RunConfig(cases=tuple(case_by_name(n) for n in NAMES), arms=(), rounds=24,
                       processes=6)
    ticks = iter(range(1000))
    aimed = run_to_target(config, 0.01, budget_s=3600, runner=typed_runner(fake_run),
                          clock=lambda: float(next(ticks)))
    # pr against base (the twin's arm): relu_d10_w8 is ✅ but short of 1 %, relu_d1_w8 ❔.
    assert calls == [list(NAMES), list(NAMES)]
    assert aimed.reruns == dict.fromkeys(NAMES, 24)
    assert [len(aimed.results.cases[n].processes) for n in NAMES] == [12, 12]
    assert aimed.notes == []
    # No budget: the first pass only, and a note per comparison names the cases and why.
    calls.clear()
    short = run_to_target(config, 0.01, budget_s=0, runner=typed_runner(fake_run),
                          clock=lambda: float(next(ticks)))
    assert calls == [list(NAMES)]
    assert short.notes == [
        "pr against base: 2 case(s) short of the target detectable change of 1.0%, for "
        "budget (the re-runs' budget ran out before more processes reached it; pass a "
        "larger --budget): relu_d10_w8 (≥ 1.1%), relu_d1_w8 (≥ 1.1%)"]


def test_run_refuses_a_target_with_nothing_to_compare(tmp_path) -> None:
    got = CliRunner().invoke(cli, ["run", "--case", "relu_d1_w8", "--arm", "engine",
                                   "--target-mde", "1%", "--out", str(tmp_path / "o")])
    assert got.exit_code == 1
    assert "--target-mde compares arms of the run: give two arms besides ort" in got.output
