"""import-linter's layers contract, checked on epbench laid out as it is installed.

Plain `lint-imports` in the checkout builds grimp's graph from `epbench/` alone: grimp
walks only the package's own folder, and the four parts are mapped into it by
pyproject.toml's package-dir (docs/design.md, "No links"). This contract type lays the
checkout's folders out as the package (a copy in a temporary folder, not the wheel:
seconds, not a build) and checks the configured layers on that graph instead.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import grimp
from importlinter.contracts.layers import LayersContract

from tests.support.staged import FOLDERS, import_graph


def package_tree(dest: Path) -> Path:
    """Every folder of FOLDERS copied to where the package has it (`epbench.harness` to
    ``dest``/epbench/harness); ``dest`` is returned, to be put first on sys.path."""
    for name, folder in sorted(FOLDERS.items()):  # `epbench` first, then its parts
        shutil.copytree(folder, dest / name.replace(".", "/"), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "_build"))
    return dest


class MappedLayersContract(LayersContract):
    """The layers contract, on the graph of the package as installed (not as the checkout's
    `epbench/` folder alone shows it)."""

    def check(self, graph: grimp.ImportGraph, verbose: bool):  # noqa: ANN201 (importlinter's)
        with tempfile.TemporaryDirectory(prefix="epbench-layers-") as tmp:
            mapped = import_graph(package_tree(Path(tmp)))
        return super().check(mapped, verbose)
