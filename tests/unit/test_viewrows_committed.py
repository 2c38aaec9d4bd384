"""`dbclient.viewrows.committed_row`: a `_00_query` row posted by a database event (transport
http, before its write commits) is read until the committed row reflects it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dbclient import viewrows
from dbclient.viewrows import committed_row

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def reads(*rows: Any) -> tuple[Any, list[int]]:
    """A read returning `rows` one after the other (the last one from then on)."""
    calls = [0]

    async def read() -> Any:
        calls[0] += 1
        return rows[min(calls[0], len(rows)) - 1]
    return read, calls


def request(at: datetime, **extra: Any) -> dict[str, Any]:
    return {"surql": "SELECT * FROM t", "lastActiveAt": at, **extra}


async def test_a_fed_row_is_read_once() -> None:
    read, calls = reads(None, request(T0))
    assert await committed_row(read, None) is None
    assert calls[0] == 1


async def test_a_created_row_is_waited_for_until_committed() -> None:
    read, calls = reads(None, None, request(T0))
    assert await committed_row(read, request(T0)) == request(T0)
    assert calls[0] == 3


async def test_an_updated_row_is_waited_for_until_its_new_last_active_at() -> None:
    older, posted = request(T0), request(T0 + timedelta(seconds=2))
    read, calls = reads(older, older, posted)
    # the posted copy may carry the instant as text (JSON) where the read has a datetime
    assert await committed_row(read, {**posted, "lastActiveAt": "2026-01-01T12:00:02Z"}) \
        == posted
    assert calls[0] == 3


async def test_an_answered_row_needs_no_wait() -> None:
    answered = request(T0, state="ready")
    read, calls = reads(answered)
    assert await committed_row(read, request(T0 + timedelta(seconds=5))) == answered
    assert calls[0] == 1


async def test_a_write_that_never_commits_gives_the_row_as_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(viewrows, "POSTED_COMMIT_SECS", 0.05)
    read, _calls = reads(None)
    assert await committed_row(read, request(T0)) is None
