"""Usage: an append-only ledger per tenant and project, hourly rollups, and reports.

Ledger rows (``usage_event``) are never updated or deleted: ``{tenant, project, metric,
quantity, measured, at, hour, source}``. Their ids double as idempotency keys (a sampler that
runs twice for the same interval, or an exporter re-sent, writes the same id). Metrics
(``cloud.config.METRICS``):

* ``api_requests`` (measured): requests served per tenant and project, counted in memory by
  each worker (:class:`RequestMeter`) and written every ``SVC_CLOUD_USAGE_FLUSH_SECS``. A
  crash loses at most the counts of that interval; counts are usage, never acknowledged data.
* ``storage_gb_hours`` (measured): each project's stored values, sampled every
  ``SVC_CLOUD_USAGE_SAMPLE_SECS`` (bytes x hours of the interval).
* ``egress_bytes``: not measured by this release: each sample writes a row with
  ``measured: false`` and no quantity, so a report says so instead of showing 0.
* ``machine_seconds``: written by the deployments of the platform's next part.

Rollups (``usage_rollup``, one row per tenant, project, metric and hour) are recomputed from
the ledger for the recent hours on every sample tick, so they converge whatever order rows
arrived in. Amounts appear only when ``SVC_CLOUD_PRICES`` is configured: no invented prices.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from cloud.config import METRICS, PriceList
from cloud.errors import BadRequest
from cloud.store import Store, now, rid

log = logging.getLogger("cloud.usage")

__all__ = ["RequestMeter", "Usage", "hour_of"]


def hour_of(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H")


def _parse_hour(value: Any, field: str) -> datetime:
    if not isinstance(value, str):
        raise BadRequest(f"{field}: an ISO date-time such as 2026-01-31T13:00:00Z")
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{field}: an ISO date-time such as 2026-01-31T13:00:00Z") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC)


class Usage:
    def __init__(self, store: Store, prices: PriceList | None) -> None:
        self.store = store
        self.prices = prices

    async def record(self, rows: list[dict[str, Any]]) -> None:
        """Append ledger rows: each ``{id, tenant, project, metric, quantity, measured, at,
        source}``; an id already written is left as it was."""
        if not rows:
            return
        stmts = []
        for r in rows:
            if r["metric"] not in METRICS:
                raise ValueError(f"unknown usage metric {r['metric']}")
            body = {k: v for k, v in r.items() if k != "id"}
            body["hour"] = hour_of(r["at"])
            body.setdefault("project", "")
            stmts.append(("INSERT IGNORE INTO usage_event $row RETURN NONE",
                          {"row": {"id": rid("usage_event", r["id"]), **body}}))
        await self.store.tx(stmts)

    async def sample_storage(self, stored: dict[str, int], interval_secs: float,
                             at: datetime | None = None) -> int:
        """One storage sample per live project: GB-hours of the interval, and the
        unmeasured egress row. Returns the number of projects sampled."""
        at = at or now()
        projects = await self.store.one(
            "SELECT id, tenant FROM project WHERE deleted_at IS NONE", read=True) or []
        tick = int(at.timestamp() // max(interval_secs, 1))
        rows = []
        for p in projects:
            pid = str(p["id"].id)
            gb_hours = stored.get(pid, 0) / 1e9 * interval_secs / 3600
            common = {"tenant": p["tenant"], "project": pid, "at": at, "source": "sampler"}
            rows.append({"id": f"st_{pid}_{tick}", "metric": "storage_gb_hours",
                         "quantity": gb_hours, "measured": True, **common})
            rows.append({"id": f"eg_{pid}_{tick}", "metric": "egress_bytes", "quantity": None,
                         "measured": False, **common})
        await self.record(rows)
        return len(projects)

    async def rollup(self, hours: int = 2, at: datetime | None = None) -> int:
        """Recompute the rollups of the last ``hours`` hours from the ledger."""
        at = at or now()
        keys = [hour_of(at - timedelta(hours=h)) for h in range(hours)]
        groups = await self.store.one(
            "SELECT tenant, project, metric, hour, math::sum(quantity ?? 0) AS q, "
            "array::distinct(measured) AS m, count() AS n FROM usage_event "
            "WHERE hour IN $hours GROUP BY tenant, project, metric, hour",
            {"hours": keys}, read=True) or []
        stmts = [("UPSERT $id CONTENT $c RETURN NONE", {
            "id": rid("usage_rollup", f"{g['tenant']}|{g['project']}|{g['metric']}|{g['hour']}"),
            "c": {"tenant": g["tenant"], "project": g["project"], "metric": g["metric"],
                  "hour": g["hour"], "quantity": g["q"], "events": g["n"],
                  "measured": g["m"] == [True], "computed_at": at}}) for g in groups]
        if stmts:
            await self.store.tx(stmts)
        return len(stmts)

    def _priced(self, metric: str, quantity: float | None) -> dict[str, Any]:
        if self.prices is None or metric not in self.prices.unit_prices or quantity is None:
            return {}
        return {"amount": round(quantity * self.prices.unit_prices[metric], 6),
                "currency": self.prices.currency}

    async def report(self, tenant: str, project: str | None, since: Any, until: Any,
                     after: str | None, limit: int) -> dict[str, Any]:
        end = _parse_hour(until, "until") if until is not None else now()
        start = _parse_hour(since, "since") if since is not None else end - timedelta(hours=24)
        if start > end:
            raise BadRequest("since: must be before until")
        if end - start > timedelta(days=366):
            raise BadRequest("since: a window of at most 366 days")
        cond = " AND project = $p" if project else ""
        vars = {"t": tenant, "p": project, "a": hour_of(start), "b": hour_of(end)}
        totals = await self.store.one(
            "SELECT metric, math::sum(quantity) AS q, array::distinct(measured) AS m "
            f"FROM usage_rollup WHERE tenant = $t{cond} AND hour >= $a AND hour <= $b "
            "GROUP BY metric", vars, read=True) or []
        rows = await self.store.one(
            f"SELECT * FROM usage_rollup WHERE tenant = $t{cond} AND hour >= $a AND "
            "hour <= $b AND id > $after ORDER BY id LIMIT $n",
            {**vars, "after": rid("usage_rollup", after or ""), "n": limit + 1},
            read=True) or []
        by_metric = {t["metric"]: t for t in totals}
        out_totals = []
        for metric, unit in METRICS.items():
            t = by_metric.get(metric)
            measured = t is not None and t["m"] == [True]
            q = t["q"] if measured and t is not None else None
            entry: dict[str, Any] = {"metric": metric, "unit": unit, "measured": measured,
                                     "quantity": q}
            if t is None:
                entry["note"] = "no usage recorded in this window"
            elif not measured:
                entry["note"] = "not measured by this release"
            out_totals.append({**entry, **self._priced(metric, q)})
        items = [{"hour": r["hour"], "project": r["project"] or None, "metric": r["metric"],
                  "quantity": r["quantity"] if r["measured"] else None,
                  "measured": r["measured"]} for r in rows[:limit]]
        nxt = str(rows[limit - 1]["id"].id) if len(rows) > limit else None
        return {"window": {"since": start, "until": end}, "totals": out_totals,
                "prices": "configured" if self.prices else "not configured (no amounts)",
                "items": items, "next": nxt}


class RequestMeter:
    """Requests per tenant and project, counted in memory and written to the ledger in
    batches (see module doc)."""

    def __init__(self, usage: Usage, flush_secs: float) -> None:
        self.usage = usage
        self.flush_secs = flush_secs
        self.counts: Counter[tuple[str, str]] = Counter()
        self._who = uuid.uuid4().hex[:12]
        self._seq = itertools.count()
        self._task: asyncio.Task[None] | None = None

    def count(self, tenant: str, project: str | None) -> None:
        self.counts[(tenant, project or "")] += 1

    async def flush(self) -> None:
        counts, self.counts = self.counts, Counter()
        at = now()
        rows = [{"id": f"rq_{self._who}_{next(self._seq)}", "tenant": t, "project": p,
                 "metric": "api_requests", "quantity": float(n), "measured": True, "at": at,
                 "source": "api"} for (t, p), n in counts.items()]
        try:
            await self.usage.record(rows)
        except Exception:  # noqa: BLE001 - kept for the next flush, never lost to one failure
            log.exception("request counts not written; retried at the next flush")
            self.counts.update(counts)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_secs)
            await self.flush()
