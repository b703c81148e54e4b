"""Where epbench keeps things between runs (one place for the cache root)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """$EPBENCH_CACHE_DIR, else $XDG_CACHE_HOME/epbench, else ~/.cache/epbench; plus ``parts``."""
    root = os.environ.get("EPBENCH_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "epbench")
    return Path(root, *parts)
