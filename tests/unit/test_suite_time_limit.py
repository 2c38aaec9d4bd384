"""The suite's own rule (tests/conftest.py): a test that ran past its time limit fails even
when pytest-timeout's signal was swallowed by an asyncio task that was running when it came."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest_plugins = ["pytester"]

PROBE = '''
import asyncio, time, pytest

@pytest.mark.timeout(1)
async def test_busy_task_takes_the_signal():
    async def busy():
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            pass
    task = asyncio.ensure_future(busy())
    await asyncio.sleep(1.8)
    assert task.done()  # the signal's exception went into the task, not the test

@pytest.mark.timeout(5)
async def test_within_its_limit():
    await asyncio.sleep(0.05)
'''


def test_a_swallowed_timeout_still_fails_the_test(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini("[pytest]\nasyncio_mode = auto\n")
    pytester.makeconftest("from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    pytester.makepyfile(test_probe=PROBE)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*past its 1 s limit*"])
