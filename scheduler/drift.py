"""Replica drift: compare the replica with the database, repair in place, else re-clone.

`DriftChecker.check_once()` runs at startup and after each drain that leaves nothing buffered
(`buffered()` False: the replica lags the WAL by design, so comparing it while events wait
would always disagree). Per synced table it compares the row count and the table hash
(XOR of `engine.hashing.bytes_hash` over each row's canonical bytes: what `Replica.hash` keeps
and what the SSPs report) with the database's, read in keyset pages.

Rules (spec "Scheduler drift rules"):

* a table new to the replica (never held rows here) is backfilled: every row sent as CREATE,
  without the row cap, and it never re-clones;
* a table empty in the replica but not upstream is acted on at once; any other mismatch once
  it persisted for `confirm_ticks` consecutive checks;
* acting = repair in place: the differing rows (ids only on one side, or same id with another
  row hash, which covers a different `_00_rv`) go through `submit` as ordinary CREATE / UPDATE /
  DELETE events. When the replica holds a newer `_00_rv` than the database, an UPDATE would be
  dropped as stale, so that row is sent as DELETE (id only) then CREATE;
* an empty diff, a diff above `repair_max_rows`, or a failure (including `repair_timeout_secs`)
  falls back to `reclone(reason)`, at most once per `reclone_cooldown_secs`; with
  `auto_reclone` off the re-clone is only reported (the table is listed as `stuck`; in-place
  repairs still happen, they are ordinary ingest).

* a table the replica holds rows of that is no longer synced upstream (dropped, or marked
  `@nosync`) is dropped from the replica once `DROP_AGREEING_PROBES` consecutive checks agree
  (one probe could race a schema change), and recorded as a `schema_change` incident (through
  `sink`, the scheduler's incident store; else a line in `incidents_dir`). While the replica
  is frozen for a bootstrap the drop waits for the next check.

Memory: a repair holds `{id text: (row hash, packed _00_rv)}` of the replica's copy of one
table, and at most `repair_max_rows + 1` database rows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dbclient import Database, DbError
from dbclient.clock import now_ms
from engine.hashing import bytes_hash
from engine.values import NONE, canonical_bytes, parse_record_id, record_id_text
from engine.versions import is_stale
from maintenance.backends import append_incident, incident_record
from scheduler.config import DriftConfig
from scheduler.replica import SYNCED_META_TABLES, CloneInProgress, Replica, ReplicaFrozen

log = logging.getLogger("scheduler.drift")

__all__ = ["DriftChecker"]

PAGE = 500
#: Consecutive checks that must miss a table upstream before the replica drops it.
DROP_AGREEING_PROBES = 2
_MASK = 0xFFFFFFFFFFFFFFFF

Event = dict[str, Any]
Submit = Callable[[list[Event]], Awaitable[list[int]]]


class _Unrepairable(Exception):
    """The diff cannot be sent as events (empty, or above the row cap)."""


async def default_tables(db: Database) -> list[str]:
    """The synced tables: every table but the service's own bookkeeping (`_00_` except
    :data:`SYNCED_META_TABLES`), computed view tables (`AS SELECT`: no feed, no rows of their
    own) and tables marked `@nosync` in their comment (the schema hooks leave them alone)."""
    out = []
    for name, text in (await db.table_definitions()).items():
        if name.startswith("_00_") and name not in SYNCED_META_TABLES:
            continue
        upper = text.upper()
        if " AS SELECT " in upper or "@NOSYNC" in upper:
            continue
        out.append(name)
    return sorted(out)


def _rv(row: Mapping[str, Any]) -> Any:
    v = row.get("_00_rv", NONE)
    return None if v is NONE else v


def _hash_rows(rows: list[dict[str, Any]]) -> tuple[int, int]:
    h = 0
    for r in rows:
        h ^= bytes_hash(canonical_bytes(r))
    return len(rows), h


def _replica_index(replica: Replica, table: str) -> dict[str, tuple[int, Any]]:
    out: dict[str, tuple[int, Any]] = {}
    for row in replica.rows(table, 1000):
        out[record_id_text(row["id"])] = (bytes_hash(canonical_bytes(row)), _rv(row))
    return out


class DriftChecker:
    """Compares the replica with the database and repairs drift (see the module docstring)."""

    def __init__(self, replica: Replica, db: Database, submit: Submit,
                 reclone: Callable[[str], Awaitable[None]], cfg: DriftConfig,
                 buffered: Callable[[], bool], *,
                 tables: Callable[[], Awaitable[list[str]]] | None = None,
                 incidents_dir: Any = None, component: str = "scheduler",
                 sink: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.replica = replica
        self.db = db
        self._submit = submit
        self._reclone = reclone
        self.cfg = cfg
        self._buffered = buffered
        self._tables_fn = tables or (lambda: default_tables(db))
        self.checked_at: float | None = None
        self.tables: dict[str, dict[str, int | None]] = {}
        self.mismatched: list[str] = []
        self.stuck: set[str] = set()
        self.backfilling: set[str] = set()
        self.ticks: dict[str, int] = {}
        self.known: set[str] | None = None  # tables the replica held rows of
        self.last_auto_reclone: dict[str, Any] | None = None
        self.auto_reclones = 0
        self.last_auto_repair: dict[str, Any] | None = None
        self.auto_repairs = 0
        self.last_error: str | None = None
        self.checks = 0
        self._recloned_mono: float | None = None
        self._lock = asyncio.Lock()
        self.missing: dict[str, int] = {}  # replica table -> consecutive checks missing upstream
        self.dropped: list[str] = []  # tables dropped from the replica (latest last)
        self.incidents: list[dict[str, Any]] = []
        self.incidents_dir = incidents_dir
        self.sink = sink  # the scheduler's incident store (else: a line in incidents_dir)
        self.component = component

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """The spec's `drift` object."""
        return {
            "enabled": self.cfg.check,
            "auto_reclone_enabled": self.cfg.auto_reclone,
            "checked_at": self.checked_at,
            "tables": {t: dict(v) for t, v in sorted(self.tables.items())},
            "mismatched": list(self.mismatched),
            "stuck": sorted(self.stuck),
            "last_auto_reclone": self.last_auto_reclone,
            "auto_reclones": self.auto_reclones,
            "last_auto_repair": self.last_auto_repair,
            "auto_repairs": self.auto_repairs,
            "repair_max_rows": self.cfg.repair_max_rows,
            "backfilling": sorted(self.backfilling),
            "last_error": self.last_error,
        }

    def note_recloned(self) -> None:
        """The replica was re-cloned (by anyone): counters start over."""
        self.ticks.clear()
        self.stuck.clear()
        self.known = None

    # ------------------------------------------------------------------ the check

    async def check_once(self) -> bool:
        """One comparison and whatever it calls for. Returns False when skipped (disabled,
        events still buffered, or a check already running)."""
        if not self.cfg.check or self._buffered() or self._lock.locked():
            return False
        async with self._lock:
            try:
                counts = await asyncio.wait_for(self._compare(), self.cfg.check_timeout_secs)
            except TimeoutError:
                self.last_error = (f"drift check timed out after "
                                   f"{self.cfg.check_timeout_secs}s")
                log.warning("%s", self.last_error)
                return True
            except DbError as e:
                self.last_error = f"drift check could not read the database: {e}"
                log.warning("%s", self.last_error)
                return True
            await self._act(counts)
            return True

    async def _compare(self) -> dict[str, tuple[int, int, int, int]]:
        """table -> (upstream count, upstream hash, replica count, replica hash)."""
        names = sorted(set(await self._tables_fn()))
        if self.known is None:
            self.known = set(self.replica.tables())
        out: dict[str, tuple[int, int, int, int]] = {}
        self.tables = {}
        errors: list[str] = []
        for t in names:
            try:
                n, h = await self._upstream_hash(t)
            except DbError as e:
                self.tables[t] = {"upstream": None, "replica": self.replica.count(t)}
                errors.append(f"{t}: {e}")
                continue
            rn, rh = self.replica.count(t), self.replica.hash(t)
            out[t] = (n, h, rn, rh)
            self.tables[t] = {"upstream": n, "replica": rn}
        self._note_missing(set(names))
        self.checked_at = time.time()
        self.checks += 1
        self.last_error = f"unreadable upstream: {'; '.join(errors)}" if errors else None
        return out

    def _note_missing(self, upstream: set[str]) -> None:
        """Count, per table the replica holds, the consecutive checks that missed it
        upstream; drop it once `DROP_AGREEING_PROBES` agree."""
        held = set(self.replica.tables())
        self.missing = {t: self.missing.get(t, 0) + 1 for t in held - upstream}
        for t, n in sorted(self.missing.items()):
            if n < DROP_AGREEING_PROBES:
                continue
            try:
                rows = self.replica.drop_table(t)
            except (ReplicaFrozen, CloneInProgress):
                continue  # the next check tries again
            del self.missing[t]
            if self.known is not None:
                self.known.discard(t)
            self.dropped = (self.dropped + [t])[-50:]
            now = now_ms()
            summary = (f"table {t} is no longer synced upstream (dropped or @nosync) in "
                       f"{n} consecutive checks: {rows} rows dropped from the replica")
            log.warning("%s", summary)
            # component: the table, as backend_down names the backend
            inc = incident_record(f"inc-schema-{t}-{now}", t, "schema_change", "info",
                                  "recorded", summary, started_at=now, at=now, ended_at=now,
                                  source=self.component)
            self.incidents = (self.incidents + [inc])[-200:]
            if self.sink is not None:
                self.sink(inc)
            elif self.incidents_dir is not None:
                append_incident(self.incidents_dir, inc)

    async def _upstream_hash(self, table: str) -> tuple[int, int]:
        n = 0
        h = 0
        async for page in self.db.keyset_pages(table, PAGE):
            pn, ph = await asyncio.to_thread(_hash_rows, page)
            n += pn
            h ^= ph
        return n, h & _MASK

    async def _act(self, counts: dict[str, tuple[int, int, int, int]]) -> None:
        assert self.known is not None
        mismatched: list[str] = []
        for t, (n, h, rn, rh) in counts.items():
            if rn > 0:
                self.known.add(t)
            if (n, h) == (rn, rh):
                self.ticks.pop(t, None)
                self.stuck.discard(t)
                continue
            mismatched.append(t)
            self.ticks[t] = self.ticks.get(t, 0) + 1
        self.mismatched = mismatched
        for t in mismatched:
            n, _h, rn, _rh = counts[t]
            if rn == 0 and n > 0 and t not in self.known:
                await self._backfill(t)
                continue
            if not (rn == 0 and n > 0) and self.ticks[t] < self.cfg.confirm_ticks:
                continue
            self.ticks.pop(t, None)
            if not await self._repair(t):
                return  # re-cloned (or re-clone refused): the rest waits for the next check

    # ------------------------------------------------------------------ actions

    async def backfill_new(self, tables: list[str]) -> list[str]:
        """Backfill the tables that were just hooked upstream (a new `_00_schema_state` row)
        without waiting for the next drift check: rows written before the hooks existed are in
        no changefeed and no http event. Every row is sent as CREATE, also those the feed
        already delivered (the same content again changes nothing). Returns the tables
        backfilled. Waits for a check in progress.

        One race is left to the drift check: a write committed after a backfill page was read
        whose feed event is sequenced before that page's events (feed latency shorter than the
        page's submit) is overwritten by the older, version-less row; the next drift check
        finds and repairs the difference."""
        done = []
        async with self._lock:
            for t in tables:
                await self._backfill(t)
                done.append(t)
        return done

    async def _backfill(self, table: str) -> None:
        self.backfilling.add(table)
        sent = 0
        try:
            async for page in self.db.keyset_pages(table, PAGE):
                events = [{"table": table, "op": "CREATE", "id": record_id_text(r["id"]),
                           "record": r} for r in page]
                await self._submit(events)
                sent += len(events)
            if self.known is not None:
                self.known.add(table)
            self.auto_repairs += 1
            self.last_auto_repair = {"at": time.time(), "table": table, "rows": sent,
                                     "kind": "backfill"}
            log.info("drift: backfilled new table %s (%d rows)", table, sent)
        except Exception as e:  # retried at the next check; a new table never re-clones
            self.last_error = f"backfill of {table} failed: {type(e).__name__}: {e}"
            log.exception("drift: backfill of %s failed", table)
        finally:
            self.backfilling.discard(table)

    async def _repair(self, table: str) -> bool:
        """Repair in place; on failure fall back to a re-clone. False when the check stops."""
        try:
            events, rows = await asyncio.wait_for(self._diff(table),
                                                  self.cfg.repair_timeout_secs)
            if rows == 0:
                raise _Unrepairable(f"{table}: counts or hashes differ but no row does")
            if rows > self.cfg.repair_max_rows:
                raise _Unrepairable(f"{table}: more than {self.cfg.repair_max_rows} rows differ")
            await asyncio.wait_for(self._submit(events), self.cfg.repair_timeout_secs)
        except _Unrepairable as e:
            return await self._fallback(table, str(e))
        except TimeoutError:
            return await self._fallback(table, f"{table}: repair timed out after "
                                               f"{self.cfg.repair_timeout_secs}s")
        except Exception as e:
            log.exception("drift repair of %s failed", table)
            return await self._fallback(table, f"{table}: repair failed: {type(e).__name__}: {e}")
        self.auto_repairs += 1
        self.last_auto_repair = {"at": time.time(), "table": table, "rows": rows,
                                 "kind": "repair"}
        log.warning("drift: repaired %d rows of %s in place", rows, table)
        return True

    async def _diff(self, table: str) -> tuple[list[Event], int]:
        """The events that make the replica's copy of `table` equal the database's, and the
        number of rows involved (counting stops just above the cap)."""
        mine = await asyncio.to_thread(_replica_index, self.replica, table)
        cap = self.cfg.repair_max_rows
        events: list[Event] = []
        rows = 0
        async for page in self.db.keyset_pages(table, PAGE):
            for r in page:
                rid = record_id_text(r["id"])
                have = mine.pop(rid, None)
                h = bytes_hash(canonical_bytes(r))
                if have is not None and have[0] == h:
                    continue
                rows += 1
                if rows > cap:
                    return events, rows
                if have is None:
                    events.append({"table": table, "op": "CREATE", "id": rid, "record": r})
                elif is_stale(r, {"_00_rv": have[1]}):
                    # The replica's version is newer: an UPDATE would be skipped as stale.
                    events.append({"table": table, "op": "DELETE", "id": rid,
                                   "record": {"id": r["id"]}})
                    events.append({"table": table, "op": "CREATE", "id": rid, "record": r})
                else:
                    events.append({"table": table, "op": "UPDATE", "id": rid, "record": r})
        for rid in mine:
            rows += 1
            if rows > cap:
                return events, rows
            events.append({"table": table, "op": "DELETE", "id": rid,
                           "record": {"id": parse_record_id(rid)}})
        return events, rows

    async def _fallback(self, table: str, reason: str) -> bool:
        """Re-clone instead of repairing, within the flag and the cooldown."""
        self.last_error = reason
        if not self.cfg.auto_reclone:
            self.stuck.add(table)
            log.warning("drift: %s; auto re-clone is off (report only)", reason)
            return True
        mono = time.monotonic()
        if (self._recloned_mono is not None
                and mono - self._recloned_mono < self.cfg.reclone_cooldown_secs):
            self.stuck.add(table)
            self.last_error = f"{reason}; re-clone held back by the cooldown"
            log.warning("drift: %s", self.last_error)
            return True
        self._recloned_mono = mono
        self.auto_reclones += 1
        self.last_auto_reclone = {"at": time.time(), "reason": f"drift: {reason}"}
        log.error("drift: %s; re-cloning the replica", reason)
        try:
            await self._reclone(f"drift: {reason}")
        except Exception as e:
            self.last_error = f"drift re-clone failed: {type(e).__name__}: {e}"
            log.exception("drift re-clone failed")
            return False
        self.note_recloned()
        return False
