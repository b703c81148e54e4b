"""Where the built engine library is: the one fact `engine`, `engine.probe` and arms share."""

from __future__ import annotations

from pathlib import Path

from epbench.core.errors import ArmError

LIBRARY_NAME = "libepbench_engine.so"


def library_path() -> str:
    """Absolute path of the built engine library inside this package.

    Raises ArmError (with the command that builds it) when the library is absent.
    """
    path = Path(__file__).resolve().parent / LIBRARY_NAME
    if not path.is_file():
        raise ArmError(f"the engine is not built ({path} is missing): run `make engine`")
    return str(path)
