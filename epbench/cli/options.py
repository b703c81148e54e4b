"""Command-line options shared by several commands, declared once and stacked.

Every option that more than one command takes is declared here (`--grid`, `--case`,
`--model`, `--dim`, `--allow-fallback`, `--arm`, `--rounds`, `--gate`, `--quiet`,
`--overwrite`, `--out`, `--format`, and the verdict options of `compare` and
`compare-commits`), so it reads the same everywhere.
Two conventions hold across every command:

- **Where output goes: `--out PATH`**, always that spelling. A command that writes
  several files takes a directory (`run`, `compare-commits`, `validate`, `cases build`);
  one that writes one document takes a file (`compare`, `report --benchmarks`; without
  `--out` they print to stdout), and `export` a file name that pyperf's suites are
  derived from. There is no `--output`, `-o`, or option named after a format. The one
  file named for what it holds is the noise profile: `calibrate --profile FILE` writes
  what `compare --profile FILE` reads.
- **How output looks: `--format`**, from one vocabulary, FORMATS: `text` (for a
  terminal, the default), `json` (for programs), `markdown` (for a PR or a report),
  `csv` (a tidy table); each command offers the ones that make sense for it, plus
  `pyperf` (pyperf's JSON suite) for `export` only. `table`, the old name of `text`, is
  still accepted and hidden.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import click

from epbench.core.errors import EpbenchError
from epbench.harness.gate import DEFAULT_BUDGET_S as GATE_BUDGET_S_PER_CASE
from epbench.harness.gate import FUTILE_ROUNDS_BEFORE_NO_WAIT, POLICIES
from epbench.harness.run_config import defaults as run_defaults
from epbench.reports import defaults
from epbench.reports.comparison import FAIL_ON

F = Callable[..., Any]

FORMATS = ("text", "json", "markdown", "csv", "pyperf", "parquet")
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


def model_option(note: str = "") -> Callable[[F], F]:
    """`--model PATH.onnx` (repeatable), into `models`; ``note`` ends the help."""

    def deco(f: F) -> F:
        return click.option(
            "--model", "models", multiple=True, metavar="PATH.onnx",
            help="A user model as case model:<stem>; inputs are synthesized. Repeatable."
                 + (f" {note}" if note else ""),
        )(f)

    return deco


def dim_option(f: F) -> F:
    """`--dim NAME=VALUE` (repeatable), into `dim_values`; read with `parse_dims`."""
    return click.option(
        "--dim", "dim_values", multiple=True, metavar="NAME=VALUE",
        help="Value for a symbolic dimension of a --model input. Repeatable.",
    )(f)


def parse_dims(values: tuple[str, ...]) -> dict[str, int]:
    """--dim NAME=VALUE items as a dict; each name once, each value a positive integer."""
    dims: dict[str, int] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name or not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise EpbenchError(f"--dim {item!r}: write NAME=VALUE with a positive integer, "
                               "e.g. --dim batch=1")
        if name in dims:
            raise EpbenchError(f"--dim {name} is given twice; give each dim once")
        dims[name] = int(value)
    return dims


def allow_fallback_option(f: F) -> F:
    return click.option(
        "--allow-fallback", is_flag=True,
        help="Let the EP under test (a plugin or engine arm) share the graph with ORT's CPU "
             "EP; the split is recorded.",
    )(f)


def ep_option_option(f: F) -> F:
    """`--ep-option KEY=VALUE` (repeatable), into `ep_option_values`; read with
    `parse_ep_options`."""
    return click.option(
        "--ep-option", "ep_option_values", multiple=True, metavar="KEY=VALUE",
        help="An option handed to the EP of both sides (base, head and the A/A twin alike) "
             "through add_provider_for_devices. Repeatable. The bundled engine takes only "
             "its own options; a plugin EP built with --build, any.",
    )(f)


def parse_ep_options(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """--ep-option KEY=VALUE items, in the order given; each key once. A value is taken
    whole: it may hold `=`, `,` or `:`."""
    options: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise EpbenchError(f"--ep-option {item!r} is not KEY=VALUE; write it as e.g. "
                               "--ep-option partition=per_node")
        if key == "name":
            raise EpbenchError("--ep-option name=... is not an EP option: the sides are named "
                               "base and head; drop it")
        if key in options:
            raise EpbenchError(f"--ep-option {key} is given twice; give each option once")
        options[key] = value
    return tuple(options.items())


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


def _default_given(default: int, shown: str | None) -> dict[str, Any]:
    """click's default keywords: `default` shown as is, or, with `shown`, no default (the
    command decides) and `shown` in the help."""
    if shown is None:
        return {"default": default, "show_default": True}
    return {"default": None, "show_default": shown}


def rounds_option(default: int, shown: str | None = None) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option(
            "--rounds",
            type=click.IntRange(min=1),
            help="Rounds per case; the round is the unit of replication.",
            **_default_given(default, shown),
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


def processes_option(default: int, shown: str | None = None) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option(
            "--processes",
            type=click.IntRange(min=1),
            **_default_given(default, shown),
            help="Worker processes per case, interleaved across cases; the rounds are "
                 "spread over them. Each process has its own memory layout, which can "
                 "shift speed by a fixed offset for its life (mostly small, up to 28 % seen): "
                 "more processes, not more rounds, average such an offset away.",
        )(f)

    return deco


def sessions_option(default: int) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option(
            "--sessions",
            type=click.IntRange(min=1),
            default=default,
            show_default=True,
            help="Sessions per arm in each process, rotated over its rounds, in case a "
                 "session carries an offset of its own.",
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


def gate_option(f: F) -> F:
    return click.option(
        "--gate",
        "gate_policy",
        type=click.Choice(list(POLICIES)),
        default=run_defaults()["gate_policy"],
        show_default=True,
        help="Idle gate before each round: wait for quiet cores for up to --gate-max-wait "
             "seconds (then run the round marked unquiet), stop the case with exit 3 "
             "(strict), or skip it (off).",
    )(f)


def gate_max_wait_option(default: float) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option(
            "--gate-max-wait",
            type=FiniteRange(min=0),
            default=default,
            show_default=True,
            help="Seconds `--gate wait` waits for quiet before running a round as unquiet "
                 f"({GATE_BUDGET_S_PER_CASE:g} s a case at most; after "
                 f"{FUTILE_ROUNDS_BEFORE_NO_WAIT} rounds in a row with no passing look, "
                 "none until the process after a look passes; 0: look, never wait).",
        )(f)

    return deco


def quiet_option(f: F) -> F:
    return click.option("--quiet", "-q", is_flag=True, help="No progress output.")(f)


def overwrite_option(f: F) -> F:
    return click.option("--overwrite", is_flag=True,
                        help="Replace output already at --out (compare: --out-dir).")(f)


class FiniteRange(click.FloatRange):
    """click.FloatRange that also refuses NaN and ±inf, which FloatRange lets through
    (NaN fails no comparison; an unbounded side takes inf): every float option uses it."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number; give a plain decimal number",
                      param, ctx)
        return number


class Percent(click.ParamType):
    """A percentage, "1%" or "1", as a fraction (0.01), strictly between 0 and 100 %."""

    name = "PCT"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip().removesuffix("%").strip()
        try:
            pct = float(text)
        except ValueError:
            pct = float("nan")
        if not 0.0 < pct < 100.0:  # NaN fails too
            self.fail(f"{value!r} is not a percentage between 0 and 100; write e.g. 1% or 0.5",
                      param, ctx)
        return pct / 100.0


def verdict_options(f: F) -> F:
    """How verdicts are judged: shared by `compare` and `compare-commits`.

    Adds profile_path, floor, k, alert, confidence, fdr, resamples, seed, fail_on,
    target_mde;
    `settings_from` turns them into reports.verdicts.Settings.
    """
    options = [
        click.option("--profile", "profile_path", type=click.Path(), metavar="FILE",
                     help="Noise profile to judge with [default: this host's, from "
                          "`epbench calibrate`]."),
        click.option("--floor", type=FiniteRange(min=0), default=defaults.FLOOR,
                     show_default=True, help="Smallest threshold, as a fraction (0.01 = 1 %)."),
        click.option("--k", type=FiniteRange(min=0, min_open=True), default=defaults.K,
                     show_default=True,
                     help="Threshold t = max(floor, k x calibrated A/A noise)."),
        click.option("--alert", type=FiniteRange(min=0, min_open=True), default=None,
                     help="Change that makes an alert (🔴), as a fraction; never below t "
                          f"[default: {defaults.ALERT_FACTOR:g}t per case]."),
        click.option("--confidence", type=FiniteRange(0, 1, min_open=True, max_open=True),
                     default=defaults.CONFIDENCE, show_default=True,
                     help="Confidence of the intervals."),
        click.option("--fdr", type=FiniteRange(0, 1, min_open=True, max_open=True),
                     default=defaults.FDR, show_default=True,
                     help="Benjamini-Hochberg false-discovery rate across the grid."),
        click.option("--resamples", type=click.IntRange(min=defaults.MIN_RESAMPLES),
                     default=defaults.RESAMPLES, show_default=True,
                     help="Bootstrap resamples of the per-node vs per-Run decomposition "
                          "(verdicts use exact intervals, no resampling)."),
        click.option("--seed", type=int, default=defaults.SEED, show_default=True,
                     help="Seed of the decomposition's resampling."),
        click.option("--target-mde", "target_mde", type=Percent(), default=None,
                     help="The detectable change every case should reach (e.g. 1%): the "
                          "floor becomes half of it, a ✅ whose A/A twin moved more is ❔, "
                          "and the report names the cases short of it and why "
                          "(compare-commits re-runs them with more worker processes "
                          "within its budget)."),
        click.option("--fail-on", type=click.Choice(list(FAIL_ON)),
                     default=defaults.FAIL_ON, show_default=True,
                     help="Exit 5 when any case is 🔴/❌ (alert), also ⚠️ (regression), "
                          "or never."),
    ]
    for option in reversed(options):
        f = option(f)
    return f
