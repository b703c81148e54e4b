"""Thin click commands that prove the harness: `validate` and `overhead`."""

from __future__ import annotations

import click

from epbench.cases.catalog import select_cases
from epbench.cli.base import Command
from epbench.cli.options import case_option, grid_option, rounds_option
from epbench.harness.instructions import availability
from epbench.harness.overhead import measure_overhead
from epbench.reports.render import format_overhead, to_json
from epbench.workflows import validate as val


@click.command(cls=Command)
@grid_option
@case_option
@click.option("--budget", type=click.FloatRange(min=0, min_open=True), default=600.0,
              show_default=True, help="Seconds the whole validation may take; the number of "
                                      "repeats is planned from it.")
@rounds_option(20)
@click.option("--block-ms", "block_ms", type=click.FloatRange(min=0.1), default=10.0,
              show_default=True, help="Target duration of one arm's block in a round.")
@click.option("--max-repeats", type=click.IntRange(min=1), default=50, show_default=True,
              help="Stop after this many repeats even if the budget allows more.")
@click.option("--position-test/--no-position-test", default=True, show_default=True,
              help="Also run A/A in a fixed arm order, to show the bias counterbalancing removes.")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Noise profile to judge with [default: this host's, as "
                                   "`epbench compare` does].")
@click.option("--gate", "gate_policy", type=click.Choice(["wait", "strict", "off"]),
              default="wait", show_default=True, help="Idle-gate policy of the runs.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default="epbench-validation",
              show_default=True, help="Output directory: validation.md and validation.json.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def validate(grids, case_names, budget, rounds, block_ms, max_repeats, position_test,
             profile_path, gate_policy, seed, out, quiet) -> None:
    """Measure this harness on this machine: false-positive rate, power, MDE, bias.

    \b
    The bundled engine runs against itself (A/A), and against copies of itself
    slowed down by 1, 2, 3, 5 and 10 % of each case's time per Run; every pair is
    judged by `epbench compare`'s rules. Also checks that the counter table shows
    injected ORT calls exactly, and the position bias of a fixed arm order.

    \b
    Example:  epbench validate --grid quick --budget 600
    """

    if not grids and not case_names:
        grids = ("quick",)
    plan = val.Plan(cases=tuple(select_cases(grids, case_names)), budget_s=budget, rounds=rounds,
                    block_target_ms=block_ms, max_repeats=max_repeats, seed=seed,
                    position_test=position_test, gate_policy=gate_policy, grids=tuple(grids))

    def status(text: str) -> None:
        if not quiet:
            click.echo(text, err=True)

    result = val.validate(plan, profile_path=profile_path, on_status=status)
    json_path, md_path = val.write_outputs(result, out)
    s = result["summary"]
    fp = s["false_positive_rate"]
    click.echo(f"false-positive rate: {fp['hits']}/{fp['n']} A/A comparisons flagged")
    for name, mde in s["mde"].items():
        click.echo(f"MDE {name}: {'> 10 %' if mde is None else f'{mde:.0%}'}")
    bias = s.get("position_bias")
    if bias:
        click.echo(f"position bias: fixed order {bias['median_abs_fixed_order']:.2%}, "
                   f"counterbalanced {bias['median_abs_counterbalanced']:.2%} (median |A/A|)")
    click.echo(f"counters exact: {s['counters']['exact']}/{s['counters']['n']}")
    click.echo(f"wrote {md_path} and {json_path}")


@click.command(cls=Command)
@click.option("--samples", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Timed calls per measurement (medians are reported).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
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
