"""User models as cases: input synthesis, every error path, and the cases CLI helpers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from epbench.cases import describe_cases, load_grid, model_case, write_cases
from epbench.cases.spec import MODEL_TOLERANCE, CaseSpec
from epbench.cases.usermodel import INTEGER_INPUT_HIGH
from epbench.core.errors import CaseError


def _save(
    path: Path, inputs: list, nodes: list | None = None, initializers=(), out_shape=(1, 3)
) -> Path:
    """A model that passes each input through an Identity node (or runs `nodes`,
    whose result `out` is float of shape `out_shape`)."""
    if nodes is None:
        nodes = [helper.make_node("Identity", [v.name], [f"{v.name}_out"]) for v in inputs]
        outputs = [helper.make_value_info(f"{v.name}_out", v.type) for v in inputs]
    else:
        outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, list(out_shape))]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, str(path))
    return path


TYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.UINT8: np.uint8,
    TensorProto.BOOL: np.bool_,
}


@pytest.fixture
def typed_model(tmp_path: Path) -> Path:
    inputs = [
        helper.make_tensor_value_info(f"in_{TensorProto.DataType.Name(t).lower()}", t,
                                      ["batch", 3] if i % 2 else [2, "seq"])
        for i, t in enumerate(TYPES)
    ]
    return _save(tmp_path / "typed.onnx", inputs)


def test_inputs_are_synthesized_from_declared_types_and_dims(typed_model: Path) -> None:
    spec = model_case(typed_model, {"batch": 4, "seq": 5, "unused": 9})
    assert spec.name == "model:typed"
    assert spec.kind == "model"
    assert spec.path == str(typed_model.resolve())
    assert spec.dims == (("batch", 4), ("seq", 5))  # only the dims the model uses
    assert spec.tolerance == MODEL_TOLERANCE and spec.opt_level == "all"
    built = spec.build()
    assert built.model_bytes == typed_model.read_bytes()
    assert built.n_nodes == spec.n_nodes == len(TYPES)
    for i, (elem, dtype) in enumerate(TYPES.items()):
        array = built.inputs[f"in_{TensorProto.DataType.Name(elem).lower()}"]
        assert array.dtype == dtype
        assert array.shape == ((4, 3) if i % 2 else (2, 5))
    floats = built.inputs["in_float"]
    assert floats.min() >= 0 and floats.max() < 1 and len(np.unique(floats)) > 1
    ints = built.inputs["in_int64"]
    assert ints.min() >= 0 and ints.max() < INTEGER_INPUT_HIGH
    # ORT accepts every synthesized input as declared.
    session = ort.InferenceSession(built.model_bytes, providers=["CPUExecutionProvider"])
    outputs = session.run(None, built.inputs)
    for array, expected in zip(outputs, built.inputs.values(), strict=True):
        np.testing.assert_array_equal(array, expected)


def test_model_inputs_are_reproducible_and_the_spec_round_trips(typed_model: Path) -> None:
    spec = model_case(typed_model, {"batch": 2, "seq": 2})
    assert CaseSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    def sha(batch: int) -> str:
        return model_case(typed_model, {"batch": batch, "seq": 2}).definition_sha256

    assert spec.definition_sha256 == sha(2)
    assert spec.definition_sha256 != sha(3)


def test_initializers_listed_as_inputs_are_not_fed(tmp_path: Path) -> None:
    weight = numpy_helper.from_array(np.ones((1, 3), np.float32), "w")
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
        helper.make_tensor_value_info("w", TensorProto.STRING, [1, 3]),  # would be refused
    ]
    weight_input = helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 3])
    path = _save(tmp_path / "init.onnx", [inputs[0], weight_input],
                 nodes=[helper.make_node("Add", ["x", "w"], ["out"])], initializers=[weight])
    assert list(model_case(path, {}).build().inputs) == ["x"]


def test_external_data_is_inlined_for_ort(tmp_path: Path) -> None:
    weight = numpy_helper.from_array(np.full((1, 256), 2.0, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["out"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 256])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    assert (tmp_path / "ext.data").exists()
    built = model_case(path, {"n": 2}).build()
    session = ort.InferenceSession(built.model_bytes, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, built.inputs)[0], built.inputs["x"] * 2)


# -- errors: one clear line naming the problem and the remedy ------------------------


def test_missing_symbolic_dim_names_it(typed_model: Path) -> None:
    with pytest.raises(CaseError) as info:
        model_case(typed_model, {"batch": 1})
    assert info.value.message == (
        "input 'in_float' has symbolic dim 'seq': pass --dim seq=VALUE"
    )


@pytest.mark.parametrize("value", [0, -3, True, "4"])
def test_dim_values_must_be_positive_integers(typed_model: Path, value) -> None:
    with pytest.raises(CaseError, match="a dim must be a positive integer"):
        model_case(typed_model, {"batch": 2, "seq": value})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CaseError, match="nope.onnx not found: check the path"):
        model_case(tmp_path / "nope.onnx", {})


@pytest.mark.parametrize(
    ("content", "first_line"),
    [
        (b"\x0a\xff\xff\xff\xff\x0f", "Unable to parse proto"),  # not protobuf
        (b"\x00\x01 some text", "The model does not have an ir_version"),  # protobuf, not a model
    ],
)
def test_not_an_onnx_file(tmp_path: Path, content: bytes, first_line: str) -> None:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(content)
    with pytest.raises(CaseError, match=f"fails onnx.checker: {first_line}") as info:
        model_case(path, {})
    assert "\n" not in info.value.message


@pytest.mark.parametrize(
    ("node", "first_line"),
    [
        (helper.make_node("NoSuchOp", ["x"], ["out"]), "No Op registered for NoSuchOp"),
        (helper.make_node("MatMul", ["x", "x"], ["out"]), "ShapeInferenceError"),
    ],
)
def test_model_failing_the_checker_gives_its_first_line(
    tmp_path: Path, node, first_line: str
) -> None:
    path = _save(tmp_path / "bad.onnx", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [2, 3])], nodes=[node])
    with pytest.raises(CaseError, match=f"fails onnx.checker: .*{first_line}") as info:
        model_case(path, {})
    assert "\n" not in info.value.message
    assert info.value.message.endswith("fix or re-export the model")


def test_unsupported_tensor_type_names_input_and_type(tmp_path: Path) -> None:
    path = _save(tmp_path / "s.onnx", [helper.make_tensor_value_info("text", TensorProto.STRING,
                                                                     [1])])
    with pytest.raises(CaseError, match="input 'text' has type tensor\\(string\\), which "
                                        "epbench cannot synthesize"):
        model_case(path, {})


def test_non_tensor_input_is_refused(tmp_path: Path) -> None:
    sequence = helper.make_tensor_sequence_value_info("items", TensorProto.FLOAT, [2])
    path = _save(tmp_path / "seq.onnx", [sequence],
                 nodes=[helper.make_node("SequenceLength", ["items"], ["count"]),
                        helper.make_node("Cast", ["count"], ["out"], to=TensorProto.FLOAT)],
                 out_shape=())
    with pytest.raises(CaseError, match="input 'items' has type sequence_type"):
        model_case(path, {})


def test_input_without_shape_is_refused(tmp_path: Path) -> None:
    # The checker already insists on a shape for graph inputs; still one clear line.
    path = _save(tmp_path / "ns.onnx", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      None)])
    with pytest.raises(CaseError, match="fails onnx.checker: Field 'shape' of 'type' is required"):
        model_case(path, {})


def test_input_with_anonymous_dim_is_refused(tmp_path: Path) -> None:
    path = _save(tmp_path / "anon.onnx", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        [None, 3])])
    with pytest.raises(CaseError, match="input 'x' dim 0 has neither a size nor a name"):
        model_case(path, {})


def test_model_deleted_after_the_case_was_made(typed_model: Path) -> None:
    spec = model_case(typed_model, {"batch": 1, "seq": 1})
    typed_model.unlink()
    with pytest.raises(CaseError, match="not found"):
        spec.build()


# -- describe_cases / write_cases (for `epbench cases list|build`) ------------------


def test_describe_cases_rows() -> None:
    rows = describe_cases(load_grid("quick"))
    assert [row["name"] for row in rows] == [spec.name for spec in load_grid("quick")]
    by_name = {row["name"]: row for row in rows}
    assert by_name["add_d10_w8"]["inputs"] == {
        "x": {"dtype": "float32", "shape": [1, 8]},
        "y": {"dtype": "float32", "shape": [1, 8]},
    }
    assert by_name["identity_d10_w8"]["opt_level"] == "disabled"
    assert by_name["identity_d10_w8"]["nodes"] == 10
    json.dumps(rows)  # JSON-able


def test_write_cases_round_trips(tmp_path: Path, typed_model: Path) -> None:
    specs = [*load_grid("quick")[:2], model_case(typed_model, {"batch": 1, "seq": 2})]
    out = tmp_path / "out" / "nested"
    written = write_cases(specs, out)
    assert sorted(path.name for path in written) == sorted(
        ["relu_d1_w8.onnx", "relu_d1_w8.inputs.npz", "relu_d10_w8.onnx",
         "relu_d10_w8.inputs.npz", "model_typed.onnx", "model_typed.inputs.npz", "cases.json"]
    )
    manifest = json.loads((out / "cases.json").read_text())["cases"]
    for spec, entry in zip(specs, manifest, strict=True):
        built = spec.build()
        assert CaseSpec.from_dict(entry["spec"]) == spec
        assert entry["definition_sha256"] == built.definition_sha256
        assert (out / entry["model"]).read_bytes() == built.model_bytes
        with np.load(out / entry["inputs"]) as saved:
            assert sorted(saved.files) == sorted(built.inputs)
            for name, array in built.inputs.items():
                np.testing.assert_array_equal(saved[name], array)
                assert saved[name].dtype == array.dtype


def test_write_cases_into_an_unwritable_place(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(CaseError, match="cannot write cases to .*choose a writable --out"):
        write_cases(load_grid("quick")[:1], blocker / "sub")


def test_a_saved_case_reads_back_as_the_same_definition(typed_model: Path, tmp_path: Path) -> None:
    """What the runner saves for its workers (cases.built) is the case itself: every input
    by name, in order, with its dtype and shape, and the same model bytes, so the same
    definition hash, for a user model of seven types and a synthetic case."""
    from epbench.cases.built import load_built_case, save_built_case
    from epbench.cases.grids import case_by_name

    folder = tmp_path / "saved"
    folder.mkdir()
    for i, spec in enumerate((model_case(typed_model, {"batch": 4, "seq": 5}),
                              case_by_name("add_d10_w8"))):
        built = spec.build()
        back = load_built_case(save_built_case(built, folder, f"case{i}"))
        assert list(back.inputs) == list(built.inputs)
        assert [(a.dtype, a.shape) for a in back.inputs.values()] == [
            (a.dtype, a.shape) for a in built.inputs.values()]
        assert back.model_bytes == built.model_bytes and back.n_nodes == built.n_nodes
        assert back.definition_sha256 == spec.definition_sha256


def test_a_saved_case_keeps_input_names_that_numpy_would_misread(tmp_path: Path) -> None:
    """Inputs are saved by position with their names in the record: a name that is numpy's
    own (`file`, savez's argument; `arr_0`, its default key, here in the wrong order) or
    not a file name (`a/b:0`) comes back as itself, with its array."""
    from epbench.cases.built import BuiltCase, load_built_case, save_built_case

    names = ("file", "arr_1", "arr_0", "a/b:0")
    inputs = {n: np.full((2, i + 1), i, dtype=np.int32 if i % 2 else np.float16)
              for i, n in enumerate(names)}
    built = BuiltCase(model_bytes=b"not a model", inputs=inputs, n_nodes=3)
    back = load_built_case(save_built_case(built, tmp_path, "case0"))
    assert list(back.inputs) == list(names)
    for name in names:
        np.testing.assert_array_equal(back.inputs[name], inputs[name])
        assert back.inputs[name].dtype == inputs[name].dtype
    assert back.definition_sha256 == built.definition_sha256
