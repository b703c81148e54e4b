"""Command-line options shared by several commands, declared once and stacked.

Two conventions hold across every command:

- **Where output goes: `--out PATH`**, always that spelling. A command that writes
  several files takes a directory (`run`, `compare-commits`, `validate`, `cases build`);
  one that writes one document takes a file (`compare`; without `--out` it prints to
  stdout), and `export` a file name that pyperf's suites are derived from. There is no
  `--output`, `-o`, or option named after a format. The one file named for what it holds
  is the noise profile: `calibrate --profile FILE` writes what `compare --profile FILE`
  reads.
- **How output looks: `--format`**, from one vocabulary, FORMATS: `text` (for a
  terminal, the default), `json` (for programs), `markdown` (for a PR or a report),
  `csv` (a tidy table); each command offers the ones that make sense for it, plus
  `pyperf` (pyperf's JSON suite) for `export` only. `table`, the old name of `text`, is
  still accepted and hidden.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]

FORMATS = ("text", "json", "markdown", "csv", "pyperf")
# Old spellings still accepted (not listed in --help): old -> current.
FORMAT_ALIASES = {"table": "text"}


class FormatChoice(click.Choice):
    """A click.Choice of FORMATS that also takes the hidden old spellings."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        current = FORMAT_ALIASES.get(value, value)
        if current in self.choices:
            return current
        return super().convert(value, param, ctx)


def format_option(*choices: str, default: str = "text") -> Callable[[F], F]:
    """`--format`, offering ``choices`` (a subset of FORMATS), into the `fmt` argument."""
    unknown = set(choices) - set(FORMATS)
    if unknown or default not in choices:
        raise ValueError(f"formats {sorted(unknown)} (default {default!r}) not in {FORMATS}")

    def deco(f: F) -> F:
        return click.option("--format", "fmt", type=FormatChoice(choices), default=default,
                            show_default=True, help="How the output looks.")(f)

    return deco


def grid_option(f: F) -> F:
    return click.option(
        "--grid",
        "grids",
        multiple=True,
        metavar="NAME",
        help="A named grid from cases/grids (quick, default, full). Repeatable.",
    )(f)


def case_option(f: F) -> F:
    return click.option(
        "--case",
        "case_names",
        multiple=True,
        metavar="CASE",
        help="A single case by name, e.g. relu_d100_w8 or matmul_128x128_dyn. Repeatable.",
    )(f)


def arm_option(f: F) -> F:
    return click.option(
        "--arm",
        "arm_specs",
        multiple=True,
        metavar="SPEC",
        help=(
            "An arm: ort | engine[:K=V,...] | engine@LIB | plugin:PATH_OR_MODULE[:K=V,...]. "
            "Options: name=ALIAS plus EP options. Repeatable; `ort` is always added "
            "as the in-run control."
        ),
    )(f)


def rounds_option(default: int) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option(
            "--rounds",
            type=click.IntRange(min=1),
            default=default,
            show_default=True,
            help="Rounds per case; the round is the unit of replication.",
        )(f)

    return deco


def out_option(*, help_text: str, directory: bool, default: str | None = None,
               required: bool = False) -> Callable[[F], F]:
    """`--out PATH`, the one spelling of "where output goes": a directory or a file."""

    # No default=None when there is none: click 8.3 counts an explicit None as a value,
    # and `required` would then never fire.
    given = {} if default is None else {"default": default, "show_default": True}

    def deco(f: F) -> F:
        return click.option(
            "--out",
            type=click.Path(file_okay=not directory, dir_okay=directory),
            required=required,
            metavar="DIR" if directory else "FILE",
            help=help_text,
            **given,
        )(f)

    return deco


def processes_option(default: int) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option(
            "--processes",
            type=click.IntRange(min=1),
            default=default,
            show_default=True,
            help="Worker processes per case, interleaved across cases; the rounds are "
                 "spread over them. Each process has its own memory layout, which shifts "
                 "speed by a fixed offset for its life: more processes, not more rounds, "
                 "average that away.",
        )(f)

    return deco


def sessions_option(default: int) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option(
            "--sessions",
            type=click.IntRange(min=1),
            default=default,
            show_default=True,
            help="Sessions per arm in each process, rotated over its rounds (two sessions "
                 "of one model differ by about 1 %).",
        )(f)

    return deco
