"""Thin click commands for reports: `compare`, `calibrate`, `export`.

Each parses its options, calls one library function with keyword arguments and
maps the result to an exit code; errors are EpbenchError subclasses raised by the
library and shown by click as one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from epbench.cases.catalog import select_cases
from epbench.cli.base import Command
from epbench.cli.exit_codes import exit_code_for
from epbench.cli.options import (
    annotations_wanted,
    case_option,
    github_annotations_option,
    grid_option,
    rounds_option,
)
from epbench.cli.progress import progress_for
from epbench.core.errors import EpbenchError
from epbench.core.results import atomic_write_text, load_results
from epbench.harness.runner import defaults as run_defaults
from epbench.reports import calibrate as cal
from epbench.reports import compare as cmp
from epbench.reports import defaults, render
from epbench.reports import export as exp
from epbench.reports.annotations import annotation_lines
from epbench.workflows.calibrate import calibrate as run_calibration

FORMATS = ("text", "markdown", "json")


def verdict_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """How verdicts are judged: shared by `compare` and `compare-commits`.

    Adds profile_path, floor, k, alert, confidence, fdr, resamples, seed, fail_on;
    `settings_from` turns them into reports.compare.Settings.
    """
    options = [
        click.option("--profile", "profile_path", type=click.Path(), metavar="FILE",
                     help="Noise profile to judge with [default: this host's, from "
                          "`epbench calibrate`]."),
        click.option("--floor", type=click.FloatRange(min=0), default=defaults.FLOOR,
                     show_default=True, help="Smallest threshold, as a fraction (0.01 = 1 %)."),
        click.option("--k", type=click.FloatRange(min=0, min_open=True), default=defaults.K,
                     show_default=True,
                     help="Threshold t = max(floor, k x calibrated A/A noise)."),
        click.option("--alert", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Change that makes an alert (🔴), as a fraction; never below t "
                          f"[default: {defaults.ALERT_FACTOR:g}t per case]."),
        click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True),
                     default=defaults.CONFIDENCE, show_default=True,
                     help="Confidence of the intervals."),
        click.option("--fdr", type=click.FloatRange(0, 1, min_open=True, max_open=True),
                     default=defaults.FDR, show_default=True,
                     help="Benjamini-Hochberg false-discovery rate across the grid."),
        click.option("--resamples", type=click.IntRange(min=defaults.MIN_RESAMPLES),
                     default=defaults.RESAMPLES, show_default=True,
                     help="Bootstrap resamples of the per-node vs per-Run decomposition "
                          "(verdicts use exact intervals, no resampling)."),
        click.option("--seed", type=int, default=defaults.SEED, show_default=True,
                     help="Seed of the decomposition's resampling."),
        click.option("--fail-on", type=click.Choice(["alert", "regression", "never"]),
                     default=defaults.FAIL_ON, show_default=True,
                     help="Exit 5 when any case is 🔴/❌ (alert), also ⚠️ (regression), "
                          "or never."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def emit_annotations(comparison: Any, *, err: bool = False) -> None:
    """The flagged cases as GitHub workflow commands, on stdout (stderr with `err`)."""
    for line in annotation_lines(comparison):
        click.echo(line, err=err)


def settings_from(*, floor: float, k: float, alert: float | None, confidence: float, fdr: float,
                  resamples: int, seed: int, force: bool = False) -> Any:
    """reports.compare.Settings from the verdict options."""

    return cmp.Settings(floor=floor, k=k, alert=alert, confidence=confidence, fdr=fdr,
                        resamples=resamples, seed=seed, force=force)


def _emit(text: str, output: str | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return

    try:
        atomic_write_text(Path(output), text)
    except OSError as exc:

        raise EpbenchError(
            f"cannot write {output}: {exc.strerror}; choose another --output"
        ) from None
    click.echo(f"wrote {output}", err=True)


@click.command(cls=Command)
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--base", "base_arm", metavar="ARM", help="Arm key of the base side.")
@click.option("--pr", "pr_arm", metavar="ARM", help="Arm key of the PR side.")
@click.option("--arm", "arm", metavar="ARM",
              help="Two files: the arm key to compare in both (same as --base ARM --pr ARM).")
@verdict_options
@click.option("--force", is_flag=True,
              help="Compare results (or a profile) from different hosts anyway, with a warning.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file instead of stdout.")
@github_annotations_option
def compare(results, base_arm, pr_arm, arm, profile_path, floor, k, alert, confidence, fdr,
            resamples, seed, force, fmt, output, github_annotations, fail_on) -> None:
    """Compare base and PR: a verdict per case against calibrated noise.

    \b
    Two runs:  epbench compare BASE.json PR.json [--arm ARM]
    One run:   epbench compare RUN.json --base ARM --pr ARM

    \b
    Verdicts (t: the case's threshold; "surely": the whole CI, significant):
      🔴 alert: surely above t and at least the alert level (--alert, else ALERT_FACTOR x t)
      ⚠️ regression: surely above t   🟢 improvement: surely below -t
      ✅ within noise (CI within +-t)   ❔ inconclusive   ❌ PR side failed
      ➖ not comparable (base failed, or too few usable rounds)
    Exit codes: 0 nothing matched --fail-on, 5 a verdict matched it, 1 bad input.
    In GitHub Actions each 🔴/❌ case also prints an ::error line and each ⚠️ case a
    ::warning line (--no-github-annotations: none); with --format json to stdout they
    go to stderr.
    """

    settings = settings_from(floor=floor, k=k, alert=alert, confidence=confidence, fdr=fdr,
                             resamples=resamples, seed=seed, force=force)
    comparison = cmp.compare_files(
        results, base_arm=base_arm, pr_arm=pr_arm, arm=arm, settings=settings,
        profile_path=profile_path,
    )
    renderers = {"text": render.render_terminal, "markdown": render.render_markdown,
                 "json": render.to_json}
    _emit(renderers[fmt](comparison), output)
    if annotations_wanted(github_annotations):
        # GitHub reads workflow commands from both streams; JSON on stdout stays parseable.
        emit_annotations(comparison, err=fmt == "json" and output is None)
    click.get_current_context().exit(
        exit_code_for(comparison=comparison, fail_on=fail_on)[0])


@click.command(cls=Command)
@grid_option
@case_option
@click.option("--arm", "arm_spec", default="ort", show_default=True, metavar="SPEC",
              help="The arm to calibrate: run A/A against itself (ort: against a second ORT "
                   "session).")
@click.option("--repeats", type=click.IntRange(min=1), default=defaults.CALIBRATION_REPEATS,
              show_default=True, help="A/A runs; the noise is the spread across them.")
@rounds_option(run_defaults()["rounds"])
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Where to write the profile [default: the user cache folder, "
                                   "~/.cache/epbench/profiles/HOSTKEY.json].")
@click.option("--position-test/--no-position-test", default=True, show_default=True,
              help="Also run once in a fixed arm order, to show what counterbalancing removes.")
@click.option("--seed", type=int, default=defaults.SEED, show_default=True)
@click.option("--gate", "gate_policy", type=click.Choice(["wait", "strict", "off"]),
              default="wait", show_default=True, help="Idle-gate policy of the A/A runs.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def calibrate(grids, case_names, arm_spec, repeats, rounds, profile_path, position_test, seed,
              gate_policy, quiet) -> None:
    """Measure A/A noise on this host and write a noise profile for `compare`.

    \b
    Example:  epbench calibrate --grid default --repeats 5
    """

    if not grids and not case_names:
        grids = ("default",)  # calibrate what `make run` measures
    specs = select_cases(grids, case_names)

    def announce(i: int, total: int) -> None:
        if not quiet:
            click.echo(f"A/A run {i + 1}/{total}", err=True)

    profile = run_calibration(
        specs, arm=arm_spec, repeats=repeats, rounds=rounds, seed=seed,
        position_test=position_test, on_repeat=announce,
        runner_options={"gate_policy": gate_policy, "progress": progress_for(quiet)},
    )
    path = Path(profile_path) if profile_path else cal.default_profile_path(profile["host_key"])
    profile["path"] = str(cal.write_profile(path, profile))
    click.echo(render.render_calibration(profile), nl=False)


@click.command(cls=Command)
@click.argument("results", type=click.Path())
@click.option("--pyperf", "pyperf_out", type=click.Path(dir_okay=False), metavar="OUT.json",
              help="Write one pyperf suite per arm: OUT.<arm>.json.")
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False), metavar="OUT.csv",
              help="Write a tidy table: one row per case x arm x round.")
@click.option("--overwrite", is_flag=True, help="Replace existing output files.")
def export(results, pyperf_out, csv_out, overwrite) -> None:
    """Export a results file for other tools (pyperf, CSV).

    \b
    Example:  epbench export results.json --pyperf out.json
              python -m pyperf compare_to out.ort.json out.plugin_nxrt_ep_cpu.json
    """

    if not pyperf_out and not csv_out:
        raise EpbenchError("nothing to export: pass --pyperf OUT.json and/or --csv OUT.csv")
    doc = load_results(results)
    if pyperf_out:
        for arm, path in exp.to_pyperf(doc, pyperf_out, overwrite=overwrite).items():
            click.echo(f"{arm}: {path}")
    if csv_out:
        click.echo(f"csv: {exp.to_csv(doc, csv_out, overwrite=overwrite)}")
