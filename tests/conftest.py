"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import PgServer, server_or_skip


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throw-away PostgreSQL server for the whole session, stopped at its end."""
    server = server_or_skip()
    try:
        yield server
    finally:
        server.stop()
