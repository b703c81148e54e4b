"""One description of the method that judged, and the "could catch" column, in every output.

templates/_method.j2 is the one fragment the PR comment, the terminal text and the HTML
page include; each output carries the detectable change per case.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html import unescape

import markupsafe
import pytest

from epbench.core.model import Results
from epbench.reports import compare, html, render
from epbench.reports.bot.artifact import comment_body
from epbench.reports.comparison import Comparison, Side
from tests.support.synthetic import NoiseModel, results_doc

NAMES = ("relu_d1_w8", "relu_d10_w8", "relu_d100_w8")


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    truth = {"ort": 1000.0, "base": 800.0, "base_twin": 800.0, "pr": 820.0}
    doc = results_doc(dict.fromkeys(NAMES, truth), rounds=24, processes=6, seed=3,
                      twin={"of": "base", "key": "base_twin"},
                      noise=NoiseModel(arm_sigma=0.002, machine_sigma=0.0, spike_prob=0.0,
                                       process_sigma=0.002))
    results = Results.from_dict(doc, source="a test")
    return compare.compare(Side("base", results, "base"), Side("pr", results, "pr"))


def _method(comparison: Comparison) -> str:
    """The fragment alone, rendered as plain text."""
    template = render.environment().from_string(
        '{% from "_method.j2" import method %}{{ method(m) }}')
    return template.render(m=render.method_context(comparison))


def test_every_output_describes_the_method_from_one_fragment(comparison) -> None:
    text = _method(comparison)
    assert text.startswith("A case is judged against its threshold t = max(1%, 2 × A/A "
                           "noise), the noise from the run's own A/A twin")
    assert "Student's t intervals over worker processes" in text
    assert render.render_markdown(comparison).count(text) == 1
    assert comment_body(Comparison.from_json(comparison.to_json())).count(text) == 1
    assert render.render_terminal(comparison).count(text) == 1
    page = html.render_html(comparison=comparison)
    # As read in a browser: each verdict mark is its emoji (its accessible name).
    read = unescape(re.sub(r'<svg class="mark"[^>]*aria-label="([^"]+)".*?</svg>', r"\1", page))
    assert read.count(text) == 1
    # The method before process-level t intervals is said nowhere.
    for output in (page, render.render_markdown(comparison), render.render_terminal(comparison)):
        assert "order-statistic intervals of the median over rounds" not in output


def test_every_output_carries_what_each_case_could_catch(comparison) -> None:
    sizes = [row.detectable for row in comparison.cases]
    assert len(sizes) == 3 and all(0.0 < s < 0.05 for s in sizes)
    cells = [render.format_detectable(s) for s in sizes]
    doc = json.loads(comparison.to_json())
    assert [row["detectable"] for row in doc["cases"]] == pytest.approx(sizes)
    markdown = render.render_markdown(comparison)
    comment = comment_body(Comparison.from_json(doc))
    terminal = render.render_terminal(comparison)
    page = html.render_html(comparison=comparison)
    assert "| Threshold | Could catch |" in markdown and "| Threshold | Could catch |" in comment
    assert "threshold  could catch" in terminal
    assert "<th>Threshold t</th><th>Could catch</th>" in page
    for cell in cells:
        for output in (markdown, comment, terminal):
            assert f" {cell} " in output
        assert f'<td class="num">{markupsafe.escape(cell)}</td>' in page
    summary = render.detectable_sentence(comparison)
    assert summary.startswith("Could catch a slowdown of ≥ ")
    for output in (markdown, comment, terminal, page):
        assert summary in output


def test_a_file_with_absurd_numbers_still_renders_as_numbers(comparison) -> None:
    # The comment job renders any compare.json the schema admits: finite, but any size.
    doc = json.loads(comparison.to_json())
    doc["twin"][0]["unmodelled_sd"] = 1000.0  # exp(1000) overflows a float
    doc["between_runs"]["sd"] = -1.0
    doc["cases"][0]["detectable"] = 1e300
    body = comment_body(Comparison.from_json(doc))
    assert "the twin's A/A spread beyond its processes (sd " in body
    assert "what two runs differ by" not in body  # a negative sd widens nothing
    assert f"| {render.format_detectable(1e300)} |" in body


def test_the_one_process_interval_is_worded_as_nested_computes_it(comparison) -> None:
    # With a twin, a one-process case's exact interval is widened into a t interval by the
    # twins' pooled one-process variance (nested._one_process); with no extra term at all
    # (one run, no twin) it stays the exact order-statistic interval.
    twinned = _method(comparison)
    assert ("a case measured in one process only gets a t interval around the median of "
            "its rounds") in twinned
    assert "pooled over the grid's one-process twins" in twinned
    assert "what two runs differ by" not in twinned  # one run: no between-run term
    plain = _method(replace(comparison, twin=()))
    assert ("a case measured in one process only gets the exact order-statistic interval "
            "of the median over its rounds, which covers that process alone.") in plain
