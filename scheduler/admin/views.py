"""``GET /admin/api/views`` and ``GET /admin/api/views/{key}``.

The list is served from the presence sampler's last sample (no database call). Query:

* ``limit`` (default 100, clamped 1-1000); ``user`` (an ``auth_id`` such as ``user:alice``);
  ``ssp`` (an SSP id, or ``unplaced``); ``q`` (case-insensitive substring of the query text,
  the view id or the user);
* ``sort``: ``recent`` (last activity, default), ``rows``, ``subscribers``, ``slow``
  (materialisation p99, slowest first), ``expiry`` (soonest first), ``user``, ``stale``
  (the least fresh first: views not served, then slow ones, then the most events behind the
  feed, then the longest since their last publication);
* ``slow_ms``: only views whose materialisation p99 is at least that many ms (a view is
  marked ``slow`` at ``SVC_ADMIN_SLOW_VIEW_MS``, 250, without it); ``large=true``: only views
  with at least ``SVC_ADMIN_LARGE_VIEW_ROWS`` (1000) rows; ``shared=true``: only queries run
  by more than one session; ``include_expired=true``: also rows past ``lastActiveAt + ttl``.

Answer: ``{views, total, returned, sampled_at_ms, refresh_secs, truncated, thresholds}``
(``refresh_secs``: how often the sampler refreshes now); each view: key,
id, user, client_id, ssp_id, rows, subscribers, state, ttl_ms, last_active_ms, expires_in_ms,
expired, materialisation ``{p50, p99, max, samples, initial_ms}``, slow, large,
identical_sessions, query (first 300 characters), freshness (below).

``freshness`` (list and detail): ``{last_publish_at_ms, since_publish_ms, lag_events,
ssp_state, served, stale}``: when the view's SSP last published a change of it (its metrics
row; null before the first), how long ago that was, how many events the scheduler has taken
that the view's SSP has not yet acknowledged (sent but unacknowledged plus queued: the view's
lag behind the feed; null while the SSP has not reported a sequence), the SSP's state,
``served`` (placed on an SSP that is Ready or Lagging and not flagged) and ``stale`` (not
served, or behind the feed by more than ``STALE_LAG_EVENTS``).

``DELETE /admin/api/views/{key}`` unregisters a view the way the spec defines it: it deletes
the `_00_query` row (its cleanup event, or the changefeed's DELETE, tells the scheduler) and
clears the scheduler's tracker for it at once; the sampled row leaves the list immediately.
200 ``{key, id, unregistered: true, ssp_id}``; 404 without a row; 503 when the database
cannot be reached.

The detail reads the database and the view's SSP at request time: the `_00_query` row (404
without one), its `_00_view_metrics` row, the query text and params, the SSP's answer for the
view (members) and its memory figures (an estimate of the view's share: members x the SSP's
bytes per stored row), and the other sessions running the identical query (same text and
params, from the last sample).
"""

from __future__ import annotations

import asyncio
import heapq
from typing import Any
from urllib.parse import quote

from surrealdb import RecordID

from dbclient import DbError
from dbclient.clock import now_ms
from scheduler.admin.cluster import Cluster, SspInfo
from scheduler.admin.errors import DB_UNREACHABLE, Invalid, NotFound, Unavailable, db_unreachable
from scheduler.admin.presence import Presence, ViewRow
from scheduler.admin.values import epoch_ms, jsonable, q_bool, q_enum, q_int, q_str, ttl_ms

__all__ = ["SORTS", "Views", "view_key"]

SORTS = ("recent", "rows", "subscribers", "slow", "expiry", "user", "stale")
KEY_MAX = 200
#: a view this many events or more behind the feed is marked stale (a busy SSP is a few
#: batches behind at any instant: that is not staleness)
STALE_LAG_EVENTS = 1000


def view_key(raw: str) -> str:
    """The `_00_query` record key of ``query:<key>``, ``_00_query:<key>`` or ``<key>``."""
    key = raw.removeprefix("query:").removeprefix("_00_query:")
    if not key or len(key) > KEY_MAX or any(c in key for c in "\x00\r\n"):
        raise Invalid(f"view key: 1 to {KEY_MAX} characters, got {raw[:40]!r}")
    return key


class Views:
    """See the module docstring."""

    def __init__(self, cluster: Cluster, presence: Presence) -> None:
        self.cluster = cluster
        self.presence = presence
        self.slow_ms = cluster.cfg.admin.slow_view_ms
        self.large_rows = cluster.cfg.admin.large_view_rows

    def _ssps(self) -> dict[str, SspInfo]:
        return {s.id: s for s in self.cluster.ssps()}

    @staticmethod
    def freshness(ssp: SspInfo | None, last_publish_ms: int | None,
                  now: int) -> dict[str, Any]:
        lag = None
        if ssp is not None and ssp.acked_seq is not None:
            lag = max(0, ssp.sent_seq - ssp.acked_seq) + ssp.queued
        served = ssp is not None and ssp.serving
        return {"last_publish_at_ms": last_publish_ms,
                "since_publish_ms": None if last_publish_ms is None
                else max(0, now - last_publish_ms),
                "lag_events": lag, "ssp_state": None if ssp is None else ssp.state,
                "served": served,
                "stale": not served or (lag is not None and lag >= STALE_LAG_EVENTS)}

    def _public(self, v: ViewRow, now: int, slow_ms: int,
                ssps: dict[str, SspInfo]) -> dict[str, Any]:
        exp = v.expires_at_ms()
        met = v.metrics or {}
        got = met.get("publish_ms")
        pub: dict[str, Any] = got if isinstance(got, dict) else {}
        p99 = v.p99()
        return {
            "key": v.key, "id": v.view_id, "user": v.user, "client_id": v.client_id,
            "ssp_id": v.ssp_id, "rows": v.rows, "subscribers": v.subscribers, "state": v.state,
            "ttl_ms": v.ttl_ms, "last_active_ms": v.last_active_ms,
            "expires_in_ms": None if exp is None else exp - now,
            "expired": exp is None or exp <= now,
            "materialisation": {"p50": pub.get("p50"), "p99": pub.get("p99"),
                                "max": pub.get("max"), "samples": pub.get("samples"),
                                "initial_ms": met.get("materialize_ms")},
            "slow": p99 is not None and p99 >= slow_ms,
            "large": v.rows >= self.large_rows,
            "identical_sessions": len(self.presence.by_query.get(v.query_key, ())) - 1,
            "query": v.surql[:300],
            "freshness": self.freshness(ssps.get(v.ssp_id or ""),
                                        met.get("last_publish_at_ms"), now),
        }

    def listing(self, req: Any) -> dict[str, Any]:
        limit = q_int(req, "limit", default=100, minimum=1, maximum=1000, clamp=True)
        user = q_str(req, "user")
        ssp = q_str(req, "ssp")
        q = q_str(req, "q")
        sort = q_enum(req, "sort", SORTS, "recent")
        slow_ms = q_int(req, "slow_ms", minimum=0, maximum=86_400_000)
        large = q_bool(req, "large")
        shared = q_bool(req, "shared")
        include_expired = q_bool(req, "include_expired")
        assert limit is not None
        now = now_ms()
        threshold = self.slow_ms if slow_ms is None else slow_ms
        needle = q.lower() if q else None
        by_query = self.presence.by_query
        hits: list[ViewRow] = []
        for v in self.presence.rows:
            if not include_expired and not v.live(now):
                continue
            if user is not None and v.user != user:
                continue
            if ssp is not None and (v.ssp_id or "unplaced") != ssp:
                continue
            if large and v.rows < self.large_rows:
                continue
            if shared and len(by_query.get(v.query_key, ())) < 2:
                continue
            if slow_ms is not None:
                p99 = v.p99()
                if p99 is None or p99 < slow_ms:
                    continue
            if needle is not None and needle not in v.surql.lower() \
                    and needle not in v.key.lower() and needle not in (v.user or "").lower():
                continue
            hits.append(v)
        ssps = self._ssps()
        fresh = {v.key: self.freshness(ssps.get(v.ssp_id or ""),
                                       (v.metrics or {}).get("last_publish_at_ms"), now)
                 for v in hits} if sort == "stale" else {}

        def staleness(v: ViewRow) -> tuple[Any, ...]:
            f = fresh[v.key]
            p99 = v.p99()
            return (not f["stale"], not (p99 is not None and p99 >= threshold),
                    -(f["lag_events"] or 0), -(f["since_publish_ms"] or 0), v.key)

        keyers: dict[str, Any] = {
            "recent": lambda v: -(v.last_active_ms or 0),
            "rows": lambda v: -v.rows,
            "subscribers": lambda v: -v.subscribers,
            "slow": lambda v: -(v.p99() or -1.0),
            "expiry": lambda v: v.expires_at_ms() or 0,
            "user": lambda v: (v.user or "", v.key),
            "stale": staleness,
        }
        top = heapq.nsmallest(limit, hits, key=keyers[sort or "recent"])
        return {"views": [self._public(v, now, threshold, ssps) for v in top], "total": len(hits),
                "returned": len(top), "sampled_at_ms": self.presence.sampled_at_ms,
                "refresh_secs": self.presence.refresh_secs,
                "truncated": self.presence.truncated,
                "thresholds": {"slow_ms": threshold, "large_rows": self.large_rows}}

    async def detail(self, raw_key: str) -> dict[str, Any]:
        key = view_key(raw_key)
        db = self.cluster.db
        try:
            rows = await db.query_one("SELECT * FROM $q", {"q": RecordID("_00_query", key)},
                                      idempotent=True)
            try:
                mets = await db.query_one("SELECT * FROM $m",
                                          {"m": RecordID("_00_view_metrics", key)},
                                          idempotent=True)
            except DbError as e:
                if isinstance(e, DB_UNREACHABLE):
                    raise
                mets = []  # no metrics table yet
        except DB_UNREACHABLE as e:
            raise db_unreachable() from e
        except DbError as e:
            if "does not exist" in str(e):
                rows = []
            else:
                raise Unavailable(f"the view could not be read ({type(e).__name__})",
                                  code="db_error") from e
        if not rows:
            raise NotFound(f"no view query:{key[:80]} (no _00_query row)")
        row = rows[0]
        met = mets[0] if mets else None
        view_id = f"query:{key}"
        ssp_id = self.cluster.placement(view_id)
        if ssp_id is None and met is not None and isinstance(met.get("ssp_id"), str):
            ssp_id = met["ssp_id"]
        now = now_ms()
        last = epoch_ms(row.get("lastActiveAt"))
        ttl = ttl_ms(row.get("ttl"))
        memory = await self._memory(ssp_id, view_id)
        sampled = self.presence.by_key.get(key)
        others: list[dict[str, Any]] = []
        if sampled is not None:
            for k in self.presence.by_query.get(sampled.query_key, ()):
                o = self.presence.by_key.get(k)
                if k != key and o is not None:
                    others.append({"key": k, "user": o.user, "client_id": o.client_id,
                                   "ssp_id": o.ssp_id, "live": o.live(now)})
        pub = met.get("publish_ms") if met and isinstance(met.get("publish_ms"), dict) else {}
        p99 = pub.get("p99") if isinstance(pub, dict) else None
        # rowCount is written once (initial edges); the SSP's metrics row follows each publish
        live_rows = met.get("rows") if met is not None and isinstance(met.get("rows"), int) \
            else row.get("rowCount")
        return {
            "key": key, "id": view_id, "user": jsonable(row.get("auth_id")),
            "client_id": row.get("clientId"), "ssp_id": ssp_id,
            "rows": live_rows, "subscribers": row.get("subscribers"),
            "state": row.get("state"), "ttl_ms": ttl, "last_active_ms": last,
            "expires_in_ms": None if last is None else last + ttl - now,
            "query": row.get("surql"), "params": jsonable(row.get("params")),
            "materialisation": {"p50": pub.get("p50"), "p99": p99, "max": pub.get("max"),
                                "samples": pub.get("samples"),
                                "initial_ms": met.get("materialize_ms") if met else None,
                                "updates": met.get("updates") if met else None,
                                "edge_ops": met.get("edge_ops") if met else None,
                                "last_publish_at_ms": epoch_ms(met.get("last_publish_at"))
                                if met else None,
                                "flushed_at_ms": epoch_ms(met.get("flushed_at")) if met else None},
            "slow": isinstance(p99, (int, float)) and p99 >= self.slow_ms,
            "large": isinstance(live_rows, int) and live_rows >= self.large_rows,
            "memory": memory,
            "identical_sessions": others,
            "freshness": self.freshness(None if ssp_id is None else self.cluster.ssp(ssp_id),
                                        epoch_ms(met.get("last_publish_at"))
                                        if met else None, now),
        }

    async def unregister(self, raw_key: str) -> dict[str, Any]:
        key = view_key(raw_key)
        rid = RecordID("_00_query", key)
        try:
            gone = await self.cluster.db.query_one("DELETE $q RETURN BEFORE", {"q": rid})
        except DB_UNREACHABLE as e:
            raise db_unreachable() from e
        except DbError as e:
            if "does not exist" not in str(e):
                raise Unavailable(f"the view could not be deleted ({type(e).__name__})",
                                  code="db_error") from e
            gone = []
        if not gone:
            raise NotFound(f"no view query:{key[:80]} (no _00_query row)")
        view_id = f"query:{key}"
        ssp_id = self.cluster.placement(view_id)
        # the cleanup event (or the changefeed's DELETE) does this too, a moment later: the
        # tracker is cleared now so the view is not served or placed in between
        self.cluster.unregister_view(view_id)
        self.presence.forget(key)
        return {"key": key, "id": view_id, "unregistered": True, "ssp_id": ssp_id}

    async def _memory(self, ssp_id: str | None, view_id: str) -> dict[str, Any] | None:
        if ssp_id is None:
            return None
        view, mem = await asyncio.gather(
            self.cluster.ssp_call(ssp_id, "GET", f"/debug/view/{quote(view_id, safe=':')}",
                                  timeout=3.0),
            self.cluster.ssp_call(ssp_id, "GET", "/debug/memory", timeout=3.0))
        out: dict[str, Any] = {"ssp_id": ssp_id, "reachable": view is not None}
        members = None
        if view is not None and view[0] == 200 and isinstance(view[1], dict):
            members = view[1].get("cache_size")
            out.update(members=members, shard=view[1].get("shard"),
                       referenced_tables=view[1].get("referenced_tables"))
        elif view is not None:
            out["members"] = None
            out["error"] = f"the SSP answered {view[0]} for the view"
        if mem is not None and mem[0] == 200 and isinstance(mem[1], dict):
            rows, row_bytes = mem[1].get("rows"), mem[1].get("row_bytes")
            out.update(ssp_rows=rows, ssp_row_bytes=row_bytes, ssp_views=mem[1].get("views"))
            if isinstance(members, int) and isinstance(rows, int) and rows > 0 \
                    and isinstance(row_bytes, int):
                out["estimated_bytes"] = int(members * row_bytes / rows)
        return out
