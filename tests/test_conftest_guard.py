"""The session's guard (tests/conftest.py): a part of the package that is missing or
comes from another checkout stops the run with a UsageError's one line, no traceback."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec

from tests.conftest import misplaced_parts
from tests.support.staged import FOLDERS

REMEDY = "run `make setup` here and use its .venv (and no PYTHONPATH)"


def test_this_checkout_passes_the_guard():
    assert misplaced_parts() is None


def test_a_part_that_is_not_installed_is_named_not_an_attribute_error():
    def find_spec(name: str) -> ModuleSpec | None:
        return None if name == "epbench.reports" else importlib.util.find_spec(name)

    assert misplaced_parts(find_spec) == (
        f"this checkout's tests cannot import epbench.reports; {REMEDY}")


def test_a_part_under_a_missing_parent_and_one_without_a_file_are_named():
    def find_spec(name: str) -> ModuleSpec | None:
        if name == "epbench.cases":
            raise ModuleNotFoundError("No module named 'epbench'")
        if name == "epbench.engine":
            return ModuleSpec(name, None)  # a namespace package: no origin
        return importlib.util.find_spec(name)

    assert misplaced_parts(find_spec) == (
        f"this checkout's tests cannot import epbench.cases, epbench.engine; {REMEDY}")


def test_a_part_from_another_checkout_is_named_with_where_it_comes_from(tmp_path):
    other = tmp_path / "other" / "harness" / "__init__.py"

    def find_spec(name: str) -> ModuleSpec | None:
        if name == "epbench.harness":
            return ModuleSpec(name, None, origin=str(other))
        return importlib.util.find_spec(name)

    assert misplaced_parts(find_spec) == (
        f"this checkout's tests would run epbench.harness from {other}; {REMEDY}")
    assert "epbench.harness" in FOLDERS
