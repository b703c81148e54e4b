"""The house's floors: commands on top, one-way imports, nothing hidden in functions."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
import tomllib

from epbench.cli.main import COMMANDS, cli

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "epbench"


def _contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    return contract


def _layer_members() -> list[list[str]]:
    return [[m.strip() for m in layer.split("|")] for layer in _contract()["layers"]]


def test_every_part_of_the_package_sits_in_a_layer():
    # A new subpackage outside the contract would escape it.
    parts = {f"epbench.{p.name}" for p in PACKAGE.iterdir()
             if (p / "__init__.py").exists()}
    assert parts == {m for layer in _layer_members() for m in layer}


def test_the_import_graph_has_no_cycle_and_no_upward_import():
    graph = grimp.build_graph("epbench")
    rank = {m: i for i, layer in enumerate(_layer_members()) for m in layer}

    def layer_of(module: str) -> str | None:
        return next((m for m in rank if module == m or module.startswith(m + ".")), None)

    upward = []
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            a, b = layer_of(importer), layer_of(imported)
            # Up a layer, or sideways between siblings of one layer.
            if a and b and a != b and rank[b] <= rank[a]:
                upward.append((importer, imported))
    assert upward == []
    # No module reaches itself: grimp finds a chain back only inside a cycle.
    cyclic = [m for m in graph.modules
              if any(graph.find_shortest_chain(importer=d, imported=m)
                     for d in graph.find_modules_directly_imported_by(m))]
    assert cyclic == []


WINGS = ("epbench.reports.bot", "epbench.reports.history")


def _wing_of(module: str) -> str | None:
    return next((w for w in WINGS if module == w or module.startswith(w + ".")), None)


def test_the_wings_of_reports_are_imported_by_nothing_else_in_reports():
    # docs/design.md: the bot and the history read the reports; the rest of reports (render,
    # html, ...) knows neither, and neither wing knows the other.
    graph = grimp.build_graph("epbench")
    assert {m for m in graph.modules if _wing_of(m)} >= {"epbench.reports.bot.github",
                                                         "epbench.reports.history.store"}
    into_wing = []
    for importer in graph.modules:
        if not importer.startswith("epbench.reports."):
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            wing = _wing_of(imported)
            if wing and _wing_of(importer) != wing:
                into_wing.append((importer, imported))
    assert into_wing == []


def _imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom) and not node.level:
        return [node.module or ""]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def test_no_function_hides_an_import_of_the_project():
    hidden = []
    # The parts are links: walk through them (Path.rglob would not, before 3.13).
    paths = [Path(d, f) for d, _, files in os.walk(PACKAGE, followlinks=True)
             for f in files if f.endswith(".py")]
    assert len(paths) > 50
    for path in sorted(paths):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if any(name.startswith("epbench") for name in _imported_names(node)):
                    hidden.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert hidden == []


def test_listing_the_commands_imports_none_of_them():
    code = ("import sys; from epbench.cli.main import main; sys.argv = ['epbench', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('epbench.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.splitlines()[-1]
    loaded = set(ast.literal_eval(out))
    assert loaded == {"epbench.cli", "epbench.cli.main", "epbench.cli.base", "epbench.core",
                      "epbench.core.errors"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_summary_is_the_commands_own_first_sentence(name):
    module_name, attr = COMMANDS[name][0].split(":")
    command = getattr(importlib.import_module(module_name), attr)
    paragraph = command.help.split("\n\n")[0].replace("\n", " ").strip()
    first = paragraph.split(". ")[0].rstrip(".") + "."
    assert COMMANDS[name][1] == first
    assert cli.get_command(None, name) is command


def test_nothing_imports_the_parts_by_their_folder_names():
    # From a checkout `import harness` would work, and load a second copy of every module.
    folders = ("cases", "engine", "harness", "reports")
    bare = []
    for path in sorted([*ROOT.glob("tests/**/*.py"), *ROOT.glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if any(n.split(".")[0] in folders for n in _imported_names(node)):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert bare == []
