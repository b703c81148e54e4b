"""`epbench action`: the measuring step of the GitHub Action (action.yml), whole.

The action's inputs arrive as INPUT_* environment variables, set by action.yml's step
from `inputs.*` (a composite action's inputs are no environment of their own), so no
input is ever pasted into a shell script. workflows.action does the work.
"""

from __future__ import annotations

from dataclasses import replace

import click

from epbench.cli.base import Command
from epbench.cli.exit_codes import exit_code_for
from epbench.cli.run_commands import compare_commits
from epbench.cli.verdict_commands import settings_from
from epbench.engine.build import ort_include_dir
from epbench.reports.comparison import Settings
from epbench.reports.defaults import FAIL_ON
from epbench.workflows.action import (
    ActionError,
    ActionInputs,
    args_words,
    fail_on_input,
    merge_action,
    run_action,
)


def _input(name: str, help_text: str, default: str = "") -> click.Option:
    env = "INPUT_" + name.upper().replace("-", "_")
    return click.Option([f"--{name}"], envvar=env, default=default, show_default=bool(default),
                        metavar="TEXT", help=f"{help_text} [env: {env}]")


def verdict_settings(args: str) -> Settings:
    """The verdict settings that input args gives each slice, parsed by compare-commits'
    own options, so that the join is judged as one run would be."""
    argv = ["BASE", "HEAD", *args_words(args, sharded=True)]
    try:
        with compare_commits.make_context("compare-commits", argv) as ctx:
            p = ctx.params
    except click.ClickException as exc:
        raise ActionError(f"input args: {exc.format_message().rstrip('.')}: write compare-commits "
                          "options, e.g. `args: --k 3`") from None
    settings = settings_from(floor=p["floor"], k=p["k"], alert=p["alert"],
                             confidence=p["confidence"], fdr=p["fdr"],
                             resamples=p["resamples"], seed=p["seed"],
                             target_mde=p["target_mde"])
    return replace(settings, instructions_threshold=p["instructions_threshold"])


@click.command(cls=Command)
@click.option("--event", "event_path", envvar="GITHUB_EVENT_PATH", required=True,
              type=click.Path(dir_okay=False), metavar="FILE",
              help="The pull_request event's JSON (default: $GITHUB_EVENT_PATH).")
@click.option("--out", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Output directory: the artifact's files.")
@click.option("--repo", type=click.Path(file_okay=False), default=".", show_default=True,
              help="The checked-out pull request (both commits reachable).")
@click.option("--summary", envvar="GITHUB_STEP_SUMMARY", default=None, metavar="FILE",
              help="The job summary file to append the report to "
                   "(default: $GITHUB_STEP_SUMMARY; none when unset).")
@click.option("--merge-from", "merge_from", type=click.Path(file_okay=False, exists=True),
              default=None, metavar="DIR",
              help="Measure nothing: join the shards in DIR/*/results.json (one runner "
                   "class's artifacts of input shard K/N) and judge the join into OUT.")
def action(event_path: str, out: str, repo: str, summary: str | None, merge_from: str | None,
           **inputs: str) -> None:
    """Measure a pull request's base and head as the epbench GitHub Action does.

    \b
    Reads the PR from the event file, runs `epbench compare-commits BASE HEAD` with the
    action's inputs, writes OUT/pull-request.json for the comment workflow and appends
    OUT/report.md to the job summary. Exits with compare-commits' code (5: a verdict
    matched fail-on). With input shard K/N only that slice is measured and, once its
    results are written, it exits 0; --merge-from joins the slices and exits on the join
    as compare-commits would (4: a crashed case, 5: fail-on).
    """
    if merge_from is not None:
        fail_on = fail_on_input(inputs.get("fail_on") or "", FAIL_ON)  # before any output
        merged, comparison = merge_action(
            merge_from, event_path=event_path, out=out, summary=summary,
            settings=verdict_settings(inputs.get("args") or ""))
        # The join's crashed or interrupted case outranks its verdicts, as in one run.
        code, why = exit_code_for(run=merged, comparison=comparison, fail_on=fail_on)
        if why:
            click.echo(why, err=True)
        click.get_current_context().exit(code)
    known = {opt for param in compare_commits.params for opt in param.opts}
    code = run_action(
        ActionInputs(**{k: v or "" for k, v in inputs.items()}), event_path=event_path,
        out=out, repo=repo, summary=summary, known_options=known,
        ort_include_dir=ort_include_dir, log=lambda line: click.echo(line, err=True))
    click.get_current_context().exit(code)


for _name, _help, *_default in (
    ("build", "Shell command run in each commit's worktree; its last stdout line is the "
              "library [default: the bundled engine]."),
    ("cases", "Grid names, case names or .onnx paths, separated by spaces or commas "
              "[default: compare-commits' own]."),
    ("dims", "NAME=VALUE for the symbolic dims of the .onnx cases."),
    ("budget", "Seconds for re-running ambiguous cases (compare-commits --budget)."),
    ("fail-on", "alert | regression | never (compare-commits --fail-on)."),
    ("history", "A history store's URL or path, read for the base commit's change points."),
    ("ort-headers", "true: fetch ORT's C headers and hand their folder to the build as "
                    "$ORT_INCLUDE_DIR.", "false"),
    ("ep-options", "KEY=VALUE EP options for both sides, separated by spaces "
                   "(compare-commits --ep-option)."),
    ("allow-fallback", "true: let ORT's CPU EP take the nodes the EP declines "
                       "(compare-commits --allow-fallback).", "false"),
    ("args", "More compare-commits options, split as a shell would."),
    ("shard", "K/N: measure only that slice of the cases (compare-commits --shard), "
              "for a runner matrix; its verdicts do not fail the job."),
):
    action.params.append(_input(_name, _help, *_default))
