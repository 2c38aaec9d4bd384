"""``GET /admin/api/logs?source=scheduler|ssp:<id>&tail&backfill``: log lines as server-sent
events.

* ``scheduler``: this process's own log lines, kept in a ring of the newest 5,000 (INFO and
  above; :class:`scheduler.admin.sse.LogRing`, installed on the root logger when the admin
  plane starts). Each line is one message, JSON ``{n, at, level, logger, message}``, event id
  ``n``; a viewer whose position fell out of the ring gets ``event: gap`` first.
* ``ssp:<id>``: the SSP's own ``GET /logs`` stream relayed byte for byte (its own gap events
  included); 404 for an SSP that is not registered, 502 when it cannot be reached or does not
  answer 200. An ``event: error`` message ends the relay when the SSP's stream breaks.

``tail`` (default true; false sends the backfill and closes), ``backfill`` (default 100, at
most 10,000 lines), as on the SSP. A reconnecting viewer's ``Last-Event-ID`` (the number of
the last line it got) resumes after that line, with ``event: gap`` when lines it never saw
are gone; for an SSP the header is passed on to its ``/logs``, which does the same.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from falcon.asgi import SSEvent

from scheduler.admin.cluster import Cluster
from scheduler.admin.errors import BadGateway, Invalid, NotFound
from scheduler.admin.sse import LogRing, RawEvent, frame, log_stream
from scheduler.admin.values import q_bool, q_int

log = logging.getLogger("scheduler.admin.logs")

__all__ = ["Logs"]

DEFAULT_BACKFILL = 100
MAX_BACKFILL = 10_000


class Logs:
    """See the module docstring."""

    def __init__(self, cluster: Cluster, ring: LogRing) -> None:
        self.cluster = cluster
        self.ring = ring
        self.viewers = 0

    async def _counted(self, inner: AsyncIterator[SSEvent]) -> AsyncIterator[SSEvent]:
        self.viewers += 1
        try:
            async for ev in inner:
                yield ev
        finally:
            self.viewers -= 1

    async def stream(self, req: Any) -> AsyncIterator[SSEvent]:
        """Validate the query and open the source (errors raised before any byte is sent)."""
        source = req.get_param("source") or "scheduler"
        tail = q_bool(req, "tail", True)
        backfill = q_int(req, "backfill", default=DEFAULT_BACKFILL, minimum=0,
                         maximum=MAX_BACKFILL)
        assert backfill is not None
        raw_last = (req.get_header("Last-Event-ID") or "").strip()
        after = int(raw_last) if raw_last.isdigit() and len(raw_last) < 19 else None
        if source == "scheduler":
            return self._counted(log_stream(self.ring, backfill=backfill, tail=tail,
                                            after=after))
        if not source.startswith("ssp:") or len(source) > 300:
            raise Invalid("query source: scheduler or ssp:<id>")
        ssp_id = source[4:]
        if self.cluster.ssp(ssp_id) is None:
            raise NotFound(f"no SSP {ssp_id[:80]} is registered")
        params = {"tail": "true" if tail else "false", "backfill": str(backfill)}
        cm = self.cluster.ssp_stream(ssp_id, "/logs", params,
                                     {} if after is None else {"Last-Event-ID": str(after)})
        resp = await cm.__aenter__()
        if resp is None or resp.status != 200:
            status = None if resp is None else resp.status
            await cm.__aexit__(None, None, None)
            raise BadGateway(f"SSP {ssp_id[:80]} " + ("is unreachable" if status is None
                             else f"answered {status} for its logs"), code="ssp_logs")
        return self._counted(self._relay(cm, resp, ssp_id))

    async def _relay(self, cm: Any, resp: aiohttp.ClientResponse,
                     ssp_id: str) -> AsyncIterator[SSEvent]:
        try:
            async for chunk in resp.content.iter_any():
                yield RawEvent(chunk)
        except (aiohttp.ClientError, TimeoutError) as e:
            yield RawEvent(frame(json.dumps({"message": f"the stream of SSP {ssp_id} broke "
                                             f"({type(e).__name__})"}), event="error"))
        finally:
            await cm.__aexit__(None, None, None)
