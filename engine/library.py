"""Where the engine library is, built on first use: the one fact `engine`, its probe and
arms share.

A checkout has it in place (`make engine`); a wheel install carries only the C sources,
and the first `engine` arm compiles them into the cache, keyed by their hash.
"""

from __future__ import annotations

from pathlib import Path

from epbench.core.errors import ArmError
from epbench.core.paths import cache_dir
from epbench.engine import build as engine_build

LIBRARY_NAME = "libepbench_engine.so"


def in_place_path() -> Path:
    """Where `make engine` puts the library: beside this module, in a checkout."""
    return Path(__file__).resolve().parent / LIBRARY_NAME


def library_path() -> str:
    """Absolute path of the engine library: the in-place build, else the cached one.

    Builds into the cache when neither exists. Raises ArmError, in one line saying what
    is missing and how to get it, when that build cannot be done (no compiler, no ORT
    headers) or fails.
    """
    in_place = in_place_path()
    if in_place.is_file():
        return str(in_place)
    folder = cache_dir("engine", engine_build.source_hash())
    cached = folder / LIBRARY_NAME
    if cached.is_file():
        return str(cached)
    try:
        return str(engine_build.build(folder))
    except engine_build.EngineBuildError as exc:
        lines = str(exc).splitlines()
        more = (f" (`python -m epbench.engine.build --out {folder}` shows the whole output)"
                if len(lines) > 1 else "")
        raise ArmError(f"the bundled engine must be compiled once, into {folder}, and "
                       f"cannot be: {lines[0]}{more}") from None
