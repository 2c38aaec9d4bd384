"""A stand-in hub for testing and benchmarking the gateway without the real SSP.

`FakeHub` serves the gateway<->hub contract (`ipc.messages`) on a ZeroMQ endpoint: it records
every request, answers canned replies per route (set `replies[route]` to a reply dict or to an
async function of the request) and otherwise a plain 200, and keeps a numbered log buffer with
the `GET /logs` polling semantics (POST /log appends to it). Run it as a process for
real-process tests and the benchmark::

    python -m gateway.testing --endpoint ipc:///tmp/hub.sock [--ready-file PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self

import zmq.asyncio

from ipc.messages import logs_reply, reply
from ipc.rpc import RpcServer

Canned = dict[str, Any] | Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class LogBuffer:
    """Numbered log lines in a bounded buffer, answering `GET /logs` polls per the contract."""

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self.lines: collections.deque[tuple[int, Any]] = collections.deque(maxlen=capacity)
        self.last = 0

    def append(self, line: Any) -> int:
        """Add a line; returns its number."""
        self.last += 1
        self.lines.append((self.last, line))
        return self.last

    def poll(self, query: dict[str, str], page: int = 500) -> dict[str, Any]:
        """The reply to a poll with `cursor` (lines after it) or `backfill` (the last N)."""
        if "cursor" in query:
            cursor = int(query["cursor"])
            first_kept = self.lines[0][0] if self.lines else self.last + 1
            if cursor > self.last:  # we restarted: start over, flagged as a gap
                picked = list(self.lines)[:page]
                return logs_reply([ln for _, ln in picked], picked[-1][0] if picked else self.last, True)
            gap = cursor + 1 < first_kept
            picked = [(n, ln) for n, ln in self.lines if n > cursor][:page]
            return logs_reply([ln for _, ln in picked], picked[-1][0] if picked else cursor, gap)
        backfill = int(query.get("backfill", "100"))
        picked = list(self.lines)[-backfill:] if backfill else []
        return logs_reply([ln for _, ln in picked], self.last, False)


class FakeHub:
    """An in-process hub: records requests, answers canned replies, serves a log buffer."""

    def __init__(self, endpoint: str, *, ctx: zmq.asyncio.Context | None = None) -> None:
        self.endpoint = endpoint
        self.requests: list[dict[str, Any]] = []
        self.replies: dict[str, Canned] = {}
        self.log = LogBuffer()
        self.record = True
        self._server = RpcServer(endpoint, self.handle, ctx=ctx)
        self._task: asyncio.Task[None] | None = None

    async def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Answer one gateway request."""
        if self.record:
            self.requests.append(msg)
        route = msg.get("route", "")
        canned = self.replies.get(route)
        if canned is not None:
            if isinstance(canned, dict):
                return canned
            answer: dict[str, Any] = await canned(msg)
            return answer
        if route == "GET /logs":
            return self.log.poll(msg.get("query") or {})
        if route == "POST /log":
            body = msg["body"]
            self.log.append(f"{body['level']} {body['message']}")
            return reply(200, {"ok": True})
        if route == "GET /health":
            return reply(200, {"status": "ready"})
        if route == "POST /ingest":
            return reply(200, {"accepted": True})
        return reply(200, {"route": route})

    def start(self) -> None:
        """Start serving on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._server.serve())

    async def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._server.close()

    def last(self, route: str) -> dict[str, Any]:
        """The most recent recorded request for `route` (AssertionError when none)."""
        for found in reversed(self.requests):
            if found.get("route") == route:
                return dict(found)
        raise AssertionError(f"the hub saw no {route} request; saw {[m.get('route') for m in self.requests]}")


async def _serve(endpoint: str, ready_file: Path | None) -> None:
    hub = FakeHub(endpoint)
    hub.record = False  # a long-running process must not grow without bound
    hub.start()
    hub.log.append("fake hub started")
    if ready_file is not None:
        ready_file.write_text(json.dumps({"endpoint": endpoint}))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await hub.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m gateway.testing --endpoint ipc://...`: serve a fake hub until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="ZeroMQ endpoint to bind, e.g. ipc:///tmp/hub.sock")
    parser.add_argument("--ready-file", type=Path, help="written once the socket is bound")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.endpoint, args.ready_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())


class GatewayUnderTest:
    """A gateway app wired to a FakeHub in the same process, driven by Falcon's ASGI conductor.

    Use as `async with GatewayUnderTest(secret="s3cret") as gw:` then `gw.client.simulate_*`
    and `gw.hub`. The ipc socket lives in a short private temp dir (unix socket paths are
    limited to ~100 bytes, pytest's tmp paths are often longer).
    """

    def __init__(self, secret: str | None = None, **settings: Any) -> None:
        import tempfile

        from falcon import testing

        from .ssp_app import GatewaySettings, build_app

        self._dir = Path(tempfile.mkdtemp(prefix="gw-"))
        endpoint = f"ipc://{self._dir}/hub.sock"
        self.ctx = zmq.asyncio.Context()
        self.settings = GatewaySettings(auth_secret=secret, hub_endpoint=endpoint, **settings)
        self.app = build_app(self.settings, ctx=self.ctx)
        self.hub = FakeHub(endpoint, ctx=self.ctx)
        self.client = testing.ASGIConductor(self.app)

    async def __aenter__(self) -> Self:
        self.hub.start()
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        import shutil

        try:
            await self.client.__aexit__(None, None, None)
        finally:
            self.app.hub.close()
            await self.hub.stop()
            self.ctx.term()
            shutil.rmtree(self._dir, ignore_errors=True)
