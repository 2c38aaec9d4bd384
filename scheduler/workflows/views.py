"""The admin API's bodies for workflows and schedules (read from the database and the engine).

Times are epoch milliseconds (as everywhere in the admin API); record ids are text
(`_00_workflow_run:<key>`, `job:wf_<key>_<step>`). Counts that describe "now" (`totals` of
the run list, `recent` of a schedule) cover the work in flight plus the last hour of terminal
work, like the job sampler's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from surrealdb import RecordID

from engine.values import record_id_text
from project.workflows import AD_HOC
from scheduler.workflows import clock, rollups
from scheduler.workflows.engine import WorkflowEngine
from scheduler.workflows.errors import NotFound
from scheduler.workflows.ids import rid as _rid

__all__ = ["get_run", "get_schedule", "list_runs", "list_schedules", "run_key_of"]

RUN_STATUSES = ("running", "completed", "failed", "killed")
RUN_FIELDS = ("id, workflow, status, trigger, schedule, schedule_run, rerun_of, retry_count, "
              "last_retry_at, kill_requested, error, created_at, finished_at, deadline_at, "
              "step_counts")
RECENT_FIRES = 20
NEXT_FIRES = 5


def ms(v: Any) -> int | None:
    return int(v.timestamp() * 1000) if isinstance(v, datetime) else None


def text(v: Any) -> Any:
    if isinstance(v, RecordID):
        return record_id_text(v)
    if isinstance(v, datetime):
        return ms(v)
    if isinstance(v, dict):
        return {str(k): text(x) for k, x in v.items()}
    if isinstance(v, list):
        return [text(x) for x in v]
    return v


def run_key_of(raw: str) -> str:
    """A run id as the API takes it: the key, or the whole record id."""
    return raw.split(":", 1)[1] if raw.startswith("_00_workflow_run:") else raw


def _run_public(row: dict[str, Any], engine: WorkflowEngine) -> dict[str, Any]:
    key = str(row["id"].id) if isinstance(row.get("id"), RecordID) else str(row.get("id"))
    counts = row.get("step_counts")
    live = engine.runs.get(key)
    if live is not None:
        counts = {}
        for st in live.steps.values():
            counts[st.status] = counts.get(st.status, 0) + 1
    return {"id": text(row.get("id")), "key": key, "workflow": row.get("workflow"),
            "status": row.get("status"), "trigger": row.get("trigger"),
            "schedule": row.get("schedule"), "schedule_run": text(row.get("schedule_run")),
            "rerun_of": text(row.get("rerun_of")), "retry_count": row.get("retry_count"),
            "last_retry_at": ms(row.get("last_retry_at")),
            "kill_requested": bool(row.get("kill_requested")),
            "error": text(row.get("error")), "created_at": ms(row.get("created_at")),
            "finished_at": ms(row.get("finished_at")),
            "deadline_at": ms(row.get("deadline_at")), "step_counts": counts or {}}


async def list_runs(engine: WorkflowEngine, *, name: str | None, schedule: str | None,
                    status: str | None, rerun_of: str | None, limit: int) -> dict[str, Any]:
    """`GET /admin/api/workflows/runs`: newest first, filtered in the database query."""
    conds: list[str] = []
    vars: dict[str, Any] = {}
    if name is not None:
        conds.append("workflow = $name")
        vars["name"] = name
    if schedule is not None:
        conds.append("schedule = $schedule")
        vars["schedule"] = schedule
    if status is not None:
        conds.append("status = $status")
        vars["status"] = status
    if rerun_of is not None:
        conds.append("rerun_of = $rerun_of")
        vars["rerun_of"] = _rid("_00_workflow_run", run_key_of(rerun_of))
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    rows = await engine.db.query_one(
        f"SELECT {RUN_FIELDS} FROM _00_workflow_run{where} ORDER BY created_at DESC "
        f"LIMIT {int(limit)}", vars, idempotent=True) or []
    totals = dict.fromkeys(RUN_STATUSES, 0)
    for r in await engine.db.query_one(
            "SELECT status, count() AS n FROM _00_workflow_run WHERE status = 'running' OR "
            "finished_at > time::now() - 1h GROUP BY status", idempotent=True) or []:
        if r.get("status") in totals:
            totals[r["status"]] = int(r.get("n") or 0)
    return {"runs": [_run_public(r, engine) for r in rows], "limit": limit,
            "totals": totals, "totals_window": "in flight plus the last hour"}


async def get_run(engine: WorkflowEngine, raw_id: str) -> dict[str, Any]:
    """`GET /admin/api/workflows/runs/:id`: the run, its steps (each with `created_at` and
    `started_at`) in DAG order, and the DAG (nodes, edges, order)."""
    rid = _rid("_00_workflow_run", run_key_of(raw_id))
    row = await engine.db.query_one("SELECT * FROM ONLY $r", {"r": rid}, idempotent=True)
    if not isinstance(row, dict):
        raise NotFound(f"no workflow run {raw_id[:80]}")
    steps = await engine.db.query_one("SELECT * FROM _00_step_run WHERE run = $r", {"r": rid},
                                      idempotent=True) or []
    raw_dag = row.get("dag")
    dag: dict[str, Any] = raw_dag if isinstance(raw_dag, dict) else {}
    raw_specs = dag.get("steps")
    specs: dict[str, Any] = raw_specs if isinstance(raw_specs, dict) else {}
    order = [str(n) for n in dag.get("order") or list(specs)]
    by_name = {str(s.get("step")): s for s in steps if isinstance(s, dict)}
    out_steps = []
    for n in order:
        s, spec = by_name.get(n, {}), specs.get(n, {})
        out_steps.append({
            "name": n, "table": spec.get("table"), "path": spec.get("path"),
            "depends_on": spec.get("depends_on") or [], "status": s.get("status"),
            "attempt": s.get("attempt"), "job": text(s.get("job")),
            "jobs": text(s.get("jobs") or []), "created_at": ms(s.get("created_at")),
            "started_at": ms(s.get("started_at")), "finished_at": ms(s.get("finished_at")),
            "error": text(s.get("error")), "retries": spec.get("retries"),
            "timeout_secs": spec.get("timeout")})
    run = _run_public(row, engine)
    run["steps"] = out_steps
    run["dag"] = {"nodes": [{"name": s["name"], "table": s["table"], "status": s["status"]}
                            for s in out_steps],
                  "edges": [[d, s["name"]] for s in out_steps for d in s["depends_on"]],
                  "order": order}
    return {"run": run}


async def _schedule_rows(engine: WorkflowEngine) -> dict[str, dict[str, Any]]:
    rows = await engine.db.query_one("SELECT *, record::id(id) AS name FROM _00_schedule",
                                     idempotent=True) or []
    return {str(r["name"]): r for r in rows if isinstance(r, dict)}


def _schedule_public(engine: WorkflowEngine, name: str, row: dict[str, Any]) -> dict[str, Any]:
    s = engine.schedules.get(name)
    spec = s.spec if s is not None else None
    active = [f for f in engine.fires.values() if f.schedule == name]
    q = s.quarantined if s is not None else row.get("quarantined")
    return {
        "name": name, "cron": row.get("cron"), "timezone": row.get("timezone"),
        "target": {"table": spec.table, "path": spec.path} if spec and spec.table
        else {"workflow": spec.workflow if spec else row.get("workflow")},
        "target_table": row.get("target_table"), "workflow": row.get("workflow"),
        "concurrency": row.get("concurrency"), "catch_up": row.get("catch_up"),
        "quarantine_after": spec.quarantine_after if spec else None,
        "enabled": bool(row.get("enabled", True)),
        "paused": s.paused if s is not None else bool(row.get("paused")),
        "quarantined": text(q) if q else None,
        "definition_error": s.problem if s is not None else None,
        "next_fire_at": ms(s.next_due) if s is not None and s.active else None,
        "last_fire_at": ms(row.get("last_fired_at")),
        "last_due_at": ms(row.get("last_due_at")),
        "last_run_status": row.get("last_run_status"),
        "last_run_at": ms(row.get("last_run_at")), "last_error": row.get("last_error"),
        "trigger_requested_at": ms(row.get("trigger_requested_at")),
        "failures": row.get("failures") or 0,
        "running": sum(1 for f in active if f.status == "running"),
        "queued": sum(1 for f in active if f.status == "queued"),
    }


async def _recent_counts(engine: WorkflowEngine, name: str | None = None
                         ) -> dict[str, dict[str, int]]:
    where = "(status IN ['running', 'queued'] OR finished_at > time::now() - 1h)"
    vars: dict[str, Any] = {}
    if name is not None:
        where += " AND schedule = $name"
        vars["name"] = name
    out: dict[str, dict[str, int]] = {}
    for r in await engine.db.query_one(
            f"SELECT schedule, status, count() AS n FROM _00_schedule_run WHERE {where} "
            "GROUP BY schedule, status", vars, idempotent=True) or []:
        out.setdefault(str(r.get("schedule")), {})[str(r.get("status"))] = int(r.get("n") or 0)
    return out


async def _rollup_totals(engine: WorkflowEngine) -> dict[str, dict[str, int]]:
    """Per bucket (schedule name or `(ad-hoc)`): success / failure / skipped over the
    retained days (one grouped read; the list page's chart)."""
    rows = await engine.db.query_one(
        "SELECT schedule, math::sum(success ?? 0) AS success, math::sum(failure ?? 0) AS "
        "failure, math::sum(skipped ?? 0) AS skipped FROM _00_run_rollup GROUP BY schedule",
        idempotent=True) or []
    return {str(r.get("schedule")): {f: int(r.get(f) or 0) for f in rollups.FIELDS}
            for r in rows}


async def list_schedules(engine: WorkflowEngine) -> dict[str, Any]:
    """`GET /admin/api/schedules`: every definition with its next and last fire, paused and
    quarantined state, `rollup` totals and skipped-fire count (retained days) and `recent`
    counts; `ad_hoc`: the rollup totals of runs no schedule owns."""
    rows = await _schedule_rows(engine)
    recent = await _recent_counts(engine)
    totals = await _rollup_totals(engine)
    items = []
    for name in sorted(rows):
        item = _schedule_public(engine, name, rows[name])
        item["recent"] = recent.get(name, {})
        item["rollup"] = totals.get(name, dict.fromkeys(rollups.FIELDS, 0))
        item["skipped_fires"] = item["rollup"]["skipped"]
        items.append(item)
    return {"schedules": items, "engine": engine.state,
            "ad_hoc": totals.get(AD_HOC, dict.fromkeys(rollups.FIELDS, 0))}


async def get_schedule(engine: WorkflowEngine, name: str) -> dict[str, Any]:
    """`GET /admin/api/schedules/:name`: the schedule, its next fires, recent fires, and
    its rollup tally (totals and per day)."""
    rows = await _schedule_rows(engine)
    if name not in rows:
        raise NotFound(f"no schedule {name[:80]}")
    item = _schedule_public(engine, name, rows[name])
    item["recent"] = (await _recent_counts(engine, name)).get(name, {})
    fires = await engine.db.query_one(
        "SELECT * FROM _00_schedule_run WHERE schedule = $n ORDER BY due_at DESC "
        f"LIMIT {RECENT_FIRES}", {"n": name}, idempotent=True) or []
    item["recent_fires"] = [{
        "id": text(f.get("id")), "due_at": ms(f.get("due_at")),
        "fired_at": ms(f.get("fired_at")), "finished_at": ms(f.get("finished_at")),
        "trigger": f.get("trigger"), "status": f.get("status"), "run": text(f.get("run")),
        "job": text(f.get("job")), "lateness_ms": f.get("lateness_ms"),
        "catch_up": bool(f.get("catch_up")), "retried": bool(f.get("retried")),
        "error": text(f.get("error"))} for f in fires if isinstance(f, dict)]
    roll = await engine.db.query_one("SELECT * FROM _00_run_rollup WHERE schedule = $n",
                                     {"n": name}, idempotent=True) or []
    item["rollup"] = rollups.tally([r for r in roll if isinstance(r, dict)])
    item["skipped_fires"] = item["rollup"]["skipped"]
    s = engine.schedules.get(name)
    nxt: list[int] = []
    if s is not None and s.spec is not None and s.active and s.next_due is not None:
        at = s.next_due
        nxt.append(ms(at) or 0)
        for _ in range(NEXT_FIRES - 1):
            at = clock.next_due(s.spec.cron, s.spec.timezone, at)
            nxt.append(ms(at) or 0)
    item["next_fires"] = nxt
    return {"schedule": item, "ad_hoc_bucket": AD_HOC}
