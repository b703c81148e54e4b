"""The GitHub Action's measuring step (action.yml at the repository root), whole.

action.yml checks out the caller's pull request, installs epbench from the action's own
ref and runs `epbench action`, which calls `run_action`: it reads the PR's base and head
commits and its number from the event file GitHub wrote ($GITHUB_EVENT_PATH), turns the
action's inputs into one `epbench compare-commits` command line, runs it with this very
interpreter (so the harness is the action's, never the PR's), records the PR number for
the comment workflow (reports.bot.artifact.PR_FILE) and writes the job summary. Tests run
this same step, so what they check is what the action does.

On a runner matrix (.github/workflows/bench-matrix.yml) each job measures one slice,
input `shard` (K/N, compare-commits --shard) and judges nothing for the job's exit; a
last job joins one runner class's slices with `merge_action` (harness.merge, then the
same comparison compare-commits makes) into the artifact the comment workflow reads.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from epbench.cases.grids import grid_names
from epbench.cases.shards import parse_shard
from epbench.core.errors import EXIT_CASE_FAILED, EXIT_GATE, EXIT_INTERRUPTED, EpbenchError
from epbench.core.model import Results
from epbench.core.paths import DB_ENV
from epbench.core.results import load_results
from epbench.harness.merge import Shard, merge_shards, merge_warnings
from epbench.reports import compare as cmp
from epbench.reports.bot.artifact import PR_FILE
from epbench.reports.comparison import FAIL_ON, Comparison, Side
from epbench.reports.outputs import (
    COMPARE_FILE,
    PAGE_FILE,
    REPORT_FILE,
    RESULTS_FILE,
    write_outputs,
)
from epbench.workflows.compare_commits import BASE_ARM, HEAD_ARM

# The action's inputs reach `epbench action` as these environment variables (action.yml
# sets them from `inputs.*`); none of them is handed on to compare-commits or the build.
INPUT_PREFIX = "INPUT_"
# Where the measuring step writes, and the upload step takes the artifact from.
# A shard judges only its slice, for its own job summary; the merged run decides the job.
SHARD_FAIL_ON = "never"
# A slice's exits that still leave results of epbench's own for the merge: the gate, a
# failed or crashed case, Ctrl-C. Any other leaves its results.json set aside as this.
SLICE_RESULT_CODES = (EXIT_GATE, EXIT_CASE_FAILED, EXIT_INTERRUPTED)
REFUSED_FILE = "results.refused.json"
SHA = re.compile(r"[0-9a-f]{40}")


class ActionError(EpbenchError):
    """An action input or event the measuring step cannot use."""


@dataclass(frozen=True)
class PullRequest:
    """The commits a pull_request event names, and its number."""

    base_sha: str
    head_sha: str
    number: int


@dataclass(frozen=True)
class ActionInputs:
    """The action's inputs as given (empty: not given); `compare_commits_argv` reads them."""

    build: str = ""
    cases: str = ""
    dims: str = ""
    budget: str = ""
    fail_on: str = ""
    history: str = ""
    ort_headers: str = "false"
    ep_options: str = ""
    allow_fallback: str = "false"
    args: str = ""
    shard: str = ""


def pull_request_from_event(path: str | Path) -> PullRequest:
    """The pull request of a `pull_request` event file ($GITHUB_EVENT_PATH)."""
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ActionError(f"cannot read the event file {path}: {exc}; run the action in a "
                          "GitHub Actions job, which sets $GITHUB_EVENT_PATH") from None
    pr = event.get("pull_request") if isinstance(event, dict) else None
    if not isinstance(pr, dict):
        raise ActionError("the event has no pull request: run the epbench action in a "
                          "workflow triggered `on: pull_request`")
    try:
        base, head, number = pr["base"]["sha"], pr["head"]["sha"], pr["number"]
    except (KeyError, TypeError):
        raise ActionError("the event's pull request lacks base.sha, head.sha or number: "
                          "run the action `on: pull_request`") from None
    if not (isinstance(base, str) and SHA.fullmatch(base) and isinstance(head, str)
            and SHA.fullmatch(head) and type(number) is int and number > 0):
        raise ActionError("the event's pull request has a malformed sha or number: "
                          "run the action `on: pull_request`")
    return PullRequest(base, head, number)


# Options input args may not hold, and the input that does their job. Each would let args
# override an input (click keeps an option's last value), move the artifact (out, repo),
# or end compare-commits with exit 0 and nothing measured (help): a green check that
# judged nothing.
ARGS_REFUSED = {
    "--help": "it prints help and measures nothing",
    "--fail-on": "set the action's fail-on input instead",
    "--shard": "set the action's shard input instead",
    "--build": "set the action's build input instead",
    "--budget": "set the action's budget input instead",
    "--history": "set the action's history input instead",
    "--out": "the action chooses where the artifact goes",
    "--repo": "the action measures the checked-out pull request",
}
# On a runner matrix the merge job judges the join without the caller's checkout.
ARGS_REFUSED_ON_A_MATRIX = {
    "--profile": "the matrix's merge job cannot read a file from your checkout",
}


def args_words(args: str, *, sharded: bool) -> list[str]:
    """Input args split as a shell would, refused with the reason when they hold an option
    the action owns (ARGS_REFUSED), or on a matrix one its merge cannot honour."""
    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise ActionError(f"input args: {exc}: quote it as a shell would") from None
    refused = {**ARGS_REFUSED, **(ARGS_REFUSED_ON_A_MATRIX if sharded else {})}
    for word in words:
        option = word.split("=", 1)[0]
        if option in refused:
            raise ActionError(f"input args: {option} is not taken there: {refused[option]}")
    return words


def _words(text: str) -> list[str]:
    """An input's items, separated by spaces, commas or new lines."""
    return [word for word in re.split(r"[\s,]+", text) if word]


def _number(name: str, text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):  # "inf" would fail later, as --budget
        raise ActionError(f"input {name}: {text!r} is not a number of seconds >= 0; "
                          "write e.g. `budget: 120`")
    return text


def fail_on_input(text: str, default: str) -> str:
    """Input fail-on, stripped (``default`` when empty), or the remedy before anything runs."""
    value = text.strip() or default
    if value not in FAIL_ON:
        raise ActionError(f"input fail-on: {text!r}: write one of {', '.join(FAIL_ON)}")
    return value


def compare_commits_argv(inputs: ActionInputs, pr: PullRequest, *, repo: str, out: str,
                         known_options: Collection[str]) -> list[str]:
    """The `compare-commits` arguments the inputs stand for (after the command's name).

    ``known_options``: the options this epbench's compare-commits takes. An input that
    needs one it lacks (`--model` for a `.onnx` case, `--dim`) is refused with a message
    rather than passed to fail later.
    """
    argv = [pr.base_sha, pr.head_sha, "--repo", repo, "--out", out]
    if inputs.build.strip():
        argv += ["--build", inputs.build]
    grids = set(grid_names())
    wanted: list[tuple[str, str]] = []
    for word in _words(inputs.cases):
        if word.endswith(".onnx"):
            # A path in the caller's repository: absolute, as compare-commits runs elsewhere.
            wanted.append(("--model", str(Path(repo).resolve() / word)))
        else:
            wanted.append(("--grid" if word in grids else "--case", word))
    wanted += [("--dim", word) for word in _words(inputs.dims)]
    # Split on white space only: an EP option's value may hold commas (device=cuda:0,1).
    wanted += [("--ep-option", word) for word in inputs.ep_options.split()]
    if inputs.budget.strip():
        wanted.append(("--budget", _number("budget", inputs.budget.strip())))
    if inputs.shard.strip():
        parse_shard(inputs.shard)  # K/N, or the remedy, before anything is built
        wanted.append(("--shard", inputs.shard.strip()))
        wanted.append(("--fail-on", SHARD_FAIL_ON))
    elif inputs.fail_on.strip():
        wanted.append(("--fail-on", fail_on_input(inputs.fail_on, "")))
    for option, value in wanted:
        if option not in known_options:
            raise ActionError(
                f"this epbench's compare-commits has no {option} option, which {value!r} "
                "needs: name built-in grids or cases in `cases`, or use an epbench ref "
                "that has it")
        argv += [option, value]
    if inputs.allow_fallback.strip().lower() == "true":
        argv.append("--allow-fallback")
    argv += args_words(inputs.args, sharded=bool(inputs.shard.strip()))
    return argv


def shown(argv: list[str]) -> str:
    """The command line for the log (the history store's URL is never on it)."""
    return shlex.join(argv)


def child_environment(environ: Mapping[str, str], ort_include: str | None) -> dict[str, str]:
    """The environment compare-commits runs in: the action's inputs taken out (the history
    URL is one), ORT's headers offered to the build as $ORT_INCLUDE_DIR when asked for."""
    env = {k: v for k, v in environ.items() if not k.startswith(INPUT_PREFIX)}
    if ort_include is not None:
        env["ORT_INCLUDE_DIR"] = ort_include
    return env


def write_summary(summary: Path, out: Path) -> None:
    """Append the run's report.md to the job summary, or say that there is none."""
    report = out / REPORT_FILE
    text = (report.read_text(encoding="utf-8") + f"\nThe same with plots: {PAGE_FILE}, in "
            "this run's bench-out artifact.\n") if report.is_file() else (
            "epbench wrote no report: see the measuring step's log.\n")
    with summary.open("a", encoding="utf-8") as fh:
        fh.write(text)


def run_action(inputs: ActionInputs, *, event_path: str | Path, out: str | Path,
               repo: str | Path = ".", summary: str | Path | None = None,
               environ: Mapping[str, str] | None = None,
               known_options: Collection[str] = (),
               ort_include_dir: Callable[[], Path] | None = None,
               log: Callable[[str], None] = lambda _: None,
               runner: Callable[..., subprocess.CompletedProcess[bytes]] = subprocess.run
               ) -> int:
    """Measure the event's pull request; return compare-commits' exit code.

    Writes ``out``/PR_FILE (the PR number, for the comment workflow) and appends the
    report to ``summary`` (the job summary file) whatever compare-commits' verdict or
    failure. ``ort_include_dir`` fetches ORT's headers for ``inputs.ort_headers``.
    """
    pr = pull_request_from_event(event_path)
    out = Path(out).absolute()
    argv = compare_commits_argv(inputs, pr, repo=str(Path(repo).absolute()), out=str(out),
                                known_options=known_options)
    include = None
    if inputs.ort_headers.strip().lower() == "true":
        if ort_include_dir is None:
            raise ActionError("input ort-headers: no way to fetch the headers here")
        include = str(ort_include_dir())
        log(f"ORT's C headers for the build: ORT_INCLUDE_DIR={include}")
    elif inputs.ort_headers.strip().lower() not in ("", "false"):
        raise ActionError(f"input ort-headers: {inputs.ort_headers!r}: write true or false")
    command = [sys.executable, "-m", "epbench.cli.main", "compare-commits", *argv]
    log(f"epbench compare-commits {shown(argv)}")
    env = child_environment(os.environ if environ is None else environ, include)
    if inputs.history.strip():
        # In the environment, not on the command line: /proc/PID/cmdline is readable by
        # every user, the build and the libraries under test included.
        env[DB_ENV] = inputs.history.strip()
    # `python -m` puts its working folder first on sys.path: run from an empty folder of
    # the harness's own, never the pull request's checkout, whose `epbench/` or `pyperf/`
    # would otherwise be imported as the harness.
    with tempfile.TemporaryDirectory(prefix="epbench-action-") as cwd:
        code = runner(command, env=env, cwd=cwd).returncode
    out.mkdir(parents=True, exist_ok=True)
    (out / PR_FILE).write_text(json.dumps({"number": pr.number}) + "\n", encoding="utf-8")
    if summary:
        write_summary(Path(summary), out)
    if code != 0 and not (out / COMPARE_FILE).is_file():
        log(f"compare-commits exited {code} before writing {COMPARE_FILE}")
    if code != 0 and inputs.shard.strip() and (out / RESULTS_FILE).is_file():
        if code in SLICE_RESULT_CODES:
            # A slice's crashed or interrupted case is in its results: the merged run reports
            # it. Failing here would skip the merge job of every class, and so the comment.
            log(f"compare-commits exited {code}; this slice's results are written, so its "
                "job succeeds and the merge judges them")
            return 0
        # compare-commits refused this slice (its build wrote into the output, or the
        # harness changed while the libraries ran): whatever results.json holds is not
        # epbench's, and the merge must not find it.
        (out / RESULTS_FILE).replace(out / REFUSED_FILE)
        log(f"compare-commits exited {code}; this slice's {RESULTS_FILE} is set aside as "
            f"{REFUSED_FILE}, so the merge of its class refuses the missing slice")
    return code


def shard_results(folder: str | Path) -> list[Path]:
    """The shards' results files under ``folder``: one sub-folder per downloaded artifact."""
    found = sorted(Path(folder).glob(f"*/{RESULTS_FILE}"))
    if not found:
        raise ActionError(f"{folder} holds {len(found)} shard results ({'*/' + RESULTS_FILE}); "
                          "download every shard's artifact of one runner class into it")
    return found


def check_every_slice(shards: list[Shard]) -> None:
    """Each of slices 1/N .. N/N once: forcing the join must not let one go missing."""
    labels = [str(s.results.config.extra.get("shard")) for s in shards]
    for shard, label in zip(shards, labels, strict=True):
        if "/" not in label:
            raise ActionError(f"{shard.source} is no slice (measured without input shard "
                              "K/N): download only the matrix's slices of one runner class")
    count = labels[0].split("/")[-1]
    wanted = [f"{k}/{count}" for k in range(1, len(shards) + 1)]
    if sorted(labels) != sorted(wanted) or str(len(shards)) != count:
        raise ActionError(f"the slices downloaded are {', '.join(sorted(labels))}, not each of "
                          f"1/{count} .. {count}/{count} once; re-run the failed measuring jobs")


def merge_action(shards_folder: str | Path, *, event_path: str | Path, out: str | Path,
                 summary: str | Path | None = None,
                 settings: cmp.Settings | None = None) -> tuple[Results, Comparison]:
    """Join one runner class's shards and judge the join as compare-commits judges a run
    (with the slices' verdict ``settings``, from input args; the merge runner's own noise
    profile, if it has one, as each slice had its runner's), but for one thing the slices'
    results do not keep: a case re-run on ❔ states its last pass's "could catch", and a
    note says so (compare.REJUDGED_RERUNS).

    Writes ``out`` as the unsharded action does (PR_FILE first, then reports.outputs' four
    files) and appends the report to ``summary``; returns the join and its comparison for
    the caller's exit code. A shard missing, measured elsewhere or twice is refused
    (harness.merge) before anything is written.
    """
    pr = pull_request_from_event(event_path)
    paths = shard_results(shards_folder)
    shards = [Shard(source=p.parent.name, results=load_results(p)) for p in paths]
    check_every_slice(shards)
    # One slice (shards: 1) is the whole run already; merge_shards wants two or more. Each
    # slice staged its libraries in a folder of its own, and the hosted runners behind one
    # label differ in CPU model and kernel: those alone are tolerated (and reported).
    merged = (shards[0].results if len(shards) == 1
              else merge_shards(shards, allow_paths_and_host=True))
    comparison = cmp.compare(
        # compare-commits' labels: the action names both commits by their full sha.
        Side("base", merged, BASE_ARM, f"{pr.base_sha} ({pr.base_sha[:10]})"),
        Side("pr", merged, HEAD_ARM, f"{pr.head_sha} ({pr.head_sha[:10]})"),
        settings=settings or cmp.Settings(),
        profile=cmp.load_profile_for(merged.host.key, None))
    comparison = cmp.with_reruns(comparison, merged)
    comparison = replace(comparison, warnings=(*merge_warnings(merged), *comparison.warnings))
    out = Path(out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    # First: the comment workflow needs the number even when drawing a report fails.
    (out / PR_FILE).write_text(json.dumps({"number": pr.number}) + "\n", encoding="utf-8")
    failed = None
    try:
        write_outputs(out, merged, comparison)
    except (ValueError, RuntimeError) as exc:  # matplotlib's, drawing the page
        failed = f"{exc}".splitlines()[0] if str(exc) else type(exc).__name__
    if summary:
        write_summary(Path(summary), out)
    if failed is not None:
        raise ActionError(f"drawing the join's report failed ({failed}); its results, "
                          f"{COMPARE_FILE} and {PR_FILE} are in {out}: report this to epbench")
    return merged, comparison
