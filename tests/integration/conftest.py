"""Fixtures the integration tests share (the database host itself: tests/conftest.py)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest

from dbclient import Database, DbConfig
from tests.support.procs import DbHost

_fresh = itertools.count()


def fresh_names(prefix: str = "it") -> tuple[str, str]:
    """A namespace and database name no other test of the run uses."""
    n = next(_fresh)
    return f"{prefix}ns{n}", f"{prefix}db{n}"


def root_config(host: DbHost, ns: str, db: str) -> DbConfig:
    """Root credentials of `host` on `ns`/`db`."""
    return DbConfig.from_env({"SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user,
                              "SVC_DB_PASS": host.password, "SVC_DB_NS": ns, "SVC_DB_NAME": db})


@pytest.fixture
async def fresh_db(shared_db_host: DbHost) -> AsyncIterator[Database]:
    """A connected root client on a namespace/database of its own on the module's host."""
    database = Database(root_config(shared_db_host, *fresh_names()))
    await database.connect()
    try:
        yield database
    finally:
        await database.close()
