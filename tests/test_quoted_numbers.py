"""One definition per derived number (issue 47): every output of one comparison quotes
each case's threshold t, the floor, the alert rule and the idle gate's counts in the same
words, from the one function that formats each (reports.formats, reports.verdicts,
reports.render.gate_text).

The outputs: the terminal text, report.md, report.html, compare.json, the PR comment
(the bot's own render of compare.json), the annotations, and for the run behind it the
run report, the summary table and the page's run section. The history page and
BENCHMARKS.md quote neither a threshold nor a run's gate counts.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from dataclasses import replace

from epbench.reports import compare, html, render, run_report, summary
from epbench.reports.bot.annotations import annotation_lines
from epbench.reports.bot.artifact import comment_body
from epbench.reports.comparison import Comparison, Side
from epbench.reports.formats import format_share
from epbench.reports.verdicts import Settings, alert_rule_text, default_threshold_text
from tests.support import synthetic
from tests.support.synthetic import as_results

# One run, the base arm's A/A twin in it (so each case has a threshold of its own), rounds
# under load in two cases, and a floor of 0.5 % (as --target-mde 1% sets it).
TRUTH = {"relu_d10_w8": 1.30, "add_d10_w8": 1.06, "relu_d1_w8": 0.85,
         "sigmoid_d10_w4096": 1.0, "identity_d1_w4096": 1.0}
SETTINGS = Settings(floor=0.005)
GATE = re.compile(r"(\d+) of (\d+) rounds passed the idle gate \((\w+), ≥ ([\d.]+) idle\), "
                  r"(\d+) unquiet, max steal ([\d.]+%)")


def _run() -> dict:
    noise = synthetic.NoiseModel(machine_sigma=0.01, arm_sigma=0.02, spike_prob=0.0,
                                 session_sigma=0.0)
    cases = {name: {"ort": 2000.0, "base": 1000.0, "base_twin": 1000.0, "pr": 1000.0 * f}
             for name, f in TRUTH.items()}
    return synthetic.results_doc(
        cases, rounds=24, processes=4, seed=5, noise=noise,
        twin={"of": "base", "key": "base_twin"},
        unquiet_rounds={"relu_d10_w8": (1, 5, 9), "add_d10_w8": (0, 12)})


def _md_thresholds(text: str) -> dict[str, str]:
    """Case -> the Threshold cell of a markdown verdict table (report.md, the comment)."""
    cells = [[c.strip() for c in line.split("|")] for line in text.splitlines()
             if line.startswith("| ") and line.count("|") >= 9 and "`" in line.split("|")[2]]
    return {c[2].strip("`"): c[7] for c in cells}


def _terminal_thresholds(text: str, cases: set[str]) -> dict[str, str]:
    rows = [re.split(r"\s{2,}", line) for line in text.splitlines()]
    return {r[0]: r[5] for r in rows if r[0] in cases}


def _html_thresholds(page: str) -> dict[str, str]:
    rows = re.findall(r'<tr><td class="verdict"[^>]*>.*?</td><td><code>(.*?)</code></td>(.*?)'
                      r"</tr>", page)
    return {name: re.findall(r'<td class="num">(.*?)</td>', cells)[4] for name, cells in rows}


def test_every_output_quotes_the_thresholds_and_gate_counts_alike() -> None:
    doc = _run()
    run = as_results(doc)
    result = compare.compare(Side("base", run, "base"), Side("pr", run, "pr"),
                             settings=SETTINGS)
    stored = json.loads(result.to_json())  # compare.json
    read_back = Comparison.from_json(stored)
    names = {r["case"] for r in stored["cases"]}
    # The one definition: each case's t, as compare.json records it, in one format.
    want = {r["case"]: format_share(r["threshold"]) for r in stored["cases"]}
    assert len(set(want.values())) > 1  # the twin gave the cases thresholds of their own

    report_md = render.render_markdown(result)
    terminal = render.render_terminal(result)
    page = html_lib.unescape(html.render_html(doc=run, comparison=result))
    comment = comment_body(read_back)
    annotations = annotation_lines(read_back)
    assert _md_thresholds(report_md) == want
    assert _md_thresholds(comment) == want
    assert _terminal_thresholds(terminal, names) == want
    assert _html_thresholds(page) == want
    flagged = {r.case: r for r in read_back.cases if r.verdict in ("alert", "regression")}
    assert flagged and len(annotations) == len(flagged)
    for line in annotations:
        message = line.split("::", 2)[2].replace("%25", "%")  # the workflow command's escape
        case = next(n for n in flagged if f" {n} " in message)
        assert message.endswith(f", threshold {want[case]}")
    # The verdicts' reasons name the same t (and an alert its level) in the same format.
    for row in read_back.cases:
        band = f"±{want[row.case]}" if row.verdict in ("no_change", "inconclusive") else (
            f"the alert level {format_share(row.alert)}" if row.verdict == "alert"
            else f"the threshold {want[row.case]}")
        assert band in row.reason, (row.case, row.reason)
    judged = [r["threshold"] for r in stored["cases"]]
    span = f"The thresholds ({format_share(min(judged))} to {format_share(max(judged))} here)"
    assert sum(span in note for note in read_back.cannot_catch) == 1

    # The floor and the alert rule: one wording in the method paragraph of every output.
    rule = "its threshold t = max(0.5%, 2 × A/A noise), the noise from "
    alert = " needs ≥ 2t, and significance"  # after 🔴, drawn as a mark on the page
    for text in (report_md, terminal, page, comment):
        assert text.count(rule) == 1 and text.count(alert) == 1

    # The gate's counts: compare.json's, the run summary's, one clause in every output.
    gate = stored["gate"]["run"]
    counts = (str(gate["quiet"]), str(gate["rounds"]), gate["policy"], f"{gate['threshold']:g}",
              str(gate["unquiet"]), format_share(gate["max_steal"]))
    assert (gate["quiet"], gate["unquiet"], gate["rounds"]) == (115, 5, 120)
    assert {key: getattr(summary.gate_summary(run), key) for key in gate} == gate
    clause = render.gate_text(read_back.gate["run"])
    run_summary = summary.summarize(run)
    assert render.gate_text(run_summary.gate) == clause
    outputs = {"terminal": terminal, "report.md": report_md, "comment": comment,
               "run report": run_report.render_run_report(run),
               "summary table": render.render_summary_table(run_summary)}
    for name, text in outputs.items():
        assert GATE.findall(text) == [counts], name
        assert text.count(f"run: {clause}") == 1, name
    # The page says it twice: of the comparison and of the run behind it.
    assert GATE.findall(page) == [counts, counts]
    assert page.count(f"run: {clause}.") == 2


def test_the_default_threshold_is_worded_once_wherever_it_is_quoted() -> None:
    run = as_results(synthetic.results_doc(
        {"relu_d10_w8": {"ort": 2000.0, "base": 1000.0, "pr": 1000.0}}, rounds=24))
    settings = replace(SETTINGS, k=1.5)
    result = compare.compare(Side("base", run, "base"), Side("pr", run, "pr"),
                             settings=settings)
    said = default_threshold_text(settings)
    assert said == "max(0.5%, 1.5 × 2%)"
    assert [w for w in result.warnings if said in w] == [w for w in result.warnings
                                                         if "conservative default" in w]
    assert sum(said in w for w in result.warnings) == 1
    assert sum(f"conservative default {said}" in n for n in result.cannot_catch) == 1
    # The method paragraph, the warning and (but in the terminal) what this cannot catch.
    for text, times in ((render.render_markdown(result), 3), (render.render_terminal(result), 2),
                        (html_lib.unescape(html.render_html(comparison=result)), 3)):
        assert text.count(f"conservative default {said}") == times
        assert "max(0%" not in text and "max(1%" not in text


def test_an_alert_level_is_quoted_as_it_was_set() -> None:
    # --alert 0.0125 is a setting: 1.25%, not the one-decimal 1.2% of a measured share.
    for alert, said in ((0.0125, "1.25%"), (0.05, "5%"), (0.0025, "0.25%")):
        assert alert_rule_text(replace(SETTINGS, alert=alert)) == (
            f"{said} (or t, where t is larger)")
