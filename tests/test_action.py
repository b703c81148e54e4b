"""`epbench action` (epbench/workflows/action.py): the event, the inputs, what it writes.

Fast: compare-commits is replaced by a recording fake; tests/test_external_ep.py runs the
real one through action.yml.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.cli.run_commands import compare_commits
from epbench.core.errors import (
    EXIT_CASE_FAILED,
    EXIT_INTERRUPTED,
    EXIT_REGRESSION,
    EXIT_USER_ERROR,
    EpbenchError,
)
from epbench.reports.bot.artifact import PR_FILE
from epbench.workflows import action as act

BASE, HEAD = "a" * 40, "b" * 40
PR = act.PullRequest(BASE, HEAD, 7)
KNOWN = frozenset(opt for param in compare_commits.params for opt in param.opts)


def event(tmp_path: Path, payload: Any) -> Path:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload))
    return path


def pr_event(tmp_path: Path) -> Path:
    return event(tmp_path, {"pull_request": {"number": 7, "base": {"sha": BASE},
                                             "head": {"sha": HEAD}}})


def argv(known: frozenset[str] = KNOWN, **inputs: str) -> list[str]:
    return act.compare_commits_argv(act.ActionInputs(**inputs), PR, repo=".", out="o",
                                    known_options=known)


def test_the_event_names_the_commits_and_the_number(tmp_path: Path) -> None:
    assert act.pull_request_from_event(pr_event(tmp_path)) == PR


@pytest.mark.parametrize(("payload", "says"), [
    ({"push": {}}, "run the epbench action in a workflow triggered `on: pull_request`"),
    ({"pull_request": {"number": 7}}, "lacks base.sha, head.sha or number"),
    ({"pull_request": {"number": "7", "base": {"sha": BASE}, "head": {"sha": HEAD}}},
     "malformed"),
    ({"pull_request": {"number": 7, "base": {"sha": "main; rm -rf /"}, "head": {"sha": HEAD}}},
     "malformed"),
    ([1, 2], "no pull request"),
])
def test_an_event_that_is_no_pull_request_is_refused(tmp_path: Path, payload: Any,
                                                     says: str) -> None:
    with pytest.raises(act.ActionError, match=re.escape(says)):
        act.pull_request_from_event(event(tmp_path, payload))


def test_inputs_become_compare_commits_options() -> None:
    assert argv() == [BASE, HEAD, "--repo", ".", "--out", "o"]
    assert argv(build="make lib >&2 && echo lib.so", cases="quick, relu_d1_w8\nrelu_d10_w8",
                budget="120", fail_on="regression", history="h.sqlite",
                args="--rounds 24 --gate 'off'") == [
        BASE, HEAD, "--repo", ".", "--out", "o", "--build", "make lib >&2 && echo lib.so",
        "--grid", "quick", "--case", "relu_d1_w8", "--case", "relu_d10_w8", "--budget", "120",
        "--fail-on", "regression", "--rounds", "24", "--gate", "off"]  # history: in env


def test_ep_options_and_fallback_reach_compare_commits_for_both_sides() -> None:
    assert argv(ep_options="partition=per_node device=cuda:0,1\n threads=2",
                allow_fallback="true")[6:] == [
        "--ep-option", "partition=per_node", "--ep-option", "device=cuda:0,1",
        "--ep-option", "threads=2", "--allow-fallback"]
    assert "--allow-fallback" not in argv(allow_fallback="false")
    # compare-commits itself takes them (a test of its own shows both sides get them).
    assert {"--ep-option", "--allow-fallback", "--model", "--dim"} <= KNOWN


@pytest.mark.parametrize("args", ["--help", "--fail-on never", "--fail-on=never",
                                  "--shard 1/2", "--out elsewhere", "--rounds 6 --repo ..",
                                  "--build make", "--budget=0", "--history h.sqlite"])
def test_args_may_not_take_over_what_an_input_or_the_action_decides(args: str) -> None:
    # --help would pass the check with nothing measured; --fail-on in args used to win over
    # the fail-on input here and lose to it on a matrix.
    option = args.split()[-2] if "repo" in args else args.split()[0].split("=")[0]
    with pytest.raises(act.ActionError, match=re.escape(f"input args: {option} is not taken")):
        argv(args=args)
    with pytest.raises(act.ActionError, match=re.escape(f"input args: {option} is not taken")):
        argv(args=args, shard="1/2")


def test_a_profile_in_args_is_refused_on_a_matrix_only() -> None:
    # The merge job has no checkout of the caller's repository to read it from.
    assert argv(args="--profile p.json")[-2:] == ["--profile", "p.json"]
    with pytest.raises(act.ActionError, match="--profile is not taken there: the matrix"):
        argv(args="--profile p.json", shard="2/3")


def test_a_shard_measures_its_slice_and_leaves_fail_on_to_the_merge() -> None:
    # On a runner matrix (bench-matrix.yml) the joined slices decide the job, not one slice.
    assert argv(shard=" 2/3 ", fail_on="regression")[6:] == [
        "--shard", "2/3", "--fail-on", act.SHARD_FAIL_ON]
    assert act.SHARD_FAIL_ON == "never"
    assert "--shard" in KNOWN
    with pytest.raises(EpbenchError, match=re.escape("write K/N with 1 <= K <= N")):
        argv(shard="4/3")


def test_a_model_or_dim_waits_for_a_compare_commits_that_takes_it() -> None:
    # compare-commits' options decide: once it has --model and --dim they are passed on.
    with_models = KNOWN | {"--model", "--dim"}
    assert argv(with_models, cases="models/a.onnx", dims="batch=1")[-4:] == [
        "--model", str(Path(".").resolve() / "models/a.onnx"), "--dim", "batch=1"]
    for inputs in ({"cases": "models/a.onnx"}, {"dims": "batch=1"}):
        if {"--model", "--dim"} <= KNOWN:
            continue  # compare-commits has them now
        with pytest.raises(act.ActionError, match="has no --(model|dim) option"):
            argv(**inputs)


@pytest.mark.parametrize(("inputs", "says"), [
    ({"budget": "two minutes"}, "not a number of seconds"),
    ({"budget": "-1"}, "not a number of seconds"),
    ({"budget": "inf"}, "input budget: 'inf' is not a number of seconds"),
    ({"budget": "nan"}, "input budget: 'nan' is not a number of seconds"),
    ({"args": "--rounds '24"}, "quote it as a shell would"),
])
def test_bad_inputs_are_refused_with_a_remedy(inputs: dict[str, str], says: str) -> None:
    with pytest.raises(act.ActionError, match=says):
        argv(**inputs)


def test_the_history_url_reaches_compare_commits_in_its_environment_only(
        tmp_path: Path) -> None:
    # Never on a command line (/proc/PID/cmdline is readable by every user) nor in the log.
    url = "postgresql://bench:s3cret@db.example/h"
    env = act.child_environment({"INPUT_HISTORY": url, "INPUT_BUILD": "x", "PATH": "/bin"},
                                "/inc")
    assert env == {"PATH": "/bin", "ORT_INCLUDE_DIR": "/inc"}
    fake, logged = FakeCompare(0, True), []
    act.run_action(act.ActionInputs(history=url), event_path=pr_event(tmp_path),
                   out=tmp_path / "out", environ={"PATH": "/bin"}, known_options=KNOWN,
                   runner=fake, log=logged.append)
    ((command, child_env),) = fake.calls
    assert not any("s3cret" in word for word in command)
    assert not any("s3cret" in line for line in logged)
    assert child_env["EPBENCH_DB"] == url


def test_compare_commits_runs_outside_the_pull_requests_checkout(tmp_path: Path) -> None:
    # `python -m` imports from its working folder first: a checkout with its own
    # `epbench/` must not become the harness.
    checkout = tmp_path / "pr"
    (checkout / "epbench").mkdir(parents=True)
    fake = FakeCompare(0, True)
    act.run_action(act.ActionInputs(cases="models/a.onnx"), event_path=pr_event(tmp_path),
                   out=tmp_path / "out", repo=checkout, environ={}, known_options=KNOWN,
                   runner=fake)
    ((command, _),) = fake.calls
    assert fake.cwds[0] != checkout and not (Path(fake.cwds[0]) / "epbench").exists()
    assert command[command.index("--repo") + 1] == str(checkout.absolute())
    assert command[command.index("--model") + 1] == str(checkout.resolve() / "models/a.onnx")


class FakeCompare:
    """compare-commits, recorded; writes report.md unless it fails first."""

    def __init__(self, code: int, report: bool) -> None:
        self.code, self.report, self.calls, self.cwds = code, report, [], []

    def __call__(self, command: list[str], env: dict[str, str],
                 cwd: str | None = None) -> subprocess.CompletedProcess:
        self.calls.append((command, env))
        self.cwds.append(cwd)
        if self.report:
            out = Path(command[command.index("--out") + 1])
            out.mkdir(parents=True, exist_ok=True)
            (out / "report.md").write_text("## verdicts\n")
        return subprocess.CompletedProcess(command, self.code)


@pytest.mark.parametrize(("code", "report"), [(0, True), (EXIT_REGRESSION, True),
                                              (EXIT_USER_ERROR, False)])
def test_the_pr_number_and_the_summary_are_written_whatever_the_verdict(
    tmp_path: Path, code: int, report: bool
) -> None:
    fake = FakeCompare(code, report)
    summary = tmp_path / "summary.md"
    summary.write_text("earlier steps\n")
    got = act.run_action(act.ActionInputs(build="./build.sh"), event_path=pr_event(tmp_path),
                         out=tmp_path / "out", summary=summary, environ={"INPUT_X": "1"},
                         known_options=KNOWN, runner=fake)
    assert got == code
    assert json.loads((tmp_path / "out" / PR_FILE).read_text()) == {"number": 7}
    text = summary.read_text()
    assert text.startswith("earlier steps\n")  # appended, as GitHub's summary file wants
    assert ("## verdicts\n" in text) is report
    assert ("epbench wrote no report" in text) is not report
    ((command, env),) = fake.calls
    assert command[3:6] == ["compare-commits", BASE, HEAD]
    assert env == {}  # the inputs are not handed on


def test_ort_headers_are_fetched_only_when_asked(tmp_path: Path) -> None:
    fetched = []

    def include() -> Path:
        fetched.append(1)
        return Path("/headers")

    for value, times in (("false", 0), ("true", 1)):
        fake = FakeCompare(0, True)
        act.run_action(act.ActionInputs(ort_headers=value), event_path=pr_event(tmp_path),
                       out=tmp_path / "out", environ={}, known_options=KNOWN, runner=fake,
                       ort_include_dir=include)
        assert len(fetched) == times
        assert fake.calls[0][1].get("ORT_INCLUDE_DIR") == ("/headers" if times else None)
    with pytest.raises(act.ActionError, match="write true or false"):
        act.run_action(act.ActionInputs(ort_headers="yes"), event_path=pr_event(tmp_path),
                       out=tmp_path / "out", known_options=KNOWN, runner=FakeCompare(0, True))


def test_the_command_reads_the_inputs_from_the_environment(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    seen = {}

    def fake_run_action(inputs: act.ActionInputs, **kwargs: Any) -> int:
        seen.update(inputs=inputs, **kwargs)
        return EXIT_REGRESSION

    monkeypatch.setattr("epbench.cli.action_command.run_action", fake_run_action)
    result = CliRunner().invoke(cli, ["action", "--out", "o"], env={
        "GITHUB_EVENT_PATH": "e.json", "GITHUB_STEP_SUMMARY": "s.md",
        "INPUT_BUILD": "./build.sh", "INPUT_FAIL_ON": "never", "INPUT_ORT_HEADERS": "true"})
    assert result.exit_code == EXIT_REGRESSION, result.output
    assert seen["inputs"] == act.ActionInputs(build="./build.sh", fail_on="never",
                                              ort_headers="true")
    assert (seen["event_path"], seen["summary"], seen["out"]) == ("e.json", "s.md", "o")
    assert "--build" in seen["known_options"]


def test_the_command_says_what_to_fix_for_a_bad_event(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["action", "--out", str(tmp_path / "o"), "--event",
                                      str(event(tmp_path, {"push": {}}))])
    assert result.exit_code == EXIT_USER_ERROR
    assert "Error: the event has no pull request" in result.output
    assert "Traceback" not in result.output


class FakeSlice(FakeCompare):
    """compare-commits that writes a slice's results, then exits ``code`` (4: a crash)."""

    def __call__(self, command: list[str], env: dict[str, str],
                 cwd: str | None = None) -> subprocess.CompletedProcess:
        done = super().__call__(command, env, cwd)
        out = Path(command[command.index("--out") + 1])
        if self.report:
            (out / "results.json").write_text("{}")
        return done


@pytest.mark.parametrize(("shard", "results", "code", "exits"), [
    ("1/2", True, EXIT_CASE_FAILED, 0),  # the merge reports the slice's crashed case
    ("1/2", True, EXIT_INTERRUPTED, 0),
    ("1/2", False, EXIT_USER_ERROR, EXIT_USER_ERROR),  # no results: nothing to merge
    # Refused (e.g. the build wrote into the output): its results.json is set aside.
    ("1/2", True, EXIT_USER_ERROR, EXIT_USER_ERROR),
    ("", True, EXIT_CASE_FAILED, EXIT_CASE_FAILED),  # the plain action exits on its run
])
def test_a_slice_that_wrote_its_results_lets_the_merge_decide(
        tmp_path: Path, shard: str, results: bool, code: int, exits: int) -> None:
    logged: list[str] = []
    got = act.run_action(act.ActionInputs(shard=shard), event_path=pr_event(tmp_path),
                         out=tmp_path / "out", environ={}, known_options=KNOWN,
                         runner=FakeSlice(code, results), log=logged.append)
    assert got == exits
    assert json.loads((tmp_path / "out" / PR_FILE).read_text()) == {"number": 7}
    assert any("the merge judges them" in line for line in logged) is (exits != code)
    refused = bool(shard) and results and code == EXIT_USER_ERROR
    # The merge globs */results.json: a refused slice's file must not be found there.
    assert (tmp_path / "out" / "results.json").is_file() is (results and not refused)
    assert (tmp_path / "out" / act.REFUSED_FILE).is_file() is refused


def test_a_bad_fail_on_is_refused_before_anything_is_measured_or_written(
        tmp_path: Path) -> None:
    with pytest.raises(act.ActionError, match="input fail-on: 'bogus': write one of "):
        argv(fail_on="bogus")
    assert argv(fail_on=" regression ")[-2:] == ["--fail-on", "regression"]
    (tmp_path / "shards").mkdir()  # no slice in it: the input is refused before that
    result = CliRunner().invoke(cli, [
        "action", "--event", str(pr_event(tmp_path)), "--merge-from", str(tmp_path / "shards"),
        "--out", str(tmp_path / "o")], env={"INPUT_FAIL_ON": "bogus"})
    assert result.exit_code == EXIT_USER_ERROR
    assert result.output.startswith("Error: input fail-on: 'bogus': write one of ")
    assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()
