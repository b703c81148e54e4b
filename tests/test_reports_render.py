"""Rendered reports against golden files: a change of wording is a visible diff.

Regenerate after an intended change: EPBENCH_UPDATE_GOLDEN=1 pytest tests/test_reports_render.py
(the fixtures themselves come from tests/fixtures/results/make_fixtures.py).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from epbench.core.results import load_results
from epbench.reports import calibrate, compare, comparison, html, render, run_report, summary
from epbench.reports.comparison import SCHEMA
from epbench.reports.verdicts import Settings
from tests.support import synthetic
from tests.support.synthetic import as_results


def Side(label, doc, arm, path=None):  # noqa: N802 -- stands in for comparison.Side
    """comparison.Side of a test's document: the tests build dicts, read into the model once."""
    return comparison.Side(label, as_results(doc), arm, path)

ROOT = Path(__file__).resolve().parent
FIXTURES = ROOT / "fixtures" / "results"
GOLDEN = ROOT / "golden"


def _load(name):
    # The fixtures are schema 1: every golden also runs them through the migration.
    return load_results(FIXTURES / name)


def _profile():
    profile = calibrate.load_profile(FIXTURES / "profile.json")
    profile["path"] = "profile.json"  # the golden files must not depend on the checkout path
    return profile


def _separate():
    return compare.compare(
        Side("base", _load("base.json"), "plugin:ep"), Side("pr", _load("pr.json"), "plugin:ep"),
        profile=_profile(),
    )


def _same_run():
    doc = _load("same_run.json")
    return compare.compare(Side("base", doc, "base"), Side("pr", doc, "pr"), profile=_profile())


def _verdicts():
    """Two synthetic runs with one case per verdict: 🟢, ➖ (base crashed), ❌ (PR crashed),
    🔴 from quiet rounds alone, ❔ straddling t (and re-run), ✅; the PR's idle gate off."""
    noise = synthetic.NoiseModel(machine_sigma=0.01, arm_sigma=0.004, spike_prob=0.0,
                                 session_sigma=0.0)
    truth = {"relu_d1_w8": 1000.0, "relu_d10_w8": 1500.0, "relu_d100_w8": 7000.0,
             "add_d10_w8": 2400.0, "sigmoid_d10_w4096": 80000.0, "identity_d1_w4096": 900.0}
    factor = {"relu_d1_w8": 0.85, "add_d10_w8": 1.25, "sigmoid_d10_w4096": 1.02}
    base = synthetic.results_doc(
        {n: {"ort": 2 * v, "ep": v} for n, v in truth.items()},
        rounds=30, seed=1, noise=noise, status={"relu_d10_w8": "crashed"})
    pr = synthetic.results_doc(
        {n: {"ort": 2 * v, "ep": v * factor.get(n, 1.0)} for n, v in truth.items()},
        rounds=30, seed=2, noise=noise, status={"relu_d100_w8": "crashed"},
        unquiet_rounds={"add_d10_w8": range(0, 30, 6)})
    pr["config"]["gate"]["policy"] = "off"
    profile = {"schema": calibrate.PROFILE_SCHEMA, "host_key": "host0001", "rounds": 30,
               "cases": {n: {"definition_sha256": f"def-{n}", "same-run": {"noise": 0.008},
                             "separate-runs": {"noise": 0.008}} for n in truth}}
    result = compare.compare(Side("base", base, "ep"), Side("pr", pr, "ep"), profile=profile)
    return replace(result, reruns={"sigmoid_d10_w4096": comparison.Rerun(reruns=1, rounds=60)})


def _edited(result, edit):
    """`result` with its JSON document changed by `edit`, read back as compare.json is."""
    doc = result.to_dict()
    edit(doc)
    return comparison.Comparison.from_json(doc)


def test_the_verdicts_golden_holds_every_verdict_and_paragraph():
    text = render.render_markdown(_verdicts())
    for needle in ("🟢", "➖", "❌", "🔴", "❔", "✅", "straddles", "quiet rounds alone",
                   "Re-run because the first pass was inconclusive", "idle gate off"):
        assert needle in text, needle


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("EPBENCH_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path}; run with EPBENCH_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("compare_separate.md", lambda: render.render_markdown(_separate())),
        ("compare_same_run.md", lambda: render.render_markdown(_same_run())),
        ("compare_same_run.txt", lambda: render.render_terminal(_same_run())),
        ("calibration.txt", lambda: render.render_calibration(_profile())),
        ("summary_same_run.txt",
         lambda: render.render_summary_table(summary.summarize(_load("same_run.json")))),
        ("run_report_pr.md", lambda: run_report.render_run_report(_load("pr.json"))),
        ("compare_verdicts.md", lambda: render.render_markdown(_verdicts())),
        ("compare_verdicts.txt", lambda: render.render_terminal(_verdicts())),
    ],
)
def test_golden(name, make):
    _check_golden(name, make())


def test_json_format_is_stable_and_strict():
    text = _separate().to_json()
    doc = json.loads(text)
    assert doc["schema"] == SCHEMA
    assert "NaN" not in text  # NaN thresholds of failed rows become null
    failed = next(r for r in doc["cases"] if r["verdict"] == "failed")
    assert failed["threshold"] is None


def test_comment_starts_with_the_sticky_marker_of_the_github_client():
    from epbench.reports.sticky import STICKY_MARKER

    text = render.render_markdown(_separate())
    assert text.splitlines()[0] == STICKY_MARKER


def _tables(text):
    """Each markdown table as a list of its rows (lists of cells)."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


@pytest.mark.parametrize(
    "make",
    [
        lambda: render.render_markdown(_separate()),
        lambda: render.render_markdown(_same_run()),
        lambda: run_report.render_run_report(_load("pr.json")),
        lambda: run_report.render_run_report(_load("same_run.json")),
    ],
)
def test_markdown_is_well_formed_for_github(make):
    text = make()
    for table in _tables(text):
        assert len({len(row) for row in table}) == 1, table  # every row as wide as the header
        assert all(re.fullmatch(r":?-+:?", cell) for cell in table[1])  # alignment row
    lines = text.splitlines()
    assert text.count("<details>") == text.count("</details>")
    for i, line in enumerate(lines):
        if line.startswith("<details>"):
            assert lines[i + 1] == "", "GFM renders markdown in <details> after a blank line"
        if line.startswith("|") and i > 0 and not lines[i - 1].startswith("|"):
            assert lines[i - 1] == "", "a table needs a blank line before it"


def test_headline_and_table_order():
    text = render.render_markdown(_separate())
    assert "## ❌ Failed" in text  # a crashed PR case outranks the alert
    header = "| Status | Case | Base | PR | Change | 95 % CI | Threshold |"
    assert header in text
    first_rows = [row[1] for row in _tables(text)[0][2:]]
    assert first_rows == ["`add_d10_w8`", "`relu_d100_w8`", "`relu_d10_w8`", "`relu_d1_w8`"]
    assert "`ort_api_calls/Run` | 7 | 4" in text
    assert "Only in base (not compared): `matmul_128x128`." in text


def test_many_no_change_rows_fold_into_details():
    comparison = _same_run()
    quiet = [r for r in comparison.cases if r.verdict == "no_change"]
    assert len(quiet) > render.COLLAPSE_NO_CHANGE_OVER
    text = render.render_markdown(comparison)
    assert f"<details><summary>{len(quiet)} cases within noise ✅</summary>" in text
    main_table = _tables(text)[0]
    assert all("✅" not in row[0] for row in main_table[2:])
    # A short grid keeps its ✅ rows in the main table.
    text = render.render_markdown(_separate())
    assert "cases within noise" not in text


def test_no_profile_is_said_out_loud():
    doc = _load("same_run.json")
    comparison = compare.compare(Side("base", doc, "base"), Side("pr", doc, "pr"))
    text = render.render_markdown(comparison)
    said = ("no measurement (no calibration profile, no A/A twin), so t is the conservative "
            "default max(1%, 2 × 2%)")
    assert f"the noise from {said}" in text  # the method paragraph
    assert f"came from {said}" in text  # what this cannot catch


def test_a_twin_is_named_as_the_source_of_the_thresholds():
    truth = {"ort": 1000.0, "base": 800.0, "base_twin": 800.0, "pr": 800.0}
    doc = synthetic.results_doc({"relu_d10_w8": truth}, rounds=24, processes=4,
                                twin={"of": "base", "key": "base_twin"})
    text = render.render_markdown(compare.compare(Side("base", doc, "base"),
                                                  Side("pr", doc, "pr")))
    twin = "the run's own A/A twin (a second copy of the base arm measured beside it; 2 ×"
    assert f"the noise from {twin}" in text
    assert f"came from {twin}" in text
    # The generic sentence of a run without a profile is not said of thresholds a twin set.
    assert "conservative default" not in text and "No A/A calibration profile" not in text
    # A twin registered from the one file every arm loads is named as that, in every
    # place the method is described, and round-trips through compare.json.
    doc["twin"]["shared_library"] = True
    shared = compare.compare(Side("base", doc, "base"), Side("pr", doc, "pr"))
    text = render.render_markdown(shared)
    twin = ("the run's own A/A twin (the base arm's library file registered a second time, "
            "the one file every arm of the run loads, measured beside it; 2 ×")
    assert f"the noise from {twin}" in text
    assert f"came from {twin}" in text
    assert "a second copy of the base arm" not in text
    assert comparison.Comparison.from_json(shared.to_json()).twin[0].shared_library
    # A copy's twin writes no key (a comment job older than it still reads the file).
    assert "shared_library" not in json.dumps(
        compare.compare(Side("base", _twinned(False), "base"),
                        Side("pr", _twinned(False), "pr")).to_dict())


def _twinned(shared: bool) -> dict:
    truth = {"ort": 1000.0, "base": 800.0, "base_twin": 800.0, "pr": 800.0}
    doc = synthetic.results_doc({"relu_d10_w8": truth}, rounds=24, processes=4,
                                twin={"of": "base", "key": "base_twin"})
    doc["twin"]["shared_library"] = shared
    return doc


def test_two_runs_take_no_threshold_from_a_twin_of_one_file():
    """Two runs set two builds' files side by side: a twin that was its run's one file
    registered again measured none of that, so it sets no threshold there; a copy does."""
    def across(base_shared: bool, pr_shared: bool):
        return compare.compare(Side("base", _twinned(base_shared), "base"),
                               Side("pr", _twinned(pr_shared), "pr"))

    both = across(True, True)
    assert both.twin == ()
    text = render.render_markdown(both)
    assert "conservative default" in text
    assert ("the A/A twin of the base and the pr run was its run's one library file "
            "registered again, not a copy") in text
    one = across(False, True)
    assert [t.side for t in one.twin] == ["base"]
    said = "the A/A twin of the pr run was its run's one library file"
    assert said in render.render_markdown(one)
    copies = across(False, False)
    assert [t.side for t in copies.twin] == ["base", "pr"]
    assert "registered again" not in render.render_markdown(copies)


def test_a_run_that_stopped_waiting_for_quiet_says_so_in_every_report():
    doc = synthetic.results_doc({"relu_d10_w8": {"ort": 1000.0, "base": 800.0, "pr": 800.0}},
                                rounds=24, processes=4)
    doc["config"]["gate"]["stops_waiting_after_rounds"] = 16
    budgets = [2.5, 2.5, 0.0, 0.0]
    for process, budget in zip(doc["cases"]["relu_d10_w8"]["processes"], budgets, strict=True):
        process["gate_budget_s"] = budget
    comparison = compare.compare(Side("base", doc, "base"), Side("pr", doc, "pr"))
    said = ("the gate stopped waiting for quiet in 2 of 4 processes (after 16 rounds in a row "
            "had no passing look: a sustained load)")
    assert said in render.render_markdown(comparison)
    assert said in render.render_terminal(comparison)
    assert said in render.render_summary_table(summary.summarize(as_results(doc)))
    assert said in run_report.render_run_report(as_results(doc))
    assert said in html.render_html(doc=as_results(doc), comparison=comparison)
    doc["cases"]["relu_d10_w8"]["processes"][2]["gate_budget_s"] = 2.5
    doc["cases"]["relu_d10_w8"]["processes"][3]["gate_budget_s"] = 2.5
    comparison = compare.compare(Side("base", doc, "base"), Side("pr", doc, "pr"))
    assert "stopped waiting" not in render.render_markdown(comparison)


def test_number_formats():
    assert render.format_ns(812.4) == "812 ns"
    assert render.format_ns(12_345.0) == "12.3 µs"
    assert render.format_ns(4_561_000.0) == "4.56 ms"
    assert render.format_ns(None) == "-"
    assert render.format_pct(0.0523) == "+5.2%"
    assert render.format_pct(-0.0004) == "+0.0%"
    assert render.format_share(0.023) == "2.3%"
    assert render.md_cell("a|b") == "a\\|b"


def test_write_run_report_writes_report_md_and_returns_the_table(tmp_path):
    text = run_report.write_run_report(_load("pr.json"), tmp_path)
    written = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert written == run_report.render_run_report(_load("pr.json"))
    assert "crashed (unverified)" in text and text.endswith(f"report: {tmp_path / 'report.md'}")


def test_the_sentence_counts_cases_that_could_not_be_compared():
    result = _verdicts()
    assert "1 could not be compared" in render.overall_sentence(result)

    def edit(doc):
        for row in doc["cases"]:
            row["verdict"] = "not_comparable"
        doc["counts"] = {"not_comparable": len(doc["cases"])}
    result = _edited(result, edit)
    assert render.overall_sentence(result) == (
        "No case of 6 could be compared (see the reasons below).")


def test_the_sentence_of_a_clean_grid_with_a_case_not_compared():
    def edit(doc):
        for row in doc["cases"]:
            row["verdict"] = "no_change"
        doc["cases"][0]["verdict"] = "not_comparable"
        doc["counts"] = {"no_change": 5, "not_comparable": 1}
    result = _edited(_verdicts(), edit)
    assert render.overall_sentence(result) == (
        "No case of 5 changed beyond its threshold; 1 could not be compared.")


def test_the_sentence_says_which_undecided_cases_more_rounds_cannot_help():
    def edit(doc):
        for row in doc["cases"]:
            row["verdict"], row["control_shift"] = "no_change", None
        for row, shift in zip(doc["cases"][:3], (0.3, -0.2, 0.05), strict=True):
            row["verdict"], row["control_shift"] = "inconclusive", shift
        doc["counts"] = {"no_change": 3, "inconclusive": 3}
    result = _edited(_verdicts(), edit)
    assert render.overall_sentence(result) == (
        "3 could not be decided (2 as the two runs' controls ran at different speeds; the "
        "others: rerun with more rounds).")

    def base_twice_as_slow(doc):
        doc["cases"][2]["control_shift"] = -0.5  # the base run's control twice as slow
    result = _edited(result, base_twice_as_slow)
    assert render.overall_sentence(result) == (
        "3 could not be decided (3 as the two runs' controls ran at different speeds: rerun "
        "both back to back).")

    def small_shifts(doc):
        for row in doc["cases"][:3]:
            row["control_shift"] = 0.05
    result = _edited(result, small_shifts)
    assert render.overall_sentence(result) == (
        "3 could not be decided (rerun with more rounds).")


def test_wording_follows_the_settings_and_the_thresholds():
    doc = _load("same_run.json")
    result = compare.compare(Side("base", doc, "base"), Side("pr", doc, "pr"),
                             settings=Settings(alert=0.01))
    text = render.render_markdown(result)
    # No profile: every t is 4 %, said once; an --alert below t is not shown as the level.
    assert "The thresholds (4.0% here)" in text
    assert "🔴 needs ≥ 1% (or t, where t is larger)" in text
    assert f"across the {len(result.cases)} case(s) with a test" in text


def test_run_report_says_a_per_node_cost_it_cannot_resolve_instead_of_a_negative_one():
    from dataclasses import replace

    doc = _load("pr.json")
    shown = summary.summarize(doc)
    family = shown.families["relu_w8"]
    fit = replace(family.arms["plugin:ep"], slope_ns=-0.93, slope_ci95=[-2.5, 0.7])
    unresolved = replace(shown, families={
        **shown.families, "relu_w8": replace(family, arms={**family.arms, "plugin:ep": fit})})
    text = run_report.render_run_report(doc, unresolved)
    row = next(line for line in text.splitlines() if line.startswith("|  |  | `plugin:ep` |"))
    assert row.split("|")[4].strip() == "not resolved"
    assert "-930 ps" not in text and "-0.93" not in text
    resolved = run_report.render_run_report(doc, shown)
    assert "| 67.6 ns |" in resolved


def test_run_report_shows_a_family_fit_with_no_interval_as_dashes(tmp_path):
    # One round of a chain case with no median for the control: that arm's family fit has
    # no interval (None in the summary), and summary --format markdown drew it as a
    # TypeError; now its cells are "-" and the other arms' fits stand.
    from click.testing import CliRunner

    from epbench.cli.main import cli

    truth = {"ort": 1000.0, "pr": 1300.0}
    doc = synthetic.results_doc({"relu_d10_w8": truth, "relu_d1_w8": truth}, rounds=8)
    doc["cases"]["relu_d10_w8"]["rounds"][0]["summary_ns"]["ort"]["median"] = None
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    fits = summary.summarize(as_results(doc)).families["relu_w8"].arms
    assert fits["ort"].slope_ci95 == [None, None] and None not in fits["pr"].slope_ci95
    result = CliRunner().invoke(cli, ["summary", str(path), "--format", "markdown"])
    assert result.exit_code == 0, result.output
    rows = {line.split("|")[3].strip(): line.split("|")[4:8] for line in
            result.output.splitlines() if line.startswith(("| `relu_w8`", "|  |  |"))}
    assert [c.strip() for c in rows["`ort`"]] == ["-", "[-, -]", "-", "[-, -]"]
    assert "µs" in rows["`pr`"][2]  # its per-Run cost


def test_run_report_gives_every_arm_row_its_case_status():
    text = run_report.render_run_report(_load("pr.json"))
    first_table = text.split("\n### ", 1)[0]
    rows = [line.split("|") for line in first_table.splitlines() if "`plugin:ep` | " in line]
    assert [r[2].strip() for r in rows] == ["crashed (unverified)", "ok", "ok", "ok", "ok"]


def test_write_outputs_writes_the_run_its_verdicts_and_both_reports(tmp_path):
    from epbench.core.results import read_document
    from epbench.reports import outputs

    run, result = _load("same_run.json"), _same_run()
    paths = outputs.write_outputs(tmp_path, run, result)
    assert [p.name for p in paths] == ["results.json", "compare.json", "report.md",
                                       "report.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(outputs.OUTPUT_FILES)
    assert read_document(tmp_path / "results.json")[0] == run.to_dict()
    assert (tmp_path / "compare.json").read_text(encoding="utf-8") == result.to_json()
    assert (tmp_path / "report.md").read_text(encoding="utf-8") == render.render_markdown(result)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and '<figure id="forest">' in page


def test_every_report_quotes_one_control_drift_in_the_same_words():
    """Issue 47: the drift was "last third vs first third" in text and markdown, "first
    round to last, Theil–Sen" in HTML, "first round to last" in compare's warning. Now one
    number (stats.control_drift, the worst case) in one sentence, run and comparison alike."""
    import markupsafe

    run, result = _load("same_run.json"), _same_run()
    drifts = render.run_drifts(summary.summarize(run))
    # One run compared with itself: the comparison's drifts are the run's.
    assert {r.case: r.control_drift for r in result.cases} == drifts
    plain = render.drift_sentence(drifts, str)
    head = plain.removesuffix(".")
    assert head.startswith(f"ORT control drift ({summary.DRIFT_MEANING}): worst ")
    name, drift = summary.worst_drift(drifts)
    assert abs(drift) == max(abs(d) for d in drifts.values() if d is not None)
    assert head.endswith(f"worst {render.format_pct(drift)} ({name})")
    marked = head.replace(f"({name})", f"({render.inert(name)})")
    in_html = str(markupsafe.escape(head)).replace(f"({name})", f"(<code>{name}</code>)")
    page = html.render_html(doc=run, comparison=result)
    assert render.render_summary_table(summary.summarize(run)).count(head) == 1
    assert run_report.render_run_report(run).count(marked) == 1
    assert render.render_terminal(result).count(head) == 1
    assert render.render_markdown(result).count(marked) == 1
    assert page.count(in_html) == 2  # the comparison's section and the run's
    for text in (render.render_markdown(result), page, render.render_terminal(result)):
        assert "last third" not in text and "across a case's rounds" not in text
    # compare's warning, for the cases whose drift passed their threshold, in those words.
    (warning,) = [w for w in result.warnings if "drifted" in w]
    assert warning.startswith(f"the ORT control drifted ({summary.DRIFT_MEANING}) by more")
