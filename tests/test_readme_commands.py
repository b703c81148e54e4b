"""Every epbench command line in the README's code blocks parses against the real CLI.

Parsing only (click's make_context): unknown options, wrong choices and renamed commands
fail here, at no cost; running them takes minutes of measurement and stays a manual check.
`a|b|c` in a line stands for each alternative; `[optional parts]` of a synopsis are left out.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import click
import pytest

from epbench.cli.main import cli

README = Path(__file__).resolve().parent.parent / "README.md"
# Placeholders the README writes where a typed value goes.
PLACEHOLDERS = {"N": "1"}


def _command_lines() -> list[str]:
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            # A synopsis's [optional parts] are left out; `a && b` is two commands; a
            # redirection is the shell's.
            line = re.sub(r"\s*\[[^\]]*\]", "", line)
            if not re.match(r"^(\.venv/bin/)?epbench ", line):
                continue
            words, part = shlex.split(line), []
            for word in [*words, "&&"]:
                if word == "&&":
                    if part and part[0].endswith("epbench"):
                        lines.append(shlex.join(part[1:part.index(">")] if ">" in part
                                                else part[1:]))
                    part = []
                else:
                    part.append(word)
    return lines


def _expanded(line: str) -> list[list[str]]:
    words = [w.split("|") if "|" in w else [w] for w in shlex.split(line)]
    return [list(choice) for choice in itertools.product(*words)]


def _parse(args: list[str]) -> click.Context:
    command: click.Command | None = cli
    while isinstance(command, click.Group):
        name, *args = args
        command = command.get_command(None, name)
        assert command is not None, f"no command {name!r}"
    args = [PLACEHOLDERS.get(a, a) for a in args]
    return command.make_context(name, args)


def test_the_readme_lists_commands():
    assert len(_command_lines()) >= 15


@pytest.mark.parametrize("line", _command_lines())
def test_readme_command_parses(line):
    for args in _expanded(line):
        _parse(args)


def test_the_readme_stays_a_guide_of_at_most_400_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 400
