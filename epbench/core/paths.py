"""Where epbench keeps things between runs (one place for the cache root)."""

from __future__ import annotations

import os
from pathlib import Path

# The variable that names the cache root (a build run apart is given its own through it).
CACHE_DIR_ENV = "EPBENCH_CACHE_DIR"
# The history store's URL when --db is not given; it may hold a database password.
DB_ENV = "EPBENCH_DB"


def cache_dir(*parts: str) -> Path:
    """$EPBENCH_CACHE_DIR, else $XDG_CACHE_HOME/epbench, else ~/.cache/epbench; plus ``parts``."""
    root = os.environ.get(CACHE_DIR_ENV)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "epbench")
    return Path(root, *parts)
