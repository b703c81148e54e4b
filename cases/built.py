"""A case ready to run (model bytes and inputs), shared by every kind of case.

Apart from spec.py so that user models (usermodel.py) and synthetic cases (spec.py)
both produce it without importing each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

MAX_TENSOR_ELEMENTS = 2**26  # 256 MiB of float32 per input


@dataclass(frozen=True, eq=False)
class BuiltCase:
    """A case ready to run: serialized model, its inputs, and how many nodes it has."""

    model_bytes: bytes
    inputs: dict[str, np.ndarray]
    n_nodes: int

    @property
    def definition_sha256(self) -> str:
        """Hash of the model bytes and every input (name, dtype, shape, data).

        Two results files measured the same thing for a case iff these agree.
        """
        digest = hashlib.sha256()
        digest.update(b"model\0")
        digest.update(self.model_bytes)
        for name in sorted(self.inputs):
            array = self.inputs[name]
            header = f"\0input\0{name}\0{array.dtype.str}\0{list(array.shape)}\0"
            digest.update(header.encode())
            digest.update(array.tobytes(order="C"))
        return digest.hexdigest()


def save_built_case(built: BuiltCase, folder: Path, stem: str) -> dict[str, Any]:
    """Write ``built`` to ``folder`` as ``stem.onnx`` and ``stem.npz``; return the
    JSON-able record that `load_built_case` reads back.

    The runner builds each case once and its workers read it: building needs onnx,
    whose import (ml_dtypes, mostly) was most of a worker's start, paid by every one of
    a run's dozens of workers (docs/validation/summaries.tar.xz:run_time.txt). Inputs go in
    by position, their names in the record, so any input name is a safe file name.
    """
    import numpy as np

    model = folder / f"{stem}.onnx"
    inputs = folder / f"{stem}.npz"
    model.write_bytes(built.model_bytes)
    np.savez(inputs, *built.inputs.values())
    return {"model": str(model), "inputs": str(inputs), "input_names": list(built.inputs),
            "n_nodes": built.n_nodes}


def load_built_case(record: dict[str, Any]) -> BuiltCase:
    """The case `save_built_case` wrote (numpy only: nothing here imports onnx)."""
    import numpy as np

    with np.load(record["inputs"], allow_pickle=False) as arrays:
        inputs = {name: arrays[f"arr_{i}"] for i, name in enumerate(record["input_names"])}
    return BuiltCase(model_bytes=Path(record["model"]).read_bytes(), inputs=inputs,
                     n_nodes=int(record["n_nodes"]))
