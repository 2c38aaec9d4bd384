"""Outbox jobs for the admin API: the job sampler, filtered listings, one job, clearing.

Job tables: the ``job_tables`` arrays of the ``_00_retention`` rows plus the scheduler's
own ``job_tables`` (YAML); read at most every 30 s.

The sampler runs every ``SVC_ADMIN_JOB_INTERVAL_SECS`` (15; 0 switches it off: totals say
``not measured`` and ``jobs/stream`` answers 501), every ``SVC_ADMIN_JOB_LIVE_INTERVAL_SECS``
(2) while at least one ``jobs/stream`` viewer is connected. A sample counts, per table, the
work in flight (``pending``, ``processing``, and ``stalled``: processing with an expired
lease) plus the last hour of terminal work (``completed``, ``failed`` finished within the
hour), and keeps the 200 jobs with the newest activity (latest of finished, started,
created). Like the presence sampler it never takes more than 5 % of the time (the next
sample waits at least 20 x the last one's duration). ``GET /admin/api/jobs`` without filters
answers from it; with ``status``, ``table``, ``origin``, ``q`` it queries the database. Each
sample is published to the stream (event ``jobs``).

``origin`` of a job: ``workflow`` (a step job, id key ``wf_<run>_<step>...`` or a
``workflow_run`` field), ``schedule`` (a ``schedule`` field), else ``app``; an ``origin``
field on the row wins.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from surrealdb import RecordID

from dbclient import DbError, is_identifier
from dbclient.clock import now_ms
from engine.values import parse_record_id, record_id_text
from scheduler.admin.cluster import Cluster
from scheduler.admin.errors import DB_UNREACHABLE, Invalid, NotFound, Unavailable, db_unreachable
from scheduler.admin.sse import Channel
from scheduler.admin.values import epoch_ms, jsonable

log = logging.getLogger("scheduler.admin.jobs")

__all__ = ["JobSampler", "STATUSES"]

STATUSES = ("pending", "processing", "completed", "failed", "stalled")
ORIGINS = ("schedule", "workflow", "app")
KEPT = 200
TABLES_TTL_SECS = 30.0
CLEAR_BATCH = 1000
COST_FACTOR = 20
LIST_FIELDS = ("id, status, path, created_at, started_at, finished_at, assignee, lease_until, "
               "attempts, max_retries, kill_requested, origin, schedule, workflow_run")
RECENT = "(status IN ['pending', 'processing'] OR finished_at > time::now() - 1h)"


def _origin(row: dict[str, Any]) -> dict[str, Any]:
    o = row.get("origin")
    if isinstance(o, dict):
        return jsonable(o)
    if isinstance(o, str) and o in ORIGINS:
        return {"kind": o}
    rid = row.get("id")
    key = str(rid.id) if isinstance(rid, RecordID) else ""
    if row.get("workflow_run") is not None or key.startswith("wf_"):
        out: dict[str, Any] = {"kind": "workflow"}
        if row.get("workflow_run") is not None:
            out["run"] = jsonable(row["workflow_run"])
        return out
    if row.get("schedule") is not None:
        return {"kind": "schedule", "schedule": jsonable(row["schedule"])}
    return {"kind": "app"}


def _public(row: dict[str, Any], now_ms: int) -> dict[str, Any]:
    status = row.get("status")
    lease = epoch_ms(row.get("lease_until"))
    times = [t for t in (epoch_ms(row.get(k)) for k in ("finished_at", "started_at",
                                                        "created_at")) if t is not None]
    return {
        "id": jsonable(row.get("id")), "table": row["id"].table_name
        if isinstance(row.get("id"), RecordID) else None,
        "status": status, "stalled": status == "processing" and lease is not None
        and lease < now_ms, "path": row.get("path"), "assignee": row.get("assignee"),
        "attempts": row.get("attempts"), "max_retries": row.get("max_retries"),
        "kill_requested": bool(row.get("kill_requested")),
        "created_at_ms": epoch_ms(row.get("created_at")),
        "started_at_ms": epoch_ms(row.get("started_at")),
        "finished_at_ms": epoch_ms(row.get("finished_at")), "lease_until_ms": lease,
        "activity_ms": max(times) if times else None, "origin": _origin(row),
    }


def _empty_totals() -> dict[str, int]:
    return {s: 0 for s in STATUSES}


class JobSampler:
    """See the module docstring."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        cfg = cluster.cfg.admin
        self.idle = cfg.job_interval_secs
        self.live = cfg.job_live_interval_secs
        self.enabled = self.idle > 0
        self.channel = Channel()
        self.snapshot: dict[str, Any] | None = None
        self._tables: tuple[float, list[str]] | None = None
        self._wake = asyncio.Event()
        self.samples = 0

    # ------------------------------------------------------------------ tables
    async def tables(self) -> list[str]:
        now = time.monotonic()
        if self._tables is not None and now - self._tables[0] < TABLES_TTL_SECS:
            return self._tables[1]
        names = set(self.cluster.cfg.job_tables)
        try:
            rows = await self.cluster.db.query_one("SELECT job_tables FROM _00_retention",
                                                   idempotent=True) or []
        except DB_UNREACHABLE:
            raise
        except DbError:
            rows = []  # no _00_retention table
        for r in rows:
            jt = r.get("job_tables") if isinstance(r, dict) else None
            if isinstance(jt, list):
                names.update(t for t in jt if isinstance(t, str))
        out = sorted(t for t in names if is_identifier(t))
        self._tables = (now, out)
        return out

    # ------------------------------------------------------------------ sampler
    async def run(self) -> None:
        if not self.enabled:
            return
        while True:
            started = time.monotonic()
            try:
                await self.sample_once()
            except DbError as e:
                log.info("job sample failed: %s", e)
            interval = max(self.live if self.channel.viewers > 0 else self.idle,
                           COST_FACTOR * (time.monotonic() - started))
            try:
                await asyncio.wait_for(self._wake.wait(), interval)
            except TimeoutError:
                pass
            self._wake.clear()

    def wake(self) -> None:
        """A stream viewer arrived: switch to the live cadence now."""
        self._wake.set()

    async def _read(self, sql: str, vars: dict[str, Any] | None = None) -> list[Any]:
        try:
            return list(await self.cluster.db.query_one(sql, vars, idempotent=True) or [])
        except DB_UNREACHABLE:
            raise
        except DbError as e:
            if "does not exist" in str(e):
                return []
            raise

    async def sample_once(self) -> dict[str, Any]:
        now = now_ms()
        totals = _empty_totals()
        per_table: dict[str, dict[str, int]] = {}
        recent: list[dict[str, Any]] = []
        for t in await self.tables():
            counts = _empty_totals()
            for r in await self._read(f"SELECT status, count() AS n FROM {t} WHERE {RECENT} "
                                      "GROUP BY status"):
                if isinstance(r, dict) and r.get("status") in counts:
                    counts[r["status"]] += int(r.get("n") or 0)
            stalled = await self._read(f"SELECT count() AS n FROM {t} WHERE status = "
                                       "'processing' AND lease_until < time::now() GROUP ALL")
            counts["stalled"] = int(stalled[0].get("n") or 0) if stalled else 0
            per_table[t] = counts
            for k in STATUSES:
                totals[k] += counts[k]
            rows = await self._read(f"SELECT {LIST_FIELDS} FROM {t} WHERE {RECENT} "
                                    f"ORDER BY created_at DESC LIMIT {KEPT}")
            recent.extend(_public(r, now) for r in rows if isinstance(r, dict))
        recent.sort(key=lambda j: j["activity_ms"] or 0, reverse=True)
        self.snapshot = {"sampled_at_ms": now, "measured": True, "totals": totals,
                         "per_table": per_table, "jobs": recent[:KEPT]}
        self.samples += 1
        self.channel.publish(self.snapshot)
        return self.snapshot

    # ------------------------------------------------------------------ listings
    async def listing(self, *, status: str | None, table: str | None, origin: str | None,
                      q: str | None, limit: int) -> dict[str, Any]:
        filtered = any(v is not None for v in (status, table, origin, q))
        if not filtered and self.snapshot is not None:
            snap = self.snapshot
            return {**snap, "jobs": snap["jobs"][:limit], "source": "sampler"}
        try:
            tables = await self.tables()
        except DB_UNREACHABLE as e:
            raise db_unreachable() from e
        if table is not None:
            if table not in tables:
                raise NotFound(f"{table[:80]} is not a job table (_00_retention.job_tables)")
            tables = [table]
        now = now_ms()
        conds: list[str] = []
        vars: dict[str, Any] = {}
        if status == "stalled":
            conds.append("status = 'processing' AND lease_until < time::now()")
        elif status is not None:
            conds.append("status = $status")
            vars["status"] = status
        if q is not None:
            conds.append("string::contains(string::lowercase(path ?? ''), $q)")
            vars["q"] = q.lower()
        where = f" WHERE {' AND '.join(conds)}" if conds else ""
        fetch = limit if origin is None else min(5000, limit * 10)
        jobs: list[dict[str, Any]] = []
        try:
            for t in tables:
                rows = await self._read(f"SELECT {LIST_FIELDS} FROM {t}{where} "
                                        f"ORDER BY created_at DESC LIMIT {fetch}", vars)
                jobs.extend(_public(r, now) for r in rows if isinstance(r, dict))
        except DB_UNREACHABLE as e:
            raise db_unreachable() from e
        except DbError as e:
            raise Unavailable(f"the job tables could not be read ({type(e).__name__})",
                              code="db_error") from e
        if origin is not None:
            jobs = [j for j in jobs if j["origin"].get("kind") == origin]
        jobs.sort(key=lambda j: j["activity_ms"] or 0, reverse=True)
        last = self.snapshot
        return {"sampled_at_ms": last["sampled_at_ms"] if last else None,
                "measured": last is not None,
                "totals": last["totals"] if last else "not measured",
                "per_table": last["per_table"] if last else "not measured",
                "jobs": jobs[:limit], "source": "database"}

    async def job(self, raw_id: str) -> dict[str, Any]:
        """One job with every field and its origin; 404 unless its table is a job table."""
        try:
            rid = parse_record_id(raw_id)
        except ValueError:
            raise Invalid(f"job id: a record id such as job:1, got {raw_id[:80]!r}") from None
        try:
            if rid.table_name not in await self.tables():
                raise NotFound(f"{rid.table_name[:80]} is not a job table "
                               "(_00_retention.job_tables)")
            rows = await self._read("SELECT * FROM $id", {"id": rid})
        except DB_UNREACHABLE as e:
            raise db_unreachable() from e
        except DbError as e:
            raise Unavailable(f"the job could not be read ({type(e).__name__})",
                              code="db_error") from e
        if not rows:
            raise NotFound(f"no job {record_id_text(rid)[:120]}")
        row = rows[0]
        out = _public(row, now_ms())
        out.update(payload=jsonable(row.get("payload")), result=jsonable(row.get("result")),
                   errors=jsonable(row.get("errors") or []),
                   retry_budget={"attempts": row.get("attempts"),
                                 "max_retries": row.get("max_retries", 3)})
        return out

    async def clear(self, table: str | None, everything: bool) -> dict[str, Any]:
        """Delete terminal rows (completed, failed) of one job table or of all of them: one
        batch of at most 1000 rows, or until none is left with ``all``."""
        try:
            tables = await self.tables()
            if table is not None:
                if table not in tables:
                    raise NotFound(f"{table[:80]} is not a job table "
                                   "(_00_retention.job_tables)")
                tables = [table]
            total = 0
            for t in tables:
                n = await self._read(f"SELECT count() AS n FROM {t} WHERE status IN "
                                     "['completed', 'failed'] GROUP ALL")
                total += int(n[0].get("n") or 0) if n else 0
            cleared = 0
            for t in tables:
                while True:
                    gone = await self.cluster.db.query_one(
                        f"DELETE (SELECT VALUE id FROM {t} WHERE status IN "
                        f"['completed', 'failed'] LIMIT {CLEAR_BATCH}) RETURN BEFORE") or []
                    cleared += len(gone)
                    if not everything or len(gone) < CLEAR_BATCH:
                        break
                if not everything and cleared >= CLEAR_BATCH:
                    break
        except DB_UNREACHABLE as e:
            raise db_unreachable() from e
        except DbError as e:
            raise Unavailable(f"the job tables could not be cleared ({type(e).__name__})",
                              code="db_error") from e
        self.wake()
        return {"cleared": cleared, "total": total, "more": total > cleared}
