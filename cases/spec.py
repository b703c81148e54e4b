"""A case: what to build, what to feed it, how close an EP must come to ORT.

`CaseSpec` is the immutable description (it goes into every results file via
`to_dict`); `build()` turns it into model bytes and seeded inputs. Names are
canonical: a spec's name is computed from its fields (`case_name`) and
`cases.grids.case_by_name` parses exactly these names back.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epbench.cases import builders, usermodel
from epbench.cases.builders import BINARY_OPS, UNARY_OPS
from epbench.cases.built import MAX_TENSOR_ELEMENTS, BuiltCase
from epbench.core.errors import CaseError

if TYPE_CHECKING:
    import numpy as np

KINDS = ("chain", "binary", "matmul", "model")
OPT_LEVELS = ("all", "disabled")

# Sizes a synthetic case may have: a typo such as relu_d1000000_w8 should be
# refused, not built for minutes. Add's exactness (see `_binary_inputs`) also
# needs depth < 2**17.
MAX_DEPTH = 100_000

# float32 machine epsilon (2**-23), written out so this module needs no numpy.
FLOAT32_EPS = 2.0**-23

# Ops whose result is exactly determined: Identity and Relu copy or clamp, and
# the Add/Mul inputs below are chosen so every partial result is representable
# (see `_binary_inputs`). An EP must reproduce ORT bit for bit.
EXACT_TOLERANCE = 0.0

# Sigmoid: outputs lie in (0, 1); float32 implementations differ (ORT's MLAS uses a
# rational approximation, accurate to a few ulps). The slope of the logistic is <= 1/4,
# so an error entering node i shrinks by 4x at every later node: a chain's total stays
# below per_node / (1 - 1/4) at any depth. 1e-5 takes an EP whose per-node error is up to
# 7.5e-6 (the bundled engine's fused loop trades accuracy for speed: 5.7e-6 a node, 7.1e-6
# over a chain), while a wrong kernel (errors of 1e-2 and more) still fails.
SIGMOID_TOLERANCE = 1e-5

# MatMul inputs are drawn from [-1, 1), so max|a| = max|b| = 1.
MATMUL_INPUT_BOUND = 1.0

# User models: one absolute bound for every output. Their numerics are unknown,
# so this is a stated default, not a derivation: tight enough that a wrong
# kernel fails on inputs of order 1 (how models are fed, see cases.usermodel),
# loose enough for reassociated float32 reductions.
MODEL_TOLERANCE = 1e-4


def _finite_number(value: object) -> bool:
    """A JSON number that fits a float: not a bool, NaN, inf or a 400-digit integer."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def matmul_tolerance(k: int) -> float:
    """Largest |EP - ORT| accepted for one element of a [m,k] x [k,n] product.

    Each output is a length-k float32 dot product. Whatever the summation order,
    the k roundings each contribute at most eps/2 of a partial sum whose size is
    at most k * max|a| * max|b| in the worst case; in practice the rounding
    errors are nearly independent and the accumulated error of one
    implementation stays below k * eps * max|a| * max|b| (measured: a naive
    sequential float32 loop is within 0.45x of that bound of the exact product
    for k = 128..4096). Two implementations may err in opposite directions,
    hence the factor 2. A wrong kernel misses by O(1) and still fails.
    """
    return 2.0 * k * FLOAT32_EPS * MATMUL_INPUT_BOUND * MATMUL_INPUT_BOUND


def tolerance_for(op: str, k: int | None = None) -> float:
    """The tolerance a synthetic case of `op` gets (k only for MatMul)."""
    if op in ("Identity", "Relu", "Add", "Mul"):
        return EXACT_TOLERANCE
    if op == "Sigmoid":
        return SIGMOID_TOLERANCE
    if op == "MatMul":
        if k is None:
            raise ValueError("MatMul tolerance needs k")
        return matmul_tolerance(k)
    raise ValueError(f"no tolerance defined for op {op!r}")


def opt_level_for(op: str | None) -> str:
    """ORT's optimizer removes Identity nodes (a 5-node chain runs as 1 node under
    ORT_ENABLE_ALL), so Identity cases run unoptimized in every arm; the rest
    keep the default optimization."""
    return "disabled" if op == "Identity" else "all"


def graph_optimization_level(opt_level: str) -> Any:
    """The onnxruntime.GraphOptimizationLevel a case's `opt_level` stands for
    (the same for every arm of the case)."""
    import onnxruntime as ort

    levels = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }
    if opt_level not in levels:
        raise ValueError(f"opt_level must be one of {OPT_LEVELS}, got {opt_level!r}")
    return levels[opt_level]


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def case_name(
    kind: str,
    op: str | None = None,
    depth: int | None = None,
    width: int | None = None,
    dynamic: bool = False,
    m: int | None = None,
    k: int | None = None,
    n: int | None = None,
    path: str | None = None,
    batch: int = 1,
) -> str:
    """The canonical name of a case (the grammar `cases.grids` parses)."""
    if kind in ("chain", "binary"):
        name = f"{str(op).lower()}_d{depth}_w{width}"
        if dynamic:
            name += "_dyn" if batch == 1 else f"_dyn_b{batch}"
        return name
    if kind == "matmul":
        # m = 1 (one row, as a single request would be) is the short spelling.
        name = f"matmul_{k}x{n}" if m == 1 else f"matmul_{m}x{k}x{n}"
        return name + ("_dyn" if dynamic else "")
    if kind == "model":
        return f"model:{Path(str(path)).stem}"
    raise ValueError(f"unknown case kind {kind!r}")


@dataclass(frozen=True)
class CaseSpec:
    """One case, validated when constructed. Build specs with `chain_case`,
    `binary_case`, `matmul_case`, `cases.grids.case_by_name` or
    `cases.usermodel.model_case` rather than by hand."""

    name: str
    kind: str
    op: str | None = None
    depth: int | None = None
    width: int | None = None
    dynamic: bool = False
    m: int | None = None
    k: int | None = None
    n: int | None = None
    path: str | None = None
    dims: tuple[tuple[str, int], ...] = ()
    tolerance: float = 0.0
    opt_level: str = "all"
    seed: int = 0
    batch: int = 1  # value fed for the symbolic `batch` dim of a dynamic case

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise ValueError(f"invalid case spec {self.name!r}: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        problems: list[str] = []
        if self.kind not in KINDS:
            return [f"kind must be one of {KINDS}, got {self.kind!r}"]
        if self.opt_level not in OPT_LEVELS:
            problems.append(f"opt_level must be one of {OPT_LEVELS}")
        if not _finite_number(self.tolerance) or self.tolerance < 0:
            problems.append("tolerance must be a finite number >= 0")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            problems.append("seed must be an integer >= 0")
        if not _positive_int(self.batch):
            problems.append("batch must be a positive integer")
        if not isinstance(self.dynamic, bool):
            problems.append("dynamic must be a bool")
        if not isinstance(self.dims, tuple) or not all(
            isinstance(pair, tuple)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and _positive_int(pair[1])
            for pair in self.dims
        ):
            problems.append("dims must be a tuple of (name, positive int) pairs")
        elif list(self.dims) != sorted(dict(self.dims).items()):
            problems.append("dims must be sorted by name without repeats")

        required: tuple[str, ...]
        if self.kind == "chain":
            required = ("op", "depth", "width")
            if self.op not in UNARY_OPS:
                problems.append(f"a chain's op must be one of {UNARY_OPS}")
        elif self.kind == "binary":
            required = ("op", "depth", "width")
            if self.op not in BINARY_OPS:
                problems.append(f"a binary chain's op must be one of {BINARY_OPS}")
        elif self.kind == "matmul":
            required = ("op", "m", "k", "n")
            if self.op != "MatMul":
                problems.append("a matmul case's op must be 'MatMul'")
            if self.dynamic and self.m != self.batch:
                problems.append("a dynamic matmul feeds m rows: batch must equal m")
        else:
            required = ("path",)
            if self.dynamic:
                problems.append("a model case declares its own dims; dynamic must be False")
        for field in ("depth", "width", "m", "k", "n"):
            value = getattr(self, field)
            if field in required:
                if not _positive_int(value):
                    problems.append(f"{field} must be a positive integer")
            elif value is not None:
                problems.append(f"{field} is not used by a {self.kind} case")
        if "path" in required and not (isinstance(self.path, str) and self.path):
            problems.append("path must be set")
        if "path" not in required and self.path is not None:
            problems.append(f"path is not used by a {self.kind} case")
        if self.kind != "model" and self.dims:
            problems.append("dims are only for model cases")
        if self.kind != "model" and not self.dynamic and self.batch != 1:
            problems.append("batch is only used by dynamic cases")
        if problems:
            return problems
        if (self.depth or 0) > MAX_DEPTH:
            problems.append(f"depth must be at most {MAX_DEPTH}")
        tensors = {
            "chain": [(self.rows, self.width)],
            "binary": [(self.rows, self.width)],
            "matmul": [(self.m, self.k), (self.k, self.n), (self.m, self.n)],
        }.get(self.kind, [])
        if any(int(a or 0) * int(b or 0) > MAX_TENSOR_ELEMENTS for a, b in tensors):
            problems.append(f"a tensor would exceed {MAX_TENSOR_ELEMENTS} elements")
        if problems:
            return problems
        expected = case_name(
            self.kind, self.op, self.depth, self.width, self.dynamic,
            self.m, self.k, self.n, self.path, self.batch,
        )
        if self.name != expected:
            problems.append(f"name must be {expected!r}")
        return problems

    # -- derived facts -------------------------------------------------------

    @property
    def family(self) -> str | None:
        """Cases that differ only in depth: e.g. "relu_w8", "relu_w8_dyn", "add_w8"."""
        if self.kind not in ("chain", "binary"):
            return None
        family = f"{str(self.op).lower()}_w{self.width}"
        if self.dynamic:
            family += "_dyn" if self.batch == 1 else f"_dyn_b{self.batch}"
        return family

    @property
    def n_nodes(self) -> int:
        """Nodes in the model's main graph (what must execute on the EP)."""
        if self.kind in ("chain", "binary"):
            return int(self.depth or 0)
        if self.kind == "matmul":
            return 1
        return usermodel.count_model_nodes(str(self.path))

    @property
    def rows(self) -> int:
        """The leading dimension actually fed (synthetic cases only)."""
        if self.kind == "matmul":
            return int(self.m or 1)
        return self.batch if self.dynamic else 1

    @property
    def definition_sha256(self) -> str:
        """See `BuiltCase.definition_sha256` (this builds the case)."""
        return self.build().definition_sha256

    # -- building ------------------------------------------------------------

    def build(self) -> BuiltCase:
        """Serialize the model and draw its inputs from `default_rng(seed)`."""
        if self.kind == "model":
            return usermodel.build_model_case(str(self.path), dict(self.dims), self.seed)
        if self.kind == "chain":
            model = builders.chain(str(self.op), int(self.depth or 0), int(self.width or 0),
                                   self.dynamic)
        elif self.kind == "binary":
            model = builders.binary_chain(str(self.op), int(self.depth or 0),
                                          int(self.width or 0), self.dynamic)
        else:
            model = builders.matmul(self.rows, int(self.k or 0), int(self.n or 0), self.dynamic)
        return BuiltCase(
            model_bytes=model.SerializeToString(),
            inputs=self._synthetic_inputs(),
            n_nodes=self.n_nodes,
        )

    def _synthetic_inputs(self) -> dict[str, np.ndarray]:
        import numpy as np

        rng = np.random.default_rng(self.seed)
        if self.kind == "chain":
            shape = (self.rows, int(self.width or 0))
            # Normal values: half negative, so Relu actually clamps.
            return {"x": rng.standard_normal(shape, dtype=np.float32)}
        if self.kind == "binary":
            return _binary_inputs(rng, str(self.op), int(self.depth or 0),
                                  (self.rows, int(self.width or 0)))
        a = rng.uniform(-MATMUL_INPUT_BOUND, MATMUL_INPUT_BOUND, (self.rows, int(self.k or 0)))
        b = rng.uniform(-MATMUL_INPUT_BOUND, MATMUL_INPUT_BOUND, (int(self.k or 0),
                                                                  int(self.n or 0)))
        return {"a": a.astype(np.float32), "b": b.astype(np.float32)}

    # -- serialization -------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-able, keys sorted: enough for `from_dict` to rebuild."""
        data = asdict(self)
        data["dims"] = [[name, value] for name, value in self.dims]
        return dict(sorted(data.items()))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseSpec:
        """Inverse of `to_dict`; a damaged or foreign dict raises CaseError."""
        try:
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(data) - known)
            if unknown:
                raise ValueError(f"unknown fields {unknown}")
            values = dict(data)
            values["dims"] = tuple(
                (str(name), int(value)) for name, value in values.get("dims", ())
            )
            return cls(**values)
        except (TypeError, ValueError) as exc:
            raise CaseError(
                f"cannot read case spec {data.get('name', '?')!r}: {exc}; "
                "the results file is damaged or was written by an incompatible epbench"
            ) from None


def _binary_inputs(
    rng: np.random.Generator, op: str, depth: int, shape: tuple[int, int]
) -> dict[str, np.ndarray]:
    """Inputs for which every intermediate of the chain is exactly representable,
    so the result does not depend on evaluation order (exact tolerance holds).

    Add: x, y are multiples of 1/8 in [-8, 8]; every partial sum x + i*y is a
    multiple of 1/8 below 8 * (depth + 1), exact in float32 while depth < 2**17.
    Mul: y = +-2**e; e in {-1, 0, 1} while depth <= 60 (the product stays within
    2**+-64, far from overflow and subnormals), else e = 0 (y = +-1, the sign
    still flips with every node).
    """
    import numpy as np

    x = (rng.integers(-64, 65, size=shape) / 8.0).astype(np.float32)
    if op == "Add":
        y = (rng.integers(-64, 65, size=shape) / 8.0).astype(np.float32)
        return {"x": x, "y": y}
    exponents = rng.integers(-1, 2, size=shape) if depth <= 60 else np.zeros(shape, np.int64)
    signs = rng.choice(np.array([-1.0, 1.0]), size=shape)
    y = (signs * np.exp2(exponents)).astype(np.float32)
    return {"x": x, "y": y}


def chain_case(
    op: str, depth: int, width: int, dynamic: bool = False, *, batch: int = 1, seed: int = 0
) -> CaseSpec:
    """A unary chain case (Identity, Relu, Sigmoid)."""
    return CaseSpec(
        name=case_name("chain", op, depth, width, dynamic, batch=batch),
        kind="chain", op=op, depth=depth, width=width, dynamic=dynamic,
        tolerance=tolerance_for(op), opt_level=opt_level_for(op), seed=seed, batch=batch,
    )


def binary_case(
    op: str, depth: int, width: int, dynamic: bool = False, *, batch: int = 1, seed: int = 0
) -> CaseSpec:
    """A binary chain case (Add, Mul) with the second operand `y` fed at run time."""
    return CaseSpec(
        name=case_name("binary", op, depth, width, dynamic, batch=batch),
        kind="binary", op=op, depth=depth, width=width, dynamic=dynamic,
        tolerance=tolerance_for(op), opt_level=opt_level_for(op), seed=seed, batch=batch,
    )


def matmul_case(m: int, k: int, n: int, dynamic: bool = False, *, seed: int = 0) -> CaseSpec:
    """[m, k] x [k, n]; when dynamic, m is fed through the symbolic `batch` dim."""
    return CaseSpec(
        name=case_name("matmul", "MatMul", m=m, k=k, n=n, dynamic=dynamic),
        kind="matmul", op="MatMul", m=m, k=k, n=n, dynamic=dynamic,
        tolerance=tolerance_for("MatMul", k), opt_level=opt_level_for("MatMul"),
        seed=seed, batch=m if dynamic else 1,
    )


def model_case(
    path: str | Path, dims: dict[str, int], *, tolerance: float = MODEL_TOLERANCE, seed: int = 0
) -> CaseSpec:
    """The case `model:<stem>` for the ONNX file at `path`.

    Raises CaseError if the file is missing or unreadable, fails the checker,
    has an input type we cannot synthesize, or a symbolic dim missing from `dims`.
    Only the dims the model's inputs use are recorded in the spec.
    """
    resolved, used = usermodel.inspect_model(path, dims)
    return CaseSpec(
        name=case_name("model", path=str(resolved)),
        kind="model",
        path=str(resolved),
        dims=tuple(sorted(used.items())),
        tolerance=tolerance,
        opt_level="all",
        seed=seed,
    )
