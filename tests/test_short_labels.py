"""A plugin EP given by library path is labelled by its stem in every report."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli

FAST = ["--rounds", "2", "--block-ms", "0.2", "--max-block-iters", "10", "--warmup-ms", "1",
        "--gate", "off", "--quiet", "--processes", "1"]


@pytest.mark.slow
def test_a_library_path_arm_reads_as_its_stem_in_text_markdown_and_html(tmp_path) -> None:
    nxrt = pytest.importorskip("nxrt_ep_cpu")
    library = nxrt.get_library_path()
    out = tmp_path / "run"
    ran = CliRunner().invoke(cli, ["run", "--case", "relu_d1_w8", "--arm", f"plugin:{library}",
                                   "--out", str(out), *FAST])
    assert ran.exit_code == 0, ran.output
    label = "onnx_runtime_ep_cpu_plugin"  # libonnx_runtime_ep_cpu_plugin.so
    doc = json.loads((out / "results.json").read_text())
    assert set(doc["cases"]["relu_d1_w8"]["arms"]) == {"ort", label}
    record = doc["arms"][label]
    assert record["spec"] == f"plugin:{library}"  # the whole spec stays in the file
    text = CliRunner().invoke(cli, ["summary", str(out / "results.json"), "--format", "text"])
    markdown = (out / "report.md").read_text()
    html = CliRunner().invoke(cli, ["report", str(out), "--html", str(tmp_path / "html")])
    assert html.exit_code == 0, html.output
    page = (tmp_path / "html" / "index.html").read_text()
    for rendered in (text.output, markdown, page):
        assert label in rendered
        assert f"plugin:{library}" not in rendered
