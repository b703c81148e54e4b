"""Thin click commands that prove the harness: `validate` and `overhead`."""

from __future__ import annotations

import click

from epbench.cases.catalog import select_cases
from epbench.cli.base import Command
from epbench.cli.options import (
    FiniteRange,
    Percent,
    case_option,
    format_option,
    gate_option,
    grid_option,
    out_option,
    processes_option,
    quiet_option,
    rounds_option,
    sessions_option,
)
from epbench.core.errors import EXIT_INTERRUPTED, EpbenchError
from epbench.harness.instructions import availability
from epbench.harness.load import LOAD_KINDS, parse_loads
from epbench.harness.overhead import measure_overhead
from epbench.reports.render import format_overhead, to_json
from epbench.workflows import validate as val
from epbench.workflows import validate_plan as vplan
from epbench.workflows import validate_report as vreport
from epbench.workflows import validate_run as vrun
from epbench.workflows.compare_commits import DEFAULT_TARGET_S_PER_CASE, default_instructions


@click.command(cls=Command)
@grid_option
@case_option
@click.option("--budget", type=FiniteRange(min=0, min_open=True),
              default=vplan.Plan.budget_s, show_default=True,
              help="Seconds the whole validation may take; the number of repeats is planned "
                   "from it (every load gets at least one; with --target-mde, on every "
                   "compare-commits command taking its deadline).")
@rounds_option(vplan.Plan.rounds)
@processes_option(vplan.Plan.processes)
@sessions_option(vplan.Plan.sessions)
@click.option("--aa-twin/--no-aa-twin", "aa_twin", default=True, show_default=True,
              help="An A/A twin in every run, as compare-commits has (its noise sets the "
                   "thresholds when no profile does).")
@click.option("--load", "load_text", default="none", show_default=True, metavar="KINDS",
              help=f"Background load validate creates while each run measures: a comma "
                   f"list of {', '.join(LOAD_KINDS)} (bursty: random 50-400 ms busy/sleep "
                   "bursts; sustained: one core kept busy).")
@click.option("--path", "path_text", default=",".join(vplan.PATHS), show_default=True,
              metavar="PATHS",
              help="What to validate, a comma list: same-process (arms of one run), "
                   "separate-runs (two runs and `compare a.json b.json`), compare-commits "
                   "(the whole command per comparison, re-runs included: the slowest).")
@click.option("--levels", "levels_text",
              default=",".join(f"{round(v * 100)}" for v in vplan.LEVELS),
              show_default=True, metavar="PERCENTS",
              help="The injected slowdowns, a comma list of whole percents of a case's time per "
                   "Run. Fewer make a repeat shorter (the compare-commits path runs one command "
                   "per level), e.g. --levels 2,3 to check a 2 % MDE over more repeats.")
@click.option("--target-mde", "target_mde", type=Percent(), default=None,
              help="The detectable change every case should reach (e.g. 1%), given to every "
                   "compare-commits command as `compare-commits --target-mde`: the floor "
                   "becomes half of it, a ✅ whose A/A twin moved more is ❔, and each command "
                   "re-runs the cases short of it with more worker processes until its "
                   f"deadline ({DEFAULT_TARGET_S_PER_CASE:g} s a case). The compare-commits path "
                   "only. Repeats are planned on every command taking its deadline: give "
                   f"--budget of at least repeats x (levels + 1) x {DEFAULT_TARGET_S_PER_CASE:g} "
                   "s x cases per load, e.g. --max-repeats 21 --budget 9000 with --levels 1 on "
                   "the quick grid.")
@click.option("--block-ms", "block_ms", type=FiniteRange(min=0.1),
              default=vplan.Plan.block_target_ms, show_default=True,
              help="Target duration of one arm's block in a round.")
@click.option("--max-repeats", type=click.IntRange(min=1, max=vplan.MAX_REPEATS), default=50,
              show_default=True,
              help="Stop a load after this many repeats even if the budget allows more.")
@click.option("--position-test/--no-position-test", default=True, show_default=True,
              help="Also run A/A in a fixed arm order, to show the bias counterbalancing removes.")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Noise profile to judge with too [default: this host's, as "
                                   "`epbench compare` does]; results without a profile (the "
                                   "CI situation) are always reported.")
@gate_option
@click.option("--seed", type=int, default=0, show_default=True)
@out_option(directory=True, default="epbench-validation",
            help_text="Output directory: validation.md and validation.json.")
@quiet_option
def validate(grids, case_names, budget, rounds, processes, sessions, aa_twin, load_text,
             path_text, levels_text, target_mde, block_ms, max_repeats, position_test, profile_path,
             gate_policy, seed, out, quiet) -> None:
    """Measure this harness on this machine: false-positive rate, power, MDE, bias.

    \b
    The bundled engine runs against itself (A/A), and against copies of itself
    slowed down by each of --levels (1, 2, 3, 5 and 10 %) of a case's time per Run, on three
    paths: arms of one run (same-process), two separate runs compared through
    the double ratio, and compare-commits' whole command, re-runs included;
    under each --load; at compare-commits' default settings; judged
    by `epbench compare`'s rules without a profile (and with one when there is
    one). Also checks that the counter table shows injected ORT calls exactly,
    and the position bias of a fixed arm order.

    \b
    Example:  epbench validate --grid quick --load none,sustained --budget 3600
              epbench validate --path compare-commits --load bursty
              epbench validate --path compare-commits --levels 2,3 --max-repeats 21
              epbench validate --path compare-commits --levels 1 --target-mde 1% \\
                  --max-repeats 21 --budget 9000
    """

    if not grids and not case_names:
        grids = ("quick",)
    paths = vplan.parse_paths(path_text)
    levels = vplan.parse_levels(levels_text)
    commit_instructions, why = None, None
    if vplan.COMMITS in paths:
        # As compare-commits counts by default: its first pass includes the count.
        commit_instructions, why = default_instructions()
    plan = vplan.Plan(cases=tuple(select_cases(grids, case_names)), budget_s=budget, rounds=rounds,
                      processes=processes, sessions=sessions, aa_twin=aa_twin,
                      loads=parse_loads(load_text), block_target_ms=block_ms,
                      max_repeats=max_repeats, seed=seed, position_test=position_test,
                      gate_policy=gate_policy, grids=tuple(grids), paths=paths,
                      commit_instructions=commit_instructions, levels=levels,
                      target_mde=target_mde)
    if why is not None and commit_instructions is None:
        # After the plan's checks, so a refused plan is one error line.
        click.echo(f"note: the compare-commits path counts no instructions ({why}), as "
                   "compare-commits would not here", err=True)

    def status(text: str) -> None:
        if not quiet:
            click.echo(text, err=True)

    # Every run is kept as it ends: a Ctrl-C, even while the repeats are compared, loses
    # no measurement (each file is a results document `epbench compare` reads).
    runs_dir = vrun.prepare_runs_dir(out)
    try:
        result = val.validate(plan, profile_path=profile_path, on_status=status,
                              runs_dir=runs_dir)
    except KeyboardInterrupt:
        click.echo(f"interrupted; every run measured so far is in {runs_dir}", err=True)
        click.get_current_context().exit(EXIT_INTERRUPTED)
    json_path, md_path = vreport.write_outputs(result, out)
    beyond = f"> {round(max(levels) * 100)} %"  # as validation.md says it
    for r in result["results"]:
        fp = r["false_positive_rate"]
        mde = r["median_mde"]
        click.echo(f"{r['path']}, {r['load']} load, {r['profile']} profile: "
                   f"{fp['hits']}/{fp['n']} A/A flagged (upper 95 % "
                   f"{_share(fp['ci'][1])}), median MDE "
                   f"{beyond if mde is None else f'{round(mde * 100)} % (nominal)'} "
                   f"over {r['repeats']} repeat(s)")
    bias = result.get("position_bias")
    if bias:
        click.echo(f"position bias: fixed order {bias['median_abs_fixed_order']:.2%}, "
                   f"counterbalanced {bias['median_abs_counterbalanced']:.2%} (median |A/A|)")
    if result["counters"]["n"]:
        click.echo(f"counters exact: {result['counters']['exact']}/{result['counters']['n']}")
    click.echo(f"wrote {md_path} and {json_path}")
    if result.get("interrupted"):
        # The report is of the repeats finished before the Ctrl-C: not a complete run.
        click.get_current_context().exit(EXIT_INTERRUPTED)
    stopped = result.get("stopped")
    if stopped:
        # The report is of the repeats finished before the error, which still fails the run.
        error = EpbenchError(stopped["message"])
        error.exit_code = stopped["exit_code"]
        raise error


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


@click.command(cls=Command)
@click.option("--samples", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Timed calls per measurement (medians are reported).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True)
@format_option("text", "json")
def overhead(samples, threads, fmt) -> None:
    """Print the harness's own cost per timed call (recorded in every results file too).

    \b
    The timer (two clock reads, and a timed call that does nothing), and
    run_with_iobinding on a one-node graph on ORT's CPU EP; plus whether
    instruction counts are available here (perf_event_open, valgrind).
    """

    result = measure_overhead(samples=samples, threads=threads)
    result["instructions"] = availability()
    if fmt == "json":
        click.echo(to_json(result), nl=False)
        return
    text = format_overhead(result)
    for method, info in result["instructions"].items():
        text += f"instructions via {method:<8} {'yes' if info['available'] else 'no'}: " \
                f"{info['detail']}\n"
    click.echo(text, nl=False)
