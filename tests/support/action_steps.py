"""Run a workflow's or action's `run:` steps as a GitHub runner would, for the tests.

A step's script is run by bash, as written; its `env:` values have their `${{ ... }}`
expressions looked up in a dictionary the test gives (an unknown one fails the test), and
a script holding an expression itself is refused: event data and inputs reach scripts
only through `env:`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")


def load(path: Path) -> dict[str, Any]:
    # ruamel.yaml reads YAML 1.2, where `on:` stays the string "on".
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))


def resolve(text: Any, context: dict[str, str]) -> str:
    """A step's `env:`/`with:` value with its expressions looked up in ``context``."""

    def lookup(match: re.Match[str]) -> str:
        assert match.group(1) in context, f"the test has no value for {match.group(0)}"
        return context[match.group(1)]

    return EXPRESSION.sub(lookup, str(text))


def run_step(step: dict[str, Any], context: dict[str, str], env: dict[str, str],
             cwd: Path) -> subprocess.CompletedProcess[str]:
    """One `run:` step: bash, in ``cwd``, with ``env`` and the step's own env resolved."""
    assert "${{" not in step["run"], "an expression in a script: pass it through env:"
    step_env = {k: resolve(v, context) for k, v in (step.get("env") or {}).items()}
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=cwd, env={**env, **step_env},
                          capture_output=True, text=True)


def epbench_bin(folder: Path) -> Path:
    """An `epbench` executable in ``folder`` running this interpreter's epbench: what an
    install step provides (the caller's PYTHONPATH picks the checkout)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "epbench"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m epbench.cli.main "$@"\n')
    path.chmod(0o755)
    return path
