"""Case names and the grid files that list them.

A synthetic case is named only by the grammar `_parse` reads (`CaseSpec.name` produces
it); a grid is a TOML file `cases/grids/NAME.toml` read by `load_grid`.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from epbench.cases.spec import CaseSpec, binary_case, chain_case, matmul_case
from epbench.core.errors import CaseError

GRIDS_DIR = Path(__file__).resolve().parent / "grids"

_UNARY = {"identity": "Identity", "relu": "Relu", "sigmoid": "Sigmoid"}
_BINARY = {"add": "Add", "mul": "Mul"}
# The name grammar:
#     {op}_d{depth}_w{width}[_dyn[_b{batch}]]   op: identity relu sigmoid add mul
#     matmul_{k}x{n}[_dyn]                      [1, k] x [k, n]
#     matmul_{m}x{k}x{n}[_dyn]                  [m, k] x [k, n], m > 1
# `_dyn` makes the leading dimension the symbolic `batch` (fed with `batch` rows, default
# 1; a dynamic matmul feeds m rows). Numbers have no leading zeros: a non-canonical
# spelling is refused with the canonical one suggested.
_NUM = r"([0-9]+)"
_CHAIN_RE = re.compile(rf"([a-z]+)_d{_NUM}_w{_NUM}(_dyn(?:_b{_NUM})?)?")
_MATMUL_RE = re.compile(rf"matmul_{_NUM}x{_NUM}(?:x{_NUM})?(_dyn)?")

# Names suggested when nothing close matches (and the pool difflib searches).
_EXAMPLE_NAMES = (
    "identity_d10_w4096", "relu_d100_w8", "relu_d10_w4096_dyn", "sigmoid_d10_w4096",
    "add_d10_w8", "mul_d10_w8", "matmul_128x128", "matmul_512x512_dyn", "matmul_8x128x128",
)


def grid_names() -> list[str]:
    """Names of the grids shipped in cases/grids, sorted."""
    return sorted(path.stem for path in GRIDS_DIR.glob("*.toml"))


def _nearest(word: str, candidates: list[str] | tuple[str, ...]) -> list[str]:
    return difflib.get_close_matches(word, candidates, n=3, cutoff=0.5)


def _suggestion(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    close = _nearest(word, candidates)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    return "known examples: " + ", ".join(candidates[:6])


def _known_case_names() -> list[str]:
    """Every name in every grid, plus the examples: the pool for suggestions."""
    names = list(_EXAMPLE_NAMES)
    for grid in grid_names():
        try:
            names.extend(_read_grid_entries(grid, ()))
        except CaseError:
            continue  # a broken grid must not hide the real error being reported
    return list(dict.fromkeys(names))


def _parse(name: str) -> CaseSpec | str:
    """The spec a name denotes (possibly spelled non-canonically), or why it denotes none."""
    try:
        match = _CHAIN_RE.fullmatch(name)
        if match:
            op_word, depth, width, dyn, batch = match.groups()
            dynamic = dyn is not None
            rows = 1 if batch is None else int(batch)
            if op_word in _UNARY:
                return chain_case(_UNARY[op_word], int(depth), int(width), dynamic, batch=rows)
            if op_word in _BINARY:
                return binary_case(_BINARY[op_word], int(depth), int(width), dynamic, batch=rows)
            return f"unknown op {op_word!r} (known: {', '.join([*_UNARY, *_BINARY])})"
        match = _MATMUL_RE.fullmatch(name)
        if match:
            first, second, third, dyn = match.groups()
            sizes = [int(first), int(second)] + ([] if third is None else [int(third)])
            m, k, n = [1, *sizes] if third is None else sizes
            return matmul_case(m, k, n, dyn is not None)
    except ValueError as exc:  # the grammar matched but CaseSpec refused a size
        raise CaseError(
            f"invalid case {name!r}: {str(exc).split(': ', 1)[-1]}: choose other sizes"
        ) from None
    return "it matches neither {op}_d{depth}_w{width}[_dyn] nor matmul_{k}x{n}[_dyn]"


def case_by_name(name: str) -> CaseSpec:
    """The case a canonical name denotes; CaseError (suggesting the nearest) otherwise."""
    if name.startswith("model:"):
        raise CaseError(
            f"{name!r} is a user model, not a named case: pass it as --model PATH.onnx"
        )
    parsed = _parse(name)
    if isinstance(parsed, CaseSpec):
        if parsed.name != name:
            # One name per case, so results of two runs always line up by name.
            raise CaseError(f"case {name!r} is spelled {parsed.name!r}: use that name")
        return parsed
    raise CaseError(
        f"unknown case {name!r}: {parsed}; {_suggestion(name, _known_case_names())}"
    )


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"grid file {path} is not valid TOML ({exc}): fix the file") from None


def _grid_path(name: str) -> Path:
    names = grid_names()
    if name not in names:
        raise CaseError(f"unknown grid {name!r}: {_suggestion(name, names)} "
                        f"(grids: {', '.join(names)})")
    return GRIDS_DIR / f"{name}.toml"


def _read_grid_entries(name: str, including: tuple[str, ...]) -> list[str]:
    """The case names of grid `name`, includes expanded, duplicates dropped."""
    # A grid file holds one table:
    #     [grid]
    #     description = "one line saying what the grid is for"
    #     include = ["default"]        # optional: other grids' cases first, in order
    #     cases = ["relu_d1_w8", ...]  # case names
    # A case listed twice (also across includes) is kept once, at its first position.
    if name in including:
        chain = " -> ".join([*including, name])
        raise CaseError(f"grid include cycle {chain}: remove one of the includes")
    path = _grid_path(name)
    document = _load_toml(path)
    where = f"grid file {path}"
    if set(document) != {"grid"} or not isinstance(document["grid"], dict):
        raise CaseError(f"{where} must hold exactly one [grid] table: fix the file")
    table = document["grid"]
    unknown = sorted(set(table) - {"description", "include", "cases"})
    if unknown:
        raise CaseError(f"{where}: unknown keys {unknown} (allowed: description, include, "
                        "cases): fix the file")
    if not isinstance(table.get("description"), str) or not table["description"].strip():
        raise CaseError(f"{where}: [grid] needs a non-empty description string: add one")
    entries: list[str] = []
    for key in ("include", "cases"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise CaseError(f"{where}: {key} must be a list of strings: fix the file")
    for included in table.get("include", []):
        entries.extend(_read_grid_entries(included, (*including, name)))
    entries.extend(table.get("cases", []))
    if not entries:
        raise CaseError(f"{where}: the grid lists no cases: add some to `cases`")
    return list(dict.fromkeys(entries))


def grid_description(name: str) -> str:
    """The one-line description of grid `name`."""
    _read_grid_entries(name, ())  # validates the file first
    return str(_load_toml(_grid_path(name))["grid"]["description"])


def load_grid(name: str) -> list[CaseSpec]:
    """The cases of grid `name`, in file order; CaseError names a bad file or entry."""
    specs = []
    for entry in _read_grid_entries(name, ()):
        try:
            specs.append(case_by_name(entry))
        except CaseError as exc:
            raise CaseError(f"grid {name!r}: {exc.message}") from None
    return specs
