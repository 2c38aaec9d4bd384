"""The presence sampler: who is live, read from `_00_query` every
``SVC_ADMIN_PRESENCE_INTERVAL_SECS`` (15) and served from memory; while an admin stream is
open (a dashboard is watching) every ``SVC_ADMIN_JOB_LIVE_INTERVAL_SECS`` (2) when that is
shorter, like the job sampler. Either way the sampler never takes more than 5 % of the time:
the next sample waits at least 20 x the last one's duration (reading 10,000 rows costs the
embedded engine ~0.6 s, so a large tenant is sampled about every 12 s, not every 2 s; the
database serves the application first).

One sample reads at most ``SVC_ADMIN_PRESENCE_MAX_ROWS`` (20,000) `_00_query` rows (``truncated``
says when there were more) and the `_00_view_metrics` rows the SSPs flush
(``SVC_SSP_VIEW_METRICS_FLUSH_MS``), then keeps:

* the view rows (:class:`ViewRow`, also the source of ``GET /admin/api/views``), each with its
  placement (the scheduler's tracker, else the SSP its metrics row names) and its
  materialisation figures (``publish_ms`` p50/p99/max over the SSP's last 256 commits of the
  view, ``materialize_ms`` for its initial edges);
* a rollup of the live ones (a row is live while ``lastActiveAt + ttl > now``, the TTL sweep's
  rule): users (distinct ``auth_id``), sessions (distinct ``auth_id`` x ``clientId``), views;
* a ring of the last 240 rollups (an hour at the default interval), the heaviest users (most
  live views, top 10) and the split per SSP.

Nothing here is on a request path: the API answers from the last sample.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from surrealdb import RecordID

from dbclient import DbError
from dbclient.clock import now_ms
from engine.values import record_id_text
from scheduler.admin.cluster import Cluster
from scheduler.admin.values import epoch_ms, jsonable, ttl_ms

log = logging.getLogger("scheduler.admin.presence")

__all__ = ["Presence", "ViewRow"]

RING = 240
HEAVIEST = 10
COST_FACTOR = 20  # wait at least this many times the last sample's duration
QUERY_FIELDS = ("id, auth_id, clientId, lastActiveAt, ttl, subscribers, rowCount, state, "
                "surql, params")
METRIC_FIELDS = "id, ssp_id, rows, publish_ms, materialize_ms, updates, edge_ops, last_publish_at"


@dataclass
class ViewRow:
    """One `_00_query` row as sampled (times in epoch ms)."""

    key: str  # the record key: `_00_query:<key>`, view id `query:<key>`
    user: str | None
    client_id: str | None
    surql: str
    params: Any
    query_key: str  # surql + params: equal for sessions running the identical query
    rows: int
    subscribers: int
    state: str | None
    ttl_ms: int
    last_active_ms: int | None
    ssp_id: str | None
    metrics: dict[str, Any] | None

    @property
    def view_id(self) -> str:
        return f"query:{self.key}"

    def expires_at_ms(self) -> int | None:
        return None if self.last_active_ms is None else self.last_active_ms + self.ttl_ms

    def live(self, now_ms: int) -> bool:
        exp = self.expires_at_ms()
        return exp is not None and exp > now_ms

    def p99(self) -> float | None:
        pub = (self.metrics or {}).get("publish_ms")
        v = pub.get("p99") if isinstance(pub, dict) else None
        return float(v) if isinstance(v, (int, float)) else None


def _key_of(rid: Any) -> str | None:
    if isinstance(rid, RecordID):
        if isinstance(rid.id, (str, int)):
            return str(rid.id)
        return record_id_text(rid).split(":", 1)[1]
    return None


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return record_id_text(v) if isinstance(v, RecordID) else str(v)


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _live_rows(query_row: dict[str, Any], met: dict[str, Any] | None) -> int:
    """The view's current size: `_00_query.rowCount` is written once, when the view's initial
    edges commit; the SSP's `_00_view_metrics.rows` follows every publish (flushed each
    ``SVC_SSP_VIEW_METRICS_FLUSH_MS``), so it wins when the SSP wrote one."""
    n = met.get("rows") if met is not None else None
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    return _int(query_row.get("rowCount"))


class Presence:
    """See the module docstring."""

    def __init__(self, cluster: Cluster, watched: Any = None) -> None:
        self.cluster = cluster
        cfg = cluster.cfg.admin
        self.interval = float(cfg.presence_interval_secs)
        self.live_interval = min(self.interval, float(cfg.job_live_interval_secs))
        self.watched = watched or (lambda: False)  # True while an admin stream is open
        self.max_rows = cfg.presence_max_rows
        self.rows: list[ViewRow] = []
        self.by_key: dict[str, ViewRow] = {}
        self.by_query: dict[str, list[str]] = {}
        self.ring: deque[dict[str, Any]] = deque(maxlen=RING)
        self.sampled_at_ms: int | None = None
        self.total_rows = 0
        self.truncated = False
        self.last_error: str | None = None
        self.duration_ms: float | None = None
        self.rollup_now: dict[str, Any] = {"users": 0, "sessions": 0, "views": 0}
        self.heaviest: list[dict[str, Any]] = []
        self.per_ssp: dict[str, dict[str, int]] = {}
        self._wake = asyncio.Event()

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await self.sample_once()
            wait = max(self.live_interval if self.watched() else self.interval,
                       COST_FACTOR * (time.monotonic() - started))
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass
            self._wake.clear()

    def wake(self) -> None:
        self._wake.set()

    def forget(self, key: str) -> None:
        """Drop one view from the last sample (it was just unregistered): the list must not
        show it until the next sample confirms it gone."""
        self.rows = [v for v in self.rows if v.key != key]
        gone = self.by_key.pop(key, None)
        if gone is not None:
            self.by_query[gone.query_key] = [k for k in self.by_query.get(gone.query_key, [])
                                             if k != key]

    async def _read(self, sql: str) -> list[dict[str, Any]]:
        try:
            return list(await self.cluster.db.query_one(sql, idempotent=True) or [])
        except DbError as e:
            if "does not exist" in str(e):
                return []  # no view registered yet / no SSP flushed metrics yet
            raise

    async def sample_once(self) -> None:
        started = time.perf_counter()
        limit = self.max_rows + 1
        try:
            raw = await self._read(f"SELECT {QUERY_FIELDS} FROM _00_query LIMIT {limit}")
            metrics = await self._read(f"SELECT {METRIC_FIELDS} FROM _00_view_metrics "
                                       f"LIMIT {limit}")
        except DbError as e:
            self.last_error = f"{type(e).__name__}: sampling _00_query failed"
            log.info("presence sample failed: %s", e)
            return
        self.last_error = None
        self.truncated = len(raw) > self.max_rows
        del raw[self.max_rows:]
        await asyncio.sleep(0)  # let requests in between the read and the build
        await self._build(raw, metrics)
        self.duration_ms = round((time.perf_counter() - started) * 1000, 1)

    async def _build(self, raw: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> None:
        now = now_ms()
        placed = self.cluster.placements()
        mets: dict[str, dict[str, Any]] = {}
        for m in metrics:
            k = _key_of(m.get("id"))
            if k is not None:
                mets[k] = {"ssp_id": m.get("ssp_id"), "rows": m.get("rows"),
                           "updates": m.get("updates"), "edge_ops": m.get("edge_ops"),
                           "publish_ms": jsonable(m.get("publish_ms")),
                           "materialize_ms": m.get("materialize_ms"),
                           "last_publish_at_ms": epoch_ms(m.get("last_publish_at"))}
        rows: list[ViewRow] = []
        for n, r in enumerate(raw):
            if n % 2000 == 1999:
                await asyncio.sleep(0)  # 20,000 rows take a while: let requests in
            key = _key_of(r.get("id"))
            if key is None:
                continue
            text = r.get("surql")
            surql = text if isinstance(text, str) else ""
            params = jsonable(r.get("params"))
            met = mets.get(key)
            ssp = placed.get(f"query:{key}")
            if ssp is None and met is not None and isinstance(met.get("ssp_id"), str):
                ssp = met["ssp_id"]
            rows.append(ViewRow(
                key=key, user=_text(r.get("auth_id")),
                client_id=r.get("clientId") if isinstance(r.get("clientId"), str) else None,
                surql=surql, params=params,
                query_key=surql + "\x00" + json.dumps(params, sort_keys=True, default=str),
                rows=_live_rows(r, met), subscribers=_int(r.get("subscribers")),
                state=r.get("state") if isinstance(r.get("state"), str) else None,
                ttl_ms=ttl_ms(r.get("ttl")), last_active_ms=epoch_ms(r.get("lastActiveAt")),
                ssp_id=ssp, metrics=met))
        by_query: dict[str, list[str]] = {}
        for v in rows:
            by_query.setdefault(v.query_key, []).append(v.key)
        live = [v for v in rows if v.live(now)]
        users = Counter(v.user for v in live)
        sessions = {(v.user, v.client_id) for v in live}
        per_user_sessions: dict[Any, set[Any]] = {}
        per_user_rows: Counter[Any] = Counter()
        for v in live:
            per_user_sessions.setdefault(v.user, set()).add(v.client_id)
            per_user_rows[v.user] += v.rows
        per_ssp: dict[str, dict[str, Any]] = {}
        ssp_users: dict[str, set[Any]] = {}
        for v in live:
            name = v.ssp_id or "unplaced"
            d = per_ssp.setdefault(name, {"views": 0, "users": 0, "rows": 0})
            d["views"] += 1
            d["rows"] += v.rows
            ssp_users.setdefault(name, set()).add(v.user)
        for name, us in ssp_users.items():
            per_ssp[name]["users"] = len(us)
        # One swap: a request never sees half a sample.
        self.rows = rows
        self.by_key = {v.key: v for v in rows}
        self.by_query = by_query
        self.total_rows = len(rows)
        self.rollup_now = {"users": len(users), "sessions": len(sessions), "views": len(live)}
        self.heaviest = [{"user": u, "views": n, "sessions": len(per_user_sessions[u]),
                          "rows": per_user_rows[u]} for u, n in users.most_common(HEAVIEST)]
        self.per_ssp = per_ssp
        self.sampled_at_ms = now
        self.ring.append({"at": now, **self.rollup_now})

    # ------------------------------------------------------------------ answers
    @property
    def refresh_secs(self) -> float:
        """How often a sample is taken now: what a viewer polling the views is worth (the
        dashboard polls no faster)."""
        base = self.live_interval if self.watched() else self.interval
        cost = COST_FACTOR * (self.duration_ms or 0.0) / 1000
        return round(max(base, cost), 3)

    def rollup(self) -> dict[str, Any]:
        return {**self.rollup_now, "sampled_at_ms": self.sampled_at_ms,
                "refresh_secs": self.refresh_secs, "truncated": self.truncated,
                "last_error": self.last_error}

    def body(self) -> dict[str, Any]:
        """``GET /admin/api/presence``."""
        return {
            "sampled_at_ms": self.sampled_at_ms, "interval_secs": self.interval,
            "refresh_secs": self.refresh_secs,
            "live": dict(self.rollup_now), "rows_sampled": self.total_rows,
            "max_rows": self.max_rows, "truncated": self.truncated,
            "heaviest_users": list(self.heaviest), "per_ssp": dict(self.per_ssp),
            "samples": list(self.ring), "last_error": self.last_error,
            "sample_duration_ms": self.duration_ms,
        }
