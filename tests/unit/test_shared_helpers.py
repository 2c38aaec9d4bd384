"""The helpers every component shares instead of its own copy: the retry backoff, the one
value-to-JSON conversion, the one duration parser."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from decimal import Decimal
from uuid import UUID

import pytest
from surrealdb import RecordID
from surrealdb.data.types.duration import Duration

from engine.jsonvalues import json_default, to_json
from engine.values import NONE
from ipc.backoff import Backoff, delay
from timetext.durations import DEFAULT_TTL_MS, parse_duration_ms, parse_duration_ns, ttl_ms


def test_backoff_doubles_up_to_its_cap_and_starts_over_after_a_reset() -> None:
    b = Backoff(0.5, cap=3.0)
    assert [b.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert b.current == 3.0
    b.reset()
    assert b.next() == 0.5
    assert [delay(n, 1.0, cap=30.0) for n in (0, 1, 2, 6, 10_000)] == [1.0, 1.0, 2.0, 30.0, 30.0]


def test_every_surrealdb_value_has_one_json_form() -> None:
    value = {"r": RecordID("user", "alice"), "t": datetime(2025, 1, 31, 12, tzinfo=UTC),
             "d": Decimal("1.50"), "u": UUID(int=1), "dur": Duration(5_400 * 10**9),
             "b": b"\x00\x01", "none": NONE, "nan": math.nan, "set": {1}, "tuple": (1, "a"),
             "nested": [{"r": RecordID("post", 1)}], 7: True}
    assert to_json(value) == {
        "r": "user:alice", "t": "2025-01-31T12:00:00Z", "d": "1.50",
        "u": "00000000-0000-0000-0000-000000000001", "dur": "1h30m", "b": "AAE=",
        "none": None, "nan": None, "set": [1], "tuple": [1, "a"],
        "nested": [{"r": "post:1"}], "7": True}
    # As a json.dumps hook it gives the same text.
    assert json.loads(json.dumps({"r": RecordID("user", "a")}, default=json_default)) == {
        "r": "user:a"}


@pytest.mark.parametrize(("text", "ns"), [("1h30m", 5_400 * 10**9), ("500ms", 5 * 10**8),
                                          ("2w", 14 * 86_400 * 10**9), ("1ns", 1)])
def test_one_duration_parser(text: str, ns: int) -> None:
    assert parse_duration_ns(text) == ns
    assert parse_duration_ms(text) == max(1, ns // 1_000_000)


@pytest.mark.parametrize("text", ["", "1", "h", "1 h", "-1h", "0s", "1h;DROP", "1.5h"])
def test_what_is_not_a_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_ns(text)


def test_a_feed_cursor_reset_with_a_floor_keeps_it_across_a_restart() -> None:
    """After a restore the re-read overlap must never reach the old database's changes: the
    floor is part of the persisted position."""
    from dbclient.feed import FeedCursor

    cur = FeedCursor(5 << 16)
    assert cur.floor == 0
    cur.reset(100 << 16, floor=True)
    again = FeedCursor.from_state(cur.state())
    assert again.floor == 100 << 16 and again.base == 100 << 16
    cur.reset(200 << 16)  # a plain reset (a re-clone) keeps the overlap
    assert FeedCursor.from_state(cur.state()).floor == 0
    assert FeedCursor.from_state({"base": 1, "cursors": {}}).floor == 0  # older state files


def test_a_ttl_text_is_read_the_same_every_time_and_a_bad_one_is_the_default() -> None:
    # ttl_ms keeps the texts it parsed (the TTL sweep reads every row's ttl each minute): a
    # repeated text must still give its own value, and a bad one the default each time.
    for _ in range(3):
        assert ttl_ms("1h30m") == 5_400_000
        assert ttl_ms("90s") == 90_000
        assert ttl_ms("soon") == DEFAULT_TTL_MS
        assert ttl_ms("") == DEFAULT_TTL_MS
    assert ttl_ms(None) == DEFAULT_TTL_MS
