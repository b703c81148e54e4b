"""`epbench conformance`: the thin command over epbench.workflows.conformance."""

from __future__ import annotations

import json

import click

from epbench.cli.base import Command, emit
from epbench.cli.options import FiniteRange, format_option, out_option
from epbench.harness.conformance import DEFAULT_CASE_TIMEOUT_S, render_markdown, render_text
from epbench.harness.worker_process import STARTUP_TIMEOUT_S
from epbench.workflows.conformance import run_conformance


@click.command(cls=Command)
@click.option("--arm", "arm_spec", required=True, metavar="SPEC",
              help="The arm whose EP is checked: engine[:K=V,...], engine@LIB, "
                   "plugin:PATH_OR_MODULE[:K=V,...] or ort.")
@click.option("--op", "ops", multiple=True, metavar="OP",
              help="Only the cases testing this ONNX op (e.g. MatMul). Repeatable; "
                   "default: every op.")
@format_option("text", "json", "markdown")
@out_option(directory=False, help_text="Write the result to this file instead of stdout.")
@click.option("--case-timeout", type=FiniteRange(min=0, min_open=True),
              default=DEFAULT_CASE_TIMEOUT_S, show_default=True,
              help="Seconds one case may take before its worker is taken for hung "
                   "(the case is reported crashed); a worker's start-up (Python and "
                   f"ORT's import, the EP's registration) gets at least {STARTUP_TIMEOUT_S:g} s.")
def conformance(arm_spec: str, ops: tuple[str, ...], fmt: str, out: str | None,
                case_timeout: float) -> None:
    """Run ONNX's own node test cases through ORT with the arm's EP.

    \b
    Examples:
      epbench conformance --arm engine --op Add --op MatMul
      epbench conformance --arm plugin:nxrt_ep_cpu --format markdown

    Every case runs in a worker process with ORT's CPU EP allowed to take the nodes
    the EP declines. Per op and per data set: passed (on the EP), failed (largest
    error, or ORT's or the EP's message), not claimed (ORT ran it), crashed (the
    worker died or hung; only that case is lost), skipped (ORT cannot run or pass it
    even without the EP). Exits 4 when any case failed or crashed.
    """
    result = run_conformance(arm_spec, tuple(ops), case_timeout_s=case_timeout)
    if fmt == "json":
        emit(json.dumps(result.to_dict(), indent=1, sort_keys=True, default=str) + "\n", out)
    elif fmt == "markdown":
        emit(render_markdown(result), out)
    else:
        emit(render_text(result), out)
    raise SystemExit(result.exit_code)
