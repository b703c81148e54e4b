"""`epbench comment`: post or update the one sticky benchmark comment on a PR."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from epbench.cli.base import Command
from epbench.core.errors import EpbenchError
from epbench.reports.github import DEFAULT_API_URL, upsert_sticky_comment


def _read_body(path: Path) -> str:
    try:
        if str(path) == "-":
            return sys.stdin.read()
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EpbenchError(
            f"no comment body at {path}: pass the comment.md that `epbench compare` or "
            "`epbench compare-commits` wrote"
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
    required=True,
    metavar="N",
    help="The pull request number.",
)
@click.option(
    "--body",
    "body_path",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    required=True,
    metavar="FILE",
    help="The markdown to post (`-` for stdin), e.g. bench-out/comment.md.",
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
def comment(
    repo: str,
    pr_number: int,
    body_path: Path,
    api_url: str,
    token_env: str,
    artifact_hint: str | None,
) -> None:
    """Create or update the one sticky epbench comment on a pull request.

    The comment is found by a hidden marker (following every page of the
    PR's comments) and edited in place, so a PR carries one benchmark comment
    however often the job runs. Retries 5xx answers and rate limits with
    back-off; an oversize body is trimmed with a pointer to the full report.
    """
    body = _read_body(body_path)
    result = upsert_sticky_comment(
        repo,
        pr_number,
        body,
        os.environ.get(token_env, "").strip(),
        api_url,
        artifact_hint=artifact_hint,
        token_source=token_env,
        log=lambda line: click.echo(line, err=True),
    )
    trimmed = " (trimmed to GitHub's comment limit)" if result.trimmed else ""
    where = result.html_url or f"comment {result.comment_id}"
    click.echo(f"{result.action} the epbench comment on {repo}#{pr_number}: {where}{trimmed}")
