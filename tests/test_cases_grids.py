"""Grid files, the case-name grammar, suggestions, and what ORT executes per case."""

from __future__ import annotations

import string
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epbench.cases import grids
from epbench.cases.grids import case_by_name, grid_description, grid_names, load_grid
from epbench.cases.spec import (
    MAX_DEPTH,
    CaseSpec,
    binary_case,
    chain_case,
    graph_optimization_level,
    matmul_case,
)
from epbench.core.errors import CaseError

ISSUE_DEFAULT = (
    [f"relu_d{d}_w8" for d in (1, 10, 100, 1000)]
    + [f"relu_d{d}_w4096" for d in (1, 10, 100)]
    + ["identity_d1_w4096", "identity_d10_w4096", "add_d10_w8", "sigmoid_d10_w4096"]
    + ["matmul_128x128", "matmul_512x512"]
    + [f"relu_d{d}_w8_dyn" for d in (1, 10, 100)]
    + ["relu_d10_w4096_dyn", "matmul_128x128_dyn"]
)


def test_shipped_grids() -> None:
    assert grid_names() == ["default", "full", "quick"]
    for name in grid_names():
        assert grid_description(name).strip()


def test_default_grid_holds_the_required_cases() -> None:
    names = [spec.name for spec in load_grid("default")]
    assert set(ISSUE_DEFAULT) <= set(names)
    assert len(names) == len(set(names))


def test_quick_grid_is_small_and_covers_every_kind() -> None:
    quick = load_grid("quick")
    assert 4 <= len(quick) <= 6
    names = {spec.name for spec in quick}
    assert "add_d10_w8" in names
    assert any(spec.op == "Identity" for spec in quick)
    assert any(spec.kind == "matmul" and spec.k <= 128 for spec in quick)
    relu_depths: dict[str | None, set[int]] = {}
    for spec in quick:
        if spec.op == "Relu":
            relu_depths.setdefault(spec.family, set()).add(int(spec.depth or 0))
    assert max(len(depths) for depths in relu_depths.values()) >= 2
    assert max(spec.n_nodes for spec in quick) <= 10  # cheap


def test_full_grid_extends_default() -> None:
    default = [spec.name for spec in load_grid("default")]
    full = [spec.name for spec in load_grid("full")]
    assert full[: len(default)] == default
    assert len(full) > len(default)
    assert {"Sigmoid", "Add", "Mul"} <= {spec.op for spec in load_grid("full")}
    assert len(full) == len(set(full))


ALL_GRID_CASES = sorted({spec.name: spec for g in grid_names() for spec in load_grid(g)}.items())


@pytest.mark.parametrize(("name", "spec"), ALL_GRID_CASES, ids=[n for n, _ in ALL_GRID_CASES])
def test_every_grid_case_builds_and_passes_the_full_checker(name: str, spec: CaseSpec) -> None:
    built = spec.build()
    model = onnx.load_from_string(built.model_bytes)
    onnx.checker.check_model(model, full_check=True)
    assert len(model.graph.node) == built.n_nodes == spec.n_nodes
    assert sorted(built.inputs) == sorted(value.name for value in model.graph.input)


def _executed_nodes(spec: CaseSpec) -> int:
    """How many nodes ORT's CPU EP runs for the case under the case's opt level."""
    built = spec.build()
    options = ort.SessionOptions()
    options.graph_optimization_level = graph_optimization_level(spec.opt_level)
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    session = ort.InferenceSession(built.model_bytes, options, providers=["CPUExecutionProvider"])
    session.run(None, built.inputs)
    return sum(len(sub.get_nodes()) for sub in session.get_provider_graph_assignment_info())


@pytest.mark.parametrize("spec", load_grid("quick"), ids=lambda spec: spec.name)
def test_quick_cases_execute_every_node_under_their_opt_level(spec: CaseSpec) -> None:
    assert _executed_nodes(spec) == spec.n_nodes


def test_identity_chain_keeps_depth_nodes_only_because_optimization_is_off() -> None:
    spec = case_by_name("identity_d10_w4096")
    assert _executed_nodes(spec) == 10
    # The reason for the opt level: with the optimizer on, ORT deletes the chain.
    optimized = CaseSpec(**{**spec.__dict__, "opt_level": "all"})
    assert _executed_nodes(optimized) < 10


# -- the name grammar ----------------------------------------------------------

sizes = st.integers(min_value=1, max_value=4096)
depths = st.integers(min_value=1, max_value=MAX_DEPTH)
rows = st.integers(min_value=1, max_value=64)


@st.composite
def specs(draw: st.DrawFn) -> CaseSpec:
    kind = draw(st.sampled_from(["chain", "binary", "matmul"]))
    dynamic = draw(st.booleans())
    batch = draw(rows) if dynamic else 1
    if kind == "chain":
        op = draw(st.sampled_from(["Identity", "Relu", "Sigmoid"]))
        return chain_case(op, draw(depths), draw(sizes), dynamic, batch=batch)
    if kind == "binary":
        op = draw(st.sampled_from(["Add", "Mul"]))
        return binary_case(op, draw(depths), draw(sizes), dynamic, batch=batch)
    return matmul_case(draw(rows), draw(sizes), draw(sizes), dynamic)


@given(specs())
@settings(max_examples=300, deadline=None)
def test_every_spec_round_trips_through_its_name(spec: CaseSpec) -> None:
    assert case_by_name(spec.name) == spec


@given(st.text(alphabet=string.ascii_lowercase + string.digits + "_x:", max_size=24))
@settings(max_examples=200, deadline=None)
def test_any_string_is_a_canonical_name_or_a_case_error(text: str) -> None:
    try:
        spec = case_by_name(text)
    except CaseError as exc:
        assert exc.message.startswith(("unknown case", "case ", "invalid case", f"{text!r}"))
    else:
        assert spec.name == text


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("relu_d100_w8", dict(kind="chain", op="Relu", depth=100, width=8, dynamic=False)),
        ("relu_d10_w4096_dyn", dict(op="Relu", depth=10, width=4096, dynamic=True, batch=1)),
        ("relu_d10_w8_dyn_b4", dict(dynamic=True, batch=4)),
        ("add_d10_w8", dict(kind="binary", op="Add", depth=10, width=8)),
        ("mul_d3_w5", dict(kind="binary", op="Mul")),
        ("identity_d1_w4096", dict(op="Identity", opt_level="disabled")),
        ("matmul_128x128", dict(kind="matmul", m=1, k=128, n=128, dynamic=False)),
        ("matmul_512x256_dyn", dict(m=1, k=512, n=256, dynamic=True, batch=1)),
        ("matmul_8x64x32", dict(m=8, k=64, n=32, dynamic=False, batch=1)),
        ("matmul_8x64x32_dyn", dict(m=8, k=64, n=32, dynamic=True, batch=8)),
    ],
)
def test_names_denote_the_documented_cases(name: str, fields: dict) -> None:
    spec = case_by_name(name)
    assert {key: getattr(spec, key) for key in fields} == fields


@pytest.mark.parametrize(
    ("typo", "suggested"),
    [
        ("rleu_d100_w8", "relu_d100_w8"),
        ("relu_d100_w8_dny", "relu_d100_w8_dyn"),
        ("matmul128x128", "matmul_128x128"),
        ("sigmod_d10_w4096", "sigmoid_d10_w4096"),
    ],
)
def test_unknown_names_suggest_the_nearest(typo: str, suggested: str) -> None:
    with pytest.raises(CaseError, match=f"unknown case '{typo}'") as info:
        case_by_name(typo)
    _, suggestions = info.value.message.split("did you mean ", 1)
    assert f"'{suggested}'" in suggestions


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("matmul_1x128x128", "matmul_128x128"),
        ("relu_d010_w8", "relu_d10_w8"),
        ("relu_d1_w8_dyn_b1", "relu_d1_w8_dyn"),
    ],
)
def test_non_canonical_spellings_point_at_the_canonical_one(spelling: str, canonical: str) -> None:
    with pytest.raises(CaseError, match=f"is spelled '{canonical}': use that name"):
        case_by_name(spelling)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("relu_d0_w8", "depth must be a positive integer"),
        (f"relu_d{MAX_DEPTH + 1}_w8", "depth must be at most"),
        ("matmul_100000x100000", "exceed"),
        ("relu_d1_w8_b4", "matches neither"),  # batch only with _dyn
    ],
)
def test_impossible_sizes_are_refused(name: str, reason: str) -> None:
    with pytest.raises(CaseError, match=reason):
        case_by_name(name)


def test_a_model_name_points_at_the_model_option() -> None:
    with pytest.raises(CaseError, match="--model PATH.onnx"):
        case_by_name("model:resnet")


# -- grid files ----------------------------------------------------------------


def test_unknown_grid_suggests_the_nearest() -> None:
    with pytest.raises(CaseError, match="unknown grid 'defualt': did you mean 'default'"):
        load_grid("defualt")


@pytest.fixture
def grid_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(grids, "GRIDS_DIR", tmp_path)
    return tmp_path


def _write(directory: Path, name: str, text: str) -> None:
    (directory / f"{name}.toml").write_text(text)


def test_includes_come_first_and_duplicates_are_kept_once(grid_dir: Path) -> None:
    _write(grid_dir, "base", '[grid]\ndescription = "b"\ncases = ["relu_d1_w8", "add_d1_w8"]\n')
    _write(grid_dir, "more", '[grid]\ndescription = "m"\ninclude = ["base"]\n'
           'cases = ["matmul_4x4", "relu_d1_w8"]\n')
    assert [s.name for s in load_grid("more")] == ["relu_d1_w8", "add_d1_w8", "matmul_4x4"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[grid\ncases = ["relu_d1_w8"]\n', "not valid TOML"),
        ('cases = ["relu_d1_w8"]\n', "exactly one \\[grid\\] table"),
        ('[grid]\ncases = ["relu_d1_w8"]\n', "needs a non-empty description"),
        ('[grid]\ndescription = "d"\ncases = "relu_d1_w8"\n', "cases must be a list of strings"),
        ('[grid]\ndescription = "d"\ncases = []\n', "lists no cases"),
        ('[grid]\ndescription = "d"\ncase = ["relu_d1_w8"]\n', "unknown keys \\['case'\\]"),
        ('[grid]\ndescription = "d"\ncases = ["relu_d1_w9x"]\n',
         "grid 'bad': unknown case 'relu_d1_w9x'"),
        ('[grid]\ndescription = "d"\ninclude = ["bad"]\ncases = ["relu_d1_w8"]\n',
         "include cycle bad -> bad"),
        ('[grid]\ndescription = "d"\ninclude = ["nope"]\ncases = ["relu_d1_w8"]\n',
         "unknown grid 'nope'"),
    ],
)
def test_broken_grid_files_name_the_problem(grid_dir: Path, text: str, message: str) -> None:
    _write(grid_dir, "bad", text)
    with pytest.raises(CaseError, match=message):
        load_grid("bad")
