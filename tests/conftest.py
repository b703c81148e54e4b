"""Fixtures shared by several test modules."""

from __future__ import annotations

import importlib.util
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from importlib.machinery import ModuleSpec
from pathlib import Path

import grimp
import pytest

from tests.support.postgres import PgServer, server_or_skip
from tests.support.staged import FOLDERS, import_graph, stage

# Hypothesis keeps its examples and Unicode tables in .hypothesis/ under the working
# directory: the checkout, which the build guard watches. Under xdist a build in one worker
# saw the other worker's writes there and refused (CI, 2026-12-07). Read at first use.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "epbench-tests-hypothesis"))


def misplaced_parts(find_spec: Callable[[str], ModuleSpec | None] = importlib.util.find_spec,
                    ) -> str | None:
    """Why this checkout's tests would not test this checkout's package, or None.

    docs/design.md, "No links": with PYTHONPATH naming one checkout and a venv installed
    from another, `epbench` comes from the first and its parts from the second; a part
    not installed at all has no spec (or, under a missing parent, raises).
    """
    remedy = "run `make setup` here and use its .venv (and no PYTHONPATH)"
    found: dict[str, str | None] = {}
    for name in FOLDERS:
        try:
            spec = find_spec(name)
        except ModuleNotFoundError:  # its parent package is not importable
            spec = None
        found[name] = spec.origin if spec is not None else None
    missing = sorted(name for name, origin in found.items() if origin is None)
    if missing:
        return f"this checkout's tests cannot import {', '.join(missing)}; {remedy}"
    elsewhere = {name: origin for name, origin in found.items()
                 if not Path(str(origin)).resolve().is_relative_to(FOLDERS[name].resolve())}
    if elsewhere:
        return (f"this checkout's tests would run {', '.join(sorted(elsewhere))} from "
                f"{sorted(set(map(str, elsewhere.values())))[0]}; {remedy}")
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    problem = misplaced_parts()
    if problem is not None:
        raise pytest.UsageError(problem)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `make test` hands whole files to two xdist workers in the order collected
    # (--no-loadscope-reorder): the files with `slow` tests (minutes, some) go first, so
    # none starts last and holds up the end while the other worker is idle. A stable
    # sort: each file's tests keep their order, the files theirs within each group.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throw-away PostgreSQL server for the whole session, stopped at its end."""
    server = server_or_skip()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty history store on each backend: a SQLite file, then a database of
    the session's PostgreSQL server (both backends pass the same tests)."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    server: PgServer = request.getfixturevalue("pg_server")
    name = "h_" + uuid.uuid4().hex[:12]
    server.createdb(name)
    return server.url(database=name)


@pytest.fixture(autouse=True)
def _no_user_cache_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # EPBENCH_CACHE_DIR outranks XDG_CACHE_HOME (epbench/core/paths.py): a developer's own
    # setting would steer the tests that point XDG_CACHE_HOME at a temporary folder.
    monkeypatch.delenv("EPBENCH_CACHE_DIR", raising=False)


@pytest.fixture(scope="session")
def staged_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder that holds `epbench` as its wheel installs it (tests/support/staged.py)."""
    return stage(tmp_path_factory.mktemp("staged") / "site")


@pytest.fixture(scope="session")
def package_graph(staged_package: Path) -> grimp.ImportGraph:
    """grimp's import graph of the whole package, read from the staged wheel."""
    return import_graph(staged_package)
