"""Thin click commands for the harness: parse, call one library function, map to an exit code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from harness.errors import (
    EXIT_CASE_FAILED,
    EXIT_GATE,
    EXIT_INTERRUPTED,
    EpbenchError,
)
from harness.options import arm_option, case_option, grid_option, out_option, rounds_option

DEFAULT_ROUNDS = 30


def _dims(values: tuple[str, ...]) -> dict[str, int]:
    dims = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.lstrip("-").isdigit() or int(value) < 1:
            raise EpbenchError(f"--dim {item!r}: write NAME=VALUE with a positive integer, "
                               "e.g. --dim batch=1")
        dims[name] = int(value)
    return dims


def select_cases(grids: tuple[str, ...], case_names: tuple[str, ...],
                 models: tuple[str, ...] = (), dims: dict[str, int] | None = None) -> list:
    """The cases named by --grid, --case and --model, in the order given, without repeats."""
    from cases.grids import case_by_name, load_grid
    from cases.usermodel import model_case

    specs = []
    for grid in grids:
        specs.extend(load_grid(grid))
    specs.extend(case_by_name(name) for name in case_names)
    specs.extend(model_case(path, dims or {}) for path in models)
    unique = {}
    for spec in specs:
        unique.setdefault(spec.name, spec)
    return list(unique.values())


@click.command()
@grid_option
@case_option
@click.option("--model", "models", multiple=True, metavar="PATH.onnx",
              help="A user model as case model:<stem>; inputs are synthesized.")
@click.option("--dim", "dim_values", multiple=True, metavar="NAME=VALUE",
              help="Value for a symbolic dimension of a --model input. Repeatable.")
@arm_option
@rounds_option(DEFAULT_ROUNDS)
@click.option("--block-ms", type=click.FloatRange(min=0.1), default=20.0, show_default=True,
              help="Target duration of one arm's block of iterations in a round.")
@click.option("--max-block-iters", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Cap on iterations per block (bounds the size of the raw samples).")
@click.option("--warmup-ms", type=click.FloatRange(min=0), default=100.0, show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="intra_op and inter_op threads, equal for every arm.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the round orders (recorded in the results).")
@click.option("--gate", "gate_policy", type=click.Choice(["wait", "strict", "off"]),
              default="wait", show_default=True,
              help="Idle gate: wait for quiet cores (then mark the round unquiet), "
                   "stop with exit 3 (strict), or skip it.")
@click.option("--gate-threshold", type=click.FloatRange(0, 1), default=0.93, show_default=True,
              help="Minimum idle fraction of every core for a round to count as quiet.")
@click.option("--gate-max-wait", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds `--gate wait` waits for quiet before running a round as unquiet.")
@click.option("--allow-fallback", is_flag=True,
              help="Let a plugin arm share the graph with ORT's CPU EP; the split is recorded.")
@out_option
@click.option("--overwrite", is_flag=True, help="Replace results already in --out.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def run(grids, case_names, models, dim_values, arm_specs, rounds, block_ms, max_block_iters,
        warmup_ms, threads, seed, gate_policy, gate_threshold, gate_max_wait, allow_fallback, out,
        overwrite, quiet) -> None:
    """Run cases x arms in interleaved, counterbalanced rounds and write the results.

    \b
    Examples:
      epbench run --grid quick --arm ort --arm plugin:nxrt_ep_cpu
      epbench run --case relu_d100_w8 --arm engine --arm engine:partition=per_node
      epbench run --model model.onnx --dim batch=1 --arm plugin:/path/libmyep.so

    Writes OUT/results.jsonl (a line per case as it ends), OUT/results.json and
    OUT/report.md, then prints the summary table.
    """
    from harness.arms import parse_arm
    from harness.runner import RunConfig
    from harness.runner import run as run_grid
    from reports.run_report import write_run_report

    if not grids and not case_names and not models:
        grids = ("quick",)
    specs = select_cases(grids, case_names, models, _dims(dim_values))
    arms = tuple(parse_arm(s) for s in arm_specs)
    config = RunConfig(
        cases=tuple(specs), arms=arms, rounds=rounds, block_target_ms=block_ms,
        max_block_iters=max_block_iters, warmup_ms=warmup_ms, seed=seed, threads=threads,
        gate_policy=gate_policy, gate_threshold=gate_threshold, gate_max_wait_s=gate_max_wait,
        allow_fallback=allow_fallback,
        out_dir=Path(out), overwrite=overwrite, progress=not quiet, grids=tuple(grids),
    )
    doc = run_grid(config)
    click.echo(write_run_report(doc, Path(out)))
    ctx = click.get_current_context()
    if doc["interrupted"]:
        click.echo(f"interrupted: results so far are in {out}/", err=True)
        ctx.exit(EXIT_INTERRUPTED)
    bad = [n for n, c in doc["cases"].items() if c["status"] != "ok"]
    if bad:
        click.echo(f"{len(bad)} case(s) did not finish: {', '.join(bad)} (see {out}/report.md)",
                   err=True)
        gated = any(doc["cases"][n].get("error_kind") == "gate" for n in bad)
        ctx.exit(EXIT_GATE if gated else EXIT_CASE_FAILED)


@click.group()
def cases() -> None:
    """List or build the cases of a grid."""


@cases.command("list")
@grid_option
@case_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def cases_list(grids, case_names, fmt) -> None:
    """List cases: name, kind, nodes, input shapes, tolerance, optimization level."""
    from cases.catalog import describe_cases
    from cases.grids import grid_names

    if not grids and not case_names:
        grids = tuple(grid_names())
    rows = describe_cases(select_cases(grids, case_names))
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1, sort_keys=True))
        return
    import pandas as pd

    click.echo(pd.DataFrame(rows).to_string(index=False))


@cases.command("build")
@grid_option
@case_option
@click.option("--out", type=click.Path(file_okay=False), required=True,
              help="Directory for NAME.onnx and NAME.inputs.npz.")
def cases_build(grids, case_names, out) -> None:
    """Write each case's model and inputs to a directory (for other tools)."""
    from cases.catalog import write_cases

    if not grids and not case_names:
        raise EpbenchError("nothing to build: pass --grid NAME or --case NAME")
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EpbenchError(f"cannot create {out!r}: {exc.strerror}; choose another --out") from None
    paths = write_cases(select_cases(grids, case_names), Path(out))
    click.echo(f"wrote {len(paths)} files to {out}")


@click.command()
@click.option("--threshold", type=click.FloatRange(0, 1), default=0.93, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def gate(threshold, fmt) -> None:
    """Per-core idle and steal right now. Exit 0 if the gate would pass, 3 if not."""
    from harness.gate import current_gate_state, format_gate_reading

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


@click.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def host(fmt) -> None:
    """The host fingerprint that goes into every results file."""
    from harness.host import fingerprint_key, host_fingerprint

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


@click.command()
@click.argument("results", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]),
              default="table", show_default=True)
def summary(results, fmt) -> None:
    """Summarize a results file (results.json, results.jsonl or a run's directory)."""
    from harness.results import load_results
    from reports.run_report import render_run_report
    from reports.stats import render_summary_table, summarize

    doc = load_results(results)
    data = summarize(doc)
    if fmt == "json":
        json.dump(data, sys.stdout, indent=1, sort_keys=True)
        click.echo()
    elif fmt == "markdown":
        click.echo(render_run_report(doc))
    else:
        click.echo(render_summary_table(data))
