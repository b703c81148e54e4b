"""One vocabulary of `--format` values and one spelling of `--out` across the commands."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.cli.options import FORMATS, FiniteRange, format_option

RESULTS = "tests/fixtures/results/base.json"


def _commands() -> dict[str, click.Command]:
    found = {}
    for name in cli.list_commands(None):
        command = cli.get_command(None, name)
        if isinstance(command, click.Group):
            found.update({f"{name} {sub}": command.get_command(None, sub)
                          for sub in command.list_commands(None)})
        else:
            found[name] = command
    return found


def test_every_format_option_offers_values_of_the_one_vocabulary():
    offered = {name: list(p.type.choices) for name, command in _commands().items()
               for p in command.params if "--format" in p.opts}
    assert offered == {
        "cases list": ["text", "json"],
        "compare": ["text", "markdown", "json"],
        "conformance": ["text", "json", "markdown"],
        "export": ["pyperf", "csv"],
        "gate": ["text", "json"],
        "history detect": ["text", "json", "csv"],
        "history export": ["csv", "parquet"],
        "history list": ["text", "json", "csv"],
        "history show": ["text", "json", "csv"],
        "host": ["text", "json"],
        "overhead": ["text", "json"],
        "summary": ["text", "json", "markdown"],
    }
    assert all(set(values) <= set(FORMATS) for values in offered.values())


def test_output_goes_to_out_in_every_command():
    spellings = {name: sorted(o for p in command.params for o in p.opts
                              if o in ("--out", "--output", "-o", "--csv", "--pyperf"))
                 for name, command in _commands().items()}
    writers = {name for name, opts in spellings.items() if opts}
    assert {name: spellings[name] for name in writers} == {
        name: ["--out"] for name in
        ("run", "compare", "compare-commits", "validate", "cases build", "export",
         "history export", "conformance", "history list", "history show", "summary",
         "cases list", "report", "merge", "action")}


def test_every_command_that_prints_a_document_can_write_it_to_out():
    # gate, host and overhead read this machine as it is now; history detect's findings
    # are its exit code's evidence: all four print for a person or a pipe.
    live = {"gate", "host", "overhead", "history detect"}
    formats = {name for name, command in _commands().items()
               for p in command.params if "--format" in p.opts}
    outs = {name for name, command in _commands().items()
            for p in command.params if "--out" in p.opts}
    assert formats - live <= outs


def test_table_is_still_taken_as_text_and_not_listed():
    runner = CliRunner()
    text = runner.invoke(cli, ["summary", RESULTS, "--format", "text"])
    table = runner.invoke(cli, ["summary", RESULTS, "--format", "table"])
    assert text.exit_code == 0, text.output
    assert table.output == text.output
    shown = runner.invoke(cli, ["summary", "--help"]).output
    assert "[text|json|markdown]" in shown.replace("\n", " ") and "table" not in shown
    refused = runner.invoke(cli, ["summary", RESULTS, "--format", "csv"])
    assert refused.exit_code == 2 and "'csv' is not one of" in refused.output


def test_summary_json_is_json():
    result = CliRunner().invoke(cli, ["summary", RESULTS, "--format", "json"])
    assert result.exit_code == 0
    assert set(json.loads(result.output)) >= {"cases"}


def test_a_format_outside_the_vocabulary_is_a_programming_error():
    with pytest.raises(ValueError, match="not in"):
        format_option("text", "yaml")
    with pytest.raises(ValueError, match="not in"):
        format_option("json", default="text")


def test_shared_options_read_the_same_in_every_command():
    # Declared once in epbench/cli/options.py: each appears with one help text and type.
    shared = ("--gate", "--quiet", "--overwrite", "--grid", "--case", "--rounds", "--fail-on")
    seen: dict[str, set[tuple[str, str]]] = {name: set() for name in shared}
    # Three deliberate differences: `history show` reads one series (one required --case),
    # a change point has no alert level (`history detect --fail-on regression|any`), and
    # `action` takes the GitHub Action's inputs as text, an empty one meaning the default.
    exempt = {("history show", "--case"), ("history detect", "--fail-on"),
              ("action", "--fail-on")}
    for command_name, command in _commands().items():
        for p in command.params:
            for name in shared:
                if name in p.opts and (command_name, name) not in exempt:
                    seen[name].add((p.help or "", repr(getattr(p.type, "choices", p.type))))
    assert {name: len(forms) for name, forms in seen.items()} == dict.fromkeys(shared, 1)


def test_every_float_option_refuses_nan_and_infinity():
    # click's FloatRange lets NaN through (it fails no comparison) and inf on an open side:
    # a --k nan judged every case against a threshold of nan. Every float option is a
    # FiniteRange, so none takes either.
    floats = {f"{name} {p.opts[0]}": type(p.type).__name__
              for name, command in _commands().items() for p in command.params
              if isinstance(p.type, click.types.FloatParamType)}
    assert "compare --k" in floats and "compare-commits --floor" in floats
    assert "run --block-ms" in floats
    assert {kind for kind in floats.values()} == {FiniteRange.__name__}


@pytest.mark.parametrize("args", [
    ["compare", RESULTS, "--k", "nan"],
    ["compare", RESULTS, "--k", "inf"],
    ["compare", RESULTS, "--floor", "nan"],
    ["compare", RESULTS, "--alert", "inf"],
    ["compare", RESULTS, "--confidence", "nan"],
    ["compare-commits", "a", "b", "--floor", "NaN"],
    ["compare-commits", "a", "b", "--budget", "inf"],
    ["run", "--block-ms", "inf"],
])
def test_a_non_finite_float_option_is_one_line_exit_2(args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.splitlines()[-1] == (
        f"Error: Invalid value for '{args[-2]}': {args[-1]!r} is not a finite number; "
        "give a plain decimal number")
