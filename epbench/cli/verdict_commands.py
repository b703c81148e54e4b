"""Thin click commands for reports: `compare`, `calibrate`, `export`.

Each parses its options, calls one library function with keyword arguments and
maps the result to an exit code; errors are EpbenchError subclasses raised by the
library and shown by click as one line.
"""

from __future__ import annotations

from pathlib import Path

import click

from epbench.cases.catalog import select_cases
from epbench.cli.base import Command, emit
from epbench.cli.exit_codes import exit_code_for
from epbench.cli.options import (
    annotations_wanted,
    case_option,
    format_option,
    gate_option,
    github_annotations_option,
    grid_option,
    out_option,
    overwrite_option,
    quiet_option,
    rounds_option,
    verdict_options,
)
from epbench.cli.progress import progress_for
from epbench.core.errors import EpbenchError
from epbench.core.results import load_results
from epbench.harness.run_config import defaults as run_defaults
from epbench.reports import calibrate as cal
from epbench.reports import compare as cmp
from epbench.reports import defaults, outputs, render
from epbench.reports import export as exp
from epbench.reports.bot.annotations import annotation_lines
from epbench.reports.comparison import Comparison, Settings
from epbench.reports.verdicts import target_settings
from epbench.workflows.calibrate import calibrate as run_calibration


def emit_annotations(comparison: Comparison, *, err: bool = False) -> None:
    """The flagged cases as GitHub workflow commands, on stdout (stderr with `err`)."""
    for line in annotation_lines(comparison):
        click.echo(line, err=err)


def settings_from(*, floor: float, k: float, alert: float | None, confidence: float, fdr: float,
                  resamples: int, seed: int, force: bool = False,
                  target_mde: float | None = None) -> Settings:
    """The comparison's Settings from the verdict options (--target-mde sets the floor)."""

    return target_settings(Settings(floor=floor, k=k, alert=alert, confidence=confidence,
                                    fdr=fdr, resamples=resamples, seed=seed, force=force),
                           target_mde)


@click.command(cls=Command)
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--base", "base_arm", metavar="ARM", help="Arm key of the base side.")
@click.option("--pr", "pr_arm", metavar="ARM", help="Arm key of the PR side.")
@click.option("--arm", "arm", metavar="ARM",
              help="Two files: the arm key to compare in both (same as --base ARM --pr ARM).")
@verdict_options
@click.option("--force", is_flag=True,
              help="Compare results (or a profile) from different hosts anyway, with a warning.")
@format_option("text", "markdown", "json")
@out_option(directory=False, help_text="Write the report to this file instead of stdout.")
@click.option("--out-dir", "out_dir", metavar="DIR", default=None,
              type=click.Path(file_okay=False),
              help="One run: also write results.json, compare.json, report.md and "
                   "report.html into DIR, as compare-commits does.")
@overwrite_option
@github_annotations_option
def compare(results, base_arm, pr_arm, arm, profile_path, floor, k, alert, confidence, fdr,
            resamples, seed, force, fmt, out, out_dir, overwrite, github_annotations, fail_on,
            target_mde) -> None:
    """Compare base and PR: a verdict per case against calibrated noise.

    \b
    Two runs:  epbench compare BASE.json PR.json [--arm ARM]
    One run:   epbench compare RUN.json --base ARM --pr ARM [--out-dir DIR]
    Two runs are compared through each run's ORT control; a case whose controls took
    more than 5 % longer a Run in one run than in the other (the machine's speed
    changed) is ❔ unless its interval clears the threshold by more than an allowance,
    2.5 % just beyond 5 %, that grows with the shift (3.2 % at 10 %, 6.0 % at 50 %), as
    a speed change does not slow every case alike.

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
                             resamples=resamples, seed=seed, force=force,
                             target_mde=target_mde)
    if out_dir is None:
        comparison = cmp.compare_files(
            results, base_arm=base_arm, pr_arm=pr_arm, arm=arm, settings=settings,
            profile_path=profile_path,
        )
    else:
        if len(results) != 1 or arm:
            raise EpbenchError("--out-dir writes one run's results.json beside its verdicts: "
                               "give one RESULTS with --base ARM --pr ARM, or write two "
                               "runs' verdicts with --format json --out FILE")
        folder = outputs.prepare_outputs(out_dir, overwrite=overwrite)
        run, comparison = cmp.compare_run(results[0], base_arm=base_arm, pr_arm=pr_arm,
                                          settings=settings, profile_path=profile_path)
        outputs.write_outputs(folder, run, comparison)
    renderers = {"text": render.render_terminal, "markdown": render.render_markdown,
                 "json": Comparison.to_json}
    emit(renderers[fmt](comparison), out)
    if annotations_wanted(github_annotations):
        # GitHub reads workflow commands from both streams; JSON on stdout stays parseable.
        emit_annotations(comparison, err=fmt == "json" and out is None)
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
              metavar="FILE", help="Where to write the profile [default: profiles/HOSTKEY.json in "
                                   "$EPBENCH_CACHE_DIR, else in ~/.cache/epbench].")
@click.option("--position-test/--no-position-test", default=True, show_default=True,
              help="Also run once in a fixed arm order, to show what counterbalancing removes.")
@click.option("--seed", type=int, default=defaults.SEED, show_default=True)
@gate_option
@quiet_option
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
        gate_policy=gate_policy, progress=progress_for(quiet),
    )
    path = Path(profile_path) if profile_path else cal.default_profile_path(profile["host_key"])
    profile["path"] = str(cal.write_profile(path, profile))
    click.echo(render.render_calibration(profile), nl=False)


@click.command(cls=Command)
@click.argument("results", type=click.Path())
@format_option("pyperf", "csv", default="pyperf")
@out_option(directory=False, required=True,
            help_text="pyperf: one suite per arm, FILE.<arm>.json (FILE ends in .json); "
                      "csv: a tidy table in FILE, one row per case x arm x round.")
@overwrite_option
def export(results, fmt, out, overwrite) -> None:
    """Export a results file for other tools (pyperf, CSV).

    \b
    Example:  epbench export results.json --out out.json
              python -m pyperf compare_to out.ort.json out.plugin_nxrt_ep_cpu.json
              epbench export results.json --format csv --out rounds.csv
    """

    doc = load_results(results)
    if fmt == "pyperf":
        for arm, path in exp.to_pyperf(doc, out, overwrite=overwrite).items():
            click.echo(f"{arm}: {path}")
    else:
        written = exp.to_csv(doc, out, overwrite=overwrite)
        if written is not None:  # `--out -` printed the table itself
            click.echo(f"csv: {written}")
