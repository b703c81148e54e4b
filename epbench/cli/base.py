"""click classes for every epbench command: the library's errors shown the click way.

Library code raises plain `EpbenchError`s carrying their exit code; here, once, they
become click's `Error: <message>` on stderr with that code, whether a command runs
through the `epbench` group or on its own (as tests invoke it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from epbench.core.errors import EpbenchError


class UserError(click.ClickException):
    """An EpbenchError as click shows it: `Error: <message>` on stderr, its exit code."""

    def __init__(self, error: EpbenchError) -> None:
        super().__init__(error.message)
        self.exit_code = error.exit_code


class Command(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EpbenchError as exc:
            raise UserError(exc) from None


class Group(click.Group):
    command_class = Command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EpbenchError as exc:
            raise UserError(exc) from None


def emit(text: str, out: str | None) -> None:
    """A command's one document: to stdout, or to `--out FILE` (its folder created)."""
    if out is None or out == "-":
        click.echo(text, nl=False)
        return
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        # Atomic: a reader sees the old file or the new one, whole (click's own writer, so
        # that `epbench --help`, which imports this module, loads no results code).
        with click.open_file(out, "w", encoding="utf-8", atomic=True) as fh:
            fh.write(text)
    except OSError as exc:
        raise EpbenchError(f"cannot write {out}: {exc.strerror or exc}; "
                           "choose another --out") from None
    click.echo(f"wrote {out}", err=True)
