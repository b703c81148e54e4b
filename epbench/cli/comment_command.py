"""`epbench comment`: post or update the one sticky benchmark comment on a PR.

Two ways in: `--pr N --body FILE` posts markdown you trust (your own run), and
`--from-artifact DIR --run-head-sha SHA` is what the comment workflow runs on a
bench run's artifact, which it treats as data (reports.bot.artifact says how). With
`--plan-out DIR` it writes nothing to GitHub: it makes every check with a read-only
token and saves the one request to make, for a job that holds the write token and
installs nothing (.github/workflows/comment.yml).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from epbench.cli.base import Command
from epbench.core.errors import EpbenchError
from epbench.reports.bot.artifact import comment_from_artifact, plan_comment_from_artifact
from epbench.reports.bot.github import DEFAULT_API_URL
from epbench.reports.bot.sticky_comment import UpsertResult, upsert_sticky_comment, write_plan


def _read_body(path: Path) -> str:
    try:
        if str(path) == "-":
            return sys.stdin.read()
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EpbenchError(
            f"no comment body at {path}: pass the report.md that `epbench compare-commits` "
            "wrote, or `epbench compare --format markdown` output"
        ) from None
    except UnicodeDecodeError:
        raise EpbenchError(f"{path} is not UTF-8 text: pass the markdown comment file") from None
    except OSError as exc:
        raise EpbenchError(f"cannot read {path} ({exc.strerror}): check the path") from None


@click.command(cls=Command)
@click.option(
    "--repo",
    envvar="GITHUB_REPOSITORY",
    required=True,
    metavar="OWNER/NAME",
    help="The repository. Default: $GITHUB_REPOSITORY (set in GitHub Actions).",
)
@click.option(
    "--pr",
    "pr_number",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="The pull request number (with --body).",
)
@click.option(
    "--body",
    "body_path",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default=None,
    metavar="FILE",
    help="The markdown to post (`-` for stdin), e.g. epbench-out/report.md.",
)
@click.option(
    "--from-artifact",
    "artifact_path",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR_OR_ZIP",
    help="A bench run's artifact, read as data: the comment is rendered from its "
    "compare.json by this epbench's templates, and posted on the PR its pull-request.json "
    "names only if GitHub confirms that PR's head is --run-head-sha.",
)
@click.option(
    "--run-head-sha",
    default=None,
    metavar="SHA",
    help="With --from-artifact: the commit the bench run measured "
    "(${{ github.event.workflow_run.head_sha }}).",
)
@click.option(
    "--api-url",
    envvar="GITHUB_API_URL",
    default=DEFAULT_API_URL,
    show_default=True,
    help="The REST API base; $GITHUB_API_URL when set (GitHub Enterprise Server).",
)
@click.option(
    "--token-env",
    default="GITHUB_TOKEN",
    show_default=True,
    metavar="NAME",
    help="The environment variable that holds the token (never a command-line argument, "
    "so it stays out of process listings and shell history).",
)
@click.option(
    "--artifact-url",
    "artifact_hint",
    default=None,
    metavar="URL_OR_TEXT",
    help="Where the full report lives; named in the note when the body must be trimmed "
    "to GitHub's comment limit.",
)
@click.option(
    "--bot-login",
    default=None,
    metavar="LOGIN",
    help="The account the token comments as; only a marked comment by it is edited. "
    "Default: GET /user's login, or github-actions[bot] for an installation token "
    "(GITHUB_TOKEN). A GitHub App's token: SLUG[bot].",
)
@click.option(
    "--plan-out",
    "plan_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="With --from-artifact: post nothing; make every check and lookup (a read-only "
    "token does) and write the one request to make into DIR (a new folder): the PR "
    "number, the comment id to edit or `none`, and request.json.",
)
def comment(
    repo: str,
    pr_number: int | None,
    body_path: Path | None,
    artifact_path: Path | None,
    run_head_sha: str | None,
    api_url: str,
    token_env: str,
    artifact_hint: str | None,
    bot_login: str | None,
    plan_dir: Path | None,
) -> None:
    """Create or update the one sticky epbench comment on a pull request.

    \b
    Examples:
      epbench comment --pr 42 --body epbench-out/report.md
      epbench comment --from-artifact bench-out --run-head-sha SHA   (the comment workflow)

    The comment is found by a hidden marker (following every page of the
    PR's comments) and its author, the token's own identity, and edited in
    place, so a PR carries one benchmark comment however often the job runs; a
    marker in anyone else's comment is ignored. Retries 5xx answers and rate limits with
    back-off; an oversize body is trimmed with a pointer to the full report.
    """
    token = os.environ.get(token_env, "").strip()
    if artifact_path is not None:
        if pr_number is not None or body_path is not None:
            raise EpbenchError(
                "--from-artifact takes the PR number and the verdicts from the artifact: "
                "drop --pr and --body"
            )
        if not run_head_sha:
            raise EpbenchError(
                "--from-artifact needs --run-head-sha: pass the bench run's head commit, "
                "${{ github.event.workflow_run.head_sha }}"
            )
        if plan_dir is not None:
            plan = plan_comment_from_artifact(
                artifact_path, repo=repo, run_head_sha=run_head_sha, token=token,
                api_url=api_url, artifact_hint=artifact_hint, token_source=token_env,
                bot_login=bot_login, log=_log,
            )
            folder = write_plan(plan, plan_dir)
            what = "create a comment" if plan.comment_id is None else (
                f"update comment {plan.comment_id}")
            trimmed = " (trimmed to GitHub's comment limit)" if plan.trimmed else ""
            click.echo(
                f"planned: {what} on {repo}#{plan.pr}{trimmed} (GitHub confirmed its head is "
                f"{run_head_sha[:12]}); the plan is in {folder}"
            )
            return
        pr_number, result = comment_from_artifact(
            artifact_path, repo=repo, run_head_sha=run_head_sha, token=token, api_url=api_url,
            artifact_hint=artifact_hint, token_source=token_env, bot_login=bot_login, log=_log,
        )
        _report(repo, pr_number, result, f" (GitHub confirmed its head is {run_head_sha[:12]})")
        return
    if pr_number is None or body_path is None:
        raise EpbenchError(
            "say what to post: --pr N --body FILE, or --from-artifact DIR --run-head-sha SHA"
        )
    if run_head_sha is not None:
        raise EpbenchError("--run-head-sha goes with --from-artifact: drop it, or pass both")
    if plan_dir is not None:
        raise EpbenchError("--plan-out goes with --from-artifact: drop it, or pass both")
    result = upsert_sticky_comment(
        repo, pr_number, _read_body(body_path), token, api_url, artifact_hint=artifact_hint,
        token_source=token_env, bot_login=bot_login, log=_log,
    )
    _report(repo, pr_number, result, "")


def _log(line: str) -> None:
    click.echo(line, err=True)


def _report(repo: str, pr_number: int, result: UpsertResult, confirmed: str) -> None:
    trimmed = " (trimmed to GitHub's comment limit)" if result.trimmed else ""
    where = result.html_url or f"comment {result.comment_id}"
    click.echo(
        f"{result.action} the epbench comment on {repo}#{pr_number}: {where}{trimmed}{confirmed}"
    )
