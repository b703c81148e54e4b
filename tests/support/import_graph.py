"""The project's import graph, as docs/design.md describes it: cycles and hidden imports.

    python -m tests.support.staged python -m tests.support.import_graph    # this checkout
    python -m tests.support.import_graph --root OLD harness reports cases engine

`--root` is a source tree put first on sys.path (e.g. an older commit unpacked with
`git archive`), followed by its top-level packages. Prints every import cycle (a
strongly connected component of the module graph, found with grimp, which reads
every import including those inside functions) and counts the imports of the
project's own modules that sit inside a function. tests/test_layers.py asserts the
same two facts (no cycle, no hidden import) for the current tree.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
from pathlib import Path

import grimp


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The graph's strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def hidden_imports(packages: list[str], root: Path | None = None) -> list[str]:
    """`file:line` of every import of one of ``packages`` made inside a function; the
    packages are read in ``root`` (a staged wheel, a source tree) or where importlib
    finds them."""
    hidden = []
    for package in packages:
        if root is not None:
            folder = root / package
        else:
            spec = importlib.util.find_spec(package)
            assert spec is not None and spec.submodule_search_locations, package
            folder = Path(list(spec.submodule_search_locations)[0])
        for d, _, files in os.walk(folder):
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = Path(d, name)
                tree = ast.parse(path.read_text())
                for fn in ast.walk(tree):
                    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        continue
                    for node in ast.walk(fn):
                        names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                                 and not node.level else
                                 [a.name for a in node.names] if isinstance(node, ast.Import)
                                 else [])
                        relative = isinstance(node, ast.ImportFrom) and node.level > 0
                        if relative or any(n.split(".")[0] in packages for n in names):
                            hidden.append(f"{path.relative_to(folder.parent)}:{node.lineno}")
    return hidden


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="source tree to analyse (default: installed)")
    parser.add_argument("packages", nargs="*", default=["epbench"])
    args = parser.parse_args(argv)
    if args.root:
        sys.path.insert(0, str(args.root.resolve()))
    graph = grimp.build_graph(*args.packages, cache_dir=None)
    found = cycles(graph)
    hidden = hidden_imports(args.packages, args.root.resolve() if args.root else None)
    print(f"{len(graph.modules)} modules, {len(found)} import cycles, "
          f"{len(hidden)} project imports inside functions")
    for component in found:
        print(f"cycle of {len(component)}: {' '.join(component)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
