"""epbench as its wheel installs it, unpacked into a folder: the tree grimp reads.

grimp (and so import-linter and tests/test_layers.py) walks only the folder of the
package it is given; in a checkout that is `epbench/`, without the four parts that
pyproject.toml maps into it from their top-level folders (docs/design.md, "No links").
So they read the package as a wheel lays it out: built from a copy of the source
(no build/ or *.egg-info left in the checkout, no stale build/lib), without build
isolation (offline: setuptools comes from the test extras), and unpacked.

    python -m tests.support.staged .venv/bin/lint-imports    # a command, the staged package first
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import grimp
import tomllib

ROOT = Path(__file__).resolve().parents[2]
# Where each package's folder is in the checkout: `epbench/`, and the parts that
# pyproject.toml maps into it from their top-level folders.
FOLDERS = {"epbench": ROOT / "epbench", **{
    name: ROOT / folder for name, folder in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()}}
# What the wheel is built from: the packaging file and every folder it maps.
SOURCE = ("pyproject.toml", "README.md", "epbench", "cases", "engine", "harness", "reports")


def checkout_modules() -> dict[str, Path]:
    """Every module under the package's folders in the checkout: dotted name -> file (a
    package by its `__init__.py`). Not the engine's build folder (`engine/_build`)."""
    found = {}
    for name, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if "_build" in parts:
                continue
            found[".".join([name, *parts]).removesuffix(".__init__")] = path
    return found


def copy_source(dest: Path) -> Path:
    """The checkout's package source, copied to ``dest`` without caches or built engines."""
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "_build")
    for name in SOURCE:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, dest / name, ignore=ignore)
        else:
            shutil.copy2(path, dest / name)
    return dest


def build_wheel(dest: Path) -> Path:
    """The checkout's wheel, built into ``dest`` (created); its path."""
    with tempfile.TemporaryDirectory() as tmp:
        source = copy_source(Path(tmp) / "source")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--no-build-isolation", "--wheel-dir", str(dest), str(source)],
                       check=True, cwd=tmp)
    (wheel,) = dest.glob("epbench-*.whl")
    return wheel


def stage(dest: Path) -> Path:
    """The wheel's files unpacked into ``dest`` (created), as `pip install --target` lays
    them out; ``dest`` is returned, to be put first on sys.path."""
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(build_wheel(Path(tmp))) as wheel:
        wheel.extractall(dest)
    return dest


def staged_env(site: Path) -> dict[str, str]:
    """The environment that imports `epbench` from ``site``, and `tests` from the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return env


# Run in a process of its own: in the test's process `epbench` is already imported from
# the checkout, and grimp asks importlib where the package is.
GRAPH = """
import grimp, importlib.util, json
graph = grimp.build_graph("epbench", cache_dir=None)
print(json.dumps({"origin": importlib.util.find_spec("epbench").origin,
                  "imports": {m: sorted(graph.find_modules_directly_imported_by(m))
                              for m in sorted(graph.modules)}}))
"""


def import_graph(site: Path) -> grimp.ImportGraph:
    """grimp's graph of the `epbench` staged in ``site``, every module and import."""
    done = subprocess.run([sys.executable, "-c", GRAPH], cwd=site, env=staged_env(site),
                          capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    if not Path(found["origin"]).is_relative_to(site):
        raise AssertionError(f"grimp read epbench from {found['origin']}, not from {site}")
    graph = grimp.ImportGraph()
    for importer, imported in found["imports"].items():
        graph.add_module(importer)
        for module in imported:
            graph.add_import(importer=importer, imported=module)
    return graph


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.support.staged COMMAND [ARG ...]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="epbench-staged-") as tmp:
        site = stage(Path(tmp) / "site")
        # Run beside the staged folder, with the checkout's pyproject.toml (lint-imports
        # reads its contract there): the checkout's `epbench/` is then not on sys.path
        # ahead of the staged one (lint-imports puts the working folder first).
        shutil.copy2(ROOT / "pyproject.toml", Path(tmp) / "pyproject.toml")
        # A command given by path still names it from here (not resolved: a venv's python
        # is a link, and it is the venv only by its own path).
        command = [os.path.abspath(argv[0]) if os.sep in argv[0] else argv[0], *argv[1:]]
        return subprocess.run(command, cwd=tmp, env=staged_env(site)).returncode

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
