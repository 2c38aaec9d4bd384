"""A fake SSP for scheduler tests: a small aiohttp server on a loopback port (real HTTP).

It answers `/health` (`ready` once told), takes `/ingest` batches (answers from a script of
statuses, then 200) in the typed encoding of `ipc.typed` (decoded: record ids, datetimes...
as values) or as JSON, and answers `/view/register` with a configurable verdict.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from engine import wire
from ipc import typed


class FakeSsp:
    def __init__(self, name: str) -> None:
        self.name = name
        self.ready = False
        self.batches: list[list[dict[str, Any]]] = []
        self.ingest_script: deque[int] = deque()  # statuses to answer before 200s
        self.ingest_attempts = 0
        self.view_reply: tuple[int, dict[str, Any]] | None = None  # None: 200 echo
        self.views: dict[str, dict[str, Any]] = {}
        self.unregistered: list[str] = []
        self.auth_headers: list[str | None] = []
        self.content_types: list[str] = []
        self.json_only = False  # answer a typed body as an SSP of an older release does
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e for b in self.batches for e in b]

    async def start(self) -> FakeSsp:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self._health)
        app.router.add_post("/ingest", self._ingest)
        app.router.add_post("/view/register", self._view_register)
        app.router.add_post("/view/unregister", self._view_unregister)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, req: web.Request) -> web.Response:
        status = "ready" if self.ready else "bootstrapping"
        return web.json_response({"status": status}, status=200 if self.ready else 503)

    async def _ingest(self, req: web.Request) -> web.Response:
        self.ingest_attempts += 1
        self.auth_headers.append(req.headers.get("Authorization"))
        self.content_types.append(req.content_type)
        if self.json_only and req.content_type != "application/json":
            return web.json_response({"error": "invalid", "message": "Content-Type must be "
                                      f"application/json, got {req.content_type!r}"}, status=400)
        body = (typed.decode(await req.read(), wire.ext_hook) if req.content_type == typed.CONTENT_TYPE
                else await req.json())
        if self.ingest_script:
            status = self.ingest_script.popleft()
            return web.json_response({"error": "SSP_NOT_READY", "message": "scripted"},
                                     status=status)
        assert isinstance(body, list)
        self.batches.append(body)
        return web.json_response({"accepted": len(body)})

    async def _view_register(self, req: web.Request) -> web.Response:
        body = await req.json()
        if self.view_reply is not None:
            status, reply = self.view_reply
            return web.json_response(reply, status=status)
        self.views[body["id"]] = body
        return web.json_response({"id": body["id"], "rows": 0})

    async def _view_unregister(self, req: web.Request) -> web.Response:
        body = await req.json()
        self.unregistered.append(body["id"])
        self.views.pop(body["id"], None)
        return web.json_response({"ok": True})


async def wait_for(cond: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll `cond` until truthy (a liveness wait with a generous bound, not a timing check)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
