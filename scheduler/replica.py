"""The scheduler's persistent snapshot replica of the database, at ``replica_db_path``.

Storage: plain ``sqlite3`` (not sqlitedict). The replica needs what a key-value pickle store
does not give: (1) keyset paging in SurrealDB's ``ORDER BY id`` order, which needs an ordered
key column and ``WHERE k > ? ORDER BY k LIMIT n`` over an index; (2) one transaction covering
a batch of rows, the per-table count/hash totals and ``applied_seq``, so WAL replay after a
crash applies each event exactly once; (3) no pickle (rows are the canonical MessagePack of
:func:`engine.values.canonical_bytes`, the same bytes the hash is taken over).

Schema (one file, WAL journal mode, ``synchronous=FULL`` so a committed drain is durable before
the caller truncates the scheduler's own WAL):

* ``rows(tbl, k, rid, data, h, rv)``, primary key ``(tbl, k)``, ``WITHOUT ROWID``: ``k`` is an
  order-preserving byte encoding of the record id's key (:func:`id_order_key`, built from
  :func:`engine.values.sort_key`, so ``ORDER BY k`` equals SurrealDB's ``ORDER BY id`` for
  mixed key kinds: numbers < strings < uuids < arrays < objects, verified against the embedded
  engine); ``rid`` is the canonical id text; ``h`` the row's xxh3 hash (signed 64-bit).
  One known divergence, on purpose: for a datetime inside an array/object key, SurrealDB
  3.2.4's ``ORDER BY id`` follows its storage order (``00:00:00.000001`` before ``00:00:00``)
  while ``id > $last`` compares by time, so SurrealDB's own keyset paging can skip such rows.
  The replica orders them by time for both, so its paging is gap-free. ``rv`` is the packed
  ``_00_rv`` (the staleness check reads it without decoding the row).
* ``tbls(tbl, n, h)``: row count and XOR of row hashes, maintained incrementally, so
  :meth:`Replica.count` and :meth:`Replica.hash` are O(1) and equal
  ``engine.ViewEngine.table_count``/``table_hash`` for the same contents.
* ``meta(k, v)``: ``applied_seq`` (the last WAL sequence absorbed).

Freeze (the SSP bootstrap): while any SSP bootstraps, the replica must keep serving the
snapshot it announced (``snapshot_seq``). The design is the simplest that is correct: the
scheduler stops draining the WAL into the replica. :meth:`freeze` returns ``snapshot_seq``
(= ``applied_seq``) and increments a counter; :meth:`unfreeze` decrements it; :meth:`apply`
and :meth:`clone_from` raise :class:`ReplicaFrozen` while the counter is above zero, so a
forgotten check fails loudly instead of moving the snapshot under a bootstrapping SSP. New
events simply wait in the WAL. The counter is in memory: after a restart, SSPs re-register.
"""

from __future__ import annotations

import asyncio
import decimal
import math
import sqlite3
import struct
import threading
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from engine.hashing import bytes_hash
from engine.values import (
    NONE,
    RecordID,
    canonical_bytes,
    pack_value,
    parse_record_id,
    record_id_text,
    sort_key,
    unpack_value,
)
from engine.versions import is_stale
from engine.write import check_change_body

if TYPE_CHECKING:
    from dbclient import Database

__all__ = [
    "SYNCED_META_TABLES",
    "ApplyResult",
    "CloneInProgress",
    "CloneProgress",
    "Replica",
    "ReplicaFrozen",
    "id_order_key",
]

SYNCED_META_TABLES: frozenset[str] = frozenset({"_00_query", "_00_app_release", "_00_user_feature"})
"""Meta (``_00_``) tables cloned like user tables: view registrations and the two tables views
may read (the allowlist always admits shapes over ``_00_app_release`` and ``_00_user_feature``).
Every other ``_00_`` table is the service's own bookkeeping and is not replicated."""

_MASK = 0xFFFFFFFFFFFFFFFF


class ReplicaFrozen(RuntimeError):
    """The replica is frozen for an SSP bootstrap; events must stay in the WAL meanwhile."""


class CloneInProgress(RuntimeError):
    """A clone is already running (the spec's 'reclone already running', a 409)."""


# ----------------------------------------------------------------------------- ordered keys
# Tags of the order-preserving encoding; a sequence ends with 0x00, below every tag, so a
# prefix sorts first (as Python tuples do).
_T_END = 0x00
_T_NEG_INF = 0x10
_T_NEG = 0x11
_T_ZERO = 0x12
_T_POS = 0x13
_T_POS_INF = 0x14
_T_NAN = 0x15
_T_STR = 0x20
_T_BYTES = 0x21
_T_SEQ = 0x30
_EXP = struct.Struct(">Q")
_EPOCH_US = datetime(1970, 1, 1).toordinal()


def _enc_bytes(tag: int, b: bytes, out: bytearray) -> None:
    out.append(tag)
    # 0x00 is escaped as 0x00 0xFF and the end is 0x00 0x00: byte order is preserved and the
    # encoding is prefix-free.
    out += b.replace(b"\x00", b"\x00\xff")
    out += b"\x00\x00"


def _enc_number(d: Decimal, out: bytearray) -> None:
    if d.is_nan():
        out.append(_T_NAN)
        return
    if d.is_infinite():
        out.append(_T_POS_INF if d > 0 else _T_NEG_INF)
        return
    if d == 0:
        out.append(_T_ZERO)
        return
    sign, digits, _ = d.normalize(_CTX).as_tuple()
    # Magnitude: adjusted exponent (biased, big-endian) then the significant digits, ended by
    # 0x00 (below any digit byte): a.bcd x 10^e compares by e, then by digits.
    mag = bytearray(_EXP.pack(d.adjusted() + (1 << 63)))
    mag += bytes(0x30 + x for x in digits)
    mag.append(0)
    if sign == 0:
        out.append(_T_POS)
        out += mag
    else:
        out.append(_T_NEG)
        out += bytes(0xFF - x for x in mag)  # larger magnitude sorts first


_CTX = decimal.Context(prec=400)  # normalize() must never round a stored decimal


def _enc(v: Any, out: bytearray) -> None:
    t = type(v)
    if t is tuple or t is list:
        out.append(_T_SEQ)
        for x in v:
            _enc(x, out)
        out.append(_T_END)
    elif t is str:
        _enc_bytes(_T_STR, v.encode("utf-8"), out)  # UTF-8 byte order == code point order
    elif t is bytes:
        _enc_bytes(_T_BYTES, v, out)
    elif t is bool or t is int:
        _enc_number(Decimal(int(v)), out)
    elif t is float:
        if math.isnan(v):
            out.append(_T_NAN)
        else:
            _enc_number(Decimal(v), out)  # exact: Decimal(float) keeps every bit
    elif t is Decimal:
        _enc_number(v, out)
    elif isinstance(v, datetime):
        # sort_key keeps aware datetimes; order them by exact UTC microseconds.
        us = (v.toordinal() - _EPOCH_US) * 86_400_000_000
        off = v.utcoffset()
        secs = v.hour * 3600 + v.minute * 60 + v.second
        if off is not None:
            secs -= int(off.total_seconds())
        _enc_number(Decimal(us + secs * 1_000_000 + v.microsecond), out)
    else:
        raise TypeError(f"cannot order-encode {t.__name__}")


_KEY_CACHE: dict[tuple[type, Any], bytes] = {}
_KEY_CACHE_MAX = 200_000


def id_order_key(rid: RecordID) -> bytes:
    """Bytes whose order equals SurrealDB's ``ORDER BY id`` order within one table.

    It is an order-preserving encoding of :func:`engine.values.sort_key` of the id's key
    (the table is the same for every row of a table and is left out).
    """
    k = rid.id
    tk = type(k)
    if tk is int or tk is str:
        # Hot rows repeat across a drain: cache the common key kinds (bounded).
        ck = (tk, k)
        b = _KEY_CACHE.get(ck)
        if b is None:
            out = bytearray()
            _enc(sort_key(rid)[2], out)
            if len(_KEY_CACHE) >= _KEY_CACHE_MAX:
                _KEY_CACHE.clear()
            b = _KEY_CACHE[ck] = bytes(out)
        return b
    out = bytearray()
    _enc(sort_key(rid)[2], out)
    return bytes(out)


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= (1 << 63) else h


# ----------------------------------------------------------------------------- results


@dataclass
class ApplyResult:
    """What one :meth:`Replica.apply` did."""

    applied: int = 0  # events that changed (or confirmed) a row
    stale: int = 0  # skipped: their _00_rv was older than the stored row's
    already: int = 0  # skipped: seq <= applied_seq (absorbed before a crash)
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (seq, reason)
    applied_seq: int = 0


@dataclass(frozen=True)
class CloneProgress:
    """Reported after each cloned page."""

    table: str
    table_rows: int  # rows of this table cloned so far
    total_rows: int  # rows of every table cloned so far
    tables_done: int
    tables_total: int


ProgressCallback = Callable[[CloneProgress], Awaitable[None] | None]


def _rv_bytes(row: Mapping[str, Any]) -> bytes | None:
    # The stored row's _00_rv, kept apart so the staleness check never decodes the whole row.
    rv = row.get("_00_rv", NONE)
    return None if rv is NONE or rv is None else pack_value(rv)


def _same_id(event_id: Any, rid: RecordID) -> bool:
    if isinstance(event_id, RecordID):
        return record_id_text(event_id) == record_id_text(rid)
    if not isinstance(event_id, str):
        return False
    text = record_id_text(rid)
    if event_id == text:
        return True
    try:  # other spellings of the same id (2.x brackets, quotes)
        return record_id_text(parse_record_id(event_id)) == text
    except ValueError:
        return False


def _resolve_id(table: str, event_id: Any, record: Mapping[str, Any] | None) -> RecordID:
    ident = record.get("id") if record is not None else None
    rid: RecordID
    if type(ident) is RecordID:
        rid = ident
        if event_id is not None and not _same_id(event_id, rid):
            # The engine refuses this too: which of the two ids is meant is unknowable.
            raise ValueError(f"record id {record_id_text(rid)} does not match event id "
                             f"{event_id!s:.80}")
    elif isinstance(event_id, RecordID):
        rid = event_id
    elif isinstance(event_id, str) and event_id:
        try:
            rid = parse_record_id(event_id)
        except ValueError:
            raise ValueError(f"invalid record id {event_id!r:.80}") from None
    else:
        raise ValueError("the event has no record id")
    if rid.table_name != table:
        raise ValueError(f"record {record_id_text(rid)} is not in table {table}")
    return rid


_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    tbl TEXT NOT NULL, k BLOB NOT NULL, rid TEXT NOT NULL, data BLOB NOT NULL,
    h INTEGER NOT NULL, rv BLOB, PRIMARY KEY (tbl, k)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tbls (tbl TEXT PRIMARY KEY, n INTEGER NOT NULL, h INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v);
"""


class Replica:
    """The persistent snapshot replica (see the module docstring). Use :meth:`open`.

    Methods are synchronous and thread-safe (one connection behind a lock); call them from
    ``asyncio.to_thread`` for large batches. Values come back as the SDK types
    (RecordID, datetime, Decimal, Duration, UUID, bytes...).
    """

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._lock = threading.RLock()
        self._frozen = 0
        self._cloning = False

    @classmethod
    def open(cls, path: Path | str) -> Replica:
        """Open or create the replica file (parent directories are created)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(p, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(_SCHEMA)
        return cls(conn, p)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads
    @property
    def applied_seq(self) -> int:
        """The last WAL sequence number whose event is in the replica (0: none)."""
        with self._lock:
            row = self._conn.execute("SELECT v FROM meta WHERE k='applied_seq'").fetchone()
        return int(row[0]) if row else 0

    def tables(self) -> list[str]:
        """Names of the tables with at least one row, sorted."""
        with self._lock:
            cur = self._conn.execute("SELECT tbl FROM tbls WHERE n > 0 ORDER BY tbl")
            return [r[0] for r in cur]

    def count(self, table: str) -> int:
        """Rows in ``table`` (0 for an unknown table)."""
        with self._lock:
            row = self._conn.execute("SELECT n FROM tbls WHERE tbl=?", (table,)).fetchone()
        return int(row[0]) if row else 0

    def hash(self, table: str) -> int:
        """XOR of ``engine.hashing.row_hash`` over the table's rows (unsigned; 0 when empty)."""
        with self._lock:
            row = self._conn.execute("SELECT h FROM tbls WHERE tbl=?", (table,)).fetchone()
        return (int(row[0]) & _MASK) if row else 0

    def get(self, table: str, id: str | RecordID) -> dict[str, Any] | None:
        """The row with this record id (text like ``user:1`` or a RecordID), or None."""
        rid = _resolve_id(table, id, None)
        with self._lock:
            row = self._conn.execute("SELECT data FROM rows WHERE tbl=? AND k=?",
                                     (table, id_order_key(rid))).fetchone()
        return unpack_value(row[0]) if row else None

    def page(self, table: str, after_id: str | RecordID | None, limit: int
             ) -> list[dict[str, Any]]:
        """Up to ``limit`` rows with id greater than ``after_id`` (None: from the start), in
        SurrealDB's ``ORDER BY id`` order: keyset paging, like ``Database.keyset_pages``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        with self._lock:
            if after_id is None:
                cur = self._conn.execute(
                    "SELECT data FROM rows WHERE tbl=? ORDER BY k LIMIT ?", (table, limit))
            else:
                key = id_order_key(_resolve_id(table, after_id, None))
                cur = self._conn.execute(
                    "SELECT data FROM rows WHERE tbl=? AND k>? ORDER BY k LIMIT ?",
                    (table, key, limit))
            return [unpack_value(r[0]) for r in cur]

    def rows(self, table: str, page_size: int = 1000) -> Iterator[dict[str, Any]]:
        """Every row of ``table`` in id order (keyset pages of ``page_size``)."""
        last: RecordID | None = None
        while True:
            page = self.page(table, last, page_size)
            yield from page
            if len(page) < page_size:
                return
            last = page[-1]["id"]

    # ------------------------------------------------------------------ freeze
    @property
    def frozen(self) -> bool:
        """True while at least one SSP bootstrap holds the snapshot."""
        return self._frozen > 0

    def freeze(self) -> int:
        """Hold the snapshot for a bootstrap; returns ``snapshot_seq`` (= ``applied_seq``).
        Nests: the replica stays frozen until every :meth:`freeze` is matched."""
        with self._lock:
            self._frozen += 1
            return self.applied_seq

    def unfreeze(self) -> None:
        """Release one :meth:`freeze` (a bootstrap finished or its SSP went away)."""
        with self._lock:
            if self._frozen == 0:
                raise RuntimeError("unfreeze() without a matching freeze()")
            self._frozen -= 1

    # ------------------------------------------------------------------ writes
    def apply(self, events: Iterable[tuple[int, Mapping[str, Any]]]) -> ApplyResult:
        """Apply ``(seq, event)`` pairs (e.g. ``wal.replay(replica.applied_seq)``) in one
        transaction, and record the highest seq as ``applied_seq`` in the same transaction.

        CREATE/UPDATE store the whole row (upsert); DELETE removes it. Events with
        ``seq <= applied_seq`` are skipped (already absorbed), as is an event whose
        ``record._00_rv`` is older than the stored row's. An invalid event (bad id, table
        mismatch, unencodable value) is skipped and reported in ``rejected`` rather than
        blocking every later event. Raises :class:`ReplicaFrozen` while frozen.
        """
        res = ApplyResult()
        with self._lock:
            if self._frozen:
                raise ReplicaFrozen("the replica is frozen for an SSP bootstrap")
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                start = self.applied_seq
                top = start
                totals: dict[str, list[int]] = {}
                for seq, ev in events:
                    if seq <= start:
                        res.already += 1
                        continue
                    if seq <= top:
                        raise ValueError(f"sequence numbers must increase ({seq} after {top})")
                    top = seq
                    try:
                        outcome = self._apply_one(ev, totals)
                    except (ValueError, TypeError, KeyError) as e:
                        res.rejected.append((seq, str(e)))
                        continue
                    if outcome:
                        res.applied += 1
                    else:
                        res.stale += 1
                for tbl, (dn, dh) in totals.items():
                    c.execute(
                        "INSERT INTO tbls(tbl, n, h) VALUES (?, 0, 0) ON CONFLICT DO NOTHING",
                        (tbl,))
                    row = c.execute("SELECT n, h FROM tbls WHERE tbl=?", (tbl,)).fetchone()
                    c.execute("UPDATE tbls SET n=?, h=? WHERE tbl=?",
                              (row[0] + dn, _signed((row[1] ^ dh) & _MASK), tbl))
                if top > start:
                    c.execute("INSERT INTO meta(k, v) VALUES ('applied_seq', ?) "
                              "ON CONFLICT(k) DO UPDATE SET v=excluded.v", (top,))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            res.applied_seq = top
        return res

    def _apply_one(self, ev: Mapping[str, Any], totals: dict[str, list[int]]) -> bool:
        # Any: check_change_body is what narrows them (a str, an op, a mapping or None)
        table: Any = ev.get("table")
        op: Any = ev.get("op")
        record: Any = ev.get("record")
        check_change_body(table, op, record)
        rid = _resolve_id(table, ev.get("id"), record)
        key = id_order_key(rid)
        c = self._conn
        old = c.execute("SELECT rv, h FROM rows WHERE tbl=? AND k=?", (table, key)).fetchone()
        if (old is not None and old[0] is not None and record is not None
                and "_00_rv" in record and is_stale(record, {"_00_rv": unpack_value(old[0])})):
            return False
        t = totals.setdefault(table, [0, 0])
        if op == "DELETE":
            if old is None:
                return True
            c.execute("DELETE FROM rows WHERE tbl=? AND k=?", (table, key))
            t[0] -= 1
            t[1] ^= old[1] & _MASK
            return True
        row = dict(record)
        row["id"] = rid
        data = canonical_bytes(row)
        h = bytes_hash(data)
        c.execute("INSERT INTO rows(tbl, k, rid, data, h, rv) VALUES (?, ?, ?, ?, ?, ?) "
                  "ON CONFLICT(tbl, k) DO UPDATE SET data=excluded.data, h=excluded.h, "
                  "rv=excluded.rv", (table, key, record_id_text(rid), data, _signed(h),
                                     _rv_bytes(row)))
        if old is None:
            t[0] += 1
        else:
            t[1] ^= old[1] & _MASK
        t[1] ^= h
        return True

    def drop_table(self, table: str) -> int:
        """Remove every row of ``table`` in one transaction; the number removed. Refused
        while frozen (an SSP bootstraps from this snapshot) or cloning."""
        with self._lock:
            if self._frozen:
                raise ReplicaFrozen("the replica is frozen for an SSP bootstrap")
            if self._cloning:
                raise CloneInProgress("a clone of the replica is running")
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                n = c.execute("DELETE FROM rows WHERE tbl=?", (table,)).rowcount
                c.execute("DELETE FROM tbls WHERE tbl=?", (table,))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return int(n)

    def rehash(self) -> dict[str, int]:
        """Recompute every table's row count and hash from the stored rows (the admin plane's
        ``rehash``: repairs bookkeeping that disagrees with the rows without a re-clone);
        table -> rows. Refused while cloning."""
        with self._lock:
            if self._cloning:
                raise CloneInProgress("a clone of the replica is running")
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                totals: dict[str, list[int]] = {}
                for tbl, rh in c.execute("SELECT tbl, h FROM rows"):
                    t = totals.setdefault(tbl, [0, 0])
                    t[0] += 1
                    t[1] ^= rh & _MASK
                c.execute("DELETE FROM tbls")
                c.executemany("INSERT INTO tbls(tbl, n, h) VALUES (?, ?, ?)",
                              [(t, n, _signed(h)) for t, (n, h) in totals.items()])
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return {t: n for t, (n, _) in totals.items()}

    def replace_all(self, tables: Mapping[str, Iterable[Mapping[str, Any]]],
                    applied_seq: int) -> None:
        """Replace the whole contents with ``tables`` (name -> rows) in one transaction."""
        self._begin_clone()
        try:
            for name, rows in tables.items():
                self._clone_page(name, list(rows))
            self._finish_clone(list(tables), applied_seq)
        finally:
            self._cloning = False

    # ------------------------------------------------------------------ cloning
    @property
    def cloning(self) -> bool:
        """True while :meth:`clone_from` or :meth:`replace_all` runs."""
        return self._cloning

    def _begin_clone(self) -> None:
        with self._lock:
            if self._frozen:
                raise ReplicaFrozen("the replica is frozen for an SSP bootstrap")
            if self._cloning:
                raise CloneInProgress("a clone of the replica is already running")
            self._cloning = True
            c = self._conn
            c.execute("DROP TABLE IF EXISTS clone_rows")
            c.execute("CREATE TABLE clone_rows (tbl TEXT NOT NULL, k BLOB NOT NULL, "
                      "rid TEXT NOT NULL, data BLOB NOT NULL, h INTEGER NOT NULL, rv BLOB, "
                      "PRIMARY KEY (tbl, k)) WITHOUT ROWID")

    def _clone_page(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        batch = []
        for r in rows:
            rid = _resolve_id(table, None, r)
            row = dict(r)
            data = canonical_bytes(row)
            batch.append((table, id_order_key(rid), record_id_text(rid), data,
                          _signed(bytes_hash(data)), _rv_bytes(row)))
        with self._lock:
            c = self._conn
            c.execute("BEGIN")
            try:
                c.executemany("INSERT OR REPLACE INTO clone_rows VALUES (?, ?, ?, ?, ?, ?)", batch)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    def _finish_clone(self, tables: list[str], applied_seq: int) -> None:
        with self._lock:
            if self._frozen:
                raise ReplicaFrozen("the replica is frozen for an SSP bootstrap")
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                c.execute("DELETE FROM rows")
                c.execute("DELETE FROM tbls")
                c.execute("INSERT INTO rows(tbl, k, rid, data, h, rv) "
                          "SELECT tbl, k, rid, data, h, rv FROM clone_rows")
                for t in tables:
                    n = 0
                    h = 0
                    for (rh,) in c.execute("SELECT h FROM rows WHERE tbl=?", (t,)):
                        n += 1
                        h ^= rh & _MASK
                    c.execute("INSERT INTO tbls(tbl, n, h) VALUES (?, ?, ?)", (t, n, _signed(h)))
                c.execute("INSERT INTO meta(k, v) VALUES ('applied_seq', ?) "
                          "ON CONFLICT(k) DO UPDATE SET v=excluded.v", (applied_seq,))
                c.execute("DROP TABLE clone_rows")
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    async def clone_from(self, db: Database, page_size: int = 500, *,
                         applied_seq: int = 0,
                         tables: Collection[str] | None = None,
                         progress: ProgressCallback | None = None) -> dict[str, int]:
        """Replace the replica's contents with the database's, read by keyset pages.

        ``tables``: which tables to copy (default: every table of the database except the
        ``_00_`` meta tables not in :data:`SYNCED_META_TABLES`). Rows go to a staging table page
        by page (memory stays bounded; readers keep seeing the old contents), then one
        transaction swaps them in and sets ``applied_seq`` (the WAL position the clone
        reflects: events after it are replayed on top, their ``_00_rv`` guarding against
        going backwards). ``progress`` (sync or async) is called after every page. Returns
        table -> rows cloned. Database errors propagate (``dbclient`` error types); the
        replica is then unchanged. Raises :class:`CloneInProgress` when a clone already runs,
        :class:`ReplicaFrozen` while frozen.
        """
        if tables is None:
            names = [t for t in await db.tables()
                     if not t.startswith("_00_") or t in SYNCED_META_TABLES]
        else:
            names = list(tables)
        self._begin_clone()
        counts: dict[str, int] = {}
        total = 0
        try:
            for i, name in enumerate(names):
                counts[name] = 0
                async for page in db.keyset_pages(name, page_size):
                    await asyncio.to_thread(self._clone_page, name, page)
                    counts[name] += len(page)
                    total += len(page)
                    if progress is not None:
                        r = progress(CloneProgress(name, counts[name], total, i, len(names)))
                        if r is not None:
                            await r
            await asyncio.to_thread(self._finish_clone, names, applied_seq)
        finally:
            self._cloning = False
        if progress is not None:
            r = progress(CloneProgress(names[-1] if names else "", counts.get(
                names[-1], 0) if names else 0, total, len(names), len(names)))
            if r is not None:
                await r
        return counts
