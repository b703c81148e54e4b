"""The HTML report: every plot drawn with a caption, nothing fetched, nothing missing unsaid.

Pages are parsed with the standard library's html.parser, the way a browser would
tokenise them; the data are synthetic results documents (reports.synthetic) whose
shape we choose: one arm, one case, a family at a single depth, unquiet rounds.
"""

from __future__ import annotations

import colorsys
import json
import re
import runpy
from html.parser import HTMLParser
from pathlib import Path

import pytest
import tomllib
from click.testing import CliRunner

from epbench.cases.grids import case_by_name
from epbench.cli.main import cli
from epbench.core.errors import EXIT_OK, EXIT_USER_ERROR
from epbench.harness.run_config import RunConfig
from epbench.reports import compare as cmp
from epbench.reports import html, plots
from epbench.reports.comparison import VERDICTS
from epbench.reports.summary import gate_rounds
from epbench.reports.verdicts import Settings
from epbench.workflows import compare_commits
from tests.support import synthetic
from tests.support.fakebuild import fake_build_commit
from tests.support.synthetic import as_results, typed_runner

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "results"
# Text a page must never show: a missing number has to read "-".
BAD_TEXT = re.compile(r"\b(NaN|nan|None|inf)\b")
NOISE = synthetic.NoiseModel(machine_sigma=0.01, arm_sigma=0.01, spike_prob=0.03)


class Page(HTMLParser):
    """What the tests look at in a page: figures, URLs, scripts, ids and visible text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.figures: list[dict] = []
        self.urls: list[str] = []
        self.scripts = 0
        self.ids: list[str] = []
        self.text: list[str] = []
        self._stack: list[str] = []
        self._in_caption = False
        self._in_style = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.figures.append({"id": attrs.get("id"), "svg": 0, "caption": "",
                                 "missing": "not-drawn" in (attrs.get("class") or "")})
        if tag == "svg" and self._open("figure"):
            self.figures[-1]["svg"] += 1
        if tag == "figcaption":
            self._in_caption = True
        self._in_style = tag == "style"
        if tag == "script":
            self.scripts += 1
        for name, value in attrs.items():
            if name in ("src", "href", "xlink:href", "action", "data") and value:
                self.urls.append(value)
            if value and "url(" in value:
                self.urls.extend(re.findall(r"url\(([^)]*)\)", value))
            if name == "id":
                self.ids.append(value)
        self._stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self._in_caption = False
        if tag == "style":
            self._in_style = False
        while self._stack:
            if self._stack.pop() == tag:
                break

    def handle_data(self, data):
        if self._in_caption:
            self.figures[-1]["caption"] += data
        if self._in_style:
            self.urls.extend(re.findall(r"url\(([^)]*)\)", data))
        else:
            self.text.append(data)

    def _open(self, tag: str) -> bool:
        return tag in self._stack

    def drawn(self) -> list[dict]:
        return [f for f in self.figures if f["svg"]]

    def not_drawn_text(self) -> str:
        return " ".join(self.text)


def check_page(text: str) -> Page:
    """The rules every page keeps; returns the parsed page for the test's own checks."""
    page = Page(text)
    assert page.scripts == 0
    assert "http://" not in text and "https://" not in text
    assert all(u.startswith("#") for u in page.urls), [u for u in page.urls
                                                       if not u.startswith("#")]
    for figure in page.drawn():
        assert figure["svg"] == 1, figure["id"]
        caption = figure["caption"].strip()
        assert caption and "\n" not in caption, figure["id"]
    visible = " ".join(page.text)
    assert not BAD_TEXT.search(visible), BAD_TEXT.search(visible).group(0)
    assert len(page.ids) == len(set(page.ids)), "an id is defined twice in the page"
    return page


def _doc(cases, **kwargs):
    kwargs.setdefault("rounds", 12)
    kwargs.setdefault("samples", 3)
    return synthetic.results_doc(cases, noise=NOISE, **kwargs)


FAMILY = {f"relu_d{d}_w8": {"ort": 800 + 200.0 * d, "engine": 400 + 60.0 * d}
          for d in (1, 10, 100)}


@pytest.fixture(scope="module")
def default_grid_page(tmp_path_factory) -> tuple[Path, dict]:
    """A page the size of the default grid (its 20 cases, ort + engine, 30 rounds each)."""
    grid = tomllib.loads((ROOT / "cases" / "grids" / "default.toml").read_text())
    names = grid["grid"]["cases"]
    doc = _doc({n: {"ort": 1000.0 * (i + 1), "engine": 700.0 * (i + 1)}
                for i, n in enumerate(names)}, rounds=30,
               unquiet_rounds={names[3]: [2, 7], names[9]: [0]})
    out = tmp_path_factory.mktemp("dg")
    (out / "results.json").write_text(json.dumps(doc))
    return html.write_report(out, out / "html"), doc


def test_the_default_grid_page_draws_every_plot_with_a_caption(default_grid_page):
    path, doc = default_grid_page
    page = check_page(path.read_text(encoding="utf-8"))
    ids = [f["id"] for f in page.drawn()]
    families = {"relu_w8", "relu_w4096", "identity_w4096", "add_w8", "relu_w8_dyn"}
    assert ids == ([f"rounds-{i}" for i in range(len(doc["cases"]))]
                   + [f"family-{i}" for i in range(len(families))] + ["gate"])
    # sigmoid, relu_d10_w4096_dyn: families of one depth, said so in place of a plot.
    not_drawn = [f["id"] for f in page.figures if f["missing"]]
    assert not_drawn == ["family-single-relu_w4096_dyn", "family-single-sigmoid_w4096"]


def test_the_default_grid_page_weighs_at_most_2_mb(default_grid_page):
    path, _ = default_grid_page
    assert path.stat().st_size <= 2 * 1024 * 1024


def test_a_results_stream_is_drawn_like_its_document(tmp_path):
    doc = _doc({"relu_d10_w8": FAMILY["relu_d10_w8"]})
    header = {k: v for k, v in doc.items() if k not in ("cases", "interrupted")}
    lines = [{"type": "header", **header}]
    lines += [{"type": "case", "name": n, "result": c} for n, c in doc["cases"].items()]
    lines.append({"type": "end", "interrupted": False})
    stream = tmp_path / "results.jsonl"
    stream.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _report(stream, "--html", tmp_path / "html")
    assert result.exit_code == EXIT_OK, result.output
    page = check_page((tmp_path / "html" / "index.html").read_text(encoding="utf-8"))
    assert [f["id"] for f in page.drawn()] == ["rounds-0", "gate"]


def test_the_same_data_draws_the_same_bytes(tmp_path):
    doc = _doc(FAMILY)
    assert html.render_html(doc=as_results(doc)) == html.render_html(doc=as_results(doc))


def test_unquiet_rounds_are_marked_in_the_rounds_and_the_gate():
    doc = _doc({"relu_d10_w8": FAMILY["relu_d10_w8"]}, unquiet_rounds={"relu_d10_w8": [3, 4]})
    text = html.render_html(doc=as_results(doc))
    figures = re.findall(r'<figure id="([^"]+)">(.*?)</figure>', text, re.S)
    by_id = dict(figures)
    colour = plots.UNQUIET_COLOUR
    assert colour in by_id["rounds-0"] and colour in by_id["gate"]
    quiet = html.render_html(doc=as_results(_doc({"relu_d10_w8": FAMILY["relu_d10_w8"]})))
    assert colour not in dict(re.findall(r'<figure id="([^"]+)">(.*?)</figure>', quiet,
                                         re.S))["rounds-0"]


def test_one_arm_one_case_single_depth_say_why_instead_of_drawing(tmp_path):
    doc = _doc({"relu_d10_w8": {"ort": 3000.0}})
    page = check_page(html.render_html(doc=as_results(doc)))
    assert [f["id"] for f in page.drawn()] == ["gate"]
    text = page.not_drawn_text()
    assert "Only the control arm `ort` ran, so there is no ratio to draw" in text
    assert "Family `relu_w8` ran at depth 10 only: a per-node slope needs at least two" in text

    doc = as_results(_doc({"matmul_128x128": {"ort": 5e4, "ep": 4e4}}))
    page = check_page(html.render_html(doc=doc))
    assert [f["id"] for f in page.drawn()] == ["rounds-0", "gate"]
    assert "No case of this run is a chain family" in page.not_drawn_text()


def test_a_crashed_case_says_so_in_place_of_its_rounds():
    doc = _doc(FAMILY, status={"relu_d100_w8": "crashed"})
    page = check_page(html.render_html(doc=as_results(doc)))
    assert [f["id"] for f in page.figures if f["missing"]] == ["rounds-2"]
    assert "The case did not finish (crashed: crashed: synthetic)" in page.not_drawn_text()


def test_a_comparison_json_gets_a_forest_plot_in_verdict_colours(tmp_path):
    comparison = cmp.compare_files([str(FIXTURES / "base.json"), str(FIXTURES / "pr.json")],
                                   profile_path=str(FIXTURES / "profile.json"))
    path = tmp_path / "compare.json"
    path.write_text(comparison.to_json())
    result = CliRunner().invoke(cli, ["report", str(path), "--html", str(tmp_path / "out")])
    assert result.exit_code == EXIT_OK, result.output
    text = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    page = check_page(text)
    assert [f["id"] for f in page.drawn()] == ["forest"]
    forest = re.search(r'<figure id="forest">(.*?)</figure>', text, re.S).group(1)
    verdicts = {r.verdict for r in comparison.cases}
    # relu_d1_w8, measured in one process, is ❔: its interval is widened by what two runs
    # differ by (a one-process case's too, since the per-case extra variance).
    assert verdicts == {"alert", "inconclusive", "failed"}
    for verdict, (colour, _) in plots.VERDICT_STYLE.items():
        # The alert colour also draws each row's alert tick; every other colour is a verdict.
        if verdict != "alert":
            assert (colour in forest) == (verdict in verdicts), verdict
    # The crashed case has no change: the plot says so in words (in the ❌ colour).
    assert "no change measured: failed" in forest
    # The table's rows carry the plot's colour of their verdict.
    for verdict in verdicts:
        emoji, words = VERDICTS[verdict]
        colour = plots.VERDICT_STYLE[verdict][0]
        cell = re.search(rf'style="border-left-color: {colour}">(<svg class="mark".*?</svg>) '
                         rf'{re.escape(words)}</td>', text)
        assert cell is not None, verdict
        assert f'aria-label="{emoji}" fill="{colour}"' in cell.group(1)
    # No verdict is left to an emoji font: outside the tab title and the marks' accessible
    # names, every verdict emoji of the page is drawn as an inline SVG mark.
    visible = re.sub(r'<title>.*?</title>|aria-label="[^"]*"', "", text, flags=re.S)
    for emoji, _ in VERDICTS.values():
        assert emoji.rstrip("\ufe0f") not in visible, emoji
    # The tables of the markdown come along: every case, with its reason.
    for row in comparison.cases:
        assert f"<code>{row.case}</code>" in text
        assert row.reason.split(",")[0] in text


def test_verdict_colours_are_the_colours_of_their_emoji():
    def hue_saturation(colour):
        r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
        h, _, s = colorsys.rgb_to_hls(r, g, b)
        return h * 360, s

    # 🔴 ❌ red, ⚠️ amber, 🟢 ✅ green, ❔ ➖ grey (no hue).
    expected = {"alert": (345, 15), "failed": (345, 15), "regression": (25, 55),
                "improvement": (90, 150), "no_change": (90, 150)}
    for verdict, (colour, _) in plots.VERDICT_STYLE.items():
        hue, saturation = hue_saturation(colour)
        if verdict in ("inconclusive", "not_comparable"):
            assert saturation < 0.05, verdict
            continue
        lo, hi = expected[verdict]
        assert saturation > 0.3, verdict
        assert (lo <= hue <= hi) if lo < hi else (hue >= lo or hue <= hi), (verdict, hue)
    # Slower points up, faster down.
    assert plots.VERDICT_STYLE["regression"][1] == plots.VERDICT_STYLE["alert"][1] == "^"
    assert plots.VERDICT_STYLE["improvement"][1] == "v"


def test_forest_rows_put_the_worst_regression_on_top():
    def row(case, change, verdict="no_change"):
        return plots.ForestRow(case, verdict, verdict, change, None, None, 0.02, 0.04)

    rows = [row("a", -0.05, "improvement"), row("b", 0.08, "alert"), row("c", None, "failed"),
            row("d", 0.01), row("e", 0.03, "regression")]
    assert [r.case for r in plots.forest_order(rows)] == ["b", "e", "d", "a", "c"]


def test_a_compare_commits_directory_is_judged_base_to_head(tmp_path):
    assert html.COMMITS_ARMS == (compare_commits.BASE_ARM, compare_commits.HEAD_ARM)
    doc = _doc({n: {"ort": v["ort"], "base": v["engine"], "head": v["engine"] * 1.1}
                for n, v in FAMILY.items()})
    (tmp_path / "results.json").write_text(json.dumps(doc))
    path = html.write_report(tmp_path, tmp_path / "html")
    page = check_page(path.read_text(encoding="utf-8"))
    assert [f["id"] for f in page.drawn()] == ["forest", "rounds-0", "rounds-1", "rounds-2",
                                               "family-0", "gate"]
    assert "judged again from its results.json (base -> head)" in page.not_drawn_text()


def test_compare_commits_writes_report_html_beside_report_md(tmp_path, monkeypatch):
    cc = compare_commits

    def fake_run(config):
        return _doc({c.name: {"ort": 1000.0, "base": 800.0, "head": 800.0}
                     for c in config.cases}, rounds=config.rounds)

    monkeypatch.setattr(cc, "run", typed_runner(fake_run))
    monkeypatch.setattr(cc, "build_commit", fake_build_commit)
    monkeypatch.setattr(cc, "resolve_revision", lambda repo, rev: rev * 8)
    monkeypatch.setattr(cc, "repo_root", lambda repo: Path(repo))
    monkeypatch.setattr(cc, "has_uncommitted_changes", lambda root: False)
    config = RunConfig(cases=(case_by_name("relu_d10_w8"),), arms=(), rounds=8,
                       progress=False, out_dir=tmp_path)
    cc.compare_commits(repo=tmp_path, base_rev="a", head_rev="b", build=None, config=config,
                       settings=Settings(), profile_path=None, budget_s=0)
    page = check_page((tmp_path / "report.html").read_text(encoding="utf-8"))
    assert [f["id"] for f in page.drawn()] == ["forest", "rounds-0", "gate"]
    assert (tmp_path / "report.md").is_file()


def test_history_series_with_a_change_point():
    commits = [f"{i:02x}" * 20 for i in range(30)]
    ratio = [0.50] * 12 + [0.52] * 18
    series = plots.HistorySeries("relu_d100_w8", "engine", commits, ratio,
                                 [r * 0.99 for r in ratio], [r * 1.01 for r in ratio])
    step = plots.ChangePoint(12, 0.04, 0.032, 0.05)
    flat = plots.HistorySeries("add_d10_w8", "engine", commits[:1], [0.7])
    page = check_page(html.render_html(history=[(series, [step]), (flat, [])]))
    assert [f["id"] for f in page.drawn()] == ["history-0"]
    text = page.not_drawn_text()
    # The table names the range: the last commit before the step, the first after it.
    assert "0b0b0b0 .. 0c0c0c0" in text and "+4.0%" in text and "[+3.2%, +5.0%]" in text
    assert "Only 1 run of this series is stored: a history needs two" in text


def test_gate_rounds_follow_the_run_order_with_worst_core_readings():
    # The file keeps cases sorted by name; the run order is the config's list.
    doc = _doc({"a_case": {"ort": 1.0}, "b_case": {"ort": 1.0}}, rounds=2,
               unquiet_rounds={"a_case": [1]})
    doc["config"]["case_names"] = ["b_case", "a_case"]
    doc["cases"]["b_case"]["rounds"][0]["gate"]["idle"] = {"cpu0": 0.97, "cpu1": 0.95}
    rounds = gate_rounds(as_results(doc))
    assert [(r.case, r.index, r.quiet) for r in rounds] == [
        ("b_case", 0, True), ("b_case", 1, True), ("a_case", 0, True), ("a_case", 1, False)]
    assert rounds[0].idle_before == 0.95 and rounds[0].idle_during == 0.98
    assert rounds[3].idle_before == 0.5 and rounds[3].steal == 0.02


def test_a_carried_gate_reading_is_no_look_before_its_round():
    doc = _doc({"a_case": {"ort": 1.0}}, rounds=2)
    doc["cases"]["a_case"]["rounds"][1]["gate"].update(carried=True, attempts=0)
    for rnd in doc["cases"]["a_case"]["rounds"]:
        rnd["gate"]["steal"] = {"cpu0": 0.3}  # the carried one: the round before's
        rnd["interference"]["steal"] = {"cpu0": 0.01}
    rounds = gate_rounds(as_results(doc))
    assert [r.idle_before for r in rounds] == [rounds[0].idle_before, None]
    assert rounds[0].idle_before is not None
    assert [r.steal for r in rounds] == [0.3, 0.01]


def _report(*args):
    return CliRunner().invoke(cli, ["report", *map(str, args)])


def test_an_unwritable_out_is_one_clear_line(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_doc({"relu_d10_w8": {"ort": 3000.0, "ep": 2000.0}})))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    taken = tmp_path / "taken"
    (taken / "index.html").mkdir(parents=True)  # the page's name is held by a directory
    for out in (blocker, blocker / "html", taken):
        result = _report(results, "--html", out)
        assert result.exit_code == EXIT_USER_ERROR
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"Error: cannot write {out}/index.html")
        assert lines[0].endswith("choose a writable --html directory")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--html", "x"], "give INPUT or --history DB (one of them)"),
        (["missing.json", "--html", "x"], "no such file or directory: 'missing.json'"),
        (["--history", "h.db", "--html", "x"], "holds no series yet"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = _report(*args)
    assert result.exit_code == EXIT_USER_ERROR
    assert len(result.output.strip().splitlines()) == 1 and message in result.output
    assert not (tmp_path / "x").exists()


def test_a_directory_without_results_and_a_newer_comparison_are_refused(tmp_path):
    result = _report(tmp_path, "--html", tmp_path / "out")
    assert result.exit_code == EXIT_USER_ERROR
    assert "holds no results.json and no compare.json or comparison.json" in result.output
    newer = tmp_path / "compare.json"
    newer.write_text(json.dumps({"schema": "epbench.comparison/99"}))
    result = _report(newer, "--html", tmp_path / "out")
    assert result.exit_code == EXIT_USER_ERROR
    assert "newer than this epbench understands" in result.output


def test_the_readme_shows_the_committed_screenshot():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/images/report.png)" in readme
    image = ROOT / "docs" / "images" / "report.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.stat().st_size < 1024 * 1024


def test_the_screenshot_sample_has_every_kind_of_plot(tmp_path):
    # docs/images/make_report_sample.py feeds `make report-screenshot`: the README's
    # picture should show verdicts, rounds, a family fit and the gate, all drawn.
    sample = runpy.run_path(str(ROOT / "docs" / "images" / "make_report_sample.py"))
    sample["main"](str(tmp_path))
    page = check_page(html.write_report(tmp_path, tmp_path / "html").read_text("utf-8"))
    ids = [f["id"] for f in page.drawn()]
    assert ids[0] == "forest" and "family-0" in ids and ids[-1] == "gate"
    assert sum(i.startswith("rounds-") for i in ids) == 6


# A name with TeX in it: matplotlib would parse `$...$` as mathtext and raise on `\foo`.
TEX_NAME = "$\\foo$"


def test_a_dollar_in_a_case_name_is_drawn_literally_in_a_comparison(tmp_path):
    for name in ("base", "pr", "profile"):
        text = (FIXTURES / f"{name}.json").read_text()
        (tmp_path / f"{name}.json").write_text(text.replace("add_d10_w8", "$\\\\foo$"))
    comparison = cmp.compare_files([str(tmp_path / "base.json"), str(tmp_path / "pr.json")],
                                   profile_path=str(tmp_path / "profile.json"))
    assert TEX_NAME in {r.case for r in comparison.cases}
    path = tmp_path / "compare.json"
    path.write_text(comparison.to_json())
    text = html.write_report(path, tmp_path / "out").read_text(encoding="utf-8")
    check_page(text)
    forest = re.search(r'<figure id="forest">(.*?)</figure>', text, re.S)
    assert f">{TEX_NAME}</text>" in forest.group(1)  # the plot's label, as typed
    assert f"<code>{TEX_NAME}</code>" in text


def test_a_dollar_in_a_case_arm_and_machine_is_drawn_literally_in_a_history():
    commits = [f"{i:02x}" * 20 for i in range(6)]
    ratio = [0.50] * 3 + [0.60] * 3
    series = plots.HistorySeries(TEX_NAME, "$eng$ ($\\bar$)", commits, ratio,
                                 [r * 0.99 for r in ratio], [r * 1.01 for r in ratio])
    text = html.render_html(history=[(series, [plots.ChangePoint(3, 0.2, 0.18, 0.22)])])
    page = check_page(text)
    assert [f["id"] for f in page.drawn()] == ["history-0"]
    figure = re.search(r'<figure id="history-0">(.*?)</figure>', text, re.S).group(1)
    assert TEX_NAME in figure and "$eng$ ($\\bar$)" in figure


def test_a_comparison_too_wide_for_an_axis_is_a_table_without_its_forest(tmp_path):
    # A hostile compare.json: finite, but no axis spans ±1e308 (matplotlib raised).
    comparison = cmp.compare_files([str(FIXTURES / "base.json"), str(FIXTURES / "pr.json")],
                                   profile_path=str(FIXTURES / "profile.json"))
    doc = json.loads(comparison.to_json())
    judged = next(row for row in doc["cases"] if row["change"] is not None)
    judged["alert"], judged["ci"] = 1e308, [-1e308, 1e308]
    path = tmp_path / "compare.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(cli, ["report", str(path), "--html", str(tmp_path / "out")])
    assert result.exit_code == EXIT_OK, result.output
    text = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert "too large to draw on one axis" in text
    assert f"<code>{judged['case']}</code>" in text
