"""Cross-origin reads of the service's public routes (Falcon ASGI middleware).

A browser app served from its own origin checks the service's `GET /health` to tell a live
view from one that may be missing changes (the client libraries report `gap` when it fails).
Without CORS headers the browser hides the answer from the page, so every health check looks
like an outage. The routes named here hold no secret and need no credential, so any origin may
read them; no other route gets a CORS header, and credentials are never allowed
(`Access-Control-Allow-Credentials` is not sent).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import falcon
import falcon.asgi

MAX_AGE_SECS = "600"  # how long a browser may reuse a preflight's answer


class PublicCors:
    """`Access-Control-Allow-Origin: *` on GET/HEAD of ``paths``, and their OPTIONS preflight
    answered 204 before any authentication runs (list it first among the middleware)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = frozenset(paths)

    async def process_request(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        if req.method == "OPTIONS" and req.path in self.paths:
            resp.status = falcon.HTTP_204
            resp.set_header("Access-Control-Allow-Origin", "*")
            resp.set_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
            resp.set_header("Access-Control-Max-Age", MAX_AGE_SECS)
            resp.complete = True

    async def process_response(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                               resource: Any, req_succeeded: bool) -> None:
        if req.path in self.paths and req.method in ("GET", "HEAD", "OPTIONS"):
            resp.set_header("Access-Control-Allow-Origin", "*")
