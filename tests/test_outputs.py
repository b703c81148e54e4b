"""One writer for a comparison's folder (issue 47): `compare RUN.json --out-dir`,
`compare-commits` and the GitHub Action (its measuring step and its join of slices) each
leave reports.outputs' four files, written by `write_outputs`, and agree on one run.

The builds and the runner are fakes (tests.support.fakebuild, a synthetic run); all the
rest is the real code path of each command, in process.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.cli.run_commands import compare_commits as compare_commits_command
from epbench.core.errors import EXIT_REGRESSION, EXIT_USER_ERROR, EpbenchError
from epbench.core.model import Results
from epbench.core.results import load_results
from epbench.reports import html, outputs, render
from epbench.reports.bot.artifact import PR_FILE
from epbench.reports.comparison import Comparison
from epbench.workflows import action as act
from epbench.workflows import compare_commits as cc
from tests.support.fakebuild import fake_build_commit
from tests.support.synthetic import NoiseModel, results_doc, typed_runner

# head 30 % slower than base: an alert, with little noise, so every path judges it alike.
TRUTH = {"ort": 1000.0, "base": 1000.0, "head": 1300.0}
NOISE = NoiseModel(arm_sigma=0.002, machine_sigma=0.0, spike_prob=0.0)
CASE = "relu_d10_w8"
OPTIONS = ["--rounds", "12", "--quiet", "--no-instructions", "--no-github-annotations"]
ARGS = ["--case", CASE, "--budget", "0", *OPTIONS]
KNOWN = frozenset(opt for p in compare_commits_command.params for opt in p.opts)
BASE_SHA, HEAD_SHA = "a" * 40, "b" * 40


@pytest.fixture
def fake_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    """compare-commits with both sides "built" and a synthetic run for the runner."""
    _fake_commits(monkeypatch)


def _fake_commits(monkeypatch: pytest.MonkeyPatch, reruns: int = 0) -> None:
    """fake_commits; ``reruns``: the run's case says it was re-run that many times (as a
    run that compare-commits' re-runs added rounds to does)."""

    def fake_run(config: Any) -> dict[str, Any]:
        Path(config.out_dir).mkdir(parents=True, exist_ok=True)  # as the runner does
        doc = results_doc({c.name: TRUTH for c in config.cases}, rounds=config.rounds, seed=3,
                          noise=NOISE, unquiet_rounds={CASE: (2, 7)})
        if config.shard:
            doc["config"]["shard"] = config.shard
        if reruns:
            doc["cases"][CASE]["reruns"] = reruns
        return doc

    monkeypatch.setattr(cc, "run", typed_runner(fake_run))
    monkeypatch.setattr(cc, "build_commit", fake_build_commit)
    monkeypatch.setattr(cc, "resolve_revision", lambda repo, rev: rev)
    monkeypatch.setattr(cc, "repo_root", lambda repo: Path(repo))
    monkeypatch.setattr(cc, "has_uncommitted_changes", lambda root: False)


def _read(out: Path, extra: tuple[str, ...] = ()) -> tuple[Results, Comparison]:
    """The folder's run and comparison, after checking that it holds exactly the four
    files (and ``extra``) and that the reports are those of its compare.json and run."""
    assert sorted(p.name for p in out.iterdir()) == sorted((*outputs.OUTPUT_FILES, *extra))
    run = load_results(out / outputs.RESULTS_FILE)
    comparison = Comparison.from_json(
        json.loads((out / outputs.COMPARE_FILE).read_text(encoding="utf-8")))
    assert (out / outputs.REPORT_FILE).read_text(encoding="utf-8") == render.render_markdown(
        comparison)
    # The page's verdicts are its compare.json's; its run section lists the arms in the
    # order of the run in memory, which results.json (sorted keys) does not keep.
    page = (out / outputs.PAGE_FILE).read_text(encoding="utf-8")
    again = html.render_html(doc=run, comparison=comparison, source=str(out))
    run_section = '<section id="run">'
    assert page.split(run_section)[0] == again.split(run_section)[0]
    assert sorted(page.split(run_section)[1]) == sorted(again.split(run_section)[1])
    return run, comparison


def _judged(comparison: Comparison) -> list[dict[str, Any]]:
    """What a comparison says of its cases and its gate, without the sides' labels."""
    return [dataclasses.asdict(r) for r in comparison.cases] + [
        {k: dataclasses.asdict(g)} for k, g in comparison.gate.items()]


def _event(tmp_path: Path) -> Path:
    path = tmp_path / "event.json"
    path.write_text(json.dumps({"pull_request": {"number": 7, "base": {"sha": BASE_SHA},
                                                 "head": {"sha": HEAD_SHA}}}))
    return path


def _in_process(command: list[str], **_: Any) -> Any:
    """run_action's runner: the compare-commits command it builds, run in this process."""
    assert command[1:4] == ["-m", "epbench.cli.main", "compare-commits"]
    result = CliRunner().invoke(cli, command[3:])
    return type("Done", (), {"returncode": result.exit_code})()


def test_compare_compare_commits_and_the_action_write_one_folder_alike(
        tmp_path: Path, fake_commits: None) -> None:
    # compare-commits, as a developer runs it.
    direct = tmp_path / "compare-commits"
    got = CliRunner().invoke(cli, ["compare-commits", BASE_SHA, HEAD_SHA, "--repo",
                                   str(tmp_path), *ARGS, "--out", str(direct)])
    assert got.exit_code == EXIT_REGRESSION, got.output
    run, judged = _read(direct)
    assert [r.verdict for r in judged.cases] == ["alert"]
    assert judged.gate["run"].unquiet == 2

    # compare on that folder's run, into a folder of its own: the same run, judged alike.
    again = tmp_path / "compare"
    got = CliRunner().invoke(cli, ["compare", str(direct / outputs.RESULTS_FILE), "--base",
                                   cc.BASE_ARM, "--pr", cc.HEAD_ARM, "--out-dir", str(again),
                                   "--no-github-annotations"])
    assert got.exit_code == EXIT_REGRESSION, got.output
    assert got.stdout == render.render_terminal(_read(again)[1])
    assert ((again / outputs.RESULTS_FILE).read_bytes()
            == (direct / outputs.RESULTS_FILE).read_bytes())
    assert _judged(_read(again)[1]) == _judged(judged)

    # The action's measuring step (one slice of one), then its join of the slices.
    slices = tmp_path / "slices"
    measured = slices / "epbench-ubuntu-latest-shard-1"
    code = act.run_action(act.ActionInputs(cases=CASE, args=" ".join(OPTIONS), budget="0",
                                           shard="1/1"),
                          event_path=_event(tmp_path), out=measured, repo=tmp_path,
                          environ={}, known_options=KNOWN, runner=_in_process)
    assert code == 0
    slice_run, slice_judged = _read(measured, (PR_FILE,))
    joined = tmp_path / "bench-out"
    merged, comparison = act.merge_action(slices, event_path=_event(tmp_path), out=joined)
    assert _read(joined, (PR_FILE,)) == (merged, comparison)
    # The one run, measured alike by every path (a shard is recorded in its config).
    assert slice_run.config.extra["shard"] == "1/1"
    assert [c.to_dict() for c in slice_run.cases.values()] == [c.to_dict()
                                                               for c in run.cases.values()]
    assert _judged(slice_judged) == _judged(comparison) == _judged(judged)


def test_compare_out_dir_takes_one_run_and_keeps_what_is_there(tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(results_doc({CASE: TRUTH}, rounds=12, noise=NOISE)))
    out = tmp_path / "out"
    base = ["compare", "--base", "base", "--pr", "head", "--out-dir", str(out)]
    two = CliRunner().invoke(cli, ["compare", str(run), str(run), "--out-dir", str(out)])
    assert two.exit_code == EXIT_USER_ERROR
    assert "--out-dir writes one run's results.json beside its verdicts" in two.output
    assert not out.exists()
    first = CliRunner().invoke(cli, [*base, str(run)])
    assert first.exit_code == EXIT_REGRESSION, first.output
    page = (out / outputs.PAGE_FILE).read_bytes()
    (out / outputs.PAGE_FILE).write_text("mine")
    kept = CliRunner().invoke(cli, [*base, str(run)])
    assert kept.exit_code == EXIT_USER_ERROR
    assert f"{out / outputs.RESULTS_FILE} already exists; choose another --out-dir" in kept.output
    assert (out / outputs.PAGE_FILE).read_text() == "mine"
    replaced = CliRunner().invoke(cli, [*base, str(run), "--overwrite"])
    assert replaced.exit_code == EXIT_REGRESSION, replaced.output
    assert (out / outputs.PAGE_FILE).read_bytes() == page


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_link_by_an_output_name_is_refused_and_its_target_left_alone(
        tmp_path: Path, overwrite: bool) -> None:
    elsewhere = tmp_path / "elsewhere.md"
    elsewhere.write_text("theirs\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / outputs.OUTPUT_FILES[2]).symlink_to(elsewhere)
    with pytest.raises(EpbenchError, match="is a symbolic link; remove it"):
        outputs.prepare_outputs(out, overwrite=overwrite)
    assert elsewhere.read_text() == "theirs\n"


def test_every_path_says_which_cases_were_re_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A run whose case was re-run twice: compare-commits' folder, compare's --out-dir on
    # its run and the action's join all name it (compare.with_reruns), and so do their
    # reports. Before, compare RUN.json --out-dir left it out.
    _fake_commits(monkeypatch, reruns=2)
    direct = tmp_path / "compare-commits"
    got = CliRunner().invoke(cli, ["compare-commits", BASE_SHA, HEAD_SHA, "--repo",
                                   str(tmp_path), *ARGS, "--out", str(direct)])
    assert got.exit_code == EXIT_REGRESSION, got.output
    judged = _read(direct)[1]
    assert judged.reruns is not None and judged.reruns[CASE].reruns == 2
    again = tmp_path / "compare"
    got = CliRunner().invoke(cli, ["compare", str(direct / outputs.RESULTS_FILE), "--base",
                                   cc.BASE_ARM, "--pr", cc.HEAD_ARM, "--out-dir", str(again),
                                   "--no-github-annotations"])
    assert got.exit_code == EXIT_REGRESSION, got.output
    assert _read(again)[1].reruns == judged.reruns
    assert f"re-run (❔ at first, or ⚠️ held back from 🔴 by the idle gate): {CASE}" in (
        got.stdout)
    for folder in (direct, again):
        assert "Re-run because the first pass was inconclusive" in (
            folder / outputs.REPORT_FILE).read_text(encoding="utf-8")
    slices = tmp_path / "slices"
    code = act.run_action(act.ActionInputs(cases=CASE, args=" ".join(OPTIONS), budget="0",
                                           shard="1/1"),
                          event_path=_event(tmp_path), out=slices / "epbench-shard-1",
                          repo=tmp_path, environ={}, known_options=KNOWN, runner=_in_process)
    assert code == 0
    _, comparison = act.merge_action(slices, event_path=_event(tmp_path),
                                     out=tmp_path / "bench-out")
    assert comparison.reruns == judged.reruns
