"""Reading table changefeeds (`SHOW CHANGES`) in commit order: the parts every tail shares.

A changefeed read returns change sets `{versionstamp, changes: [...]}` per table. Merging
several tables' feeds into one commit order, and not losing a commit that becomes visible after
a later one was already read, is the same problem for every reader (the SSP in standalone mode,
the scheduler's changefeed transport), so it lives here:

* :func:`feed_change` turns one change into `(table, op, id text, row)`, keeping only the row
  (`current`, `update` when it is the created row, the `original` of a delete) and dropping the
  opaque parts of the feed (JSON patches of `update`, schema entries);
* :func:`read_round` reads the database's feed (`SHOW CHANGES FOR DATABASE`) in pages from the
  lowest cursor minus an overlap (a commit with an older versionstamp can become visible after a
  newer one was read), keeps the tables asked for, leaves out what was already seen, and returns
  the sets in commit order. Per-table reads cannot be paged: the engine's LIMIT counts every
  table's entries and caps at 1000 (see :meth:`dbclient.Database.changes`);
* :class:`FeedCursor` is where a reader stands: the per-table cursors, the re-read window's
  seen set and the horizon rule. :meth:`FeedCursor.read` never moves it; the reader calls
  :meth:`FeedCursor.advance` with the round only AFTER it handed the round's events on, so a
  reader that dies (or whose hand-off fails) in between reads the same changes again from its
  persisted state (at-least-once: a repeat is harmless, see the readers);
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cbor2 import CBORTag
from surrealdb import RecordID

from dbclient.cbor import TAG_RECORD_ID, LazyChanges, materialize
from dbclient.errors import DbError
from engine.values import record_id_text

if TYPE_CHECKING:
    from dbclient.database import Database

log = logging.getLogger("dbclient.feed")

# The engine scans at most this many feed entries per SHOW CHANGES, whatever LIMIT says.
ENGINE_PAGE_MAX = 1000

__all__ = [
    "ENGINE_PAGE_MAX",
    "FeedCursor",
    "FeedRound",
    "change_table",
    "feed_change",
    "read_round",
    "shallow_change_table",
    "split_by_table",
    "trim_seen",
]



def feed_change(table: str, ch: Mapping[str, Any]) -> tuple[str, str, str, Any] | None:
    """One changefeed change -> (table, op, id text, row), or None for schema entries.

    `op` is CREATE (the feed's `update` holding the new row), UPDATE (`current`, the row after
    the change; its `update` is then a list of patches, dropped) or DELETE (row = the
    `original` when the feed includes it, else None).
    """
    if "delete" in ch:
        d = ch["delete"]
        rid = d.get("id") if isinstance(d, Mapping) else None
        if not isinstance(rid, RecordID):
            return None
        return (table, "DELETE", record_id_text(rid), d.get("original"))
    if "current" in ch:
        row = ch["current"]
        op = "UPDATE"
    elif "update" in ch and isinstance(ch["update"], Mapping):
        row = ch["update"]
        op = "CREATE"
    else:
        return None
    if not isinstance(row, Mapping) or not isinstance(row.get("id"), RecordID):
        return None
    return (table, op, record_id_text(row["id"]), row)


@dataclass
class FeedRound:
    """What one :func:`read_round` found."""

    sets: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    # True when it stopped at `limit` new sets: more are waiting beyond `horizon`.
    more: bool = False
    # The last versionstamp the scan reached (None: the feed was empty from the start).
    # Every table's entries below it were read; those AT it may be cut off (re-read them).
    horizon: int | None = None
    # Versionstamps skipped because one transaction held more feed entries than a page.
    oversized: list[int] = field(default_factory=list)
    # Sweep marks the round sets, and when its sweep began (`FeedCursor`; None: no sweep).
    marks: dict[str, int] = field(default_factory=dict)
    swept_at: float | None = None
    read_from: dict[str, int] = field(default_factory=dict)  # the cursors it was read from
    # The last versionstamp of the scan's first page: every commit that shows after that page
    # was read has a later versionstamp minus the lateness allowed (a sweep's mark).
    first_page: int | None = None


def change_table(ch: Mapping[str, Any]) -> str | None:
    """The table a change belongs to (its record id's, or the defined table's name)."""
    for kind in ("delete", "current", "update"):
        body = ch.get(kind)
        if isinstance(body, Mapping):
            rid = body.get("id")
            if isinstance(rid, RecordID):
                return str(rid.table_name)
    d = ch.get("define_table")
    if isinstance(d, Mapping) and isinstance(d.get("name"), str):
        return str(d["name"])
    return None


def shallow_change_table(ch: Any) -> str | None:
    """:func:`change_table` of a change decoded shallowly (`dbclient.cbor.decode_shallow`):
    a record id is then still its CBOR tag 8, whose content is (table, key)."""
    # `type(...) is dict`: a shallow decode builds plain dicts, and an ABC isinstance check
    # per change was a visible part of the LIVE feed loop's time
    if type(ch) is not dict:
        return None
    for kind in ("delete", "current", "update"):
        body = ch.get(kind)
        if type(body) is dict:
            rid = body.get("id")
            if type(rid) is CBORTag and rid.tag == TAG_RECORD_ID:
                parts = rid.value
                if isinstance(parts, (tuple, list)) and len(parts) == 2 and isinstance(parts[0], str):
                    return parts[0]
    d = ch.get("define_table")
    if type(d) is dict and isinstance(d.get("name"), str):
        return str(d["name"])
    return None


def split_by_table(changes: Iterable[Mapping[str, Any]], *,
                   shallow: bool = False) -> dict[str, list[Any]]:
    """A database-wide change set's changes by table; each table is one feed entry.

    A change whose table cannot be told is kept under "" (it still counts as an entry).
    `shallow`: the changes were decoded shallowly (:func:`shallow_change_table`)."""
    table_of = shallow_change_table if shallow else change_table
    out: dict[str, list[Any]] = {}
    for ch in changes:
        out.setdefault(table_of(ch) or "", []).append(ch)
    return out


async def read_round(db: Database, cursors: Mapping[str, int],
                     seen: Mapping[str, Iterable[int] | set[int]], *, limit: int,
                     overlap_vs: int, page: int = ENGINE_PAGE_MAX,
                     min_vs: int = 0, floors: Mapping[str, int] | None = None,
                     ceilings: Mapping[str, int] | None = None) -> FeedRound:
    """Read the database's feed from the lowest `cursors[t] - overlap_vs`; return the sets of
    the tables in `cursors` not read before, in commit order (versionstamp, then table).

    One scan of the whole database's feed (`SHOW CHANGES FOR DATABASE`), paged: a table read
    would scan the same entries anyway (the engine applies LIMIT before the table filter), and
    only the database read tells where a page ended. A page that may have ended inside a
    transaction is continued from that transaction's versionstamp (SINCE is inclusive); what was
    taken already is not taken twice. Stops at the end of the feed or, with `more`, once
    `limit` new sets were found. A set of table t is new when its versionstamp is at least
    `cursors[t] - overlap_vs` and not in `seen[t]`; nothing below `min_vs` is ever read (the
    overlap does not reach back past a restore, see `FeedCursor.reset`).

    `floors` (table -> lowest versionstamp to read) replaces `cursors[t] - overlap_vs` when
    given (`FeedCursor`'s short reads and sweeps). `ceilings` (table -> highest versionstamp
    to take) bounds a read that need not reach the end of the feed (`FeedCursor.sweep_read`):
    paging stops once every table's ceiling was passed.
    """
    page = max(1, min(page, ENGINE_PAGE_MAX))
    out = FeedRound()
    if not cursors:
        return out
    if floors is None:
        floors = {t: c - overlap_vs for t, c in cursors.items()}
    floors = {t: max(0, min_vs, floors[t]) for t in cursors}
    since = min(floors.values())
    taken: set[tuple[int, str]] = set()
    while True:
        got = await db.changes(None, since, page)
        entries = 0
        last: int | None = None
        for s in got:
            vs = int(s["versionstamp"])
            last = vs
            changes_of = s.get("changes") or []
            # Changes decoded lazily (`dbclient.cbor.LazyChanges`) are split while still
            # shallow, and only the kept tables' are built: most of a busy feed is other
            # tables' (the SSPs' edges).
            lazy = isinstance(changes_of, LazyChanges)
            by_table = split_by_table(changes_of.raw if lazy else changes_of,  # type: ignore[union-attr]
                                      shallow=lazy)
            entries += len(by_table)
            for table, changes in by_table.items():
                floor = floors.get(table)
                if floor is None or vs < floor or (vs, table) in taken:
                    continue
                if ceilings is not None and vs > ceilings.get(table, vs):
                    continue
                if vs in (seen.get(table) or ()):
                    continue
                taken.add((vs, table))
                if lazy:
                    changes = [materialize(c) for c in changes]
                out.sets.append((vs, table, {"versionstamp": vs, "changes": changes}))
        if last is not None:
            out.horizon = last
            if out.first_page is None:
                out.first_page = last
        if last is None or entries < page:
            return out  # the scan reached the end of the feed
        if ceilings is not None and last > max(ceilings.values(), default=last):
            return out  # past every ceiling: what lies beyond is not this read's
        if last == since:
            # One transaction with at least a page of entries: SHOW CHANGES cannot page inside
            # a versionstamp, so the entries past the page are out of reach. Skip it loudly.
            out.oversized.append(since)
            log.error("changefeed: the transaction at versionstamp %d holds %d or more feed "
                      "entries (one per table); entries past the first %d cannot be read",
                      since, entries, page)
            since += 1
            continue
        if len(out.sets) >= limit:
            out.more = True
            return out
        since = last


@dataclass(frozen=True)
class SweepWindow:
    """The re-read window's rule, one per reader, shared by every reader of a feed
    (`FeedCursor` here, the database host's LIVE loop in `dbhost.live`).

    A commit can become visible after a commit with a later versionstamp was read; one that
    is at most `overlap_vs` late (its versionstamp at most that far below the versionstamps
    being committed when it shows) must not be lost. With `short_vs == overlap_vs` every read
    starts `overlap_vs` below the cursor: each read re-scans the whole window (issue 31: 2 s
    of a 500 writes/s feed on every doorbell). With a shorter `short_vs`, a read starts only
    `short_vs` below the cursor, and at most every `sweep_secs` a read *sweeps*: it starts at
    `mark - overlap_vs`, where `mark` is the table's cursor when the previous sweep began, and
    sets `mark` to the cursor. Why nothing late is lost: let a commit V show at time T, at
    most `overlap_vs` late, and let S be the first sweep that began after T and P the sweep
    before it (it began before T, with the cursor at m; or m is the last versionstamp of P's
    first page, if higher: V was not visible when that page was read, else P would have read
    it). Neither the cursor nor a page passes what has been committed when it is read, so
    m <= (the versionstamps of time T) <= V + overlap_vs, and S reads from m - overlap_vs <= V
    to the end of the feed, where V is visible by then. A table without a mark (new,
    re-followed, or restored from a state without marks) is read the old way, from its
    cursor minus `overlap_vs`, which marks it. The price: a commit more than `short_vs` late
    is delivered at the next sweep instead of the next read, and a sweep reads again what the
    short reads since the last one read. That pays while reads come more often than every
    `overlap_vs - short_vs` of feed; when they come less often (`sparse`), every read sweeps
    (as every read re-read the window before). Tests: `tests/unit/test_dbclient_feed_sweep.py`,
    `tests/unit/test_dbhost_live_sweep.py`.
    """

    overlap_vs: int
    short_vs: int
    sweep_secs: float

    @property
    def sweeping(self) -> bool:
        """Whether reads re-scan the window by sweeps (else every read re-reads all of it)."""
        return self.short_vs < self.overlap_vs

    def sparse(self, cursor: int, prev: int) -> bool:
        """Whether the last read (from `prev`) read the window's width of new feed or more: a
        short read would save less than its new changes cost the next sweep, so sweep."""
        return cursor - prev >= self.overlap_vs - self.short_vs

    def start(self, cursor: int, mark: int | None, sweep: bool) -> tuple[int, bool]:
        """Where a read of a table at `cursor` starts, and whether it sweeps (and so sets the
        table's mark, `new_mark`): a table never swept reads its whole window."""
        if mark is None:
            return cursor - self.overlap_vs, True
        if sweep:
            return min(mark, cursor) - self.overlap_vs, True
        return cursor - self.short_vs, False

    @staticmethod
    def new_mark(cursor: int, first_page: int | None) -> int:
        """The mark a sweep that began at `cursor` sets: as high as is safe, and what its
        first page reached had been committed when it was read (class docstring)."""
        return cursor if first_page is None else max(cursor, first_page)

    def low(self, cursor: int, mark: int | None) -> int:
        """The lowest versionstamp a later read (short or sweep) of the table reaches: seen
        versionstamps below it are never read again."""
        return (cursor if mark is None else min(mark, cursor)) - self.overlap_vs


def trim_seen(seen: MutableMapping[str, set[int]], cursors: Mapping[str, int],
              overlap_vs: int, marks: Mapping[str, int] | None = None) -> None:
    """Forget seen versionstamps below the re-read window (they are never read again). With
    sweeps (`FeedCursor`), a table's window starts at its sweep mark minus the overlap
    (`SweepWindow.low`)."""
    window = SweepWindow(overlap_vs, overlap_vs, 0.0)
    for table, vs_set in seen.items():
        floor = window.low(cursors.get(table, 0), None if marks is None else marks.get(table))
        if any(v < floor for v in vs_set):
            seen[table] = {v for v in vs_set if v >= floor}


async def sweep_loop(every: float, due: Callable[[], bool],
                     sweep: Callable[[], Awaitable[object]]) -> None:
    """Run `sweep` (a tail's :meth:`FeedCursor.sweep_read` and hand-on, apart from its short
    reads) at most every `every` seconds, when `due()` says one is owed. A sweep that fails
    is logged and owed again by `sweep` itself; the loop goes on until cancelled. The
    scheduler's tail and the standalone SSP's share it (`scheduler.feed`, `ssp.hub.tail`)."""
    while True:
        await asyncio.sleep(every)
        if not due():
            continue
        try:
            await sweep()
        except DbError as e:
            log.warning("changefeed sweep failed: %s", e)
        except Exception:  # a hand-on failure: owed again, the next turn runs it
            log.exception("changefeed sweep failed")


class FeedCursor:
    """A changefeed reader's position: `cursors` (table -> last versionstamp absorbed), `seen`
    (versionstamps inside the re-read window, per table) and `base` (where a table without a
    cursor of its own is read from).

    `read` returns the next round without moving anything; `advance` absorbs a round once its
    events were handed on. Persist `state()` after `advance` and rebuild with `from_state`.

    The re-read window: with `short_vs` below `overlap_vs`, reads re-read only `short_vs`
    and sweep the whole window at most every `sweep_secs` (`SweepWindow`, where the argument
    that no late commit is lost is written down).
    """

    def __init__(self, base: int, *, limit: int = 1000, overlap_vs: int = 2000 << 16,
                 short_vs: int | None = None, sweep_secs: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base = base
        self.limit = limit
        self.window = SweepWindow(overlap_vs, overlap_vs if short_vs is None
                                  else min(short_vs, overlap_vs), sweep_secs)
        self._clock = clock
        self.cursors: dict[str, int] = {}
        self.seen: dict[str, set[int]] = {}
        # table -> its cursor when the last sweep (or whole-window read) of it began
        self.marks: dict[str, int] = {}
        self._swept_at = float("-inf")
        self._prev: dict[str, int] = {}  # the cursors the last absorbed round was read from
        self.floor = 0  # nothing below it is read again, even in the overlap (`reset`)
        self.pinned = 0  # the database's feed floor (`pin`): every `reset` keeps it
        # `reset`s so far: a sweep read before one must not be absorbed after it
        self.resets = 0

    @property
    def overlap_vs(self) -> int:
        """How late a commit may become visible and still be read (`SweepWindow`)."""
        return self.window.overlap_vs

    @property
    def sweep_secs(self) -> float:
        """How often at most a read sweeps the whole window (`SweepWindow`)."""
        return self.window.sweep_secs

    @sweep_secs.setter
    def sweep_secs(self, secs: float) -> None:
        self.window = dataclasses.replace(self.window, sweep_secs=secs)

    @property
    def sweeping(self) -> bool:
        """Whether reads re-scan the window by sweeps (else every read re-reads all of it)."""
        return self.window.sweeping

    def at(self, table: str) -> int:
        """The cursor of `table` (`base` when it has none yet)."""
        return self.cursors.get(table, self.base)

    def follow(self, table: str, vs: int | None = None) -> None:
        """Read `table` from `vs` (its cursor so far, else `base`, when None)."""
        self.cursors[table] = self.at(table) if vs is None else vs
        if vs is not None:
            self.marks.pop(table, None)  # moved: read its whole window again first

    def forget(self, table: str) -> None:
        """Stop reading `table`."""
        self.cursors.pop(table, None)
        self.seen.pop(table, None)
        self.marks.pop(table, None)

    def reset(self, base: int, *, floor: bool = False) -> None:
        """Every table read again from `base`; nothing seen. With `floor`, the re-read overlap
        never reaches below `base` either: after the database was replaced (a restore), the
        feed still holds the old database's last changes, which must not be read again."""
        self.base = base
        self.cursors = {}
        self.seen = {}
        self.marks = {}
        self.floor = max(base if floor else 0, self.pinned)
        self.resets += 1

    def pin(self, vs: int) -> None:
        """Never read below `vs` again, across resets: the database's feed floor
        (`dbclient.feedfloor`), below which the feed describes the database a restore
        replaced."""
        self.pinned = max(self.pinned, vs)
        self.floor = max(self.floor, vs)

    def below(self, vs: int) -> bool:
        """Whether any followed table's position is below `vs` (a position of the database
        before the restore that set the floor `vs`)."""
        return any(c < vs for c in self.cursors.values()) or (not self.cursors and self.base < vs)

    async def read(self, db: Database, tables: Iterable[str] | None = None, *,
                   sweeps: bool = True) -> FeedRound:
        """The next round of `tables` (default: every table with a cursor); moves nothing.

        `sweeps=False`: the read never sweeps a table that has a mark; the caller sweeps apart
        (:meth:`sweep_read`), so that a sweep's long read does not hold up new changes."""
        names = list(self.cursors) if tables is None else list(tables)
        cursors = {t: self.at(t) for t in names}
        if not self.sweeping:
            return await read_round(db, cursors, self.seen, limit=self.limit,
                                    overlap_vs=self.overlap_vs, min_vs=self.floor)
        window = self.window
        began = self._clock()
        sweep = sweeps and (
            any(window.sparse(c, self._prev.get(t, c)) for t, c in cursors.items())
            or began - self._swept_at >= window.sweep_secs)
        floors: dict[str, int] = {}
        swept: list[str] = []
        for t, c in cursors.items():
            floors[t], sweeps = window.start(c, self.marks.get(t), sweep)
            if sweeps:
                swept.append(t)
        rnd = await read_round(db, cursors, self.seen, limit=self.limit,
                               overlap_vs=self.overlap_vs, min_vs=self.floor, floors=floors)
        rnd.marks = {t: window.new_mark(cursors[t], rnd.first_page) for t in swept}
        rnd.read_from = cursors
        if sweep:
            rnd.swept_at = began
        return rnd

    async def sweep_read(self, db: Database, tables: Iterable[str] | None = None) -> FeedRound:
        """A sweep on its own: each marked table's window, from its mark (or cursor, if lower)
        minus the overlap up to its cursor now, for sets not seen; moves nothing.

        For a reader whose short reads go on meanwhile (`read(..., sweeps=False)`): what lies
        above the cursors is theirs, and the argument of `SweepWindow` holds with the sweep
        ending at the cursor it began with (a late commit that showed before the sweep began
        lies below that cursor). A table without a mark is left to the short reads, which
        read its whole window first. Absorb the result with :meth:`absorb_sweep`, after
        dropping what became seen meanwhile (:meth:`unseen`)."""
        names = list(self.cursors) if tables is None else list(tables)
        window = self.window
        began = self._clock()
        floors: dict[str, int] = {}
        ceilings: dict[str, int] = {}
        for t in names:
            mark = self.marks.get(t)
            if mark is None or t not in self.cursors:
                continue
            floors[t], _ = window.start(self.cursors[t], mark, True)
            ceilings[t] = self.cursors[t]
        if not floors:
            return FeedRound(swept_at=began)
        rnd = await read_round(db, dict(ceilings), self.seen, limit=1 << 30,
                               overlap_vs=self.overlap_vs, min_vs=self.floor, floors=floors,
                               ceilings=ceilings)
        rnd.marks = dict(ceilings)
        rnd.swept_at = began
        rnd.horizon = None  # a sweep moves no cursor
        return rnd

    def unseen(self, rnd: FeedRound) -> list[tuple[int, str, dict[str, Any]]]:
        """`rnd`'s sets that are not seen (yet) and whose table is still followed."""
        return [(vs, t, s) for vs, t, s in rnd.sets
                if t in self.cursors and vs not in self.seen.get(t, ())]

    def absorb_sweep(self, rnd: FeedRound, taken: Iterable[tuple[int, str, Any]]) -> None:
        """Absorb a sweep once the sets it `taken` were handed on: they are seen, and each
        swept table's mark moves to the cursor the sweep began with."""
        for vs, table, _s in taken:
            if table in self.cursors:
                self.seen.setdefault(table, set()).add(vs)
        for table, mark in rnd.marks.items():
            if table in self.cursors:
                self.marks[table] = max(mark, self.marks.get(table, mark))
        if rnd.swept_at is not None:
            self._swept_at = rnd.swept_at
        trim_seen(self.seen, self.cursors, self.overlap_vs, self.marks)

    def advance(self, rnd: FeedRound, tables: Iterable[str] | None = None) -> None:
        """Absorb `rnd` (read for `tables`, default every table with a cursor): call only
        once its events were handed on. Pass the tables the round was read for: a table
        followed since was not read, and must not move to the round's horizon."""
        names = list(self.cursors) if tables is None else list(tables)
        wanted = set(names)
        for vs, table, _s in rnd.sets:
            if table not in wanted:
                continue  # forgotten while the round was handed on
            self.seen.setdefault(table, set()).add(vs)
            self.cursors[table] = max(self.at(table), vs)
        if rnd.horizon is not None:
            # The database-wide scan read every table up to the horizon: a table with no
            # change in it moves too (its entries AT the horizon come again in the overlap).
            for table in names:
                self.cursors[table] = max(self.at(table), rnd.horizon)
        for table, mark in rnd.marks.items():
            if table in wanted and table in self.cursors:
                self.marks[table] = mark
        if rnd.swept_at is not None:
            self._swept_at = rnd.swept_at
        self._prev = {t: c for t, c in rnd.read_from.items() if t in self.cursors}
        trim_seen(self.seen, self.cursors, self.overlap_vs, self.marks)

    def state(self) -> dict[str, Any]:
        """The JSON-able position (`from_state` reads it back). The sweep marks are kept: a
        commit that showed late after the last sweep lies below `cursor - overlap_vs`, and
        only a sweep from the mark finds it (the first read after a restart sweeps)."""
        out = {"base": self.base, "cursors": dict(self.cursors),
               "seen": {t: sorted(v) for t, v in self.seen.items() if v}, "floor": self.floor}
        if self.marks:
            out["marks"] = dict(self.marks)
        return out

    @classmethod
    def from_state(cls, raw: Mapping[str, Any], *, limit: int = 1000,
                   overlap_vs: int = 2000 << 16, short_vs: int | None = None,
                   sweep_secs: float = 0.5) -> FeedCursor:
        """A cursor from `state()` (ValueError/KeyError/TypeError on a malformed one)."""
        cur = cls(int(raw["base"]), limit=limit, overlap_vs=overlap_vs, short_vs=short_vs,
                  sweep_secs=sweep_secs)
        cur.cursors = {str(k): int(v) for k, v in raw.get("cursors", {}).items()}
        cur.seen = {str(k): {int(x) for x in v} for k, v in raw.get("seen", {}).items()}
        cur.floor = int(raw.get("floor", 0))
        # a state without marks (or from an older release): tables read their whole window
        cur.marks = {str(k): int(v) for k, v in raw.get("marks", {}).items()
                     if str(k) in cur.cursors}
        return cur
