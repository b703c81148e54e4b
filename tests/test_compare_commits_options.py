"""compare-commits with an outside team's own cases and EP configuration (issue 48, item 5).

`--model`/`--dim`, `--allow-fallback` and `--ep-option KEY=VALUE` reach both sides (and
the base's A/A twin) alike; a user model is read from the caller's working tree and held
to the hash it had before the builds. Most tests fake the builds and the run (as
test_compare_commits does); the slow one measures the bundled engine's library, handed
over by a `--build` command, on a model built here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.errors import EXIT_INTERRUPTED, EXIT_USER_ERROR
from epbench.engine import EP_OPTIONS
from epbench.harness.arms import find_arm, twin_arm
from tests.support.fakebuild import fake_build_commit
from tests.support.gitrepo import git, init_repo
from tests.support.synthetic import typed_runner

FAST = ["--rounds", "4", "--processes", "2", "--budget", "0", "--gate", "off", "--quiet",
        "--no-instructions"]


def tiny_model(path: Path, relus: int = 1) -> Path:
    """A model of ``relus`` Relu nodes and an Add, input [batch, 16] (batch symbolic)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", [f"r{i}" if i else "x"], [f"r{i + 1}"])
             for i in range(relus)]
    nodes.append(helper.make_node("Add", [f"r{relus}", "x"], ["y"]))
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def faked(tmp_path, monkeypatch) -> dict[str, Any]:
    """compare-commits with both sides' builds and the runner faked: ``seen["configs"]``
    gets each RunConfig the runner was handed, ``seen["builds"]`` each side built. The
    runner stops the command (exit 130) unless a test sets ``seen["run"]``."""
    from epbench.workflows import compare_commits as cc

    seen: dict[str, Any] = {"configs": [], "builds": []}

    def build(repo, label, rev, sha, build=None, out_dir=None, timeout_s=None):
        seen["builds"].append(label)
        seen.setdefault("build_timeouts", []).append(timeout_s)
        if "on_build" in seen:
            seen["on_build"](label)
        return fake_build_commit(repo, label, rev, sha, build, out_dir)

    def run(config):
        seen["configs"].append(config)
        if "run" in seen:
            return typed_runner(seen["run"])(config)
        raise KeyboardInterrupt  # what the run was handed is all these tests need

    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cc, "run", run)
    monkeypatch.setattr(cc, "build_commit", build)
    monkeypatch.setattr(cc, "resolve_revision", lambda repo, rev: rev[0] * 40)
    monkeypatch.setattr(cc, "repo_root", lambda repo: Path(repo))
    monkeypatch.setattr(cc, "has_uncommitted_changes", lambda root: False)
    return seen


def commits(*args: str, repo: Path) -> Any:
    # FAST first: an option given again in ``args`` overrides it.
    return CliRunner().invoke(cli, ["compare-commits", "a", "b", "--repo", str(repo), *FAST,
                                    *args, "--out", "out"])


def one_error_line(result: Any, needle: str, built: bool = False, rerun: bool = False) -> str:
    """Exit 1 with one line of error, naming ``needle``, and no other output but the
    builds' status lines when ``built`` (and a re-run's when ``rerun``); no traceback."""
    assert result.exit_code == EXIT_USER_ERROR, (result.output, result.exception)
    lines = [x for x in result.output.splitlines() if x.strip()]
    status = ["building base (a, aaaaaaaaaa)", "building head (b, bbbbbbbbbb)"] if built else []
    status += ["re-running 1 ambiguous case(s) (❔, or ⚠️ held back by the idle gate): "
               "model:tiny"] if rerun else []
    assert lines[:-1] == status and lines[-1].startswith("Error: "), result.output
    assert needle in lines[-1], lines[-1]
    return lines[-1]


def test_the_build_timeout_reaches_each_build(faked, tmp_path, monkeypatch) -> None:
    from epbench.workflows.compare_commits import BUILD_TIMEOUT_S

    monkeypatch.chdir(tmp_path)
    commits(repo=tmp_path)
    commits("--build-timeout", "7", repo=tmp_path)
    assert faked["builds"] == ["base", "head"] * 2
    assert faked["build_timeouts"] == [BUILD_TIMEOUT_S, BUILD_TIMEOUT_S, 7.0, 7.0]


def test_both_sides_get_the_same_ep_options_and_the_user_model(faked, tmp_path,
                                                               monkeypatch) -> None:
    work = tmp_path / "work"  # the caller's working tree: the model is read from here
    tiny_model(work / "models" / "tiny.onnx")
    monkeypatch.chdir(work)
    # Values holding `,`, `:` and `=` are handed over whole (the --arm grammar splits them).
    result = commits("--build", "make-it", "--model", "models/tiny.onnx", "--dim", "batch=2",
                     "--ep-option", "device=cuda:0,1", "--ep-option", "mode=a=b",
                     "--allow-fallback", repo=tmp_path / "elsewhere")
    assert result.exit_code == EXIT_INTERRUPTED, result.output
    assert faked["builds"] == ["base", "head"]
    (config,) = faked["configs"]
    want = (("device", "cuda:0,1"), ("mode", "a=b"))
    assert [a.key for a in config.arms] == ["base", "head"]
    assert [a.kind for a in config.arms] == ["plugin", "plugin"]
    assert [a.options for a in config.arms] == [want, want]
    assert [a.ep_options for a in config.arms] == [dict(want)] * 2
    # The twin the runner makes (harness.arms.twin_arm) is the base with another name.
    assert config.aa_twin == "base"
    twin = twin_arm(find_arm(list(config.arms), config.aa_twin))
    assert (twin.key, twin.options) == ("base_twin", want)
    assert config.allow_fallback is True
    # Only the model: a --model alone does not add the quick grid. Its path is the
    # caller's file (relative to the current directory, not --repo).
    (case,) = config.cases
    assert (case.name, case.kind) == ("model:tiny", "model")
    assert case.path == str((work / "models" / "tiny.onnx").resolve())
    assert case.dims == (("batch", 2),)


def test_without_options_the_sides_get_none_and_the_quick_grid(faked, tmp_path,
                                                               monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = commits(repo=tmp_path)
    assert result.exit_code == EXIT_INTERRUPTED, result.output
    (config,) = faked["configs"]
    assert [(a.key, a.kind, a.options) for a in config.arms] == [
        ("base", "engine", ()), ("head", "engine", ())]
    assert config.allow_fallback is False
    assert config.grids == ("quick",) and len(config.cases) == 6


@pytest.mark.parametrize(("options", "needle"), [
    (["novalue"], "--ep-option 'novalue' is not KEY=VALUE; write it as e.g. "
                  "--ep-option partition=per_node"),
    (["=1"], "--ep-option '=1' is not KEY=VALUE"),
    (["name=x"], "is not an EP option: the sides are named base and head; drop it"),
    (["k=1", "k=2"], "--ep-option k is given twice; give each option once"),
])
def test_a_bad_ep_option_is_one_line_before_anything_is_built(faked, tmp_path, monkeypatch,
                                                              options, needle) -> None:
    monkeypatch.chdir(tmp_path)
    args = [x for option in options for x in ("--ep-option", option)]
    one_error_line(commits("--build", "make-it", *args, repo=tmp_path), needle)
    assert faked["builds"] == [] and faked["configs"] == []


def test_an_option_the_engine_lacks_is_refused_before_building(faked, tmp_path,
                                                               monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error_line(
        commits("--ep-option", "partition=per_node", "--ep-option", "bogus=1", repo=tmp_path),
        "--ep-option bogus: the bundled engine has no option 'bogus'; use one of ")
    assert line.endswith(f"{', '.join(EP_OPTIONS)} (a plugin EP given with --build takes "
                         "its own)")
    assert faked["builds"] == []
    # A plugin EP built with --build is handed any option: its library decides.
    result = commits("--build", "make-it", "--ep-option", "bogus=1", repo=tmp_path)
    assert result.exit_code == EXIT_INTERRUPTED, result.output
    assert [a.options for a in faked["configs"][0].arms] == [(("bogus", "1"),)] * 2


@pytest.mark.parametrize("when", ["build", "rerun"])
def test_a_model_rewritten_during_the_comparison_stops_it(faked, tmp_path, monkeypatch,
                                                          when) -> None:
    """The model is the caller's file as it was when the command began: rewritten by a
    build, or between the first pass and a re-run of its ❔, it is caught, not measured."""
    from tests.support.synthetic import NoiseModel, results_doc

    model = tiny_model(tmp_path / "tiny.onnx")
    monkeypatch.chdir(tmp_path)

    def rewrite(label):
        if when == "build" and label == "head":
            tiny_model(model, relus=3)

    def run(config):
        # As the runner does: build each case from its file now, record its hash. The
        # noise over 8 rounds leaves the case ❔, so the budget re-runs it.
        truth = {"ort": 1000.0, "base": 1000.0, "head": 1000.0}
        doc = results_doc({c.name: truth for c in config.cases}, rounds=8,
                          definition={c.name: c.definition_sha256 for c in config.cases},
                          noise=NoiseModel(arm_sigma=0.1, machine_sigma=0.0, spike_prob=0.0))
        if when == "rerun":
            tiny_model(model, relus=3)
        return doc

    faked["on_build"], faked["run"] = rewrite, run
    line = one_error_line(commits("--build", "make-it", "--model", "tiny.onnx",
                                  "--dim", "batch=1", "--budget", "3600", repo=tmp_path),
                          f"model:tiny: the model {model} changed while compare-commits ran",
                          built=True, rerun=when == "rerun")
    assert line.endswith("keep the file unchanged during the run and rerun")
    assert len(faked["configs"]) == (1 if when == "build" else 2)
    assert not (tmp_path / "out" / "compare.json").exists()


@pytest.mark.slow
def test_a_user_model_and_ep_options_end_to_end(tmp_path, monkeypatch) -> None:
    """Two commits of a repository whose build hands over the bundled engine's library (as
    any plugin EP): both sides, and the twin, run the caller's model with the EP options,
    which reach the EP (per_node: one compute call per node, where fused makes one)."""
    from epbench import engine

    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    repo = init_repo(tmp_path / "repo")
    for message in ("base", "head"):
        git(repo, "commit", "-q", "--allow-empty", "-m", message)
    model = tiny_model(tmp_path / "work" / "tiny.onnx")
    monkeypatch.chdir(tmp_path / "work")
    result = CliRunner().invoke(cli, [
        "compare-commits", "HEAD~1", "HEAD", "--repo", str(repo),
        "--build", f"echo {engine.library_path()}", "--model", "tiny.onnx", "--dim", "batch=2",
        "--ep-option", "partition=per_node", "--ep-option", "inject_api_calls_per_run=3",
        *FAST, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    want = {"partition": "per_node", "inject_api_calls_per_run": "3"}
    assert {key: arm["options"] for key, arm in doc["arms"].items()} == {
        "ort": {}, "base": want, "base_twin": want, "head": want}
    case = doc["cases"]["model:tiny"]
    assert case["status"] == "ok"
    assert (case["spec"]["path"], case["spec"]["dims"]) == (str(model.resolve()), [["batch", 2]])
    from epbench.cases.spec import model_case

    assert case["definition_sha256"] == model_case(model, {"batch": 2}).definition_sha256
    counters = {key: case["arms"][key]["counters_per_run"] for key in ("base", "base_twin",
                                                                       "head")}
    assert {key: c["compute_calls"] for key, c in counters.items()} == dict.fromkeys(counters, 2)
    assert len({c["ort_api_calls"] for c in counters.values()}) == 1
    verdicts = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert [row["case"] for row in verdicts["cases"]] == ["model:tiny"]
