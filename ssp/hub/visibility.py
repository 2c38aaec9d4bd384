"""Commit visibility (transport http): an event posted by the database arrives inside its
writing transaction, so its edges are published only once the commit is visible on our own
connection: `_00_version:[table, key]` shows the event's `_00_rv` (16 probes at once, 5 s in
all, then published anyway and counted)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from dbclient import DbError
from engine.values import parse_record_id

if TYPE_CHECKING:
    from ssp.hub.state import HubState

log = logging.getLogger("ssp.hub")

VISIBILITY_PROBES = 16  # source-commit visibility probes at once (spec, Limits)
VISIBILITY_DEADLINE_SECS = 5.0

Event = tuple[str, str, str, Any]
Marks = list[tuple[str, list[str]]]


class Visibility:
    """Publishes marks once the commits that caused them are visible."""

    def __init__(self, state: HubState) -> None:
        self.state = state
        self._slots = asyncio.Semaphore(VISIBILITY_PROBES)
        self.fallbacks = 0  # published without seeing the commit (deadline passed)

    def publish_after_commit(self, events: list[Event], marks: Marks,
                             arrived: float | None) -> bool:
        """Publish `marks` once `events` are committed; False when no event carries a
        version to wait for (the caller publishes at once)."""
        probes = self.probes(events)
        if not probes:
            return False
        self.state.spawn_tracked(self.publish_when_visible(probes, marks, arrived))
        return True

    @staticmethod
    def probes(events: list[Event]) -> list[tuple[RecordID, int]]:
        """(the `_00_version` record, the rv it must reach) of each event that carries one."""
        out = []
        for table, op, rid, record in events:
            rv = record.get("_00_rv") if isinstance(record, dict) else None
            if not isinstance(rv, int) or isinstance(rv, bool):
                continue
            key = parse_record_id(rid).id
            out.append((RecordID("_00_version", [table, key]), rv + 1 if op == "DELETE" else rv))
        return out

    async def publish_when_visible(self, probes: list[tuple[RecordID, int]], marks: Marks,
                                   arrived: float | None = None) -> None:
        """Publish the edges once the row's `_00_version` is readable on our own connection
        (committed), at most 16 probes at once, 5 s in all; after that publish anyway."""
        state = self.state
        deadline = time.monotonic() + VISIBILITY_DEADLINE_SECS
        try:
            for rec, want in probes:
                while time.monotonic() < deadline:
                    async with self._slots:
                        row = await state.db.query_one("SELECT rv FROM ONLY $v", {"v": rec})
                    rv = row.get("rv") if isinstance(row, dict) else None
                    if isinstance(rv, int) and rv >= want:
                        break
                    await asyncio.sleep(0.01)
                else:
                    self.fallbacks += 1
                    log.info("commit of %s not visible within %.0fs: publishing anyway", rec,
                             VISIBILITY_DEADLINE_SECS)
                    break
        except DbError as e:
            log.warning("visibility probe failed (%s): publishing anyway", e)
        for vid, members in marks:
            if vid in state.views:
                state.publisher.mark(vid, members, at=arrived)
