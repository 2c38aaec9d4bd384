"""The scheduler's changefeed transport: tail the synced tables' change streams into ingest.

`ChangefeedTail` reads every synced table's changefeed (`SHOW CHANGES`, post-commit) in
versionstamp order across tables (:mod:`dbclient.feed`, shared with the SSP), turns each change
into a row-change event `{table, op, id, record}` (SurrealDB types kept: RecordID, datetime...)
and hands each round's events, in order, to `submit` (the scheduler's `ingest_many`: WAL append,
broadcast). Only after `submit` returned is the cursor advanced; it is written to `state_path`
(write to a temporary file, fsync, rename) at most every `CURSOR_PERSIST_SECS` while changes
flow and when the tail stops, so a crash replays at most that last half second of rounds:
at-least-once, and the replica's `_00_rv` guard plus the SSPs' `seq` skip make a repeat harmless.

Cursor state (JSON): `base` (the versionstamp a table without its own cursor is read from: the
clone time), `cursors` (table -> last versionstamp absorbed), `seen` (versionstamps inside the
re-read window, so a restart does not repeat them), `synced_ms` (local wall-clock time at the
start of the last catch-up that reached the end of every feed).

Waking: a LIVE subscription on `_00_version` (bumped in every synced write transaction) rings
the doorbell, and so does one on `_00_query` (a record user's new row asks for a
registration, `dbclient.viewrows`, and bumps no `_00_version`); a poll every 2 s is the
fallback (LIVE unavailable, or writes that do not touch either). A reconnect of the
subscription is counted and triggers a read.

Gap: the feed keeps `retention` (the `CHANGEFEED <duration>` of the tables; the shortest one
counts). When the last complete catch-up (`synced_ms`) is older than that, changes may have
expired unread: `gap` is set, reading stops and `on_gap()` is awaited (the scheduler re-clones
and then calls :meth:`ChangefeedTail.reset` with the clone's start time). An idle database is
not a gap: `synced_ms` moves with every successful poll, not with the last change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dbclient import Database, DbError, LiveSubscription
from dbclient.clock import now_ms
from dbclient.feed import FeedCursor, feed_change, sweep_loop
from dbclient.feedfloor import read_floor
from dbclient.tasks import stop_loops
from engine.values import parse_record_id
from ipc.statefile import replace_file
from timetext.durations import parse_duration_ns

log = logging.getLogger("scheduler.feed")

__all__ = ["ChangefeedTail", "disabled_status"]

FEED_LIMIT = 1000  # new change sets per round (the engine pages 1000 feed entries per read)
FEED_OVERLAP_VS = 2000 << 16  # a commit visible up to 2 s late is not lost
# Each read re-reads only 30 ms; every 3 s a sweep (its own task, `_sweep_loop`) re-reads the
# whole window from where the last sweep began (dbclient.feed.SweepWindow): a commit more than
# 30 ms late comes at most 3 s later. Re-reading the whole window on every doorbell cost the
# host ~250 KB a read at 500 writes/s (issue 31). Every change set a read returns costs the
# engine ~20 us to build and this reader ~10 us to decode, read again or not: with 100 ms and
# a sweep each second the tail read each set ~4.6 times (6 reads/s under the soak's load,
# 0.6 of a set again per read, 3 per sweep), now ~2.9; a commit more than 30 ms late is rare
# (the host's LIVE counts them: `live_late_by_ms` in its `/debug/memory`).
FEED_SHORT_VS = 30 << 16
FEED_SWEEP_SECS = 3.0
POLL_SECS = 2.0
CURSOR_MARGIN_MS = 5000  # no saved cursor: start a little before now (clone time)
TABLES_REFRESH_SECS = 5.0
RETENTION_REFRESH_SECS = 60.0
DOORBELL_TABLE = "_00_version"
QUERY_DOORBELL_TABLE = "_00_query"
DOORBELL_RETRY_SECS = 30.0
SYNCED_PERSIST_SECS = 60.0  # an idle tail still records that it is in sync, this often
# The cursor file is written at most this often while changes flow (and when the tail stops):
# an fsync and a rename per round were ~8 ms (p50) of every round on the tail's own path, and
# a crash replays at most this much of the feed again, which is harmless (module docstring).
CURSOR_PERSIST_SECS = 0.5
STALLED_AFTER_SECS = 30.0
GAP_RETRY_SECS = 30.0

Event = dict[str, Any]
Submit = Callable[[list[Event]], Awaitable[list[int]]]



def disabled_status() -> dict[str, Any]:
    """The `changefeed` object under `SVC_INGEST_TRANSPORT=http`."""
    return {"enabled": False, "cursor_ms": None, "lag_ms": None, "records_1m": 0,
            "doorbell": "off", "doorbell_reconnects": 0, "gap": False, "stalled": False,
            "last_error": None}


class ChangefeedTail:
    """Tails the synced tables' changefeeds into `submit` (see the module docstring)."""

    def __init__(self, db: Database, submit: Submit, state_path: Path,
                 tables: Callable[[], Awaitable[list[str]]], *,
                 on_gap: Callable[[], Awaitable[None]] | None = None,
                 poll_secs: float = POLL_SECS,
                 doorbell_table: str | None = DOORBELL_TABLE,
                 doorbell_retry_secs: float = DOORBELL_RETRY_SECS,
                 stalled_after_secs: float = STALLED_AFTER_SECS) -> None:
        self.db = db
        self._submit = submit
        self.state_path = Path(state_path)
        self._tables_fn = tables
        self._on_gap = on_gap
        self.poll_secs = poll_secs
        self.doorbell_table = doorbell_table
        self.doorbell_retry_secs = doorbell_retry_secs
        self.stalled_after_secs = stalled_after_secs
        # The position (dbclient.feed.FeedCursor): advanced only after `submit` returned.
        self.cursor = FeedCursor((now_ms() - CURSOR_MARGIN_MS) << 16, limit=FEED_LIMIT,
                                 overlap_vs=FEED_OVERLAP_VS, short_vs=FEED_SHORT_VS,
                                 sweep_secs=FEED_SWEEP_SECS)
        self.synced_ms: int = now_ms() - CURSOR_MARGIN_MS
        self.gap = False
        self.last_error: str | None = None
        self.doorbell = "off" if doorbell_table is None else "connecting"
        self.doorbell_reconnects = 0
        self.rounds = 0  # complete catch-ups
        self.oversized = 0  # transactions with more feed entries than a read can return
        self._round_note: str | None = None
        self._records: deque[tuple[float, int]] = deque()
        self._live: LiveSubscription | None = None
        self._query_live: LiveSubscription | None = None
        self._doorbell_tried = float("-inf")
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._tables: list[str] = []
        self._tables_at = float("-inf")
        self._retention_ms: int | None = None
        self._retention_at = float("-inf")
        self._persisted_synced = float("-inf")
        self._dirty = False  # the cursor moved since the file was last written
        self._last_ok = time.monotonic()
        self._gap_called_at = float("-inf")
        self._gap_handled = False
        self._lock = asyncio.Lock()
        self._sweep_owed = False  # short reads ran since the last sweep (`_sweep_loop`)
        self._sweeper: asyncio.Task[None] | None = None
        self.sweeps = 0
        # The database's feed floor is read at the first catch-up (`_check_floor`); a
        # position loaded from the file (not made by a clone in this process) below it is
        # of the database a restore replaced.
        self._floor_read = False
        self._saved_position = False
        self._load()

    # ------------------------------------------------------------------ state file

    def _load(self) -> None:
        try:
            raw = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            # A torn file cannot happen (atomic rename); anything else is an operator's edit.
            raise ValueError(f"changefeed cursor file {self.state_path} is unreadable: {e}") \
                from None
        try:
            self.cursor = FeedCursor.from_state(raw, limit=FEED_LIMIT, overlap_vs=FEED_OVERLAP_VS,
                                                short_vs=FEED_SHORT_VS,
                                                sweep_secs=FEED_SWEEP_SECS)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"changefeed cursor file {self.state_path} is unreadable: "
                             f"{type(e).__name__}: {e}") from None
        self.synced_ms = int(raw.get("synced_ms", self.cursor.base >> 16))
        self._saved_position = True

    def _state_text(self) -> str:
        return json.dumps({"version": 1, **self.cursor.state(), "synced_ms": self.synced_ms},
                          sort_keys=True)

    async def _persist(self) -> None:
        self._dirty = False
        text = self._state_text()
        try:
            await asyncio.to_thread(_atomic_write, self.state_path, text)
        except BaseException:
            self._dirty = True
            raise
        self._persisted_synced = time.monotonic()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the tail loop (it subscribes the doorbell itself)."""
        if self._task is None or self._task.done():
            self._last_ok = time.monotonic()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="changefeed")
        if self.cursor.sweeping and (self._sweeper is None or self._sweeper.done()):
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep_loop(), name="changefeed-sweep")

    async def stop(self) -> None:
        """Stop the loop and the doorbell; the cursor file keeps the position.

        The loop has ended when this returns: a cancel that Python 3.11's ``wait_for`` loses
        (the doorbell wait or a database answer completing in the same turn) is repeated
        (``dbclient.tasks``); a bare ``await task`` waited forever, and a restore's
        ``hold_for_restore`` with it. A cancel of the caller is not swallowed."""
        task, self._task = self._task, None
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            await stop_loops(sweeper)
        if task is not None:
            await stop_loops(task)
            # The cursor in memory holds exactly what was submitted (it advances only after a
            # submit returned), but the cancel may have landed before the round wrote it: a
            # restart would deliver that round again.
            try:
                await self._persist()
            except OSError as e:
                log.warning("saving the changefeed cursor at stop failed: %s", e)
        for live in (self._live, self._query_live):
            if live is not None:
                try:
                    await live.kill()
                except DbError as e:  # best effort: the socket may be gone already
                    log.info("killing a doorbell subscription failed: %s", e)
        self._live = self._query_live = None
        if self.doorbell_table is not None:
            self.doorbell = "connecting"

    def wake(self) -> None:
        """Read the feeds now (instead of at the next poll)."""
        self._wake.set()

    async def reset(self, since_ms: int, *, floor: bool = False) -> None:
        """Restart every cursor at `since_ms` (the start of a re-clone) and clear the gap; with
        `floor` (after a restore) the re-read overlap never reaches below it (FeedCursor.reset)."""
        async with self._lock:
            self.cursor.reset(since_ms << 16, floor=floor)
            self._saved_position = False
            self.synced_ms = since_ms
            self.gap = False
            self._gap_handled = False
            self._last_ok = time.monotonic()
            await self._persist()
        self._wake.set()

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """The spec's `changefeed` object."""
        now = now_ms()
        cutoff = time.monotonic() - 60.0
        while self._records and self._records[0][0] < cutoff:
            self._records.popleft()
        running = self._task is not None and not self._task.done()
        return {
            "enabled": True,
            "cursor_ms": self.synced_ms,
            "lag_ms": max(0, now - self.synced_ms),
            "records_1m": sum(n for _, n in self._records),
            "doorbell": self.doorbell,
            "doorbell_reconnects": self.doorbell_reconnects,
            "gap": self.gap,
            "stalled": running and not self.gap
                       and time.monotonic() - self._last_ok > self.stalled_after_secs,
            "last_error": self.last_error,
        }

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            await self._ensure_doorbell()
            if self.gap:
                await self._handle_gap()
            else:
                try:
                    await self.catch_up()
                except DbError as e:
                    self.last_error = f"changefeed read failed: {e}"
                    log.warning("%s", self.last_error)
                except Exception as e:  # a submit failure: retried from the same cursor
                    self.last_error = f"changefeed round failed: {type(e).__name__}: {e}"
                    log.exception("changefeed round failed")
            # A cursor not yet written is written at the next turn, half a second on at most.
            wait = min(self.poll_secs, CURSOR_PERSIST_SECS) if self._dirty else self.poll_secs
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()

    async def _sweep_loop(self) -> None:
        """Sweeps apart from the short reads (`dbclient.feed.FeedCursor.sweep_read`).

        A sweep re-reads the whole re-read window (2 s of every table's feed, the SSPs' edges
        included) to find commits that showed late. Done inside the tail's rounds, it held up
        every new change behind it: in issue 31's soak the sweeps took 64% of the tail's time
        under load and a change waited 2.8 s (p50) to be submitted. Here the short reads go on
        while a sweep reads; only its submit takes the tail's lock. A sweep is owed after
        short reads (a commit more than the short re-read late is found only by one, and a
        quiet feed rings no doorbell for it) and runs at most every `sweep_secs`."""
        await sweep_loop(self.cursor.sweep_secs, lambda: self._sweep_owed and not self.gap,
                         self.sweep)

    async def sweep(self) -> int:
        """One sweep of every followed table's window; returns the (late) events submitted."""
        resets = self.cursor.resets
        tables = list(self._tables)
        self._sweep_owed = False
        try:
            rnd = await self.cursor.sweep_read(self.db, tables)
            async with self._lock:
                if resets != self.cursor.resets or self.gap:
                    return 0  # the cursor was reset meanwhile: this sweep read the old one
                fresh = self.cursor.unseen(rnd)
                n = await self._hand_on(fresh)
                self.cursor.absorb_sweep(rnd, fresh)
                self.sweeps += 1
                if fresh:
                    self._dirty = True
                return n
        except BaseException:
            self._sweep_owed = True  # the next turn sweeps again
            raise

    async def _ensure_doorbell(self) -> None:
        if self.doorbell_table is None or self._live is not None:
            return
        if time.monotonic() - self._doorbell_tried < self.doorbell_retry_secs:
            return
        self._doorbell_tried = time.monotonic()
        try:
            self._live = await self.db.live(self.doorbell_table, self._ring)
            self.doorbell = "connected"
        except DbError as e:
            self.doorbell = "unavailable"
            log.warning("LIVE on %s unavailable (%s); polling every %.0fs",
                        self.doorbell_table, e, self.poll_secs)
        if self._live is not None and self.doorbell_table != QUERY_DOORBELL_TABLE:
            try:
                self._query_live = await self.db.live(QUERY_DOORBELL_TABLE, self._ring)
            except DbError as e:  # its rows are then read at the next poll
                log.info("LIVE on %s unavailable (%s)", QUERY_DOORBELL_TABLE, e)

    def _ring(self, note: dict[str, Any]) -> None:
        if note.get("action") == "RECONNECTED":
            self.doorbell_reconnects += 1
            self.doorbell = "connected"
        self._wake.set()

    async def _handle_gap(self) -> None:
        if self._on_gap is None or self._gap_handled:
            return
        if time.monotonic() - self._gap_called_at < GAP_RETRY_SECS:
            return
        self._gap_called_at = time.monotonic()
        try:
            await self._on_gap()
            self._gap_handled = True
        except Exception as e:
            self.last_error = f"re-clone after a changefeed gap failed: {type(e).__name__}: {e}"
            log.exception("re-clone after a changefeed gap failed")

    async def _check_floor(self) -> bool:
        """Pin the cursor to the database's feed floor (`dbclient.feedfloor`); True (a gap:
        the replica must be cloned again) when the saved position lies below it."""
        floor = await read_floor(self.db)
        self._floor_read = True
        below = bool(floor) and self._saved_position and self.cursor.below(floor)
        self.cursor.pin(floor)  # kept across the re-clone's reset
        if below:
            self.gap = True
            self.last_error = ("the database was restored after the saved changefeed "
                               "position (its feed floor is newer)")
            log.error("%s; the replica must be re-cloned", self.last_error)
            self._wake.set()
            return True
        return False

    async def catch_up(self) -> int:
        """Read every feed until nothing new is left; returns the events submitted.

        Sets `gap` (and reads nothing) when the last complete catch-up is older than the
        feeds' retention."""
        async with self._lock:
            if self.gap:
                return 0
            started = now_ms()
            if not self._floor_read and await self._check_floor():
                return 0
            tables = await self._current_tables()
            retention = await self._retention()
            if retention is not None and started - self.synced_ms > retention:
                self.gap = True
                self.last_error = (f"changefeed cursor fell out of retention: last read "
                                   f"{started - self.synced_ms} ms ago, retention {retention} ms")
                log.error("%s; the replica must be re-cloned", self.last_error)
                self._wake.set()
                return 0
            total = 0
            self._round_note = None
            while True:
                more, n = await self._round(tables)
                total += n
                if not more:
                    break
            self.synced_ms = started
            self.rounds += 1
            self._last_ok = time.monotonic()
            self.last_error = self._round_note
            since = time.monotonic() - self._persisted_synced
            if (self._dirty and since >= CURSOR_PERSIST_SECS) or since > SYNCED_PERSIST_SECS:
                await self._persist()
            return total

    async def _round(self, tables: list[str]) -> tuple[bool, int]:
        rnd = await self.cursor.read(self.db, tables, sweeps=False)
        n = await self._hand_on(rnd.sets)
        # Only now: a submit that failed above leaves the round to be read again.
        self.cursor.advance(rnd, tables)
        self._sweep_owed = self.cursor.sweeping
        if rnd.oversized:
            self.oversized += len(rnd.oversized)
            self._round_note = (f"{self.oversized} transaction(s) held more changefeed entries "
                               f"than one read returns; rows past them are left to the drift "
                               f"check (last at versionstamp {rnd.oversized[-1]})")
        if rnd.sets:
            self._dirty = True  # written by `catch_up`, at most every CURSOR_PERSIST_SECS
        return rnd.more, n

    async def _hand_on(self, sets: list[tuple[int, str, dict[str, Any]]]) -> int:
        """Submit the row changes of `sets` (in their order); returns how many."""
        events: list[Event] = []
        for _vs, table, s in sets:
            for ch in s.get("changes") or []:
                ev = feed_change(table, ch)
                if ev is not None:
                    events.append(_event(*ev))
        if events:
            await self._submit(events)
            self._records.append((time.monotonic(), len(events)))
        return len(events)

    async def _current_tables(self) -> list[str]:
        if time.monotonic() - self._tables_at >= TABLES_REFRESH_SECS:
            self._tables = list(await self._tables_fn())
            self._tables_at = time.monotonic()
        return self._tables

    async def _retention(self) -> int | None:
        if time.monotonic() - self._retention_at >= RETENTION_REFRESH_SECS:
            defs = await self.db.table_definitions()
            found = [feed_retention_ms(defs[t]) for t in self._tables if t in defs]
            kept = [r for r in found if r is not None]
            self._retention_ms = min(kept) if kept else None
            self._retention_at = time.monotonic()
        return self._retention_ms


def _event(table: str, op: str, rid: str, row: Any) -> Event:
    """A row-change event; a DELETE without the original row carries just the id."""
    record = dict(row) if isinstance(row, dict) else {"id": parse_record_id(rid)}
    return {"table": table, "op": op, "id": rid, "record": record}


def _atomic_write(path: Path, text: str) -> None:
    replace_file(path, text.encode("utf-8"), sync_dir=True)


def feed_retention_ms(definition: str) -> int | None:
    """The retention of a `DEFINE TABLE ... CHANGEFEED <duration>` text in ms (None: no feed,
    or not a duration)."""
    m = re.search(r"\bCHANGEFEED (\S+)", definition)
    if m is None:
        return None
    try:
        return parse_duration_ns(m.group(1)) // 1_000_000
    except ValueError:
        return None
