"""Views registered from `_00_query` rows that record users created (`dbclient.viewrows`),
in standalone mode: the feed tail hands each request row it reads here, and the row is
registered through the same `Registry.register` as `POST /view/register` (at most
`SVC_ROW_VIEWS_PER_USER` views per identity this way, else 429 `too_many_views`). A refusal (4xx) is
written back onto the row; a 503 or 500 (not ready, the database failing) leaves the row a
request, registered again on its next change (the client touches `lastActiveAt` while it
waits) or at the next start."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from dbclient import DbError
from dbclient.viewrows import (
    REFUSAL_SQL,
    Placing,
    committed_row,
    identity_of,
    is_request,
    refusal,
    registration_body,
    too_many,
)
from ssp.naming import QUERY_TABLE, view_id_of, view_record

if TYPE_CHECKING:
    from ssp.hub.registry import Registry
    from ssp.hub.state import HubState

log = logging.getLogger("ssp.hub")


class RowRequests:
    """Registers request rows, one registration per view id at a time."""

    def __init__(self, state: HubState, registry: Registry) -> None:
        self.state = state
        self.registry = registry
        self._inflight: set[str] = set()
        self._placing = Placing()
        self.registered = 0
        self.refused = 0

    def seen(self, view_id: str, row: Any, posted: bool = False) -> None:
        """A `_00_query` row as the feed read it, or as a database event posted it (`posted`,
        transport http: not committed yet): registered when it is a request."""
        if is_request(row) and view_id not in self._inflight:
            self._inflight.add(view_id)
            self.state.spawn_tracked(self._register(view_id, row if posted else None))

    async def scan(self) -> None:
        """The request rows already in the database (written while this SSP was down),
        once the SSP is ready (a registration before that would be a 503)."""
        while self.state.status != "ready":
            await asyncio.sleep(0.05)  # start-up only: bootstrap sets `ready` once
        rows = await self.state.db.query_one(
            f"SELECT * FROM {QUERY_TABLE} WHERE state = NONE AND error = NONE "
            "AND surql != NONE", idempotent=True) or []
        for row in rows:
            try:
                self.seen(view_id_of(row["id"]), row)
            except (KeyError, ValueError, TypeError) as e:
                log.warning("unreadable _00_query request row %r: %s", row.get("id"), e)

    async def _register(self, view_id: str, posted: Any = None) -> None:
        try:
            # The row as it is now: the feed may be behind (registered, refused or deleted
            # since), and a re-read of the feed must not register twice. A posted row is
            # waited on until its write committed (`committed_row`).
            record = view_record(view_id)
            row = await committed_row(lambda: self.state.db.query_one(
                "SELECT * FROM ONLY $q", {"q": record}, idempotent=True), posted)
            if not is_request(row):
                return
            auth = row.get("auth_id")
            body = registration_body(view_id, row)
            who = identity_of(body)
            limit = self.state.cfg.row_views_per_user
            held = 0 if view_id in self.state.views or auth is None else sum(
                1 for v in self.state.views.values() if v.auth == auth
            ) + self._placing.others(who, view_id)
            if held >= limit:
                self.refused += 1
                await self.state.db.query(REFUSAL_SQL, {"q": record, "e": too_many(limit)})
                return
            self._placing.start(who, view_id)
            try:
                out = await self.registry.register({"body": body})
            finally:
                self._placing.done(who, view_id)
            status = int(out.get("status", 500))
            if status == 200:
                self.registered += 1
                return
            if status >= 500:
                log.info("view %s from its row: %d, left for its next change", view_id, status)
                return
            self.refused += 1
            await self.state.db.query(REFUSAL_SQL, {"q": record,
                                                    "e": refusal(status, out.get("body"))})
        except DbError as e:
            log.warning("view %s from its row: database call failed (%s)", view_id, e)
        finally:
            self._inflight.discard(view_id)
