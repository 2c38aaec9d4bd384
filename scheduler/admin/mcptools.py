"""The admin MCP tools (spec "Scheduler admin MCP tools"): one declarative table, one entry per
tool, each naming the admin API request it makes.

A tool is an :class:`AdminTool`: its name, a one-line description, its arguments (a JSON schema
of an object), its kind and how its arguments become one admin API request
(:class:`ApiCall`). The MCP endpoint (:mod:`scheduler.admin.mcp`) runs that request through
the admin listener's own Falcon app with the caller's bearer, so a tool has exactly the
permissions, validation and statuses of its route; nothing here reads the scheduler.

Kinds: ``read`` (``readOnlyHint``; listed for every token), ``write`` (changes something, may be
repeated safely) and ``destructive`` (``destructiveHint``: restarts, kills, deletions). A token
of scope ``read`` is shown only the read tools, and calling another answers a tool error.

Areas are tuples below; :data:`AREAS` lists them in the order ``tools/list`` shows them. The
the pool tools are plain data in ``pooltools``. ``backup_delete`` and ``backups_configure``
call their routes, which answer ``Not linked to the hosted platform`` while the scheduler is not
linked. ``cloud_deployment`` and ``cloud_restart`` call their routes,
which answer ``Not linked to the hosted platform`` while the scheduler is not linked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from scheduler.admin.pooltools import POOL_TOOL_SPECS

__all__ = ["AREAS", "TOOLS", "AdminTool", "ApiCall", "tool_named"]

Kind = Literal["read", "write", "destructive"]


@dataclass(frozen=True)
class ApiCall:
    """One admin API request: ``path`` is relative to ``/admin/api``."""

    method: str
    path: str
    query: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None


@dataclass(frozen=True)
class AdminTool:
    """One MCP tool over one admin API route."""

    name: str
    title: str
    description: str
    kind: Kind
    request: Callable[[dict[str, Any]], ApiCall]
    properties: Mapping[str, Any] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    #: turns the route's answer into the tool's result (default: the JSON body as it is)
    shape: Callable[[dict[str, Any], Any], Any] | None = None

    @property
    def read_only(self) -> bool:
        return self.kind == "read"

    def input_schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": dict(self.properties),
                "required": list(self.required), "additionalProperties": False}


def _seg(value: Any) -> str:
    """A path segment, percent-encoded (``?``, ``#``, ``%`` stay inside it). ValueError for a
    value the route could not take as one segment: the ASGI path is decoded before routing,
    so a ``/`` would split it and ``..`` would name another route (a tool must call its own
    route, whatever its arguments)."""
    text = str(value)
    if "/" in text or text in (".", ".."):
        raise ValueError(f"{text[:80]!r} cannot name one path segment (no / and not . or ..)")
    return quote(text, safe=":@")


def _q(args: dict[str, Any], *names: str) -> dict[str, Any]:
    """The query parameters among ``names`` the caller gave (booleans as true/false)."""
    out: dict[str, Any] = {}
    for n in names:
        v = args.get(n)
        if v is None:
            continue
        out[n] = ("true" if v else "false") if isinstance(v, bool) else v
    return out


def _get(path: str, *query: str) -> Callable[[dict[str, Any]], ApiCall]:
    return lambda a: ApiCall("GET", path, _q(a, *query))


_STR = {"type": "string", "minLength": 1, "maxLength": 300}
_LIMIT = {"type": "integer", "minimum": 1, "maximum": 1000}


def _logs_shape(args: dict[str, Any], text: Any) -> dict[str, Any]:
    """``logs_recent``: the SSE answer as a list of lines, and how many gap notices it had."""
    lines: list[Any] = []
    gaps = 0
    event, data = None, []
    for raw in (text if isinstance(text, str) else "").split("\n") + [""]:
        line = raw.rstrip("\r")
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line == "":
            if data:
                payload = "\n".join(data)
                if event == "gap":
                    gaps += 1
                elif event in (None, "message"):
                    lines.append(_json_or_text(payload))
            event, data = None, []
    return {"source": args.get("source") or "scheduler", "lines": lines, "gaps": gaps}


def _json_or_text(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def _operations_shape(args: dict[str, Any], body: Any) -> Any:
    ops = body.get("operations", []) if isinstance(body, dict) else []
    if args.get("operation_id"):
        ops = [o for o in ops if o.get("id") == args["operation_id"]]
    if args.get("status"):
        ops = [o for o in ops if o.get("status") == args["status"]]
    return {"operations": ops[: int(args.get("limit") or 50)]}


CLUSTER: tuple[AdminTool, ...] = (
    AdminTool("admin_config", "Admin config",
              "Scheduler id and version, whether break-glass sign-in is available, whether the "
              "scheduler is linked to the hosted platform and supervised.",
              "read", _get("/config")),
    AdminTool("overview", "Cluster overview",
              "Scheduler, SSPs and backends with their state, totals, the presence rollup, running "
              "operations and the incident counts.", "read", _get("/overview")),
    AdminTool("backends_list", "Backends", "Every backend with its health status.", "read",
              _get("/backends")),
    AdminTool("backend_get", "One backend",
              "One backend: about 30 minutes of probe history, its health-check URL, masked env.",
              "read", lambda a: ApiCall("GET", f"/backends/{_seg(a['name'])}"),
              {"name": _STR}, ("name",)),
    AdminTool("logs_recent", "Recent log lines",
              "The newest log lines of the scheduler or of one SSP (not streamed).", "read",
              lambda a: ApiCall("GET", "/logs", {"source": a.get("source") or "scheduler",
                                                  "tail": "false",
                                                  "backfill": a.get("lines", 100)}),
              {"source": {"type": "string", "description": "scheduler (default) or ssp:<id>",
                          "maxLength": 300},
               "lines": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
              shape=_logs_shape),
    AdminTool("operations_list", "Operations",
              "Recent operations (restarts, reclone, rehash), newest first, with status "
              "running/done/failed and progress; filter by id or status.", "read",
              _get("/operations"),
              {"operation_id": _STR,
               "status": {"enum": ["running", "done", "failed"]},
               "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
              shape=_operations_shape),
)

LIVE: tuple[AdminTool, ...] = (
    AdminTool("presence", "Presence",
              "Live users, sessions and views, the sample ring, heaviest users, split per SSP.",
              "read", _get("/presence")),
    AdminTool("views_list", "Views",
              "Registered views with owner, SSP, rows, subscribers, materialisation percentiles "
              "and time to expiry; filters and sort as GET /admin/api/views.", "read",
              _get("/views", "limit", "user", "ssp", "sort", "slow_ms", "q", "shared",
                   "include_expired", "large"),
              {"limit": _LIMIT, "user": _STR, "ssp": _STR,
               "sort": {"enum": ["recent", "rows", "subscribers", "slow", "expiry", "user"]},
               "slow_ms": {"type": "integer", "minimum": 0}, "q": _STR,
               "shared": {"type": "boolean"}, "include_expired": {"type": "boolean"},
               "large": {"type": "boolean"}}),
    AdminTool("view_get", "One view",
              "One view: query text, params, subscribers, percentiles, SSP memory attribution, "
              "other sessions running the identical query.", "read",
              lambda a: ApiCall("GET", f"/views/{_seg(a['key'])}"), {"key": _STR}, ("key",)),
    AdminTool("view_unregister", "Unregister a view",
              "Unregister a view as DELETE /admin/api/views/{key} does: its _00_query row is "
              "deleted (the spec's way; its client registers again if still open). Answers "
              "{key, id, unregistered, ssp_id}; 404 without such a view.", "destructive",
              lambda a: ApiCall("DELETE", f"/views/{_seg(a['key'])}"), {"key": _STR},
              ("key",)),
)

_RUN = {"type": "string", "minLength": 1, "maxLength": 200,
        "description": "the run key, or _00_workflow_run:<key>"}
_SCHED = {"type": "string", "minLength": 1, "maxLength": 200, "description": "schedule name"}


def _run(verb: str) -> Callable[[dict[str, Any]], ApiCall]:
    return lambda a: ApiCall("POST", f"/workflows/runs/{_seg(a['run_id'])}/{verb}")


def _sched(verb: str) -> Callable[[dict[str, Any]], ApiCall]:
    return lambda a: ApiCall("POST", f"/schedules/{_seg(a['name'])}/{verb}")


WORKFLOWS: tuple[AdminTool, ...] = (
    AdminTool("workflow_runs_list", "Workflow runs",
              "Workflow runs newest first, filtered by workflow name, schedule, status or the "
              "run they rerun; totals cover runs in flight plus the last hour.", "read",
              _get("/workflows/runs", "name", "schedule", "status", "rerun_of", "limit"),
              {"name": _STR, "schedule": _STR,
               "status": {"enum": ["running", "completed", "failed", "killed"]},
               "rerun_of": _RUN, "limit": {"type": "integer", "minimum": 1, "maximum": 500}}),
    AdminTool("workflow_run_get", "One workflow run",
              "One run with its steps (status, job, created_at, started_at, error) and its "
              "DAG.", "read", lambda a: ApiCall("GET", f"/workflows/runs/{_seg(a['run_id'])}"),
              {"run_id": _RUN}, ("run_id",)),
    AdminTool("workflow_run_cancel", "Cancel a workflow run",
              "Cancel a running run: blocked steps are skipped, running steps' jobs killed. "
              "Answers {run, status: killed|kill_requested, operation}.", "destructive",
              _run("cancel"), {"run_id": _RUN}, ("run_id",)),
    AdminTool("workflow_runs_cancel", "Cancel several workflow runs",
              "Cancel up to 200 running runs in one request, each as workflow_run_cancel "
              "would. Answers {results: [{id, ok, status, run, operation} or {id, ok: false, "
              "status, code, error}], cancelled, total}.", "destructive",
              lambda a: ApiCall("POST", "/workflows/runs/cancel", body={"ids": a["run_ids"]}),
              {"run_ids": {"type": "array", "items": _RUN, "minItems": 1, "maxItems": 200}},
              ("run_ids",)),
    AdminTool("workflow_run_rerun", "Rerun a workflow run",
              "Start a new ad-hoc run (trigger manual) of the same workflow, whatever the "
              "source's status. Answers {run, rerun_of}.", "write", _run("rerun"),
              {"run_id": _RUN}, ("run_id",)),
    AdminTool("workflow_run_retry", "Retry a workflow run",
              "Retry a failed or killed run from what failed: failed and skipped steps run "
              "again, completed ones are kept. Answers {run, retry_count, reset, kept, "
              "operation}.", "write", _run("retry"), {"run_id": _RUN}, ("run_id",)),
    AdminTool("schedules_list", "Schedules",
              "Every schedule with its next and last fire, paused and quarantined state and "
              "skipped-fire count.", "read", _get("/schedules")),
    AdminTool("schedule_get", "One schedule",
              "One schedule with its next fires, recent fires and rollup tally.", "read",
              lambda a: ApiCall("GET", f"/schedules/{_seg(a['name'])}"), {"name": _SCHED},
              ("name",)),
    AdminTool("schedule_pause", "Pause a schedule",
              "Stop a schedule firing (running runs go on). Answers {name, paused}.", "write",
              _sched("pause"), {"name": _SCHED}, ("name",)),
    AdminTool("schedule_resume", "Resume a schedule",
              "Let a paused schedule fire again (the paused time is not caught up).", "write",
              _sched("resume"), {"name": _SCHED}, ("name",)),
    AdminTool("schedule_trigger", "Trigger a schedule",
              "Fire a schedule now (refused while paused or disabled in the configuration). "
              "Answers {name, triggered_at}.", "write", _sched("trigger"), {"name": _SCHED},
              ("name",)),
    AdminTool("schedule_release", "Release a quarantined schedule",
              "Lift a schedule's quarantine (its schedule_quarantined incident recovers).",
              "write", _sched("release"), {"name": _SCHED}, ("name",)),
)

JOBS: tuple[AdminTool, ...] = (
    AdminTool("jobs_list", "Jobs",
              "Outbox jobs across the job tables, newest activity first, with queue totals and "
              "a per-table breakdown.", "read",
              _get("/jobs", "status", "table", "origin", "q", "limit"),
              {"status": {"enum": ["pending", "processing", "completed", "failed", "stalled"]},
               "table": _STR, "origin": {"enum": ["schedule", "workflow", "app"]}, "q": _STR,
               "limit": _LIMIT}),
    AdminTool("job_get", "One job",
              "One job: status, path, payload, result, errors, retry budget, assignee, lease, "
              "origin.", "read", lambda a: ApiCall("GET", f"/jobs/{_seg(a['job_id'])}"),
              {"job_id": _STR}, ("job_id",)),
    AdminTool("job_kill", "Kill a job", "Kill a job across the cluster (the SSP's verdict).",
              "destructive", lambda a: ApiCall("POST", f"/jobs/{_seg(a['job_id'])}/kill"),
              {"job_id": _STR}, ("job_id",)),
    AdminTool("job_retry", "Retry a job", "Retry a failed job (the SSP's verdict).", "write",
              lambda a: ApiCall("POST", f"/jobs/{_seg(a['job_id'])}/retry"),
              {"job_id": _STR}, ("job_id",)),
    AdminTool("jobs_clear", "Clear finished jobs",
              "Delete terminal (completed, failed) jobs of one job table or of all: one batch "
              "of 1000, or every one with all=true. Answers {cleared, total, more}.",
              "destructive",
              lambda a: ApiCall("POST", "/jobs/clear",
                                body={k: a[k] for k in ("table", "all") if k in a}),
              {"table": _STR, "all": {"type": "boolean"}}),
)

RESTART: tuple[AdminTool, ...] = (
    AdminTool("ssp_restart", "Restart an SSP",
              "Restart one SSP: restart (warm), clean (wipes its snapshot and arena) or reload "
              "(its circuit). Answers the operation; operations_list shows its completion.",
              "destructive",
              lambda a: ApiCall("POST", f"/ssps/{_seg(a['ssp_id'])}/restart",
                                body={"mode": a["mode"]}),
              {"ssp_id": _STR, "mode": {"enum": ["restart", "clean", "reload"]}},
              ("ssp_id", "mode")),
    AdminTool("ssps_restart_all", "Restart every SSP",
              "Restart every SSP, one at a time (rolling, the default), each waited to Ready. "
              "Answers the operation with progress {done, total, current}.", "destructive",
              lambda a: ApiCall("POST", "/ssps/restart-all",
                                body={"mode": a["mode"], "rolling": a.get("rolling", True)}),
              {"mode": {"enum": ["restart", "clean"]}, "rolling": {"type": "boolean"}},
              ("mode",)),
    AdminTool("scheduler_restart", "Restart the scheduler",
              "restart (needs a supervisor), reclone (re-clone the replica, every SSP "
              "re-bootstraps) or rehash (recount the replica, then a drift check). Answers the "
              "operation.", "destructive",
              lambda a: ApiCall("POST", "/scheduler/restart", body={"mode": a["mode"]}),
              {"mode": {"enum": ["restart", "reclone", "rehash"]}}, ("mode",)),
    AdminTool("cloud_deployment", "Hosted deployment",
              "The deployment as the hosted platform sees it (only when linked).", "read",
              _get("/cloud/deployment")),
    AdminTool("cloud_restart", "Hosted restart",
              "Ask the hosted platform to restart roles (only when linked).", "destructive",
              lambda a: ApiCall("POST", "/cloud/restart",
                                body={k: a[k] for k in ("roles", "upgrade", "clean", "surreal")
                                      if k in a}),
              {"roles": {"type": "array", "items": {"type": "string", "maxLength": 50},
                         "maxItems": 10},
               "upgrade": {"type": "boolean"}, "clean": {"type": "boolean"},
               "surreal": {"type": "boolean"}}),
)

BACKUPS: tuple[AdminTool, ...] = (
    AdminTool("backups_list", "Backups",
              "The catalog in object storage, this scheduler's local registry, the restores, "
              "the schedule config and storage reachability; `held` names a failed restore "
              "that keeps the scheduler Restoring.", "read", _get("/backups")),
    AdminTool("backup_create", "Back up the database",
              "Export the main database (schema and every table's rows) to object storage. "
              "Answers {operation, backup_id}; operations_list shows its completion.", "write",
              lambda a: ApiCall("POST", "/backups",
                                body={"name": a["name"]} if a.get("name") else {}),
              {"name": {"type": "string", "minLength": 1, "maxLength": 200}}),
    AdminTool("backup_restore", "Restore a backup",
              "Replace the main database with a backup: stages queued, running, main_db "
              "(wiped and re-imported), replica (re-cloned; every SSP re-bootstraps), done. "
              "Only while the scheduler is Ready (or held by a failed restore). Answers "
              "{operation, restore_id}.", "destructive",
              lambda a: ApiCall("POST", f"/backups/{_seg(a['backup_id'])}/restore"),
              {"backup_id": _STR}, ("backup_id",)),
    AdminTool("backup_restore_status", "Restore status",
              "The latest restore of a backup: {cloud, local, stage}.", "read",
              lambda a: ApiCall("GET", f"/backups/{_seg(a['backup_id'])}/restore"),
              {"backup_id": _STR}, ("backup_id",)),
    AdminTool("backup_delete", "Delete a backup",
              "Soft-delete a backup in the catalog (only when linked to the hosted platform).",
              "destructive", lambda a: ApiCall("DELETE", f"/backups/{_seg(a['backup_id'])}"),
              {"backup_id": _STR}, ("backup_id",)),
    AdminTool("backups_configure", "Configure scheduled backups",
              "Scheduled backups: enabled, schedule, retention (only when linked to the hosted "
              "platform).", "write",
              lambda a: ApiCall("PUT", "/backups/config",
                                body={k: a[k] for k in ("enabled", "schedule", "retention")
                                      if k in a}),
              {"enabled": {"type": "boolean"}, "schedule": _STR,
               "retention": {"type": "integer", "minimum": 1, "maximum": 3650}}),
)

INCIDENTS: tuple[AdminTool, ...] = (
    AdminTool("incidents_list", "Incidents",
              "Incidents newest first (same data and filters as GET /admin/api/incidents).",
              "read", _get("/incidents", "component", "state", "severity", "since", "before",
                           "offset", "limit"),
              {"component": _STR,
               "state": {"enum": ["open", "recovered", "interrupted", "failed", "recorded"]},
               "severity": {"enum": ["warning", "info"]},
               "since": {"type": "integer", "minimum": 0, "description": "epoch ms"},
               "before": {"type": "integer", "minimum": 0, "description": "epoch ms"},
               "offset": {"type": "integer", "minimum": 0},
               "limit": {"type": "integer", "minimum": 1, "maximum": 200}}),
    AdminTool("incident_get", "One incident", "One incident with its events.", "read",
              lambda a: ApiCall("GET", f"/incidents/{_seg(a['incident_id'])}"),
              {"incident_id": _STR}, ("incident_id",)),
)


def _from_spec(spec: dict[str, Any]) -> AdminTool:
    """A tool described as plain data by a system's own module (``pooltools``)."""
    route = spec["request"]
    return AdminTool(spec["name"], spec["title"], spec["description"], spec["kind"],
                     lambda a: ApiCall(*route(a)), spec.get("properties", {}),
                     tuple(spec.get("required", ())))


POOLS: tuple[AdminTool, ...] = tuple(_from_spec(s) for s in POOL_TOOL_SPECS)

#: every area in tools/list order; a new system adds its tuple here
AREAS: tuple[tuple[AdminTool, ...], ...] = (CLUSTER, LIVE, WORKFLOWS, JOBS, RESTART, BACKUPS,
                                            INCIDENTS, POOLS)
TOOLS: tuple[AdminTool, ...] = tuple(t for area in AREAS for t in area)
_BY_NAME = {t.name: t for t in TOOLS}
assert len(_BY_NAME) == len(TOOLS), "tool names must be unique"


def tool_named(name: str) -> AdminTool | None:
    return _BY_NAME.get(name)
