"""Per-user edge tables (ref mode `dedicated`): `_00_list_ref_user_<key>` defined with a select
permission fixed to that user when a view of that user is registered (and on the user's
`user` CREATE only when this SSP holds a view of that user); removed on `user` DELETE
(ssp/README.md, "Edge tables").

Only users owning a view get a table: every table defined in the database makes each DELETE
in it slower (SurrealDB 3.2.4 pays ~7 us per per-user edge table on every deleted record, the
application's own deletes included; `loadtests/probe_edge_removal.py`), so a table per `user`
row would tax every write of a database with many users for tables nobody reads.

The user's views outlive its table: their edges went with it, so while it is gone the publisher
writes nothing there (`Publisher.drop_table`; a RELATE would create the table again without its
select rule), and once it is defined again every view of the user is materialised again. The
definitions and removals of one SSP run one at a time, in the order the events came (a user
deleted and created again in one batch is dropped, then defined). Each event on a table takes
the next generation, and a queued definition or removal runs only while its generation is still
the table's latest: the last event decides (deleted, created and deleted again: no table)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING

from surrealdb import RecordID

from dbclient import DbError
from engine.values import parse_record_id, record_id_text
from ipc.backoff import Backoff
from ssp.naming import SINGLE_TABLE, edge_table

if TYPE_CHECKING:
    from ssp.hub.state import HubState

log = logging.getLogger("ssp.hub")

DEFINE_ATTEMPTS = 5


class EdgeTables:
    """Defines and drops the per-user edge tables on the publication connection."""

    def __init__(self, state: HubState) -> None:
        self.state = state
        self.known: set[str] = set()  # defined by this SSP (or found defined)
        self._lock = asyncio.Lock()
        # table -> (generation, is a removal) of its latest event, only while work for it is
        # queued (one counter for all tables: an entry can go once its work ran, never to be
        # matched again)
        self._gen: dict[str, tuple[int, bool]] = {}
        self._count = itertools.count(1)

    def _next(self, table: str, removal: bool = False) -> int:
        g = next(self._count)
        self._gen[table] = (g, removal)
        return g

    def _done(self, table: str, gen: int) -> None:
        """The work of generation `gen` ran: if it was the latest, the table needs no entry."""
        latest = self._gen.get(table)
        if latest is not None and latest[0] == gen:
            del self._gen[table]

    def user_changed(self, op: str, rid: str) -> None:
        """A `user` row was created or deleted: define (when this SSP holds a view of the user:
        a user deleted and created again) or drop its edge table (in the background: the
        ingest does not wait for DDL)."""
        if self.state.cfg.ref_mode == "single":
            return
        try:
            auth = parse_record_id(rid)
        except ValueError:
            return
        table = edge_table(auth, self.state.cfg.ref_mode)
        if op == "CREATE":
            if any(v.edge_table == table for v in self.state.views.values()):
                self.state.spawn_tracked(self._define_quietly(table, auth, self._next(table)))
        else:
            self.known.discard(table)
            self.state.publisher.drop_table(table)  # before any delta of this batch is marked
            self.state.spawn_tracked(self._drop(table, self._next(table, removal=True)))

    async def ensure(self, table: str, auth: RecordID | None, gen: int | None = None) -> None:
        """Define the user's edge table (select permission fixed to that user). `gen`: the
        `user` CREATE this answers (skipped once a later event on the table came); without
        it (a registration) the definition is itself the table's latest event."""
        if table in self.known or table == SINGLE_TABLE:
            return
        if auth is None:
            return
        if gen is None:
            gen = self._next(table)
        # `$auth` is the signed-in record's id. Written as `$auth = <id>`, not `$auth.id =
        # <id>`: SurrealDB 3.2.4 reads every table's definition on each DELETE in the database,
        # so this expression is paid per table per deleted record (1,000 users: ~3.8 ms vs
        # ~4.8 ms per edge delete, loadtests/probe_delete_cost.py). Tables defined by an older
        # SSP keep the longer form, which allows the same reads.
        perm = f"$auth = {record_id_text(auth)}"
        # Schema writes conflict with each other under concurrency: one at a time, retried.
        try:
            await self._define(table, perm, gen)
        finally:
            self._done(table, gen)

    async def _define(self, table: str, perm: str, gen: int) -> None:
        async with self._lock:
            backoff = Backoff(0.05, factor=2.0)
            for attempt in range(DEFINE_ATTEMPTS):
                # Only a later removal makes this definition moot. A later definition does not:
                # DEFINE ... IF NOT EXISTS is idempotent, and a registration's caller publishes
                # into the table as soon as this returns (two registrations of one user's views
                # at once: the first one skipped for the second and published into no table).
                if table in self.known or self._superseded_by_removal(table, gen):
                    return
                try:
                    await self.state.pub_db.query(
                        f"DEFINE TABLE IF NOT EXISTS {table} TYPE RELATION SCHEMALESS "
                        f"CHANGEFEED 1h INCLUDE ORIGINAL PERMISSIONS FOR select WHERE {perm} "
                        "FOR create, update, delete NONE")
                    if self._superseded_by_removal(table, gen):
                        return  # a user DELETE came meanwhile: its removal runs next
                    self.known.add(table)
                    self._back(table)
                    return
                except DbError as e:
                    log.warning("defining edge table %s failed (attempt %d): %s", table,
                                attempt + 1, e)
                    if attempt == DEFINE_ATTEMPTS - 1:
                        raise
                    await backoff.sleep()

    def _superseded_by_removal(self, table: str, gen: int) -> bool:
        latest = self._gen.get(table)
        return latest is not None and latest[0] != gen and latest[1]

    def _back(self, table: str) -> None:
        """`table` was defined: if it had been dropped, its views' edges are written again."""
        publisher = self.state.publisher
        if table not in publisher.dropped:
            return
        publisher.restore_table(table)
        n = 0
        for view in self.state.views.values():
            if view.edge_table == table:
                publisher.materialise(view)
                n += 1
        log.info("edge table %s defined again: %d views written again", table, n)

    async def _define_quietly(self, table: str, auth: RecordID, gen: int) -> None:
        try:
            await self.ensure(table, auth, gen)
        except DbError as e:  # registration defines it again before any edge is written
            log.error("edge table %s not defined: %s", table, e)
        finally:
            self._done(table, gen)  # (also when `ensure` found the table defined already)

    async def _drop(self, table: str, gen: int) -> None:
        try:
            await self._remove(table, gen)
        finally:
            self._done(table, gen)

    async def _remove(self, table: str, gen: int) -> None:
        async with self._lock:
            latest = self._gen.get(table)
            if latest is None or latest[0] != gen:
                return  # a later event (or registration) decides whether the table stays
            # A flush holding one of its views commits first: its RELATEs would otherwise
            # create the table again after the removal.
            await self.state.publisher.quiesce(table)
            try:
                await self.state.pub_db.query(f"REMOVE TABLE IF EXISTS {table}")
                log.info("edge table %s removed with its user", table)
            except DbError as e:
                log.warning("removing edge table %s failed: %s", table, e)
