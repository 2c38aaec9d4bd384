"""Server-sent events framing our HTTP listeners share (the SSP gateway's `/logs`, the admin
plane's streams): one message as bytes (`frame`) and a Falcon event that sends them as they
are (`RawEvent`)."""

from __future__ import annotations

from typing import Any

from falcon.asgi import SSEvent

__all__ = ["RawEvent", "frame"]


class RawEvent(SSEvent):
    """Pre-framed SSE bytes (Falcon's SSEvent does not split multi-line data)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        super().__init__()
        self.raw = raw

    def __bool__(self) -> bool:
        return True

    def serialize(self, handler: Any = None) -> bytes:
        """The bytes as given."""
        return self.raw


def frame(data: str, *, event: str | None = None, event_id: str | None = None) -> bytes:
    """One SSE message: every line of `data` becomes its own `data:` field."""
    parts: list[str] = []
    if event is not None:
        parts.append(f"event: {event}\n")
    if event_id is not None:
        parts.append(f"id: {event_id}\n")
    for line in data.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        parts.append(f"data: {line}\n")
    parts.append("\n")
    return "".join(parts).encode("utf-8", "replace")
