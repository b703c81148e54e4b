"""Command-line options shared by several commands, declared once and stacked."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]


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


def out_option(f: F) -> F:
    return click.option(
        "--out",
        type=click.Path(file_okay=False),
        default="epbench-out",
        show_default=True,
        help="Output directory: results.jsonl, results.json and the report.",
    )(f)


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


def github_annotations_option(f: F) -> F:
    return click.option(
        "--github-annotations/--no-github-annotations",
        "github_annotations",
        default=None,
        help="Print a GitHub Actions ::error (🔴, ❌) or ::warning (⚠️) line per flagged "
        "case, which GitHub shows on the run and the pull request [default: on when "
        "$GITHUB_ACTIONS is 'true', as in GitHub Actions].",
    )(f)


def annotations_wanted(flag: bool | None) -> bool:
    """--github-annotations as given, else on exactly when running in GitHub Actions."""
    if flag is not None:
        return flag
    return os.environ.get("GITHUB_ACTIONS") == "true"
