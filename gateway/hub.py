"""The gateway's link to the hub: one `ipc.rpc.RpcClient` per worker process and event loop.

Created lazily on the first request, so nothing ZeroMQ exists before gunicorn forks its
workers, and re-created if the app is driven from another event loop (tests).
"""

from __future__ import annotations

import asyncio
from typing import Any

import zmq.asyncio

from ipc.rpc import RpcClient, RpcTimeout


class HubUnavailable(Exception):
    """The hub did not answer in time (starting, overloaded or gone)."""


class HubLink:
    """Request/reply to the hub at `endpoint` (`SspConfig.hub_endpoint`)."""

    def __init__(self, endpoint: str, *, ctx: zmq.asyncio.Context | None = None) -> None:
        self.endpoint = endpoint
        self._ctx = ctx
        self._client: RpcClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get(self) -> RpcClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            if self._client is not None:
                self._client.close()
            self._client = RpcClient(self.endpoint, ctx=self._ctx)
            self._loop = loop
        return self._client

    async def call(self, message: dict[str, Any], timeout: float) -> Any:
        """Send `message`, return the hub's reply; HubUnavailable after `timeout` seconds."""
        try:
            return await self._get().call(message, timeout=timeout)
        except RpcTimeout:
            raise HubUnavailable(f"the SSP hub did not answer within {timeout:g}s") from None

    def close(self) -> None:
        """Close the socket (lifespan shutdown)."""
        if self._client is not None:
            self._client.close()
            self._client = None
            self._loop = None
