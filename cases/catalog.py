"""What `epbench cases list` shows and what `epbench cases build` writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from epbench.cases.grids import case_by_name, load_grid
from epbench.cases.spec import CaseSpec, model_case
from epbench.core.errors import CaseError

MANIFEST_NAME = "cases.json"


def file_stem(spec: CaseSpec) -> str:
    """A file-name-safe stem for a case (`model:foo` -> `model_foo`)."""
    return spec.name.replace(":", "_").replace("/", "_")


def describe_cases(specs: list[CaseSpec]) -> list[dict[str, Any]]:
    """One JSON-able row per case: name, kind, op, family, nodes, inputs (dtype and
    fed shape), tolerance, opt_level, definition_sha256. Builds every case."""
    rows = []
    for spec in specs:
        built = spec.build()
        rows.append({
            "name": spec.name,
            "kind": spec.kind,
            "op": spec.op,
            "family": spec.family,
            "nodes": built.n_nodes,
            "inputs": {
                name: {"dtype": str(array.dtype), "shape": list(array.shape)}
                for name, array in built.inputs.items()
            },
            "tolerance": spec.tolerance,
            "opt_level": spec.opt_level,
            "definition_sha256": built.definition_sha256,
        })
    return rows


def case_table(rows: list[dict[str, Any]]) -> str:
    """`describe_cases` rows as an aligned text table a person reads.

    Inputs read `x:float32[1,8]`, a case outside any family shows `-`, the definition
    hash its first 12 hex digits (the JSON form keeps all 64).
    """
    header = ("name", "kind", "op", "family", "nodes", "inputs", "tolerance", "opt", "definition")
    lines = [header]
    for row in rows:
        inputs = " ".join(f"{name}:{spec['dtype']}[{','.join(map(str, spec['shape']))}]"
                          for name, spec in row["inputs"].items())
        lines.append((row["name"], row["kind"], row["op"], row["family"] or "-",
                      str(row["nodes"]), inputs, f"{row['tolerance']:g}", row["opt_level"],
                      row["definition_sha256"][:12]))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                     .rstrip() for line in lines)


def write_cases(specs: list[CaseSpec], out_dir: str | Path) -> list[Path]:
    """Write NAME.onnx and NAME.inputs.npz per case, plus a cases.json manifest
    (each spec's to_dict and definition hash); returns the paths written."""
    import numpy as np

    out = Path(out_dir)
    written: list[Path] = []
    manifest = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for spec in specs:
            built = spec.build()
            stem = file_stem(spec)
            model_path = out / f"{stem}.onnx"
            inputs_path = out / f"{stem}.inputs.npz"
            model_path.write_bytes(built.model_bytes)
            with inputs_path.open("wb") as handle:
                np.savez(handle, **built.inputs)
            written += [model_path, inputs_path]
            manifest.append({
                "spec": spec.to_dict(),
                "definition_sha256": built.definition_sha256,
                "model": model_path.name,
                "inputs": inputs_path.name,
            })
        manifest_path = out / MANIFEST_NAME
        manifest_path.write_text(json.dumps({"cases": manifest}, indent=2, sort_keys=True) + "\n")
        written.append(manifest_path)
    except OSError as exc:
        raise CaseError(
            f"cannot write cases to {out}: {exc.strerror or exc}: choose a writable --out"
        ) from None
    return written


def select_cases(grids: tuple[str, ...] | list[str], case_names: tuple[str, ...] | list[str],
                 models: tuple[str, ...] | list[str] = (),
                 dims: dict[str, int] | None = None) -> list[CaseSpec]:
    """The cases named by --grid, --case and --model, in the order given, without repeats.

    A name that stands for two different definitions (two models with the same
    file name) is refused rather than silently measured once; a --dim that no
    model uses is refused as a likely typo.
    """

    dims = dims or {}
    specs: list[CaseSpec] = []
    for grid in grids:
        specs.extend(load_grid(grid))
    specs.extend(case_by_name(name) for name in case_names)
    model_specs = [model_case(path, dims) for path in models]
    specs.extend(model_specs)
    unused = sorted(set(dims) - {name for spec in model_specs for name, _ in spec.dims})
    if unused:
        raise CaseError(f"--dim {unused[0]} is not a symbolic dim of any --model input; "
                        "check its spelling against the model's inputs")
    unique: dict[str, CaseSpec] = {}
    for spec in specs:
        seen = unique.setdefault(spec.name, spec)
        if seen != spec:
            raise CaseError(f"two cases are both named {spec.name!r} ({seen.path} and "
                            f"{spec.path}): rename one of the model files")
    return list(unique.values())
