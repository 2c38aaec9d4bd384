"""Commit visibility (transport http): an event posted by the database arrives inside its
writing transaction, so its edges are published only once the commit is visible on our own
connection: `_00_version:[table, key]` shows the event's `_00_rv` (16 probes at once, 5 s in
all, then published anyway and counted).

A wait also ends when a later event takes the record back to an older version, or carries
none (`supersede`): versions never go back in what commits, so such an event says that the
change waited for did not commit. It comes from the commit check, which undoes a transaction
that failed after its events posted (`dbclient.commitcheck`); the other changes of the
failed change's batch are then published at once, not at the 5 s deadline."""

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
        self.superseded = 0  # waits ended by a later event for the record
        # record id text -> [versions gone back since a wait began, waits on it, the
        # highest version waited for]
        self._waits: dict[str, list[int]] = {}

    def supersede(self, events: list[Event]) -> None:
        """A batch's events arrived: a wait on a record ends when one of them takes it back
        to an older version than the one waited for, or carries none."""
        if not self._waits:
            return
        for _table, op, rid, record in events:
            w = self._waits.get(rid)
            if w is None:
                continue
            v = _version(op, record)
            if v is None or v < w[2]:
                w[0] += 1

    def publish_after_commit(self, events: list[Event], marks: Marks,
                             arrived: float | None) -> bool:
        """Publish `marks` once `events` are committed; False when no event carries a
        version to wait for (the caller publishes at once)."""
        probes = self.probes(events)
        if not probes:
            return False
        began = []  # registered now, before a later batch can supersede them
        for rid, _rec, want in probes:
            w = self._waits.setdefault(rid, [0, 0, want])
            w[1] += 1
            w[2] = max(w[2], want)
            began.append(w[0])
        self.state.spawn_tracked(self.publish_when_visible(probes, began, marks, arrived))
        return True

    @staticmethod
    def probes(events: list[Event]) -> list[tuple[str, RecordID, int]]:
        """(the record's id text, its `_00_version` record, the rv that must reach) of each
        event that carries one."""
        out = []
        for table, op, rid, record in events:
            v = _version(op, record)
            if v is not None:
                out.append((rid, RecordID("_00_version", [table, parse_record_id(rid).id]), v))
        return out

    async def publish_when_visible(self, probes: list[tuple[str, RecordID, int]],
                                   began: list[int],
                                   marks: Marks, arrived: float | None = None) -> None:
        """Publish the edges once the row's `_00_version` is readable on our own connection
        (committed), at most 16 probes at once, 5 s in all; after that publish anyway."""
        state = self.state
        deadline = time.monotonic() + VISIBILITY_DEADLINE_SECS
        try:
            for (rid, rec, want), seen in zip(probes, began, strict=True):
                while time.monotonic() < deadline:
                    if self._waits[rid][0] != seen:
                        self.superseded += 1
                        break
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
        finally:
            for rid, _, _ in probes:
                w = self._waits[rid]
                w[1] -= 1
                if w[1] == 0:
                    del self._waits[rid]
        for vid, members in marks:
            if vid in state.views:
                state.publisher.mark(vid, members, at=arrived)


def _version(op: str, record: Any) -> int | None:
    """The `_00_version` rv an event's commit shows (a DELETE's is its row's + 1), None when
    the event carries no version."""
    rv = record.get("_00_rv") if isinstance(record, dict) else None
    if not isinstance(rv, int) or isinstance(rv, bool):
        return None
    return rv + 1 if op == "DELETE" else rv
