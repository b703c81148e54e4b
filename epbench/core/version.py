"""The version of the epbench that is running: what a results file records it was made by."""

from __future__ import annotations

from importlib import metadata


def epbench_version() -> str | None:
    """The installed distribution's version, or None from a bare source tree."""
    try:
        return metadata.version("epbench")
    except metadata.PackageNotFoundError:
        return None
