"""Small pieces of raw ASGI shared by the endpoints that sit in front of a Falcon app (the
admin and the platform MCP endpoints): a JSON answer and a request header."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["header", "send_json"]


async def send_json(send: Any, status: int, body: Any, headers: dict[str, str] | None = None
                    ) -> None:
    """Answer `body` as JSON with `status` and extra `headers`."""
    data = json.dumps(body).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    hdrs += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": data})


def header(scope: dict[str, Any], name: bytes) -> bytes | None:
    """The first value of request header `name` (lower case), or None."""
    for k, v in scope.get("headers", []):
        if k.lower() == name:
            return bytes(v)
    return None
