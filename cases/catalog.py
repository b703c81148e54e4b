"""What `epbench cases list` shows and what `epbench cases build` writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cases.spec import CaseSpec
from harness.errors import CaseError

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
