"""The `epbench` command line: thin commands over the library.

Commands are loaded lazily (click's LazyGroup pattern): `epbench --help` imports no
command module, and `epbench run` imports only the run command's.
"""

from __future__ import annotations

import importlib

import click

from epbench.cli.base import Group
from epbench.core.errors import EXIT_CODES

# name -> ("module:attribute", summary); the one list of commands. The summaries are
# the commands' own first sentences (a test keeps them equal), listed here so that
# `epbench --help` imports no command module: each command imports its whole stack
# (harness, reports) at the top, which costs a few hundred ms.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("epbench.cli.run_commands:run",
            "Run cases x arms in interleaved, counterbalanced rounds and write the results."),
    "cases": ("epbench.cli.run_commands:cases", "List or build the cases of a grid."),
    "gate": ("epbench.cli.run_commands:gate", "Per-core idle and steal right now."),
    "host": ("epbench.cli.run_commands:host",
             "The host fingerprint that goes into every results file."),
    "merge": ("epbench.cli.run_commands:merge",
              "Join the shards of one grid (run --shard K/N) into one results file."),
    "summary": ("epbench.cli.run_commands:summary",
                "Summarize a results file (results.json, results.jsonl or a run's directory)."),
    "compare": ("epbench.cli.verdict_commands:compare",
                "Compare base and PR: a verdict per case against calibrated noise."),
    "calibrate": ("epbench.cli.verdict_commands:calibrate",
                  "Measure A/A noise on this host and write a noise profile for `compare`."),
    "export": ("epbench.cli.verdict_commands:export",
               "Export a results file for other tools (pyperf, CSV)."),
    "report": ("epbench.cli.report_command:report",
               "Draw one self-contained HTML page with plots of a run, a comparison or the "
               "history."),
    "comment": ("epbench.cli.comment_command:comment",
                "Create or update the one sticky epbench comment on a pull request."),
    "compare-commits": ("epbench.cli.run_commands:compare_commits",
                        "Compare two commits of an EP in one interleaved run, with ORT as the "
                        "control."),
    "action": ("epbench.cli.action_command:action",
               "Measure a pull request's base and head as the epbench GitHub Action does."),
    "validate": ("epbench.cli.validate_commands:validate",
                 "Measure this harness on this machine: false-positive rate, power, MDE, bias."),
    "conformance": ("epbench.cli.conformance_command:conformance",
                    "Run ONNX's own node test cases through ORT with the arm's EP."),
    "history": ("epbench.cli.history_commands:history",
                "Keep every run in a history store and find the commits that changed a case."),
    "overhead": ("epbench.cli.validate_commands:overhead",
                 "Print the harness's own cost per timed call (recorded in every results file "
                 "too)."),
}


class LazyGroup(Group):
    def __init__(self, *args, lazy: dict[str, tuple[str, str]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name][0].split(":")
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # From the table, so that listing the commands imports none of them.
        rows = [(name, self._lazy[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


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
