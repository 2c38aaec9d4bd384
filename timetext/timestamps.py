"""ISO 8601 date-times as aware UTC datetimes and epoch milliseconds, and a view's
`lastActiveAt`."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?"
)


def parse_timestamp(text: str) -> datetime:
    """ISO 8601 date-time (`2025-01-31T12:00:00Z`, fractions up to ns, offsets) -> aware UTC.

    A time without an offset is taken as UTC. ValueError says what is wrong.
    """
    stripped = text.strip()
    if not _ISO.fullmatch(stripped):
        raise ValueError(f"must be an ISO 8601 date-time such as 2025-01-31T12:00:00Z, got {text!r}")
    norm = stripped
    if norm[-1] in "Zz":
        norm = norm[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(norm)
    except ValueError:
        raise ValueError(f"is not a valid date-time: {text!r}") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def epoch_ms(value: Any) -> int | None:
    """A datetime (or ISO 8601 text) as epoch milliseconds; None when it is neither."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, str):
        try:
            return int(parse_timestamp(value).timestamp() * 1000)
        except ValueError:
            return None
    return None


#: how far in the future a `lastActiveAt` may lie (clock skew between a client and us)
ACTIVITY_SKEW_MS = 60_000


def activity_ms(value: Any, now: int) -> int | None:
    """A `lastActiveAt` as epoch milliseconds, None when unreadable or later than `now` plus
    the skew: a record user may write its own rows' `lastActiveAt`, and a date in the far
    future would otherwise keep a view alive for ever."""
    ms = epoch_ms(value)
    return None if ms is None or ms > now + ACTIVITY_SKEW_MS else ms
