"""LIVE queries (placeholder until the changefeed tailer lands)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dbhost.engine import Engine
from dbhost.frames import LIVE_ERROR, RpcError

if TYPE_CHECKING:
    from dbhost.connection import RpcConnection


class LiveHub:
    """Registry of live queries."""

    def __init__(self, engine: Engine, poll_interval: float) -> None:
        self.engine = engine
        self.poll_interval = poll_interval

    async def start(self) -> None:
        """Start the tailer."""

    async def stop(self) -> None:
        """Stop the tailer."""

    def wake(self) -> None:
        """A write passed through the host."""

    def count(self) -> int:
        """Number of live queries."""
        return 0

    async def kill_connection(self, conn: RpcConnection) -> None:
        """Kill a connection's live queries."""

    async def kill_session(self, conn: RpcConnection, sid: str) -> None:
        """Kill a session's live queries."""

    def query_needs_host(self, params: Any) -> bool:
        """Whether a query holds LIVE or KILL statements."""
        return False

    async def rpc_live(self, conn: RpcConnection, sid: str, params: Any) -> Any:
        """The live method."""
        raise RpcError(LIVE_ERROR, "live queries are not available yet")

    async def rpc_kill(self, conn: RpcConnection, params: Any) -> Any:
        """The kill method."""
        raise RpcError(LIVE_ERROR, "live queries are not available yet")

    async def run_query(self, conn: RpcConnection, sid: str, params: Any) -> Any:
        """A query with LIVE/KILL statements."""
        raise RpcError(LIVE_ERROR, "live queries are not available yet")
