"""The `epbench` command line: thin commands over the library.

Commands are loaded lazily (click's LazyGroup pattern) so that `epbench --help`
imports no ONNX Runtime, numpy or pandas, and so each command lives beside the
library it drives.
"""

from __future__ import annotations

import importlib

import click

from harness.errors import EXIT_CODES

# name -> "module:attribute"; the one list of commands.
COMMANDS: dict[str, str] = {
    "run": "harness.commands:run",
    "cases": "harness.commands:cases",
    "gate": "harness.commands:gate",
    "host": "harness.commands:host",
    "summary": "harness.commands:summary",
    "compare": "reports.commands:compare",
    "calibrate": "reports.commands:calibrate",
    "export": "reports.commands:export",
    "comment": "reports.github_command:comment",
    "compare-commits": "harness.commands:compare_commits",
    "validate": "harness.validate_commands:validate",
    "floor": "harness.validate_commands:floor",
    "conformance": "harness.conformance_command:conformance",
}


class LazyGroup(click.Group):
    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, cmd_name)


def _exit_code_epilog() -> str:
    rows = "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items())
    return f"\b\nExit codes:\n{rows}"  # \b: click keeps these lines as they are


@click.group(cls=LazyGroup, lazy=COMMANDS, epilog=_exit_code_epilog())
@click.version_option(package_name="epbench")
def cli() -> None:
    """epbench: measure an ONNX Runtime plugin EP against ORT's CPU EP.

    Every arm runs in one process, interleaved round by round in a
    counterbalanced order, with ORT's CPU EP as the in-run control and an
    idle-core gate before each round.
    """


def main() -> None:
    cli(prog_name="epbench")


if __name__ == "__main__":
    main()
