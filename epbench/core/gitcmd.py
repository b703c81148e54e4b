"""How epbench runs git: with no user or system config and no hooks or fsmonitor.

A build of a pull request can write the user's ~/.gitconfig (on a runner that does not
run it as another user); git then runs what `core.fsmonitor` or a hook names as the
harness. Every git command epbench runs goes through these two facts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# Config that runs programs, switched off on the command line (it outranks every file).
_SAFE_CONFIG = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")


def git_argv(repo: str | Path, *args: str) -> list[str]:
    """`git -C REPO ARGS...` with no program-running config."""
    return ["git", *_SAFE_CONFIG, "-C", str(repo), *args]


def git_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for git: no global or system config file is read."""
    env = dict(os.environ if environ is None else environ)
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return env
