"""User models (`--model PATH.onnx`) as cases.

The model is checked with onnx's full checker when the case is made, so a bad
file fails before any arm is set up. Inputs are synthesized from the declared
types and shapes; symbolic dims take their values from `--dim NAME=VALUE`.

How inputs are drawn (from `default_rng(seed)`, in graph-input order):
- floating point (float, double, float16): uniform in [0, 1), positive so that
  Log/Sqrt/Div-style ops stay finite and outputs stay of order 1 (which is what
  MODEL_TOLERANCE assumes);
- integers (int8..int64, uint8..uint64): uniform in [0, 8), small and
  non-negative so they work as indices (Gather, token ids) into most tables;
- bool: fair coin.
Graph inputs that have an initializer of the same name keep their stored value
(they are overridable constants, not data the caller must feed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epbench.cases.built import MAX_TENSOR_ELEMENTS, BuiltCase
from epbench.core.errors import CaseError

if TYPE_CHECKING:
    import numpy as np
    import onnx

# ONNX element type name -> numpy dtype name, for the types we can synthesize.
SUPPORTED_TYPES: dict[str, str] = {
    "FLOAT": "float32",
    "DOUBLE": "float64",
    "FLOAT16": "float16",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "BOOL": "bool",
}
INTEGER_INPUT_HIGH = 8  # integers are drawn from [0, INTEGER_INPUT_HIGH)


def _load_graph_only(path: Path) -> onnx.ModelProto:
    """The model without its external tensor data (enough to read the graph)."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends: not an ONNX file
        raise CaseError(
            f"cannot read model {path}: {_first_line(exc)}: pass an ONNX model file"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    # One line, without a trailing period: the remedy follows after a colon.
    return text.splitlines()[0].strip().rstrip(".") if text else type(exc).__name__


def _check(path: Path) -> None:
    """onnx.checker with full_check (shape inference included), as one CaseError line."""
    import onnx

    try:
        # A path (not a loaded proto) lets the checker handle models over 2 GB.
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # ValidationError, InferenceError, DecodeError...
        raise CaseError(
            f"model {path} fails onnx.checker: {_first_line(exc)}: fix or re-export the model"
        ) from None


def _type_name(type_proto: onnx.TypeProto) -> str:
    """A readable name for an input's type, e.g. "tensor(string)" or "sequence"."""
    from onnx import TensorProto

    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return f"tensor({TensorProto.DataType.Name(type_proto.tensor_type.elem_type).lower()})"
    return which or "undefined"


def _feed_specs(
    model: onnx.ModelProto, dims: dict[str, int]
) -> tuple[list[tuple[str, str, tuple[int, ...]]], dict[str, int]]:
    """(name, numpy dtype, concrete shape) per fed input, and the dims actually used."""
    from onnx import TensorProto

    initializers = {init.name for init in model.graph.initializer}
    feeds: list[tuple[str, str, tuple[int, ...]]] = []
    used: dict[str, int] = {}
    supported = ", ".join(name.lower() for name in SUPPORTED_TYPES)
    for value in model.graph.input:
        if value.name in initializers:
            continue
        type_proto = value.type
        elem = (
            TensorProto.DataType.Name(type_proto.tensor_type.elem_type)
            if type_proto.WhichOneof("value") == "tensor_type"
            else None
        )
        if elem not in SUPPORTED_TYPES:
            raise CaseError(
                f"input {value.name!r} has type {_type_name(type_proto)}, which epbench cannot "
                f"synthesize (supported: tensors of {supported}): export the model with "
                "inputs of a supported type"
            )
        if not type_proto.tensor_type.HasField("shape"):
            raise CaseError(
                f"input {value.name!r} declares no shape, so its size is unknown: "
                "export the model with input shapes (symbolic dims are fine)"
            )
        shape: list[int] = []
        for axis, dim in enumerate(type_proto.tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            elif dim.HasField("dim_param") and dim.dim_param:
                if dim.dim_param not in dims:
                    raise CaseError(
                        f"input {value.name!r} has symbolic dim {dim.dim_param!r}: "
                        f"pass --dim {dim.dim_param}=VALUE"
                    )
                used[dim.dim_param] = dims[dim.dim_param]
                shape.append(dims[dim.dim_param])
            else:
                raise CaseError(
                    f"input {value.name!r} dim {axis} has neither a size nor a name: "
                    "export the model with named (symbolic) or fixed input dims"
                )
        if math.prod(shape) > MAX_TENSOR_ELEMENTS:
            raise CaseError(
                f"input {value.name!r} would have shape {shape}, over "
                f"{MAX_TENSOR_ELEMENTS} elements: pass smaller --dim values"
            )
        feeds.append((value.name, SUPPORTED_TYPES[elem], tuple(shape)))
    return feeds, used


def _validate_dims(dims: dict[str, int]) -> None:
    for name, value in dims.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CaseError(f"--dim {name}={value!r}: a dim must be a positive integer: "
                            f"pass --dim {name}=N with N >= 1")


def inspect_model(path: str | Path, dims: dict[str, int]) -> tuple[Path, dict[str, int]]:
    """The model's resolved path and the dims its inputs use (spec.model_case's checks).

    Raises CaseError if the file is missing or unreadable, fails the checker,
    has an input type we cannot synthesize, or a symbolic dim missing from `dims`.
    """
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise CaseError(f"model file {path} not found: check the path")
    _validate_dims(dims)
    _check(resolved)
    _, used = _feed_specs(_load_graph_only(resolved), dims)
    return resolved, used


def count_model_nodes(path: str) -> int:
    """Nodes in the main graph of the model at `path`."""
    return len(_load_graph_only(Path(path)).graph.node)


def _uses_external_data(model: onnx.ModelProto) -> bool:
    from onnx import TensorProto

    return any(init.data_location == TensorProto.EXTERNAL for init in model.graph.initializer)


def synthesize_inputs(
    feeds: list[tuple[str, str, tuple[int, ...]]], seed: int
) -> dict[str, np.ndarray]:
    """Seeded inputs for (name, dtype, shape) feeds; see the module docstring."""
    import numpy as np

    rng = np.random.default_rng(seed)
    inputs: dict[str, Any] = {}
    for name, dtype, shape in feeds:
        if dtype == "bool":
            inputs[name] = rng.random(shape) < 0.5
        elif dtype.startswith(("int", "uint")):
            inputs[name] = rng.integers(0, INTEGER_INPUT_HIGH, size=shape).astype(dtype)
        else:
            inputs[name] = rng.random(shape).astype(dtype)
    return inputs


def build_model_case(model_path: str, dims: dict[str, int], seed: int) -> BuiltCase:
    """Model bytes and synthesized inputs for a `model` case."""
    import onnx

    path = Path(model_path)
    if not path.is_file():
        raise CaseError(f"model file {path} not found: check the path")
    model = _load_graph_only(path)
    feeds, _ = _feed_specs(model, dims)
    if _uses_external_data(model):
        # ORT gets bytes, which cannot point at side files: inline the tensors.
        model_bytes = onnx.load(str(path)).SerializeToString()
    else:
        model_bytes = path.read_bytes()
    return BuiltCase(
        model_bytes=model_bytes,
        inputs=synthesize_inputs(feeds, seed),
        n_nodes=len(model.graph.node),
    )
