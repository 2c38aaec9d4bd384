"""`GET /logs`: the hub's log lines as server-sent events.

The gateway polls the hub (`ipc.messages.logs_poll`) and frames each line as one SSE message
whose `id` is the line's number, so a reconnecting `EventSource` resumes with `Last-Event-ID`.
A viewer that fell behind the hub's buffer gets an explicit `event: gap` message. Query:
`tail` (default true; false sends the backfill and closes) and `backfill` (default 100 lines,
at most 10,000). Falcon's `resp.sse` drives the stream because it watches for the client's
disconnect; it notices after the next message, hence the periodic keep-alive comment.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from falcon.asgi import SSEvent

from ipc.httperrors import bad_request
from ipc.messages import ErrorCode, logs_poll
from ipc.sse import RawEvent, frame

from .hub import HubLink, HubUnavailable

log = logging.getLogger("gateway.sse")

DEFAULT_BACKFILL = 100
MAX_BACKFILL = 10_000


def parse_tail(raw: str | None) -> bool:
    """The `tail` query value: true/false, 1/0, yes/no (default true); else 400."""
    if raw is None or raw == "":
        return True
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise bad_request(f"query tail must be true or false, got {raw[:40]!r}")


def parse_backfill(raw: str | None) -> int:
    """The `backfill` query value: an integer 0..10000 (default 100); else 400."""
    if raw is None or raw == "":
        return DEFAULT_BACKFILL
    try:
        value = int(raw.strip())
    except ValueError:
        raise bad_request(f"query backfill must be an integer 0..{MAX_BACKFILL}, got {raw[:40]!r}") from None
    if not 0 <= value <= MAX_BACKFILL:
        raise bad_request(f"query backfill must be an integer 0..{MAX_BACKFILL}, got {value}")
    return value


def parse_last_event_id(raw: str | None) -> int | None:
    """A numeric `Last-Event-ID` header (a reconnecting viewer) or None."""
    if raw is None:
        return None
    text = raw.strip()
    return int(text) if text.isdigit() and len(text) < 20 else None


def check_logs_body(body: Any) -> str | None:
    """None when a `/logs` reply body is `{lines: [...], cursor: int, gap: bool}`."""
    if not isinstance(body, dict):
        return "logs reply body is not a map"
    if not isinstance(body.get("lines"), list):
        return "logs reply has no lines array"
    cursor = body.get("cursor")
    if not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 0:
        return "logs reply cursor is not a non-negative integer"
    return None


def frame_batch(body: dict[str, Any]) -> bytes:
    """The SSE bytes for one hub reply: a gap notice when flagged, then each numbered line."""
    lines: list[Any] = body["lines"]
    cursor: int = body["cursor"]
    out: list[bytes] = []
    if body.get("gap"):
        out.append(frame(json.dumps({"message": "log lines were dropped before this viewer read them"}),
                         event="gap"))
    first = cursor - len(lines) + 1
    for i, line in enumerate(lines):
        text = line if isinstance(line, str) else json.dumps(line, ensure_ascii=False, default=str)
        out.append(frame(text, event_id=str(first + i)))
    return b"".join(out)


class LogStream:
    """Polls the hub for lines after a cursor and yields them as SSE messages."""

    def __init__(
        self,
        hub: HubLink,
        first: dict[str, Any],
        *,
        tail: bool,
        timeout: float = 5.0,
        poll_interval: float = 0.25,
        keepalive: float = 5.0,
    ) -> None:
        self._hub = hub
        self._first = first
        self._tail = tail
        self._timeout = timeout
        self._poll_interval = poll_interval
        self._keepalive = keepalive

    async def events(self) -> AsyncIterator[SSEvent]:
        """The stream for `resp.sse`; ends after the backfill when not tailing."""
        yield RawEvent(b"retry: 2000\n\n")
        body = self._first
        if body["lines"] or body.get("gap"):
            yield RawEvent(frame_batch(body))
        if not self._tail:
            return
        cursor: int = body["cursor"]
        had_lines = bool(body["lines"])
        quiet = 0.0
        while True:
            if not had_lines:  # drain a backlog at once, otherwise poll at a steady pace
                await asyncio.sleep(self._poll_interval)
                quiet += self._poll_interval
            polled = await self._poll(cursor)
            if polled is None:
                stopped = {"error": ErrorCode.NOT_READY, "message": "the SSP hub stopped answering"}
                yield RawEvent(frame(json.dumps(stopped), event="error"))
                return
            had_lines = bool(polled["lines"])
            if had_lines or polled.get("gap"):
                yield RawEvent(frame_batch(polled))
                quiet = 0.0
            elif quiet >= self._keepalive:
                # also how Falcon notices a viewer that went away
                yield RawEvent(b": keepalive\n\n")
                quiet = 0.0
            cursor = polled["cursor"]

    async def _poll(self, cursor: int) -> dict[str, Any] | None:
        try:
            reply = await self._hub.call(logs_poll(cursor=cursor, timeout_secs=self._timeout), self._timeout)
        except HubUnavailable:
            return None
        body = reply.get("body") if isinstance(reply, dict) else None
        if not isinstance(reply, dict) or reply.get("status") != 200 or check_logs_body(body) is not None:
            log.error("GET /logs: unusable hub reply, ending the stream")
            return None
        assert isinstance(body, dict)
        return body
