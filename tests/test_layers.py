"""The house's floors: commands on top, one-way imports, nothing hidden in functions."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from epbench.cli.main import COMMANDS, cli
from tests.support.staged import FOLDERS, checkout_modules

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "epbench"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _contract() -> dict:
    (contract,) = PYPROJECT["tool"]["importlinter"]["contracts"]
    return contract


def _layer_members() -> list[list[str]]:
    return [[m.strip() for m in layer.split("|")] for layer in _contract()["layers"]]


def _folders_in_the_checkout() -> set[str]:
    """Every folder of the package, by dotted name: packages and data folders alike."""
    return {".".join([name, *path.relative_to(folder).parts])
            for name, folder in FOLDERS.items()
            for path in [folder, *folder.rglob("*")]
            if path.is_dir()
            and not {"__pycache__", "_build"} & set(path.relative_to(folder).parts)}


def test_the_parts_are_real_folders_and_mapped_not_linked():
    # docs/design.md, "No links": no link anywhere in the package's folders.
    assert set(FOLDERS) == {"epbench", "epbench.cases", "epbench.engine", "epbench.harness",
                            "epbench.reports"}
    links = [str(p) for folder in FOLDERS.values() for p in [folder, *folder.rglob("*")]
             if p.is_symlink()]
    assert links == []


def test_every_package_in_the_checkout_is_listed_for_the_wheel():
    # A folder missing from the list is left out of the wheel (and of grimp's graph), though
    # an editable install still imports it; data folders ship as namespace packages.
    listed = PYPROJECT["tool"]["setuptools"]["packages"]
    assert sorted(listed) == sorted(_folders_in_the_checkout())


def test_every_part_of_the_package_sits_in_a_layer():
    # A new subpackage outside the contract would escape it.
    parts = {m for m, path in checkout_modules().items()
             if path.name == "__init__.py" and m.count(".") == 1}
    assert parts == {m for layer in _layer_members() for m in layer}


def test_grimp_reads_every_module_of_the_checkout(package_graph):
    # The graph comes from the staged wheel; a module that did not reach it is unchecked.
    modules = set(checkout_modules())
    assert len(modules) > 90
    assert set(package_graph.modules) == modules


def test_the_import_graph_has_no_cycle_and_no_upward_import(package_graph):
    graph = package_graph
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


def test_the_wings_of_reports_are_imported_by_nothing_else_in_reports(package_graph):
    # docs/design.md: the bot and the history read the reports; the rest of reports (render,
    # html, ...) knows neither, and neither wing knows the other.
    graph = package_graph
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
    paths = list(checkout_modules().values())
    assert len(paths) > 90
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


TYPED_PACKAGES = ("reports", "epbench/workflows")


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return [a.annotation for a in every if a is not None and a.annotation is not None] + (
        [node.returns] if node.returns is not None else [])


def _public_functions(tree: ast.Module):
    """(qualified name, node) of every public function and public class's public method."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not node.name.startswith("_"):
                yield node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and not item.name.startswith("_")):
                    yield f"{node.name}.{item.name}", item


def _names_any(annotation: ast.expr) -> bool:
    # `from __future__ import annotations` keeps them as written; a string one is parsed.
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    return any((isinstance(n, ast.Name) and n.id == "Any")
               or (isinstance(n, ast.Attribute) and n.attr == "Any")
               for n in ast.walk(annotation))


def public_signatures_with_any(root: Path = ROOT) -> set[str]:
    found = set()
    for package in TYPED_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for name, node in _public_functions(tree):
                if any(_names_any(a) for a in _annotations(node)):
                    found.add(f"{rel}:{name}")
    return found


def test_no_public_function_of_the_reports_or_workflows_takes_or_gives_any():
    # Issue 47: what crosses a module boundary there is typed (the comparison is a
    # reports.comparison.Comparison, not a dict[str, Any]; JSON at an edge is JsonValue).
    assert sorted(public_signatures_with_any()) == [], "type these: dataclasses, or JsonValue"


# Issue 47: one job per file; a module past this has grown a second job.
MAX_MODULE_LINES = 600


def test_no_module_of_the_package_exceeds_the_line_cap():
    long = {str(path.relative_to(ROOT)): n for path in checkout_modules().values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"split these by job: {long}"


def test_plain_lint_imports_checks_the_mapped_parts_too(tmp_path) -> None:
    """`lint-imports` from the root, as a user or CI runs it, lays the package out with its
    mapped parts (tests/support/layers_contract.py), so a part's module is in its graph."""
    from tests.support.layers_contract import package_tree

    tree = package_tree(tmp_path)
    assert (tree / "epbench" / "harness" / "runner.py").is_file()
    assert (tree / "epbench" / "reports" / "bot" / "github.py").is_file()
    assert not any(tree.rglob("__pycache__"))
    done = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--verbose"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 1 kept, 0 broken." in done.stdout
