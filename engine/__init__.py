"""Incremental view engine for SurrealDB queries (DBSP-style circuits over Z-sets).

Public API (stable; used by the SSP shards, the tests and the benchmarks)::

    from engine import ViewEngine, ViewDelta, QueryRejected

    eng = ViewEngine(arena_dir=None, segment_mb=64)
    eng.load(table, rows)                          # bulk bootstrap; rows are dicts with "id"
    members = eng.register(view_id, surql, params) # -> set of record-id texts in the view
                                                   #    raises QueryRejected naming the clause
    delta = eng.ingest(table, op, id, record)      # -> {view_id: ViewDelta(added, removed, updated)}
    deltas = eng.ingest_batch(events)              # events: (table, op, id, record); net delta per view
    groups = eng.ingest_groups(table, op, id, record)  # -> [(view ids, ViewDelta)], each view once:
    groups = eng.ingest_batch_groups(events)       #    the same deltas, one per group of views
                                                   #    sharing it (what the shards send)
    eng.members(view_id); eng.unregister(view_id)
    eng.table_count(table); eng.table_hash(table)  # rows; XOR of xxh3_64 over canonical row bytes
    eng.result(view_id)                            # current result rows (SurrealDB-shaped)
    eng.sync_arena(table=None)                     # write changed rows' bytes to the arena

- Record ids are SurrealDB's canonical text (``<string> id``: ``thread:1``, ``user:`a-b```);
  ``ingest`` also accepts the ``⟨⟩`` form and canonicalises it.
- ``op`` is CREATE, UPDATE or DELETE. Events carry full rows: CREATE of an existing id and
  UPDATE of an unknown id both store the row wholesale. An event whose ``record["_00_rv"]`` is
  lower than the stored row's is ignored (stale); a missing version never is
  (``engine.versions``).
- Values are SurrealDB-typed (``RecordID``, tz-aware ``datetime``, ``Decimal``, ``Duration``,
  ``UUID``...); an absent key is NONE, ``None`` is NULL.
- Membership: every dict with a record-id ``id`` anywhere in the view's result tree (top-level
  rows, subquery rows, ``link.*`` and FETCHed records), and the records a row without an id
  stands for: a ``SELECT VALUE`` row's source row, the rows a GROUP BY row aggregates
  (engine/README, "Members"). ``added``/``removed`` are the records that entered/left;
  ``updated`` the members whose content in the result changed.
- Supported language: see ``engine/README.md``; anything else raises :class:`QueryRejected`.
- Rows are stored as canonical bytes in numpy memmap arenas (``eng.row_store``): file-backed
  in ``arena_dir`` (written at the end of every ingest/load call, readable by another process
  with ``engine.arena.ArenaReader``), anonymous without it (written on demand: ``table_hash``,
  ``sync_arena``). Evaluation reads a decoded copy.
"""

from engine import native

# the compiled modules (engine.native), when a build of exactly these sources is installed
native.activate(__path__)

from engine.core import ViewDelta, ViewEngine  # noqa: E402
from engine.errors import QueryRejected  # noqa: E402

__all__ = ["QueryRejected", "ViewDelta", "ViewEngine"]
