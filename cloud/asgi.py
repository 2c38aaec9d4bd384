"""The ASGI app a gunicorn worker serves (``cloud.asgi:create_app()``): the MCP endpoint in
front of the Falcon REST app, and the worker's lifespan.

The configuration is read here, once per worker process (the environment the service passed
on; secrets never travel in argv). The lifespan runs the SDK's task group and the request
meter's flush loop for exactly as long as the worker, and flushes the last counts on the way
out.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from cloud.config import CloudConfig
from cloud.mcp import MCP_PATH, McpEndpoint
from cloud.rest import create_rest_app
from cloud.services import Services, build
from dbclient.tasks import cancel_and_wait

log = logging.getLogger("cloud.asgi")

__all__ = ["CloudAsgi", "create_app"]


class CloudAsgi:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.rest = create_rest_app(services)
        self.mcp = McpEndpoint(services)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if kind == "http" and scope.get("path", "").rstrip("/") == MCP_PATH:
            await self.mcp.handle(scope, receive, send)
            return
        await self.rest(scope, receive, send)

    async def _lifespan(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async with self.mcp.running():
            flusher = asyncio.get_running_loop().create_task(self.services.meter.run())
            try:
                await self.rest(scope, receive, send)
            finally:
                await cancel_and_wait(flusher)
                await self.services.meter.flush()
                await self.services.store.db.close()


def create_app() -> CloudAsgi:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return CloudAsgi(build(CloudConfig.from_env(os.environ)))
