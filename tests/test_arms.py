"""Arm specs: the grammar, keys, registration names, and library resolution errors."""

from __future__ import annotations

import pytest

from epbench.core.errors import ArmError
from epbench.harness.arms import ArmSpec, parse_arm, resolve_library, with_control


@pytest.mark.parametrize(
    ("spec", "kind", "target", "options", "key"),
    [
        ("ort", "ort", None, {}, "ort"),
        ("ort:name=ort_b", "ort", None, {}, "ort_b"),
        ("engine", "engine", None, {}, "engine"),
        ("engine:partition=per_node", "engine", None, {"partition": "per_node"},
         "engine:partition=per_node"),
        ("engine@/tmp/lib.so:name=base", "engine", "/tmp/lib.so", {}, "base"),
        ("plugin:nxrt_ep_cpu", "plugin", "nxrt_ep_cpu", {}, "plugin:nxrt_ep_cpu"),
        ("plugin:/a/libx.so:k=v,name=x", "plugin", "/a/libx.so", {"k": "v"}, "x"),
        ("plugin:C:/odd/path.so", "plugin", "C:/odd/path.so", {}, "path"),
    ],
)
def test_grammar(spec, kind, target, options, key) -> None:
    arm = parse_arm(spec)
    assert (arm.kind, arm.target, arm.ep_options, arm.key) == (kind, target, options, key)


def test_registration_name_is_an_identifier() -> None:
    assert parse_arm("engine:partition=per_node").registration_name == "engine_partition_per_node"
    assert parse_arm("ort").registration_name is None


@pytest.mark.parametrize(
    ("spec", "needle"),
    [("", "empty --arm"), ("gpu", "unknown arm"), ("engine:fast", "KEY=VALUE"),
     ("ort:threads=2", "only name="), ("plugin:", "library path or a module"),
     ("engine@", "needs a library path"), ("engine:name=a b", "must be letters")],
)
def test_bad_specs_say_what_to_write(spec: str, needle: str) -> None:
    with pytest.raises(ArmError, match=needle):
        parse_arm(spec)


def test_control_is_added_first_and_keys_are_unique() -> None:
    arms = with_control([parse_arm("engine")])
    assert [a.key for a in arms] == ["ort", "engine"]
    named = with_control([parse_arm("engine"), parse_arm("ort")])
    assert [a.key for a in named] == ["engine", "ort"]
    with pytest.raises(ArmError, match="used twice"):
        with_control([parse_arm("engine"), parse_arm("engine")])
    with pytest.raises(ArmError, match="reserved"):
        with_control([parse_arm("engine:name=ort")])


def test_missing_library_names_the_path(tmp_path) -> None:
    with pytest.raises(ArmError, match="does not exist"):
        resolve_library(parse_arm(f"plugin:{tmp_path}/nope.so"))
    with pytest.raises(ArmError, match="neither a file nor an installed module"):
        resolve_library(parse_arm("plugin:no_such_module_xyz"))
    with pytest.raises(ArmError, match="no get_library_path"):
        resolve_library(parse_arm("plugin:json"))


def test_module_resolves_through_get_library_path() -> None:
    pytest.importorskip("nxrt_ep_cpu")
    path = resolve_library(parse_arm("plugin:nxrt_ep_cpu"))
    assert path is not None and path.endswith(".so")


def test_unknown_kind_is_refused_when_built() -> None:
    with pytest.raises(ArmError):
        ArmSpec(spec="x", kind="gpu")


@pytest.mark.parametrize("spec", ["ort", "engine:partition=per_node,name=pn", "plugin:/x.so:a=1"])
def test_round_trip_through_the_worker_request(spec) -> None:
    import dataclasses

    arm = dataclasses.replace(parse_arm(spec), name="renamed")
    assert ArmSpec.from_dict(arm.to_dict()) == arm


@pytest.mark.parametrize(
    ("spec", "key"),
    [("plugin:/opt/x/lib/libonnxruntime_ggml_ep.so", "ggml_ep"),
     ("plugin:/a/libmy_ep.so.1.2", "my_ep"),
     ("plugin:./build/my_ep.dll", "my_ep"),
     ("plugin:/a/libmy_ep.so:threads=2", "my_ep:threads=2"),
     ("engine@/tmp/x/libepbench_engine.so", "engine@epbench_engine"),
     ("plugin:/a/lib.so", "lib")],
)
def test_a_library_path_is_labelled_by_its_stem(spec: str, key: str) -> None:
    arm = parse_arm(spec)
    assert arm.key == key
    assert arm.spec == spec  # the whole spec stays, for the results file's arm record


def test_colliding_labels_are_made_unique_and_a_chosen_name_wins() -> None:
    arms = with_control([parse_arm("plugin:/a/libmy_ep.so"), parse_arm("plugin:/b/libmy_ep.so"),
                         parse_arm("plugin:/c/libmy_ep.so")])
    assert [a.key for a in arms] == ["ort", "my_ep", "my_ep_2", "my_ep_3"]
    assert len({a.registration_name for a in arms}) == 4
    chosen = with_control([parse_arm("plugin:/a/libmy_ep.so"), parse_arm("ort:name=my_ep")])
    assert [a.key for a in chosen] == ["ort", "my_ep_2", "my_ep"]
    with pytest.raises(ArmError, match="used twice"):
        with_control([parse_arm("plugin:/a/libmy_ep.so"), parse_arm("plugin:/a/libmy_ep.so")])


def test_an_arm_is_found_by_its_key_or_by_its_spec() -> None:
    from epbench.harness.arms import find_arm

    arms = with_control([parse_arm("plugin:/a/libmy_ep.so")])
    assert find_arm(arms, "my_ep") is arms[1]
    assert find_arm(arms, "plugin:/a/libmy_ep.so") is arms[1]
    assert find_arm(arms, "nope") is None
