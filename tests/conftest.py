"""Shared fixtures: real processes on loopback ports, always stopped afterwards."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.support import cpu_report, lifeline, suite_order
from tests.support.procs import DbHost, start_db_host

# Property tests judge results, never speed: Hypothesis's wall-clock checks (an example past
# its deadline, input generation "too slow") fail on a shared 2-core machine under load (a
# 1 s draw in a full run, 2026-12-02), so the suite's profile turns them off.
settings.register_profile("suite", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


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


def _time_limit(item: pytest.Item) -> float:
    """The test's pytest-timeout limit in seconds (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    try:
        return float(item.config.getini("timeout") or 0)
    except ValueError:
        return 0.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A test that ran past its time limit fails even when it passed. pytest-timeout's signal
    lands as an exception in whatever runs at that moment: inside an asyncio task's step the
    task keeps it and the test goes on (one ran 344 s of a 300 s limit and passed)."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    limit = _time_limit(item)
    if report.when == "call" and report.passed and limit and report.duration > limit:
        report.outcome = "failed"
        report.longrepr = (f"the test passed after {report.duration:.0f} s, past its "
                           f"{limit:.0f} s limit (the timeout's signal was swallowed)")


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
