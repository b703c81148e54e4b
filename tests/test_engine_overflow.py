"""Shapes near the size limits: the engine gives ORT's result or a clean error, never a crash.

A seeded fuzz of small graphs of the engine's ops whose shapes carry zero dims beside dims
of 2^30..2^60, so that element counts reach 2^61, 2^62 and past 2^64 (where an unchecked
product wraps to something small), fed through static, symbolic and negative declared dims
(a negative dim is unknown to ORT and resolved at run time). Every case runs in every
partition mode, in a child process (tests/support/overflow_worker.py): a crash or an
AddressSanitizer report fails the test and names the case. Where ORT's CPU EP gives a
result the engine must give the same; where ORT refuses, the engine must raise too, and
where a tensor of the graph could not exist (more than EBE_MAX_ELEMENTS floats) the
engine's error names the node. Nothing big is ever real: every tensor is either tiny or
empty or too large for any address space, so no case allocates gigabytes.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from math import prod
from pathlib import Path

import pytest

from epbench import engine

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = ("fused", "per_node", "kernel")
# The engine's EBE_MAX_ELEMENTS (engine/src/ebe_common.h): PTRDIFF_MAX / sizeof(float).
MAX_ELEMENTS = (2**63 - 1) // 4
# A tensor this small is really allocated; one this large cannot be (beyond a 47-bit
# address space). The generator draws nothing in between.
REAL, IMPOSSIBLE = 4096, 2**46
BIG = (2**30, 2**31, 2**32, 2**33, 2**40, 2**60)
SMALL = (1, 2, 3)
KINDS = ("chain", "broadcast", "matmul", "unary")
CASES_PER_KIND = 12


def _library() -> str:
    # make asan runs this module against a sanitizer build.
    return os.environ.get("EBE_TEST_LIBRARY") or engine.library_path()


# ---- shape rules, in Python's exact integers ------------------------------------------------

def _broadcast(a: list[int], b: list[int]) -> list[int] | None:
    r = max(len(a), len(b))
    a, b = [1] * (r - len(a)) + a, [1] * (r - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return out


def _matmul(a: list[int], b: list[int]) -> list[int] | None:
    k_b = b[0] if len(b) == 1 else b[-2]
    batch = _broadcast(a[:-2], b[:-2])
    if a[-1] != k_b or batch is None:
        return None
    return batch + a[-2:-1] + (b[-1:] if len(b) >= 2 else [])


def _nonzero(shape: list[int]) -> int:
    return prod(d for d in shape if d != 0)


def _numel(shape: list[int]) -> int:
    return prod(shape)


def _analyse(case: dict) -> dict | None:
    """The shapes a case gives, or None when it would really allocate something big.

    Returns {"mismatch": bool, "too_large": nodes whose output (or MatMul extents) the
    engine must refuse, "shapes": {value: shape} as far as they go}.
    """
    shapes = {name: fed for name, _, fed in case["inputs"]}
    for fed in shapes.values():
        if _nonzero(fed) > MAX_ELEMENTS or _numel(fed) > 64:  # numpy could not make it
            return None
    too_large = []
    for op, args, out in case["nodes"]:
        ins = [shapes[a] for a in args]
        if op == "MatMul":
            shape = _matmul(*ins)
            if shape is not None:
                m = ins[0][-2] if len(ins[0]) >= 2 else 1
                n = ins[1][-1] if len(ins[1]) >= 2 else 1
                k = ins[0][-1]
                if max(_nonzero([m, k]), _nonzero([k, n]), _nonzero([m, n])) > MAX_ELEMENTS:
                    too_large.append(out)
        elif op in ("Add", "Mul"):
            shape = _broadcast(*ins)
        else:
            shape = ins[0]
        if shape is None:
            return {"mismatch": True, "too_large": [], "shapes": shapes}
        if REAL < _numel(shape) < IMPOSSIBLE:
            return None
        if _nonzero(shape) > MAX_ELEMENTS and out not in too_large:
            too_large.append(out)
        shapes[out] = shape
    return {"mismatch": False, "too_large": too_large, "shapes": shapes}


# ---- cases ----------------------------------------------------------------------------------

def _declare(fed: list[int], rng: random.Random) -> list:
    """How the model declares an input: static, symbolic, or negative (unknown) per dim."""
    style = rng.choice(["static", "symbolic", "negative", "mixed"])
    declared: list = []
    for i, d in enumerate(fed):
        kind = style if style != "mixed" else rng.choice(["static", "symbolic", "negative"])
        declared.append(d if kind == "static" else f"d{i}" if kind == "symbolic"
                        else -1 - rng.randrange(3))
    return declared


def _chain(m: int, n: int, k: int = 0) -> dict:
    """The reported overflow: MatMul(A[m,k], B[k,n]) -> Mul(., Relu(S[1,1])) ->
    MatMul(., C[n,0])."""
    return {"nodes": [["MatMul", ["A", "B"], "mm1"], ["Relu", ["S"], "relu"],
                      ["Mul", ["mm1", "relu"], "mul"], ["MatMul", ["mul", "C"], "mm2"]],
            "inputs": [["A", [m, k], [m, k]], ["B", [k, n], [k, n]], ["S", [1, 1], [1, 1]],
                       ["C", [n, 0], [n, 0]]],
            "outputs": ["mm2"]}


def _dim(rng: random.Random) -> int:
    return rng.choice((0, 0, 0, *SMALL, *BIG))


def _draw(rng: random.Random, kind: str) -> dict:
    if kind == "chain":
        case = _chain(rng.choice(BIG + SMALL), rng.choice(BIG + SMALL), rng.choice((0, 0, 1)))
    elif kind == "unary":
        fed = [_dim(rng) for _ in range(rng.randint(1, 4))]
        case = {"nodes": [["Relu", ["x"], "r"], ["Sigmoid", ["r"], "s"],
                          ["Identity", ["s"], "y"]],
                "inputs": [["x", None, fed]], "outputs": ["y"]}
    elif kind == "broadcast":
        out = [_dim(rng) for _ in range(rng.randint(1, 5))]

        def operand() -> list[int]:
            tail = out[len(out) - rng.randint(0, len(out)):]
            # Mostly the output's dim or 1; sometimes another, which may not broadcast.
            return [rng.choice((d, 1, 1, _dim(rng))) for d in tail]

        op = rng.choice(["Add", "Mul"])
        case = {"nodes": [["Relu", ["a"], "r"], [op, ["r", "b"], "y"]],
                "inputs": [["a", None, operand()], ["b", None, operand()]], "outputs": ["y"]}
    else:
        m, k, n = _dim(rng), _dim(rng), _dim(rng)
        batch = [_dim(rng) for _ in range(rng.randint(0, 3))]

        def batch_of() -> list[int]:
            return [rng.choice((d, 1)) for d in batch[len(batch) - rng.randint(0, len(batch)):]]

        a = [k] if rng.random() < 0.2 else [*batch_of(), m, k]
        b = [k] if rng.random() < 0.2 else [*batch_of(), k, n]
        case = {"nodes": [["MatMul", ["a", "b"], "p"], ["Add", ["p", "p"], "y"]],
                "inputs": [["a", None, a], ["b", None, b]], "outputs": ["y"]}
    for entry in case["inputs"]:
        entry[1] = _declare(entry[2], rng)
    return case


def _fuzz_cases() -> list[dict]:
    """CASES_PER_KIND of each kind, a third of them (at least) ones the engine must refuse
    for size or ORT for a dim conflict, so that both sides of the differential are hit."""
    rng = random.Random(45)
    cases: list[dict] = []
    for kind in KINDS:
        refused = accepted = 0
        while refused + accepted < CASES_PER_KIND:
            case = _draw(rng, kind)
            shapes = _analyse(case)
            if shapes is None:
                continue
            bad = bool(shapes["too_large"]) or shapes["mismatch"]
            if kind != "unary" and not bad and accepted >= CASES_PER_KIND * 2 // 3:
                continue  # enough plain ones: keep drawing until the refusals are there
            refused += bad
            accepted += not bad
            case["id"] = f"{kind}{refused + accepted}"
            cases.append(case)
    return cases


# ---- running --------------------------------------------------------------------------------

def _under_asan() -> bool:
    return "libasan" in os.environ.get("LD_PRELOAD", "")


def _asan_cannot_run(case: dict, partition: str) -> bool:
    """Whether ORT itself would ask for a tensor of terabytes on the engine's behalf.

    Under ASan a failed C++ `new` aborts the process (allocator_may_return_null covers
    malloc only), and ORT allocates each partition's outputs with `new`: a value the
    engine accepts (at most EBE_MAX_ELEMENTS) that no machine can hold cannot be run there.
    Without ASan ORT just raises, and the case runs."""
    shapes = _analyse(case)["shapes"]  # type: ignore[index]
    handed = case["outputs"] if partition == "fused" else [out for *_, out in case["nodes"]]
    return any(IMPOSSIBLE <= _numel(shapes.get(v, [0])) <= MAX_ELEMENTS for v in handed)


def _worker(role: str, lines: list[str]) -> dict[str, dict]:
    """Run the lines in one child process: {line id: outcome}. A child that dies gives the
    case it was running the outcome stage "crash" (with its exit and stderr), and a new
    child takes the lines not yet run: one crash fails its own case's test, not them all."""
    env = dict(os.environ)
    if role == "cpu":  # the reference needs no sanitizer, and ORT's own big `new` aborts it
        env.pop("LD_PRELOAD", None)
    else:
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"),
                                                     "allocator_may_return_null=1"]))
    outcomes: dict[str, dict] = {}
    todo = lines
    while todo:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.support.overflow_worker", role, _library()],
            input="\n".join(todo) + "\n", cwd=ROOT, capture_output=True, text=True,
            timeout=1200, env=env)
        records = [json.loads(line) for line in proc.stdout.splitlines()
                   if line.startswith("{")]
        outcomes.update({r["id"]: r for r in records if "id" in r})
        if proc.returncode == 0:
            break
        running = [r["start"] for r in records if "start" in r and r["start"] not in outcomes]
        if not running:
            pytest.fail(f"the {role} worker died (exit {proc.returncode}) before any case:\n"
                        f"{proc.stderr[-3000:]}")
        # stderr apart from the error: it holds earlier cases' errors, which a test matches.
        outcomes[running[0]] = {"id": running[0], "stage": "crash",
                                "error": f"the {role} worker died (exit {proc.returncode})",
                                "stderr": proc.stderr[-3000:]}
        todo = [line for line in todo if json.loads(line)["id"] not in outcomes]
    assert len(outcomes) == len(lines)
    return outcomes


def _same(got: list, want: list) -> bool:
    import numpy as np

    def array(output: list) -> np.ndarray:
        return np.frombuffer(bytes.fromhex(output[1]), np.float32)

    return len(got) == len(want) and all(
        g[0] == w[0] and np.allclose(array(g), array(w), rtol=1e-5, atol=1e-6, equal_nan=True)
        for g, w in zip(got, want, strict=True))


def _run_worker(cases: list[dict]) -> dict[str, dict]:
    """Each case on ORT's CPU EP once and on the engine in each partition mode, each side in
    its own child process: {"case/partition": {"id", "cpu", "engine", "same"}} (under ASan
    without the combinations _asan_cannot_run)."""
    cpu = _worker("cpu", [json.dumps(case) for case in cases])
    runs = [(case, p) for case in cases for p in PARTITIONS
            if not (_under_asan() and _asan_cannot_run(case, p))]
    engine = _worker("engine", [json.dumps({**case, "id": f"{case['id']}/{p}", "partition": p})
                                for case, p in runs])
    outcomes = {}
    for case, p in runs:
        name = f"{case['id']}/{p}"
        want, got = cpu[case["id"]], engine[name]
        same = (_same(got["outputs"], want["outputs"])
                if want["stage"] == got["stage"] == "ok" else None)
        outcomes[name] = {"id": name, "cpu": want, "engine": got, "same": same}
    return outcomes


def _problems(case: dict, outcome: dict) -> list[str]:
    """What is wrong with one outcome (empty when it is right)."""
    cpu, eng, name = outcome["cpu"], outcome["engine"], outcome["id"]
    expected = _analyse(case)
    assert expected is not None
    if cpu["stage"] == "ok":
        if eng["stage"] != "ok":
            return [f"{name}: ORT gives a result, the engine fails: {eng['error']}"]
        return [] if outcome["same"] else [f"{name}: outputs differ from ORT's"]
    if eng["stage"] != cpu["stage"]:
        return [f"{name}: ORT fails at {cpu['stage']} ({cpu['error'][-200:]}), the engine "
                f"at {eng['stage']}: {eng.get('error', 'no error')}"]
    if expected["too_large"] and not expected["mismatch"] and eng["stage"] == "run":
        named = [n for n in expected["too_large"]
                 if f"node '{n}'" in eng["error"] and "overflows" in eng["error"]]
        if not named:
            return [f"{name}: the engine's error names none of {expected['too_large']}: "
                    f"{eng['error']}"]
    return []


PRODUCTS = [(2**31, 2**31), (2**32, 2**32), (2**33, 2**31), (3, 2**60), (2**60, 2)]
ZERO_DIM_OPS = ["Add", "Mul"]


def _zero_dim_case(op: str) -> dict:
    """[0, 2^40, 2^40] holds nothing, but as in numpy its nonzero dims count: a product
    that stopped at the zero would take it, and so every stride of a tensor like it."""
    return {"nodes": [["Relu", ["a"], "r"], [op, ["r", "b"], "y"]],
            "inputs": [["a", ["n", "w", 1], [0, 2**40, 1]], ["b", [0, 1, -1], [0, 1, 2**40]]],
            "outputs": ["y"], "id": f"zero-{op}"}


def _named_cases() -> list[dict]:
    """The cases of the tests below, each under an id of its own."""
    return [{**_chain(2**31, 2**30), "id": "issue45"},
            {**_chain(2**30, 2**30), "id": "arena"},
            *({**_chain(m, n), "id": f"p-{m}-{n}"} for m, n in PRODUCTS),
            *(_zero_dim_case(op) for op in ZERO_DIM_OPS)]


@pytest.fixture(scope="module")
def named() -> dict[str, dict]:
    # One pair of workers for the cases of all the tests below, as the fuzz test runs its
    # cases: starting the two workers (ORT, numpy) was 3 of the 3 s each test took, one
    # pair a test (nine tests, 28 s on an idle 2-core machine). Each case still gets its
    # own sessions in each worker, and a worker that dies names the case it was running.
    return _run_worker(_named_cases())


def test_the_reported_overflow_is_an_error_naming_the_node(named: dict[str, dict]) -> None:
    """m = 2^31, n = 2^30: the scratch total used to wrap to 64 bytes and memset past it."""
    for partition in PARTITIONS:
        outcome = named[f"issue45/{partition}"]
        assert outcome["cpu"]["stage"] == "run"
        assert outcome["engine"]["stage"] == "run", outcome
        assert ("MatMul node 'mm1': input shapes [2147483648,0] and [0,1073741824] give "
                "[2147483648,1073741824], whose size overflows") in outcome["engine"]["error"]


def test_a_scratch_total_past_the_limit_names_a_node(named: dict[str, dict]) -> None:
    """m = n = 2^30: each [m,n] value fits (2^60 floats), the two slots together do not."""
    fused = named["arena/fused"]["engine"]
    assert fused["stage"] == "run"
    assert "Mul node 'mul': the scratch its output adds to the partition's overflows" in (
        fused["error"])
    for partition in ("per_node", "kernel"):  # no arena: ORT's own allocation fails
        if not _under_asan():  # where it would abort (see _asan_cannot_run)
            assert named[f"arena/{partition}"]["engine"]["stage"] == "run"


@pytest.mark.parametrize(("m", "n"), PRODUCTS)
def test_products_of_2_62_and_past_2_64_are_refused(named: dict[str, dict], m: int,
                                                     n: int) -> None:
    """m * n at 2^62 and at 2^64 (which wraps to 0 in 64 bits) and 2^61 and up."""
    for partition in PARTITIONS:
        error = named[f"p-{m}-{n}/{partition}"]["engine"].get("error", "")
        assert "MatMul node 'mm1'" in error and "overflows" in error, error


@pytest.mark.parametrize("op", ZERO_DIM_OPS)
def test_a_leading_zero_dim_does_not_hide_an_overflow(named: dict[str, dict], op: str) -> None:
    """_zero_dim_case: a zero first dim does not hide the overflow of the others."""
    case = _zero_dim_case(op)
    assert _analyse(case)["too_large"] == ["y"]  # type: ignore[index]
    for partition in PARTITIONS:
        outcome = named[f"zero-{op}/{partition}"]
        assert outcome["cpu"]["stage"] == "run"  # numpy cannot hold ORT's empty result
        assert f"{op} node 'y'" in outcome["engine"]["error"], outcome
        assert "give [0,1099511627776,1099511627776], whose size overflows" in (
            outcome["engine"]["error"])


def test_fuzzed_shapes_near_the_limits_give_orts_result_or_a_clean_error() -> None:
    cases = _fuzz_cases()
    outcomes = _run_worker(cases)
    by_id = {case["id"]: case for case in cases}
    problems = [p for name, outcome in outcomes.items()
                for p in _problems(by_id[name.split("/")[0]], outcome)]
    assert problems == []
    # Under ASan, 6 of the 144 combinations cannot run (see _asan_cannot_run).
    assert len(outcomes) == len(cases) * len(PARTITIONS) - (6 if _under_asan() else 0)
    # The fuzz reaches both sides: results ORT and the engine agree on, and refusals.
    stages = [o["cpu"]["stage"] for o in outcomes.values()]
    assert "ok" in stages and "run" in stages
    assert any(_analyse(c)["too_large"] for c in cases)  # type: ignore[index]
    assert any(_analyse(c)["mismatch"] for c in cases)  # type: ignore[index]
