"""Commit check (transport http): an event posted from inside a transaction is a promise.

Under transport http the database's events post each row change to the ingest with
`http::post` *inside* the writing transaction, before it commits. The ingest applies it at
once (the write waits on it, so the views read their own writes). But the transaction may
still fail after its events fired: a later statement errors, `THROW`, a `CANCEL`, a commit
that loses a write conflict. SurrealDB then rolls the rows back, while the service has
already applied a change that never happened, and nothing else would ever undo it.

So every change that came from a database event (it carries the database's own CBOR copy)
is checked against what committed: `note` records, per record, a digest of the
last change applied (the canonical bytes' hash, or "absent" after a DELETE). A loop reads
the noted records back in batches (`SELECT * FROM $ids`, which sees committed data only):

* the committed row equals the last change applied: confirmed, forgotten;
* it differs and the last change was noted less than `deadline` ago: the transaction may not
  have committed yet; read again on the next round;
* it still differs at the deadline: the transaction failed (or is still running, see below).
  The committed state is submitted as ordinary events, through the same path as the
  original change: a DELETE when the record is absent; else a CREATE after a DELETE when the
  applied change was a DELETE or carried a newer `_00_rv` than the committed row (an UPDATE
  would be dropped as stale), else an UPDATE.

A transaction that commits later than `deadline` after its event (a long transaction) is
not lost: a corrected record is watched until `watch` seconds after its last change, and
when the committed row moves away from the corrected state without a new event, that
committed state is submitted too. A commit later than that is left to the drift check.

Races: the read and the submit are asynchronous, so a new event for the record can be applied
while a read is under way (its result is then ignored: the new event is checked on its own)
or while a correction is submitted (the order of the two is then unknown: the record is
checked again and corrected to whatever committed at the deadline of the new event).

The state is in memory: a crash forgets unchecked records (the drift check at start covers
them). At most `limit` records wait; above that, changes are counted as `unchecked`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from surrealdb import RecordID

from dbclient.errors import DbError
from engine.hashing import bytes_hash, row_hash
from engine.values import NONE, parse_record_id, record_id_text
from engine.versions import rv_is_stale

log = logging.getLogger("dbclient.commitcheck")

__all__ = ["CommitCheck", "applies_to"]

Event = dict[str, Any]
Submit = Callable[[list[Event]], Awaitable[Any]]

ABSENT = -1  # the digest of a record that does not exist (a hash is never negative)
UNKNOWN = -2  # what the pipeline holds is not known (a correction raced a new event)

DEADLINE_SECS = 0.5  # a commit later than this after its event is rare; see `watch`
WATCH_SECS = 30.0
TICK_SECS = 0.025  # between reads of records that may not have committed yet
WATCH_TICK_SECS = 0.25  # between reads of corrected records
BATCH = 500  # records per read
LIMIT = 100_000
RETRY_SECS = 1.0  # after a failed read or submit


def applies_to(table: str, record: Any) -> bool:
    """Whether a change of `table` carrying `record` (a database event's typed row) is
    checked: rows of the application's tables, not of the service's own (`_00_*`). A row
    written before the schema hooks has no `_00_rv`, and is checked all the same."""
    return (not table.startswith("_00_") and isinstance(record, Mapping)
            and isinstance(record.get("id"), RecordID))


def digest(row: Mapping[str, Any] | None) -> int:
    """The canonical bytes' hash of a row, `ABSENT` for none."""
    return ABSENT if row is None else row_hash(row)


@dataclass
class _Record:
    table: str
    digest: int  # of the last change the pipeline applied (ABSENT, UNKNOWN)
    rv: Any  # its `_00_rv` (None when absent or unknown)
    noted: float  # monotonic time of the last change noted
    gen: int = 0  # bumped by every change noted
    corrected: bool = False  # watching after a correction
    checked: float = 0.0  # monotonic time of the last read


class CommitCheck:
    """See the module docstring. `submit` takes correction events (`{table, op, id,
    record}`) into the pipeline the noted changes went through, without noting them."""

    def __init__(self, db: Any, submit: Submit, *, deadline: float = DEADLINE_SECS,
                 watch: float = WATCH_SECS, tick: float = TICK_SECS,
                 limit: int = LIMIT) -> None:
        self.db = db
        self._submit = submit
        self.deadline = deadline
        self.watch = watch
        self.tick = tick
        self.limit = limit
        self._records: dict[str, _Record] = {}
        self._wake = asyncio.Event()
        self.confirmed = 0
        self.corrected = 0  # records corrected (a transaction that did not commit)
        self.late = 0  # corrected records whose commit showed later
        self.unchecked = 0
        self.reads = 0
        self.last_error: str | None = None

    # ------------------------------------------------------------------ intake
    def note(self, table: str, op: str, record: Mapping[str, Any],
             data: bytes | None = None) -> None:
        """A change the pipeline applied (after it is durable): `record` is the row after it
        (`$before` for a DELETE: only its id and `_00_rv` are read), its id a RecordID;
        `data` its canonical bytes when the caller has them."""
        gone = op == "DELETE"
        rid = record_id_text(record["id"])
        rec = self._records.get(rid)
        if rec is None:
            if len(self._records) >= self.limit:
                self.unchecked += 1
                return
            rec = self._records[rid] = _Record(table, ABSENT, None, 0.0)
        rec.gen += 1
        rec.noted = time.monotonic()
        rec.corrected = False
        if gone:
            rec.digest = ABSENT
            rec.rv = record.get("_00_rv")
        else:
            rec.digest = bytes_hash(data) if data is not None else digest(record)
            rec.rv = record.get("_00_rv")
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._records)

    def status(self) -> dict[str, Any]:
        return {"pending": len(self._records), "confirmed": self.confirmed,
                "corrected": self.corrected, "late_commits": self.late,
                "unchecked": self.unchecked, "reads": self.reads,
                "last_error": self.last_error}

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        """Read the records due, forever (cancel to stop)."""
        while True:
            if not self._records:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self.tick)
            try:
                await self.check_due()
                self.last_error = None
            except DbError as e:
                self.last_error = f"{type(e).__name__}: {e}"[:300]
                log.warning("commit check: reading records back failed (%s)", e)
                await asyncio.sleep(RETRY_SECS)
            except Exception as e:  # a correction the pipeline refused: never stop checking
                self.last_error = f"{type(e).__name__}: {e}"[:300]
                log.exception("commit check: submitting corrections failed")
                await asyncio.sleep(RETRY_SECS)

    def _due(self, now: float) -> list[str]:
        out = []
        for rid, rec in self._records.items():
            if rec.corrected and now - rec.checked < WATCH_TICK_SECS:
                continue
            out.append(rid)
            if len(out) >= BATCH:
                break
        return out

    async def check_due(self) -> None:
        """One round: read the records due back and act on each (see the module docstring)."""
        now = time.monotonic()
        due = self._due(now)
        if not due:
            return
        gens = {rid: self._records[rid].gen for rid in due}
        rows = await self._read(due)
        self.reads += 1
        now = time.monotonic()
        fixes: list[tuple[str, int, Any]] = []  # (record, committed digest, its `_00_rv`)
        events: list[Event] = []
        for rid in due:
            rec = self._records.get(rid)
            if rec is None or rec.gen != gens[rid]:
                continue  # a newer change arrived during the read: it is checked on its own
            rec.checked = now
            row = rows.get(rid)
            have = digest(row)
            if have == rec.digest:
                if not rec.corrected:
                    self.confirmed += 1
                    del self._records[rid]
                elif now - rec.noted >= self.watch:
                    del self._records[rid]
                continue
            if not rec.corrected and now - rec.noted < self.deadline:
                continue  # not committed yet, perhaps
            events += self._correction(rec, rid, row)
            fixes.append((rid, have, row.get("_00_rv") if row is not None else None))
        if not events:
            return
        log.warning("commit check: %d record(s) held a change that did not commit (or "
                    "committed late); submitting what committed", len(fixes))
        # (a failure leaves the records as they were: corrected again on the next round)
        await self._submit(events)
        for rid, have, rv in fixes:
            rec = self._records.get(rid)
            if rec is None:
                continue
            if rec.corrected:
                self.late += 1  # the committed row moved without an event: a late commit
            else:
                self.corrected += 1
            if rec.gen != gens[rid]:
                # a new change was applied while the correction was submitted: which came
                # last is unknown, so the record is corrected again at that change's deadline
                rec.digest, rec.rv, rec.corrected = UNKNOWN, None, False
            else:
                rec.digest, rec.rv, rec.corrected = have, rv, True

    def _correction(self, rec: _Record, rid: str, row: Mapping[str, Any] | None) -> list[Event]:
        """The events that make the pipeline's copy of `rid` the committed `row`."""
        ident = parse_record_id(rid)
        if row is None:
            return [{"table": rec.table, "op": "DELETE", "id": rid, "record": {"id": ident}}]
        new_rv = row.get("_00_rv", NONE)
        if rec.digest in (ABSENT, UNKNOWN) or rec.rv is None or rv_is_stale(new_rv, rec.rv):
            out: list[Event] = []
            if rec.digest != ABSENT:
                out.append({"table": rec.table, "op": "DELETE", "id": rid,
                            "record": {"id": ident}})
            out.append({"table": rec.table, "op": "CREATE", "id": rid, "record": dict(row)})
            return out
        return [{"table": rec.table, "op": "UPDATE", "id": rid, "record": dict(row)}]

    async def _read(self, rids: list[str]) -> dict[str, Mapping[str, Any]]:
        ids = [parse_record_id(r) for r in rids]
        res = await self.db.query("SELECT * FROM $ids", {"ids": ids})
        rows = res[0] if res else []
        out: dict[str, Mapping[str, Any]] = {}
        for row in rows or []:
            if isinstance(row, Mapping) and isinstance(row.get("id"), RecordID):
                out[record_id_text(row["id"])] = row
        return out
