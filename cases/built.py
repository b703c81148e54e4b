"""A case ready to run (model bytes and inputs), shared by every kind of case.

Apart from spec.py so that user models (usermodel.py) and synthetic cases (spec.py)
both produce it without importing each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
