"""Thin click commands for the harness: parse, call one library function, map to an exit code."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import click

from epbench.cases.catalog import case_table, describe_cases, select_cases, write_cases
from epbench.cases.grids import grid_names
from epbench.cases.shards import parse_shard, shard_cases
from epbench.cases.spec import CaseSpec
from epbench.cli.base import Command, Group, emit
from epbench.cli.exit_codes import exit_code_for
from epbench.cli.options import (
    FiniteRange,
    Percent,
    allow_fallback_option,
    annotations_wanted,
    arm_option,
    case_option,
    dim_option,
    ep_option_option,
    format_option,
    gate_max_wait_option,
    gate_option,
    github_annotations_option,
    grid_option,
    model_option,
    out_option,
    overwrite_option,
    parse_dims,
    parse_ep_options,
    processes_option,
    quiet_option,
    rounds_option,
    sessions_option,
    verdict_options,
)
from epbench.cli.progress import progress_for
from epbench.cli.verdict_commands import emit_annotations, settings_from
from epbench.core.errors import EXIT_GATE, EXIT_INTERRUPTED, EpbenchError
from epbench.core.paths import DB_ENV
from epbench.core.results import load_results, prepare_out_dir, write_results
from epbench.harness.arms import default_twin, parse_arm
from epbench.harness.gate import current_gate_state, format_gate_reading
from epbench.harness.host import fingerprint_key, host_fingerprint
from epbench.harness.instructions import METHODS as INSTRUCTION_METHODS
from epbench.harness.merge import Shard, merge_shards
from epbench.harness.run_config import (
    COMPARED_PROCESSES,
    COMPARED_ROUNDS,
    RunConfig,
    sized_for,
)
from epbench.harness.run_config import defaults as run_defaults
from epbench.harness.runner import run as run_grid
from epbench.harness.worker_process import STARTUP_TIMEOUT_S
from epbench.reports import render
from epbench.reports.defaults import INSTRUCTIONS_THRESHOLD
from epbench.reports.history.changes import history_to_check
from epbench.reports.render import render_summary_table
from epbench.reports.run_report import render_run_report, write_run_report
from epbench.reports.summary import summarize
from epbench.reports.verdicts import Settings, default_threshold_text
from epbench.workflows.compare_commits import (
    BASE_ARM,
    BUILD_TIMEOUT_S,
    COMMITS_GATE_MAX_WAIT_S,
    COMMITS_PROCESSES,
    COMMITS_ROUNDS,
    DEFAULT_TARGET_S_PER_CASE,
    REPORT_RESERVE_S,
    default_instructions,
)
from epbench.workflows.compare_commits import compare_commits as run_comparison
from epbench.workflows.run_target import run_to_target

_RUN = run_defaults()
_COMPARED = "when two or more arms besides ort are compared"


@click.command(cls=Command)
@grid_option
@case_option
@model_option()
@dim_option
@arm_option
@rounds_option(_RUN["rounds"], shown=f"{_RUN['rounds']}; {COMPARED_ROUNDS} {_COMPARED}")
@processes_option(_RUN["processes"],
                  shown=f"{_RUN['processes']}; {COMPARED_PROCESSES} {_COMPARED}")
@sessions_option(_RUN["sessions"])
@click.option("--aa-twin", "aa_twin", metavar="ARM", default=None,
              help="Also run a twin of ARM (its own copy of the library or, when two or "
                   "more arms all load one file, that file again; its own registration "
                   "name): the run measures its own A/A noise, which "
                   "`compare` then uses for its thresholds. Default: the first arm "
                   "after the ORT control, once two or more arms are compared (one more "
                   "arm per round).")
@click.option("--no-aa-twin", "no_aa_twin", is_flag=True,
              help="Run no twin, even when two or more arms are compared (`compare` "
                   "then falls back to the threshold t = "
                   f"{default_threshold_text(Settings())} unless given a --profile).")
@click.option("--keep-samples", is_flag=True,
              help="Keep every timed call's sample in OUT/results.samples.jsonl.gz (the "
                   "results file keeps per-block summaries: median, min, quartiles, count).")
@click.option("--block-ms", type=FiniteRange(min=0.1), default=_RUN["block_target_ms"],
              show_default=True, help="Target duration of one arm's block in a round.")
@click.option("--slices", type=click.IntRange(min=1), default=_RUN["block_slices"],
              show_default=True,
              help="Cut each arm's block into this many slices, run alternately in the "
                   "round's order, so the arms share the machine's millisecond-scale noise "
                   "(fewer, for all arms of a case, when its shortest block would give "
                   "slices of under 25 calls; 1: whole blocks).")
@click.option("--max-block-iters", type=click.IntRange(min=1), default=_RUN["max_block_iters"],
              show_default=True,
              help="Cap on iterations per block (bounds the raw samples kept; fast cases "
                   "get blocks shorter than --block-ms, recorded as block_ms).")
@click.option("--warmup-ms", type=FiniteRange(min=0), default=_RUN["warmup_ms"],
              show_default=True, help="Untimed warm-up per arm before its block is sized.")
@click.option("--threads", type=click.IntRange(min=1), default=_RUN["threads"],
              show_default=True,
              help="intra_op and inter_op threads, equal for every arm (1 pins the worker "
                   "to the quietest core).")
@click.option("--seed", type=int, default=_RUN["seed"], show_default=True,
              help="Seed of the round orders (recorded in the results).")
@gate_option
@click.option("--gate-threshold", type=FiniteRange(0, 1, min_open=True),
              default=_RUN["gate_threshold"], show_default=True,
              help="Minimum idle fraction of every core for a round to count as quiet.")
@gate_max_wait_option(_RUN["gate_max_wait_s"])
@click.option("--case-timeout", type=FiniteRange(min=0, min_open=True),
              default=_RUN["silence_timeout_s"], show_default=True,
              help="Seconds a worker may report nothing before it is taken for hung and "
                   "killed (its case is reported crashed); its start-up, until it reports "
                   f"(Python and ORT's import), gets at least {STARTUP_TIMEOUT_S:g} s.")
@allow_fallback_option
@click.option("--instructions", type=click.Choice(list(INSTRUCTION_METHODS)), default=None,
              help="Also count instructions per Run in an extra untimed pass: hardware "
                   "counters (perf) or callgrind (valgrind); exact, reported when they change.")
@click.option("--shard", metavar="K/N", default=None,
              help="Run only the K-th of N deterministic slices of the cases (a chain family "
                   "stays in one slice); `epbench merge` joins the N results files.")
@click.option("--target-mde", "target_mde", type=Percent(), default=None,
              help="After the first pass, compare the base arm (the twin's, else the first "
                   "besides ort) with each other arm as `compare --target-mde` would, and "
                   "run the cases whose detectable change is above this (e.g. 1%) again "
                   "with --processes more worker processes, until they reach it or --budget "
                   "is spent; a note names the cases left short.")
@click.option("--budget", "budget_s", type=FiniteRange(min=0), default=None,
              help="With --target-mde: seconds for its re-runs [default: until "
                   f"{DEFAULT_TARGET_S_PER_CASE:g} s per case after the command began, less "
                   f"{REPORT_RESERVE_S:g} s].")
@out_option(directory=True, default="epbench-out",
            help_text="Output directory: results.jsonl, results.json and the report.")
@overwrite_option
@quiet_option
def run(grids: tuple[str, ...], case_names: tuple[str, ...], models: tuple[str, ...],
        dim_values: tuple[str, ...], arm_specs: tuple[str, ...], rounds: int | None,
        processes: int | None, sessions: int, aa_twin: str | None, no_aa_twin: bool,
        keep_samples: bool, block_ms: float, slices: int,
        max_block_iters: int, warmup_ms: float, threads: int, seed: int, gate_policy: str,
        gate_threshold: float, gate_max_wait: float, case_timeout: float, allow_fallback: bool,
        instructions: str | None, shard: str | None, target_mde: float | None,
        budget_s: float | None, out: str, overwrite: bool, quiet: bool) -> None:
    """Run cases x arms in interleaved, counterbalanced rounds and write the results.

    \b
    Examples:
      epbench run --grid quick --arm ort --arm plugin:nxrt_ep_cpu
      epbench run --case relu_d100_w8 --arm engine --arm engine:partition=per_node
      epbench run --model model.onnx --dim batch=1 --arm plugin:/path/libmyep.so

    Without --grid, --case or --model the quick grid runs. Writes OUT/results.jsonl
    (a line per case as it ends), OUT/results.json and OUT/report.md, then prints
    the summary table. Rounds are rounded up to whole counterbalanced designs.
    """

    if not grids and not case_names and not models:
        grids = ("quick",)
    specs = select_cases(grids, case_names, models, parse_dims(dim_values))
    if shard is not None:
        specs = shard_of(specs, shard)
    if aa_twin is not None and no_aa_twin:
        raise EpbenchError("--aa-twin ARM and --no-aa-twin contradict each other; pass one")
    arms = tuple(parse_arm(s) for s in arm_specs)
    rounds, processes = sized_for(arms, rounds, processes)
    twin_optional = aa_twin is None and not no_aa_twin
    if twin_optional:
        aa_twin = default_twin(list(arms))
    config = RunConfig(
        cases=tuple(specs), arms=arms, rounds=rounds, processes=processes,
        sessions=sessions, aa_twin=aa_twin, aa_twin_optional=twin_optional,
        keep_samples=keep_samples,
        block_target_ms=block_ms, block_slices=slices, max_block_iters=max_block_iters,
        warmup_ms=warmup_ms, seed=seed, threads=threads, gate_policy=gate_policy,
        gate_threshold=gate_threshold, gate_max_wait_s=gate_max_wait,
        silence_timeout_s=case_timeout, allow_fallback=allow_fallback,
        instructions=instructions, out_dir=Path(out), overwrite=overwrite,
        progress=progress_for(quiet), grids=tuple(grids), shard=shard,
    )
    if target_mde is not None and sum(a.kind != "ort" for a in config.arms) < 2:
        raise EpbenchError("--target-mde compares arms of the run: give two arms besides "
                           "ort, e.g. --arm engine --arm plugin:PATH (the first is the base)")
    started_at = time.monotonic()
    try:
        if target_mde is None:
            results = run_grid(config)
        else:
            aimed = run_to_target(config, target_mde, budget_s=budget_s, started_at=started_at,
                                  on_status=lambda line: click.echo(line, err=True))
            results = aimed.results
            # the re-runs' rounds merged in
            write_results(Path(out) / "results.json", results.to_dict())
            for note in aimed.notes:
                click.echo(f"note: {note}", err=True)
    except KeyboardInterrupt:
        # A --target-mde re-run interrupted before it ran a case leaves the first pass.
        kept = Path(out) / "results.json"
        click.echo(f"interrupted; what was measured is in {kept}"
                   if target_mde is not None and kept.is_file() else
                   "interrupted before any case ran; nothing was written", err=True)
        click.get_current_context().exit(EXIT_INTERRUPTED)
    click.echo(write_run_report(results, Path(out)))
    code, message = exit_code_for(run=results)
    if message:
        click.echo(f"{message} (see {out}/report.md)", err=True)
    click.get_current_context().exit(code)


def shard_of(specs: list[CaseSpec], shard: str) -> list[CaseSpec]:
    """The cases of `--shard K/N`; a slice with none is the user's to fix."""
    index, count = parse_shard(shard)
    specs = shard_cases(specs, index, count)
    if not specs:
        raise EpbenchError(f"--shard {shard} holds no case: the cases make fewer than "
                           f"{count} slices (a chain family is one); use fewer shards")
    return specs


@click.group(cls=Group)
def cases() -> None:
    """List or build the cases of a grid."""


@cases.command("list")
@grid_option
@case_option
@format_option("text", "json")
@out_option(directory=False, help_text="Write the list to this file instead of stdout.")
def cases_list(grids: tuple[str, ...], case_names: tuple[str, ...], fmt: str,
               out: str | None) -> None:
    """List cases: name, kind, nodes, input shapes, tolerance, optimization level."""

    if not grids and not case_names:
        grids = tuple(grid_names())
    rows = describe_cases(select_cases(grids, case_names))
    if fmt == "json":
        emit(json.dumps(rows, indent=1, sort_keys=True) + "\n", out)
        return
    emit(case_table(rows) + "\n", out)


@cases.command("build")
@grid_option
@case_option
@out_option(directory=True, required=True,
            help_text="Directory for NAME.onnx and NAME.inputs.npz.")
def cases_build(grids: tuple[str, ...], case_names: tuple[str, ...], out: str) -> None:
    """Write each case's model and inputs to a directory (for other tools)."""

    if not grids and not case_names:
        raise EpbenchError("nothing to build: pass --grid NAME or --case NAME")
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EpbenchError(f"cannot create {out!r}: {exc.strerror}; choose another --out") from None
    paths = write_cases(select_cases(grids, case_names), Path(out))
    click.echo(f"wrote {len(paths)} files to {out}")


@click.command(cls=Command)
@click.option("--threshold", type=FiniteRange(0, 1, min_open=True),
              default=_RUN["gate_threshold"], show_default=True,
              help="Minimum idle fraction of every core for the gate to pass.")
@format_option("text", "json")
def gate(threshold: float, fmt: str) -> None:
    """Per-core idle and steal right now. Exit 0 if the gate would pass, 3 if not."""

    reading = current_gate_state(threshold)
    if fmt == "json":
        click.echo(json.dumps(reading.to_dict(), indent=1, sort_keys=True))
    else:
        for cpu in sorted(reading.idle, key=lambda c: (len(c), c)):
            click.echo(f"{cpu:>6}  idle {reading.idle[cpu]:6.1%}  "
                       f"steal {reading.steal.get(cpu, 0.0):6.1%}")
        click.echo(format_gate_reading(reading))
    if not reading.passed:
        click.get_current_context().exit(EXIT_GATE)


@click.command(cls=Command)
@format_option("text", "json")
def host(fmt: str) -> None:
    """The host fingerprint that goes into every results file."""

    fp = host_fingerprint()
    fp["key"] = fingerprint_key(fp)
    if fmt == "json":
        click.echo(json.dumps(fp, indent=1, sort_keys=True))
        return
    for key in sorted(fp):
        value = fp[key]
        if isinstance(value, (dict, list)):
            value = json.dumps(value, sort_keys=True)
        click.echo(f"{key:>16}: {value}")


@click.command(cls=Command)
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--force", is_flag=True,
              help="Join shards measured on different machines, configurations or epbench "
                   "versions anyway; what differed is recorded in the merged file.")
@out_option(directory=True, required=True,
            help_text="Output directory: the merged results.json and its report.md.")
@overwrite_option
def merge(results: tuple[str, ...], force: bool, out: str, overwrite: bool) -> None:
    """Join the shards of one grid (run --shard K/N) into one results file.

    \b
    Example:
      epbench merge shard-1/results.json shard-2/results.json shard-3/results.json --out all

    compare, report, history add and export read the merged file like any other.
    """
    shards = [Shard(source=path, results=load_results(path)) for path in results]
    merged = merge_shards(shards, force=force)
    prepare_out_dir(Path(out), overwrite=overwrite)
    write_results(Path(out) / "results.json", merged.to_dict())
    click.echo(write_run_report(merged, Path(out)))
    if "merge_forced" in merged.extra:
        click.echo(f"note: merged with --force: {'; '.join(merged.extra['merge_forced'])}",
                   err=True)


@click.command(cls=Command)
@click.argument("results", type=click.Path())
@format_option("text", "json", "markdown")
@out_option(directory=False, help_text="Write the summary to this file instead of stdout.")
def summary(results: str, fmt: str, out: str | None) -> None:
    """Summarize a results file (results.json, results.jsonl or a run's directory)."""

    doc = load_results(results)
    data = summarize(doc)
    if fmt == "json":
        emit(json.dumps(data.to_dict(), indent=1, sort_keys=True) + "\n", out)
    elif fmt == "markdown":
        emit(render_run_report(doc) + "\n", out)
    else:
        emit(render_summary_table(data) + "\n", out)


@click.command("compare-commits", cls=Command)
@click.argument("base_rev", metavar="BASE")
@click.argument("head_rev", metavar="HEAD")
@click.option("--repo", type=click.Path(file_okay=False), default=".", show_default=True,
              help="The git repository holding both commits.")
@click.option("--build", "build_command", metavar="COMMAND", default=None,
              help="Shell command run in each commit's worktree; its last line on stdout is "
                   "the built library's path [default: the bundled engine's "
                   "`python -m epbench.engine.build --out DIR`].")
@click.option("--build-timeout", "build_timeout", type=FiniteRange(min=0, min_open=True),
              default=BUILD_TIMEOUT_S, show_default=True, metavar="SECONDS",
              help="Stop a commit's build still running after this many seconds, with "
                   "the processes it started (exit 1).")
@grid_option
@case_option
@model_option(note="Read once from your working tree (relative to the current directory, "
                   "not --repo), hashed before anything is built; both sides run that same "
                   "file, and results.json records its path and hash.")
@dim_option
@ep_option_option
@allow_fallback_option
@rounds_option(COMMITS_ROUNDS)
@processes_option(COMMITS_PROCESSES)
@sessions_option(_RUN["sessions"])
@click.option("--aa-twin/--no-aa-twin", "aa_twin", default=True, show_default=True,
              help="Run a twin of the base side (its own copy of the library): the run's own "
                   "A/A noise sets the thresholds when no profile does, and a twin that "
                   "differs from base flags the run as untrustworthy.")
@click.option("--instructions/--no-instructions", "count_instructions", default=True,
              show_default=True,
              help="Count instructions per Run per arm with callgrind where valgrind exists "
                   "(an exact second channel beside time; skipped with a note otherwise).")
@click.option("--instructions-threshold", type=FiniteRange(min=0), show_default=True,
              default=INSTRUCTIONS_THRESHOLD,
              help="A change in instructions per Run at least this large gets its own mark "
                   "(never a 🔴 on its own).")
@click.option("--budget", "budget_s", type=FiniteRange(min=0), default=None,
              help="Seconds to spend re-running inconclusive (❔) cases, and ⚠️ ones the "
                   "idle gate held back from 🔴 with some round quiet, with more rounds "
                   f"[default: until {DEFAULT_TARGET_S_PER_CASE:g} s per case after the "
                   f"command began, builds included, less {REPORT_RESERVE_S:g} s for the "
                   "reports].")
@click.option("--history", "history_db", metavar="DB", default=None,
              help="A history store (SQLite file or postgresql:// URL) to check the base "
                   "commit against (read only, never upgraded): the reports say when it sits in a "
                   f"change point of the cases' series [default: ${DB_ENV} when it can "
                   "be read, else none].")
@click.option("--history-arm", "history_arms", multiple=True, metavar="ARM",
              help="With --history: only this arm's series. Repeatable [default: every arm "
                   "but the control].")
@click.option("--machine-class", metavar="NAME", default=None,
              help="With --history: the series of this machine class (`history add "
                   "--machine-class`) [default: this host's own series].")
@gate_option
@gate_max_wait_option(COMMITS_GATE_MAX_WAIT_S)
@click.option("--shard", metavar="K/N", default=None,
              help="Compare only the K-th of N slices of the cases (as `run --shard`); "
                   "`epbench merge` joins the N results files, `compare` judges the join.")
@out_option(directory=True, default="epbench-out",
            help_text="Output directory: results.json, compare.json, report.md and report.html.")
@overwrite_option
@quiet_option
@github_annotations_option
@verdict_options
def compare_commits(base_rev: str, head_rev: str, repo: str, build_command: str | None,
                    build_timeout: float, grids: tuple[str, ...], case_names: tuple[str, ...],
                    models: tuple[str, ...], dim_values: tuple[str, ...],
                    ep_option_values: tuple[str, ...], allow_fallback: bool, rounds: int,
                    processes: int, sessions: int, aa_twin: bool, count_instructions: bool,
                    instructions_threshold: float, budget_s: float | None,
                    history_db: str | None, history_arms: tuple[str, ...],
                    machine_class: str | None, gate_policy: str, gate_max_wait: float,
                    shard: str | None, out: str, overwrite: bool, quiet: bool,
                    github_annotations: bool | None,
                    profile_path: str | None, floor: float, k: float, alert: float | None,
                    confidence: float, fdr: float, resamples: int, seed: int,
                    fail_on: str, target_mde: float | None) -> None:
    """Compare two commits of an EP in one interleaved run, with ORT as the control.

    \b
    Examples:
      epbench compare-commits HEAD~1 HEAD
      epbench compare-commits main my-branch --grid default --budget 300
      epbench compare-commits v1 v2 --repo ../my-ep \\
          --build 'cargo build --release >&2 && echo target/release/libmy_ep.so'
      epbench compare-commits main HEAD --build ./build.sh \\
          --model models/encoder.onnx --dim batch=1 --ep-option threads=1

    Without --grid, --case or --model the quick grid runs. --ep-option, --allow-fallback
    and the cases apply to both sides (and the base's A/A twin) alike. A --model file
    is read from your working tree, not from either commit: it is hashed before
    anything is built, every pass must run that same file, and results.json records its
    path and definition hash.

    Each commit is checked out in a temporary git worktree (your working tree
    and index are never touched) and built; libraries are cached by commit sha.
    Both run as arms `base` and `head` of one process. Writes OUT/results.json,
    OUT/compare.json (the verdicts, as `compare --format json`), OUT/report.md and
    OUT/report.html (with plots); exits 5 when a verdict matches --fail-on. In GitHub
    Actions, flagged cases also print ::error / ::warning lines.

    With a history (--history DB, or $EPBENCH_DB), the reports also say whether the
    base commit sits inside a change point of the cases' series, or early on the
    level a regression one started: the base itself may carry that change. The
    history is only read, never upgraded. A --history that does not exist or cannot
    be read is an error (exit 1), found before anything is built; one of an older
    schema, and any trouble with $EPBENCH_DB, is a note and no check.
    """
    started_at = time.monotonic()
    history_db, history_note = history_to_check(history_db)
    if history_note:
        click.echo(f"note: {history_note}", err=True)

    if not grids and not case_names and not models:
        grids = ("quick",)
    ep_options = parse_ep_options(ep_option_values)
    cases = select_cases(grids, case_names, models, parse_dims(dim_values))
    if shard is not None:
        cases = shard_of(cases, shard)
    instructions = None
    if count_instructions:
        instructions, why = default_instructions()
        if instructions is None:
            click.echo(f"note: no instruction counts ({why}); pass --no-instructions to "
                       "silence this", err=True)
    config = RunConfig(cases=tuple(cases), arms=(), rounds=rounds,
                       processes=processes, sessions=sessions, instructions=instructions,
                       allow_fallback=allow_fallback,
                       aa_twin=BASE_ARM if aa_twin else None,
                       gate_policy=gate_policy, gate_max_wait_s=gate_max_wait,
                       out_dir=Path(out), overwrite=overwrite,
                       progress=progress_for(quiet), grids=tuple(grids), shard=shard)
    settings = replace(settings_from(floor=floor, k=k, alert=alert, confidence=confidence,
                                     fdr=fdr, resamples=resamples, seed=seed,
                                     target_mde=target_mde),
                       instructions_threshold=instructions_threshold)
    try:
        result = run_comparison(
            repo=repo, base_rev=base_rev, head_rev=head_rev, build=build_command,
            config=config, settings=settings, profile_path=profile_path, budget_s=budget_s,
            on_status=lambda line: click.echo(line, err=True), history_db=history_db,
            history_machine=machine_class, history_arms=history_arms, started_at=started_at,
            ep_options=ep_options, build_timeout_s=build_timeout,
        )
    except KeyboardInterrupt:
        click.echo("interrupted; worktrees were removed", err=True)
        click.get_current_context().exit(EXIT_INTERRUPTED)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(render.render_terminal(result.comparison), nl=False)
    if annotations_wanted(github_annotations):
        emit_annotations(result.comparison)
    click.echo(f"wrote {out}/results.json, {out}/compare.json, {out}/report.md, "
               f"{out}/report.html", err=True)

    code, _ = exit_code_for(comparison=result.comparison, fail_on=fail_on)
    if result.results.interrupted:
        code = EXIT_INTERRUPTED
    click.get_current_context().exit(code)
