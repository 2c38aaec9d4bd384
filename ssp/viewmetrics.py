"""Per-view publication metrics, flushed to `_00_view_metrics` every SVC_SSP_VIEW_METRICS_FLUSH_MS.

The publisher calls :meth:`ViewMetrics.observe` once per view in every committed flush with the
time the view's oldest change waited (change arrival to edge commit) and the operations
written. The metrics loop writes, for each view that changed since the last write, one row
``_00_view_metrics:<key of the view's _00_query record>`` in one transaction:

* ``view`` (the `_00_query` record), ``view_id``, ``ssp_id``, ``rows`` (current members);
* ``updates`` (committed flushes that touched the view) and ``edge_ops`` (edges written);
* ``publish_ms`` ``{p50, p99, max, samples}`` over the last 256 commits of the view;
* ``materialize_ms``: registration (or re-materialisation) to its initial edges committed;
* ``last_publish_at`` and ``flushed_at`` (datetimes).

Views with nothing new are not written (a quiet SSP writes nothing). One write takes at most
`MAX_ROWS_PER_WRITE` rows, the views written longest ago first; the rest stay marked for the next
tick. Metrics must not compete with edges for the database: with 10,000 views under 3,000
events/s, ~2,600 views change every 2 s, and writing all of them took about as much engine time
as the edges themselves (bench_ssp, `single`: 2,997 events/s with p99 211 ms without metrics,
2,522 events/s with p99 400 ms with every changed row written). So the writes also keep to a
share of the time (`SHARE`): after a write that took `t` seconds the next one comes no sooner
than `t * (1 - SHARE) / SHARE` later. A write of 500 rows takes ~60 ms on a quiet host (~100 us
of host CPU a row, `loadtests/probe_host_costs.py`), so the figures are written every interval
as before; in issue 31's soak (500 updates/s, 2,000 views over 2 SSPs, every view changing)
on a busy machine (load 5) a write of 500 rows took 0.6-3 s there and was 4-9% of the engine's
time: the metrics then come every 5-27 s and leave that time to the edges. The table is defined with
``PERMISSIONS NONE``: record users never read operator metrics. A view that is unregistered has
its metrics row deleted at the next write. Nothing here is on the ingest path: observing is a
dict update per view per flush.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbError

log = logging.getLogger("ssp.viewmetrics")

TABLE = "_00_view_metrics"
WINDOW = 256
MAX_ROWS_PER_WRITE = 500
SHARE = 0.1  # of the wall-clock time the metrics writes may take (module docstring)
DEFINE = f"DEFINE TABLE IF NOT EXISTS {TABLE} SCHEMALESS PERMISSIONS NONE"
WRITE = "FOR $m IN $rows { UPSERT $m.id CONTENT $m RETURN NONE }; DELETE $gone RETURN NONE"


class _Samples:
    """The last WINDOW waits of one view (ms), in one array allocated whole at the first.

    Why not a `deque(maxlen=WINDOW)` of floats: it held a 24-byte float object per sample and
    grew by a block each 64 samples, so every view's figures grew for its first 256 commits:
    ~8 MB per 1,000 views, reached only after minutes of steady load, which a soak sees as
    the hub growing. The array is its full size from the first sample on."""

    __slots__ = ("_vals", "_n")

    def __init__(self) -> None:
        self._vals = array("d", bytes(8 * WINDOW))
        self._n = 0  # samples seen (the next one goes to _n % WINDOW)

    def append(self, ms: float) -> None:
        self._vals[self._n % WINDOW] = ms
        self._n += 1

    def __len__(self) -> int:
        return min(self._n, WINDOW)

    def values(self) -> list[float]:
        return self._vals.tolist()[:len(self)]


@dataclass
class _Entry:
    updates: int = 0
    edge_ops: int = 0
    samples: _Samples = field(default_factory=_Samples)
    materialize_ms: float | None = None
    last_publish: float = 0.0  # wall clock seconds
    dirty: bool = False
    key: Any = None  # the `_00_query` record's key, once known
    written: float = 0.0  # monotonic time of its last row write (0: never)


def _pct(sorted_values: list[float], q: float) -> float:
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return round(sorted_values[i], 3)


class ViewMetrics:
    """Accumulates per-view figures; :meth:`run` writes the changed ones periodically."""

    def __init__(self, ssp_id: str, flush_ms: int,
                 view_of: Callable[[str], tuple[RecordID, int] | None],
                 hold: Callable[[], bool] = lambda: False) -> None:
        self.ssp_id = ssp_id
        self._hold = hold  # True while a restore replaces the database: no periodic write
        self.interval = flush_ms / 1000.0
        # view id -> (its `_00_query` record, member count); None once unregistered
        self._view_of = view_of
        self.entries: dict[str, _Entry] = {}
        self._gone: list[Any] = []
        self._defined = False
        self.writes = 0
        self.last_error = ""
        self.rest = self.interval  # until the next write (`rest_after`)

    def observe(self, view_id: str, waited_ms: float, ops: int, initial: bool) -> None:
        """One committed flush touched `view_id` (called by the publisher)."""
        e = self.entries.get(view_id)
        if e is None:
            e = self.entries[view_id] = _Entry()
        e.updates += 1
        e.edge_ops += ops
        e.samples.append(waited_ms)
        if initial:
            e.materialize_ms = round(waited_ms, 3)
        e.last_publish = time.time()
        e.dirty = True

    def forget(self, view_id: str) -> None:
        """The view was unregistered: drop its figures and its row."""
        e = self.entries.pop(view_id, None)
        if e is not None and e.key is not None:
            self._gone.append(e.key)

    def snapshot(self, view_id: str) -> dict[str, Any] | None:
        """The figures of one view as written (also served by /debug/view)."""
        e = self.entries.get(view_id)
        if e is None:
            return None
        s = sorted(e.samples.values())
        return {
            "updates": e.updates,
            "edge_ops": e.edge_ops,
            "publish_ms": {"p50": _pct(s, 0.5), "p99": _pct(s, 0.99), "max": round(s[-1], 3),
                           "samples": len(s)} if s else None,
            "materialize_ms": e.materialize_ms,
            "last_publish_at": datetime.fromtimestamp(e.last_publish, UTC),
        }

    def take_rows(self) -> tuple[list[dict[str, Any]], list[RecordID]]:
        """Rows for the views that changed since the last call, and ids of rows to delete."""
        rows: list[dict[str, Any]] = []
        now = datetime.now(UTC)
        due: list[tuple[float, str, _Entry, tuple[RecordID, int]]] = []
        for vid, e in list(self.entries.items()):
            found = self._view_of(vid)
            if found is None:
                self.forget(vid)  # unregistered: its row goes
                continue
            if e.dirty:
                due.append((e.written, vid, e, found))
        if len(due) > MAX_ROWS_PER_WRITE:
            due.sort(key=lambda d: d[0])  # written longest ago (or never) first
            del due[MAX_ROWS_PER_WRITE:]
        stamp = time.monotonic()
        for _, vid, e, found in due:
            record, n = found
            e.written = stamp
            e.key = record.id
            e.dirty = False
            body = self.snapshot(vid) or {}
            body.update(id=RecordID(TABLE, record.id), view=record, ssp_id=self.ssp_id,
                        rows=n, flushed_at=now, view_id=vid)
            rows.append(body)
        gone = [RecordID(TABLE, k) for k in self._gone]
        self._gone = []
        return rows, gone

    async def write(self, db: Database) -> int:
        """Write what changed in one transaction; returns rows written. On a database error
        the rows are marked dirty again and retried at the next tick."""
        rows, gone = self.take_rows()
        if not rows and not gone:
            return 0
        try:
            if not self._defined:
                await db.query(DEFINE)
                self._defined = True
            await db.query(WRITE, {"rows": rows, "gone": gone})
        except DbError as e:
            self.last_error = str(e)[:300]
            for r in rows:
                ent = self.entries.get(r["view_id"])
                if ent is not None:
                    ent.dirty = True
            self._gone.extend(g.id for g in gone)
            log.info("view metrics write failed (retried next tick): %s", e)
            return 0
        self.writes += 1
        return len(rows)

    def rest_after(self, took: float) -> float:
        """Seconds to wait after a write that took `took` seconds: the interval, or longer
        when the writes would otherwise take more than `SHARE` of the time."""
        return max(self.interval, took * (1 - SHARE) / SHARE)

    async def run(self, db: Database) -> None:
        """Write every `flush_ms` (or less often, see `rest_after`) until cancelled."""
        while True:
            await asyncio.sleep(self.rest)
            if self._hold():
                continue
            began = time.monotonic()
            wrote = await self.write(db)
            self.rest = self.rest_after(time.monotonic() - began) if wrote else self.interval
