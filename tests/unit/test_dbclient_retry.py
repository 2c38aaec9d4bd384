"""`dbclient.errors.retry_conflicts`: a call that lost a write conflict runs again, other
failures do not; and the hub answers a conflict it could not win with 503, not 500."""

from __future__ import annotations

import pytest

from dbclient import DbQueryError, DbTimeout
from dbclient.errors import retry_conflicts
from ssp.hub.errors import failure_reply

CONFLICT = ("There was a problem with the key-value store: Transaction conflict: Transaction "
            "write conflict. This transaction can be retried")


class Calls:
    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.n = 0

    async def __call__(self) -> str:
        self.n += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


async def test_a_lost_write_conflict_is_run_again() -> None:
    call = Calls(DbQueryError(CONFLICT, 0), DbQueryError(CONFLICT, 0))
    assert await retry_conflicts(call, first_delay=0.001) == "done"
    assert call.n == 3


async def test_a_refusal_is_not_run_again() -> None:
    call = Calls(DbQueryError("Found record: `x:1` which already exists", 0))
    with pytest.raises(DbQueryError, match="already exists"):
        await retry_conflicts(call, first_delay=0.001)
    assert call.n == 1


async def test_the_last_conflict_is_raised_after_the_attempts() -> None:
    call = Calls(*(DbQueryError(CONFLICT, 0) for _ in range(5)))
    with pytest.raises(DbQueryError, match="can be retried"):
        await retry_conflicts(call, attempts=3, first_delay=0.001)
    assert call.n == 3


async def test_a_timeout_is_not_a_conflict() -> None:
    call = Calls(DbTimeout("query", 10))
    with pytest.raises(DbTimeout):
        await retry_conflicts(call, first_delay=0.001)
    assert call.n == 1


def test_the_hub_answers_a_lost_conflict_with_503_and_a_refusal_with_500() -> None:
    busy = failure_reply("POST /view/register", DbQueryError(CONFLICT, 0))
    assert busy is not None and busy["status"] == 503, busy
    refused = failure_reply("POST /view/register", DbQueryError("Found record", 0))
    assert refused is not None and refused["status"] == 500, refused
