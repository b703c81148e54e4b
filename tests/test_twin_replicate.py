"""The A/A twin as a second copy of base (compare.second_replicate): in one run, PR
against the geometric mean of base and its twin, with 3/4 of the twins' unmodelled
variance; base alone where the PR arm loads base's own library file."""

from __future__ import annotations

import math
import re

import numpy as np

from epbench.core.model import Results
from epbench.reports import compare, nested, stats
from epbench.reports.comparison import RoundMedians, Settings, Side
from epbench.reports.run_noise import twin_noise
from epbench.reports.verdicts import GridSamples
from tests.support.synthetic import NoiseModel, results_doc

TWIN = {"of": "base", "key": "base_twin"}
NAMES = ("relu_d1_w8", "relu_d10_w8", "add_d10_w8", "matmul_64x64")
NOISE = NoiseModel(arm_sigma=0.002, machine_sigma=0.0, spike_prob=0.0, process_sigma=0.002)


def _run(base_ns: float, twin_ns: float, *, same_file: bool = False, seed: int = 3) -> Results:
    truth = {"ort": 1000.0, "base": base_ns, "base_twin": twin_ns, "pr": 800.0}
    doc = results_doc(dict.fromkeys(NAMES, truth), rounds=24, seed=seed, processes=6,
                      twin=TWIN, noise=NOISE)
    if same_file:  # the PR arm is base's library file with other options
        doc["arms"]["pr"]["library"] = doc["arms"]["base"]["library"]
    return Results.from_dict(doc, source="a test")


def _compare(run: Results) -> compare.Comparison:
    return compare.compare(Side("base", run, "base"), Side("pr", run, "pr"))


def test_the_pr_is_compared_with_the_mean_of_base_and_its_twin() -> None:
    # base's copy 0.8 % slow, the twin's 0.8 % fast, the PR as fast as the truth: against
    # their geometric mean the PR has not changed; against base alone it is 0.8 % faster.
    run = _run(806.4, 793.6)
    assert compare.second_replicate(Side("base", run, "base"), Side("pr", run, "pr")) \
        == "base_twin"
    changes = [row.change for row in _compare(run).cases]
    assert all(abs(c) < 0.002 for c in changes), changes


def test_a_pr_on_base_s_own_library_file_is_compared_with_base_alone() -> None:
    run = _run(806.4, 793.6, same_file=True)
    assert compare.second_replicate(Side("base", run, "base"), Side("pr", run, "pr")) is None
    changes = [row.change for row in _compare(run).cases]
    assert all(abs(c + 0.008) < 0.002 for c in changes), changes


def test_no_twin_of_base_no_mean() -> None:
    run = _run(806.4, 793.6)
    # The twin copies the PR's arm, not base's: it is no copy of base.
    other = Results.from_dict({**run.to_dict(), "twin": {"of": "pr", "key": "base_twin"}},
                              source="a test")
    assert compare.second_replicate(Side("base", other, "base"), Side("pr", other, "pr")) \
        is None


def test_the_interval_carries_three_quarters_of_the_twins_unmodelled_variance() -> None:
    # Two copies a case's y^2 - s^2 far from 0: the extra term dominates the interval.
    run = _run(806.4, 793.6, seed=5)
    comparison = _compare(run)
    medians, settings = RoundMedians(), Settings()
    samples = []
    for name in NAMES:
        case = run.cases[name]
        mean = np.sqrt(medians(case, "base") * medians(case, "base_twin"))
        samples.append(nested.process_sample(medians(case, "pr"), mean,
                                             stats.round_labels(case, "process")))
    twins = twin_noise([Side("base", run, "base")], list(NAMES), settings, medians)
    assert min(twins.extra) > 1e-5  # the copies differ beyond what processes show
    grid = GridSamples(samples, [], True,
                       extra_variance=[0.75 * v for v in twins.extra],
                       extra_df=len(NAMES) - 1.0)
    expected = dict(zip(NAMES, grid.changes(confidence=settings.confidence), strict=True))
    shown = [row for row in comparison.cases if row.verdict in ("no_change", "inconclusive")]
    assert shown
    for row in shown:
        want = expected[row.case]
        assert math.isclose(row.ci[0], want.lo - 1.0, abs_tol=1e-9)
        assert math.isclose(row.ci[1], want.hi - 1.0, abs_tol=1e-9)


def test_a_twin_far_off_its_arm_makes_no_false_flag_through_the_mean() -> None:
    # A twin 6 % slower than base pulls the mean 3 % up, so the identical PR reads 3 %
    # faster; the case's own twin's y^2 - s^2 (3/4 of it, sd 5 %) covers it, and the
    # run says its twin cannot be trusted.
    comparison = _compare(_run(800.0, 848.0))
    assert all(-0.035 < row.change < -0.025 for row in comparison.cases)
    assert not [row.case for row in comparison.cases
                if row.verdict in ("improvement", "regression", "alert")]
    assert any("A/A twin differs" in w for w in comparison.warnings)


def test_compare_json_and_the_method_say_the_twin_stood_as_a_copy_of_base() -> None:
    from epbench.reports import render
    from epbench.reports.comparison import Comparison

    def method(comparison: Comparison) -> str:
        template = render.environment().from_string(
            '{% from "_method.j2" import method %}{{ method(m) }}')
        return template.render(m=render.method_context(comparison))

    pooled = _compare(_run(806.4, 793.6))
    assert [t.replicate for t in pooled.twin] == [True]
    assert Comparison.from_json(pooled.to_json()).twin[0].replicate
    assert "geometric mean of base and its A/A twin" in method(pooled)
    alone = _compare(_run(806.4, 793.6, same_file=True))
    assert [t.replicate for t in alone.twin] == [False]
    assert "median PR/base log ratio" in method(alone)


def test_a_case_without_the_twin_is_compared_with_base_alone_and_its_whole_tau() -> None:
    truth = {"ort": 1000.0, "base": 806.4, "base_twin": 793.6, "pr": 800.0}
    doc = results_doc(dict.fromkeys(NAMES, truth), rounds=24, seed=5, processes=6,
                      twin=TWIN, noise=NOISE)
    lone = doc["cases"]["matmul_64x64"]
    del lone["arms"]["base_twin"]
    for rnd in lone["rounds"]:
        del rnd["summary_ns"]["base_twin"]
        rnd["order"].remove("base_twin")
    run = Results.from_dict(doc, source="a test")
    rows = {row.case: row for row in _compare(run).cases}
    assert abs(rows["matmul_64x64"].change + 0.008) < 0.003  # base alone: -0.8 %
    assert all(abs(rows[n].change) < 0.002 for n in NAMES if n != "matmul_64x64")
    medians, settings = RoundMedians(), Settings()
    samples = []
    for name in NAMES:
        case = run.cases[name]
        ref = (medians(case, "base") if name == "matmul_64x64" else
               np.sqrt(medians(case, "base") * medians(case, "base_twin")))
        samples.append(nested.process_sample(medians(case, "pr"), ref,
                                             stats.round_labels(case, "process")))
    twins = twin_noise([Side("base", run, "base")], list(NAMES), settings, medians)
    shares = [1.0 if n == "matmul_64x64" else 0.75 for n in NAMES]
    grid = GridSamples(samples, [], True,
                       extra_variance=[s * v for s, v in zip(shares, twins.extra, strict=True)],
                       extra_df=len(NAMES) - 1.0)
    want = dict(zip(NAMES, grid.changes(confidence=settings.confidence), strict=True))
    row = rows["matmul_64x64"]
    assert row.verdict in ("no_change", "inconclusive")
    assert math.isclose(row.ci[0], want["matmul_64x64"].lo - 1.0, abs_tol=1e-9)
    assert math.isclose(row.ci[1], want["matmul_64x64"].hi - 1.0, abs_tol=1e-9)


def test_a_twin_missing_from_some_rounds_leaves_its_case_on_base_with_every_round() -> None:
    # The twin is listed on the case but has no time in 3 rounds: against the mean those
    # rounds would drop (or all 24, and the case read ➖); the case keeps base alone.
    doc = results_doc(dict.fromkeys(NAMES, {"ort": 1000.0, "base": 806.4,
                                            "base_twin": 793.6, "pr": 800.0}),
                      rounds=24, seed=5, processes=6, twin=TWIN, noise=NOISE)
    for rnd in doc["cases"]["add_d10_w8"]["rounds"][:3]:
        del rnd["summary_ns"]["base_twin"]
    rows = {row.case: row for row in _compare(Results.from_dict(doc, source="a test")).cases}
    assert abs(rows["add_d10_w8"].change + 0.008) < 0.003  # base alone: -0.8 %
    assert rows["add_d10_w8"].verdict != "not_comparable"
    assert all(abs(rows[n].change) < 0.002 for n in NAMES if n != "add_d10_w8")


def test_no_mean_when_the_pr_is_the_twin_or_base_names_no_library() -> None:
    run = _run(806.4, 793.6)
    assert compare.second_replicate(Side("base", run, "base"), Side("pr", run, "base_twin")) \
        is None
    doc = run.to_dict()
    doc["arms"]["base"]["library"] = None
    bare = Results.from_dict(doc, source="a test")
    assert compare.second_replicate(Side("base", bare, "base"), Side("pr", bare, "pr")) is None


def test_the_quiet_rounds_are_also_compared_with_the_mean_of_base_and_its_twin() -> None:
    # base's copy 0.8 % slow, the twin's 0.8 % fast, the PR 30 % slower than the truth,
    # and process 0's rounds unquiet: the quiet rounds alone make the alert, and their
    # point (quoted in the reason) must be against the same reference as all rounds',
    # the mean (+30 %), not base alone (+29 %).
    truth = {"ort": 1000.0, "base": 806.4, "base_twin": 793.6, "pr": 1040.0}
    doc = results_doc(dict.fromkeys(NAMES, truth), rounds=24, seed=5, processes=6,
                      twin=TWIN, noise=NOISE, unquiet_rounds=dict.fromkeys(NAMES, range(4)))
    rows = _compare(Results.from_dict(doc, source="a test")).cases
    assert [row.verdict for row in rows] == ["alert"] * len(NAMES)
    for row in rows:
        quoted = re.search(r"slower by ([\d.]+)% \(at least [\d.]+% at 95%\) on the 20 quiet",
                           row.reason)
        assert quoted, row.reason
        assert abs(float(quoted[1]) / 100.0 - row.change) < 0.003, (row.reason, row.change)
        assert abs(float(quoted[1]) / 100.0 - 0.30) < 0.005, row.reason


def test_the_mean_of_tiny_times_keeps_every_round() -> None:
    # Times of 1e-170 ns are valid in a results file; their product underflows to 0.
    base = np.array([1e-170, 1000.0])
    mean = compare.replicate_reference(base, base.copy())
    assert mean is not None and mean[0] == 1e-170 and mean[1] == 1000.0
