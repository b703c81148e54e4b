"""compare-commits' statement for a case it re-ran because it was ❔: at least what the
pass that re-ran it stated (verdicts.kept_detectable), in every output; a case re-run
only for --target-mde keeps its final pass's."""

from __future__ import annotations

import math
from typing import Any

from epbench.core.model import Results
from epbench.reports import compare as cmp
from epbench.reports import render
from epbench.reports.comparison import Comparison, Side
from epbench.reports.verdicts import Settings, kept_detectable, target_settings
from tests.support.comparisons import case_row, comparison_of
from tests.support.synthetic import NoiseModel, results_doc
from tests.test_compare_commits import _fake_commits

NAMES = ("relu_d1_w8", "relu_d10_w8")
KEPT_WORDS = "a case re-run because it was ❔ states at least the figure of the pass that re-ran it"


def _judge(results: Results, kept: dict[str, float] | None = None,
           settings: Settings | None = None) -> Comparison:
    """compare-commits' own comparison of a run, labels aside."""
    return cmp.compare(Side("base", results, "base"), Side("pr", results, "head"),
                       settings=settings or Settings(), kept=kept)


def _commits(monkeypatch, tmp_path, models: list[NoiseModel]) -> tuple[Any, list[Results]]:
    """compare_commits over NAMES, no change between the commits, with a fake runner whose
    n-th pass has noise ``models[n]`` (the last one beyond); and each pass's results."""
    from epbench.cases.grids import case_by_name
    from epbench.harness.run_config import RunConfig
    from epbench.workflows import compare_commits as cc

    passes: list[Results] = []

    def fake_run(config: Any) -> dict[str, Any]:
        model = models[min(len(passes), len(models) - 1)]
        truth = {"ort": 1000.0, "base": 1000.0, "head": 1000.0}
        doc = results_doc({c.name: truth for c in config.cases}, rounds=config.rounds,
                          seed=len(passes) + 1, noise=model, processes=config.processes)
        passes.append(Results.from_dict(doc, source="a fake pass"))
        return doc

    _fake_commits(monkeypatch, fake_run)
    config = RunConfig(cases=tuple(case_by_name(n) for n in NAMES), arms=(), rounds=6)
    result = cc.compare_commits(repo=tmp_path, base_rev="a", head_rev="b", build=None,
                                config=config, settings=Settings(),
                                profile_path=None, budget_s=3600)
    return result, passes


def test_a_case_rerun_on_inconclusive_states_its_first_pass_figure(tmp_path,
                                                                  monkeypatch) -> None:
    noisy = NoiseModel(arm_sigma=0.03, machine_sigma=0.0, spike_prob=0.0)
    quiet = NoiseModel(arm_sigma=0.001, machine_sigma=0.0, spike_prob=0.0)
    result, passes = _commits(monkeypatch, tmp_path, [noisy, quiet])
    first = {r.case: r for r in _judge(passes[0]).cases}
    rerun = [n for n in NAMES if first[n].verdict == "inconclusive"]
    assert rerun and len(passes) == 2 and set(result.reruns) == set(rerun)
    fresh = {r.case: r for r in _judge(result.results).cases}  # the merged run, afresh
    rows = {r.case: r for r in result.comparison.cases}
    for name in rerun:
        said = first[name].detectable
        assert said is not None and said > fresh[name].detectable  # the re-run narrowed it
        assert rows[name].detectable == said
        assert result.comparison.reruns[name].kept == said  # compare.json says so
    # What is said of the grid is from the same figures: the summary, the cannot-catch
    # note and the method.
    worst = max(r.detectable for r in result.comparison.cases)
    assert worst == max(first[n].detectable for n in rerun)
    assert f"≥ {render.format_share(worst)} in the worst" in render.detectable_sentence(
        result.comparison)
    assert any(f"≥ {render.format_share(worst)} in the worst" in note
               for note in result.comparison.cannot_catch)
    assert KEPT_WORDS in render.render_terminal(result.comparison)
    # compare.json keeps it for the PR comment, rendered from that file.
    again = Comparison.from_json(result.comparison.to_json())
    assert [r.detectable for r in again.cases] == [r.detectable
                                                   for r in result.comparison.cases]
    assert again.reruns == result.comparison.reruns
    assert KEPT_WORDS in render.render_markdown(again)
    assert cmp.REJUDGED_RERUNS not in result.comparison.warnings
    # The merged run judged again from its results (`compare` on results.json, the
    # matrix's merge): the floor is lost, and a note says so.
    rejudged = cmp.with_reruns(_judge(result.results), result.results)
    assert cmp.REJUDGED_RERUNS in rejudged.warnings
    assert all(r.kept is None for r in rejudged.reruns.values())
    assert cmp.REJUDGED_RERUNS not in cmp.with_reruns(_judge(passes[0]), passes[0]).warnings


def test_a_case_rerun_for_the_target_keeps_its_final_figure(tmp_path, monkeypatch) -> None:
    """Short of --target-mde, the first pass's ❔ is re-run for the target, a choice on the
    standard error alone: its final figure stands, and the target is met by it."""
    from tests import test_target_mde as aimed

    result, calls = aimed._commits(monkeypatch, tmp_path, sigmas=[0.0025, 0.001],
                                   budget_s=3600, target=0.01)
    settings = target_settings(Settings(), 0.01)
    first = Results.from_dict(aimed._doc(0.0025, seed=1, head="head"), source="first pass")
    unsure = [r for r in _judge(first, settings=settings).cases if r.verdict == "inconclusive"]
    assert len(unsure) == 1 and unsure[0].detectable > 0.01  # ❔, and short of the target
    assert calls == [list(NAMES), list(NAMES)]
    fresh = _judge(result.results, settings=settings)
    assert [r.detectable for r in result.comparison.cases] == [r.detectable
                                                               for r in fresh.cases]
    assert all(r.kept is None for r in result.comparison.reruns.values())
    assert all(r.detectable <= 0.01 for r in result.comparison.cases)
    assert KEPT_WORDS not in render.render_terminal(result.comparison)


def test_only_a_pass_taken_for_its_inconclusive_verdict_keeps_its_figure() -> None:
    from epbench.workflows import compare_commits as cc

    def row(case: str, verdict: str, detectable: float | None) -> Any:
        return case_row(case, verdict, detectable=detectable, threshold=0.004)

    comparison = comparison_of(
        [row("unsure", "inconclusive", 0.008),  # ❔ within the target: re-run for the ❔
         row("short", "inconclusive", 0.02),  # ❔ short of it: re-run for the target
         row("held", "regression", 0.008),  # ⚠️ (already flagged)
         row("unknown", "inconclusive", None),
         row("left", "inconclusive", 0.008)],  # ❔ the pass does not take
        settings=target_settings(Settings(), 0.01))
    pending = ["unsure", "short", "held", "unknown"]
    assert cc.kept_on_rerun(comparison, pending) == {"unsure": 0.008}
    # No target: every ❔ the pass takes.
    plain = comparison_of(comparison.cases)
    assert cc.kept_on_rerun(plain, pending) == {"unsure": 0.008, "short": 0.02}


def test_the_kept_figure_is_a_floor() -> None:
    assert kept_detectable(0.01, 0.03) == 0.03
    assert kept_detectable(0.04, 0.03) == 0.04
    assert kept_detectable(0.01, None) == 0.01
    assert math.isnan(kept_detectable(math.nan, 0.03))  # no figure stays none


def test_validate_judges_a_command_with_the_figures_it_kept() -> None:
    """validate's compare-commits path states what the command stated: a case's kept
    figure (Repeat.commits_kept) is its statement's floor in the calibration table."""
    from epbench.workflows import validate_judge as vjudge
    from epbench.workflows import validate_plan as vplan
    from epbench.workflows import validate_run as vrun

    truth = {"ort": 1000.0, "a": 1000.0, "a2": 1000.0}
    doc = Results.from_dict(results_doc(dict.fromkeys(NAMES, truth), rounds=12, seed=3,
                                        processes=3), source="a command")

    def stated(kept: dict[str, dict[str, float]]) -> dict[str, list[float | None]]:
        rep = vrun.Repeat("none", commits={"aa": doc}, commits_kept=kept)
        seen = vjudge._compare_repeats([rep], vplan.COMMITS, None, NAMES, Settings(), set(),
                                       "", ())
        return {n: seen.detectable[n]["aa"] for n in NAMES}

    plain = stated({})
    assert all(v[0] is not None and v[0] < 0.5 for v in plain.values())
    assert stated({"aa": {"relu_d1_w8": 0.5}}) == {**plain, "relu_d1_w8": [0.5]}


def test_the_kept_figure_is_the_first_pass_that_reran_the_case_on_inconclusive() -> None:
    """rerun_ambiguous hands each judgement the figures kept so far: the first ❔ pass's,
    not a later one's (a later pass's sample is there because its estimate stayed low)."""
    from epbench.cases.grids import case_by_name
    from epbench.harness.run_config import RunConfig
    from epbench.workflows import compare_commits as cc

    name = "relu_d1_w8"
    said = [0.03, 0.02]  # what the first and second judgements state; the third is ✅
    given: list[dict[str, float]] = []

    def judge(results: Results, kept: Any) -> Comparison:
        given.append(dict(kept))
        unsure = len(given) <= len(said)
        row = case_row(name, "inconclusive" if unsure else "no_change",
                       detectable=said[len(given) - 1] if unsure else 0.01)
        return comparison_of([row])

    def runner(config: Any) -> Results:
        truth = {"ort": 1000.0, "base": 1000.0, "head": 1000.0}
        return Results.from_dict(results_doc({c.name: truth for c in config.cases},
                                             rounds=config.rounds), source="a fake pass")

    config = RunConfig(cases=(case_by_name(name),), arms=(), rounds=6)
    reran = cc.rerun_ambiguous(runner(config), config, judge, budget_s=3600.0,
                               started_at=0.0, first_pass_s=1.0, runner=runner,
                               clock=lambda: 0.0)
    assert given == [{}, {name: 0.03}, {name: 0.03}]
    assert reran.kept == {name: 0.03} and reran.reruns == {name: 12}
