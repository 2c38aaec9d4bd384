"""Shared fixtures: real processes on loopback ports, always stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import cpu_report, lifeline, suite_order
from tests.support.procs import DbHost, start_db_host


def pytest_configure(config: pytest.Config) -> None:
    # a worker of a killed run must not live on with the processes its tests started
    lifeline.bind_xdist_worker()
    cpu_report.register(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With ``--dist loadfile`` (the whole run, ops/test) the most expensive modules go first,
    so no long module starts last while the other worker idles (tests/support/suite_order.py)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    return suite_order.make_scheduler(config, log)


@pytest.fixture
def db_host(tmp_path: Path) -> Iterator[DbHost]:
    """A memory-only database host for one test."""
    host = start_db_host(tmp_path, memory=True)
    try:
        yield host
    finally:
        host.process.stop()


@pytest.fixture(scope="module")
def shared_db_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DbHost]:
    """One memory-only database host shared by a test module (use distinct ns/db per test)."""
    host = start_db_host(tmp_path_factory.mktemp("dbhost"), memory=True)
    try:
        yield host
    finally:
        host.process.stop()


@pytest.fixture(scope="module")
def host(shared_db_host: DbHost) -> DbHost:
    """The module's database host (the shared one); a module may override it with its own."""
    return shared_db_host
