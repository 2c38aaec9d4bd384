"""Deployments as records: admission, listing, cancel, rollback, restart, scale, the logs of
deployments and instances, and the scheduler's link credential. Nothing here runs a process:
the reconcile worker (``cloud.reconcile``) takes the records this module writes.

A deployment: ``version`` (per project, 1, 2, ...), ``spec`` (what runs: the number of SSPs,
an external database URL or none, the repo commit, restart flags) and ``spec_hash`` (the spec
plus the fingerprints of the project's environment values, never the values), ``trigger``
(``api``, ``repo_link``, ``rollback``, ``restart``), ``status`` (``queued``, ``building``,
``deploying``, ``running``, ``failed``, ``cancelled``, ``superseded``), ``progress``,
``started_by``, timestamps, ``error`` with the last log lines.

Admission is one transaction per deployment, optimistic: the next version is read, then
written under a unique index on (project, version), so two racing admissions cannot both
take it; the loser reads again (and then sees the winner: an equal spec is answered with it,
a full queue is refused). Rules: at most one deployment of a project is in flight
(``building``/``deploying``); others wait ``queued`` in version order, at most
``MAX_QUEUED`` (429 ``queue_full``); a deploy whose spec hash equals a deployment that is
queued, in flight or running answers that deployment (``existing: true``) instead of a
second one (idempotent; rollback and restart always make a new one).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from datetime import datetime
from typing import Any

from cloud.errors import BadRequest, CloudError, Conflict, NotFound, TooMany
from cloud.store import Duplicate, Store, guard, new_id, now, rid, row_id

log = logging.getLogger("cloud.deployments")

__all__ = ["ACTIVE", "IN_FLIGHT", "MAX_QUEUED", "Deployments", "level_of", "spec_hash"]

IN_FLIGHT = ("building", "deploying")
ACTIVE = ("queued", *IN_FLIGHT)
TERMINAL = ("failed", "cancelled", "superseded")
MAX_QUEUED = 3
MAX_SSPS = 8
LOG_LIMIT_MAX = 500
ROLES = ("db", "scheduler", "ssps")
_LEVEL = re.compile(r"\b(CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG)\b")
LEVELS = ("debug", "info", "warning", "error")


def level_of(text: str, stream: str) -> str:
    """The level a log line says it has; stderr without one counts as a warning."""
    m = _LEVEL.search(text[:200])
    if m is None:
        return "warning" if stream == "stderr" else "info"
    word = m.group(1)
    return {"CRITICAL": "error", "WARN": "warning"}.get(word, word.lower())


def spec_hash(spec: dict[str, Any], env_fps: dict[str, str]) -> str:
    doc = json.dumps({"spec": spec, "env": sorted(env_fps.items())}, sort_keys=True,
                     separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()


def link_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _iso(v: Any) -> Any:
    return v.isoformat() if isinstance(v, datetime) else v


def public(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("version", "spec_hash", "trigger", "status", "progress", "started_by",
            "created_at", "started_at", "finished_at", "error", "rollback_of", "spec",
            "cancel_requested", "degraded", "images")
    out: dict[str, Any] = {"id": row_id(row), **{k: row.get(k) for k in keys}}
    spec = dict(row.get("spec") or {})
    if spec.get("database_url"):
        spec["database_url"] = "(external)"  # may carry credentials: never shown
    out["spec"] = spec
    return out


def instance_public(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("deployment", "role", "kind", "status", "executor", "pid", "url", "started_at",
            "healthy_at", "stopped_at", "exit_code", "error", "lines_dropped")
    return {"id": row_id(row), **{k: row.get(k) for k in keys}}


class Deployments:
    def __init__(self, store: Store, values: Any, fingerprints: Any) -> None:
        self.store = store
        self.values = values
        self.fingerprints = fingerprints

    # ------------------------------------------------------------------ reads
    async def find(self, project: dict[str, Any], ref: Any) -> dict[str, Any]:
        """A deployment of ``project`` by id or version number."""
        if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
            row = await self.store.one(
                "SELECT * FROM deployment WHERE project = $p AND version = $v LIMIT 1",
                {"p": project["id"], "v": int(ref)}, read=True)
            row = row[0] if row else None
        elif isinstance(ref, str) and 0 < len(ref) <= 40:
            row = await self.store.get("deployment", ref)
        else:
            raise BadRequest("deployment: a deployment id (dep_...) or version number")
        if not row or row.get("project") != project["id"]:
            raise NotFound(f"no deployment {str(ref)[:40]} in project {project['slug']}")
        return dict(row)

    async def latest(self, project_id: str, statuses: tuple[str, ...]) -> dict[str, Any] | None:
        rows = await self.store.one(
            "SELECT * FROM deployment WHERE project = $p AND status IN $s "
            "ORDER BY version DESC LIMIT 1", {"p": project_id, "s": list(statuses)}, read=True)
        return dict(rows[0]) if rows else None

    async def listing(self, project: dict[str, Any], status: str | None, before: int | None,
                      limit: int) -> tuple[list[dict[str, Any]], int | None]:
        cond = " AND status = $s" if status else ""
        rows = await self.store.one(
            f"SELECT * FROM deployment WHERE project = $p{cond} AND version < $before "
            "ORDER BY version DESC LIMIT $n",
            {"p": project["id"], "s": status, "before": before or 10**12, "n": limit + 1},
            read=True) or []
        return ([public(r) for r in rows[:limit]],
                rows[limit - 1]["version"] if len(rows) > limit else None)

    async def instances(self, deployment_id: str) -> list[dict[str, Any]]:
        rows = await self.store.one(
            "SELECT * FROM instance WHERE deployment = $d "
            "ORDER BY started_at", {"d": deployment_id}, read=True) or []
        return [instance_public(r) for r in rows]

    async def detail(self, project: dict[str, Any], ref: Any) -> dict[str, Any]:
        row = await self.find(project, ref)
        return {"deployment": public(row), "instances": await self.instances(row_id(row))}

    # ------------------------------------------------------------------ admission
    async def _env_fps(self, project: dict[str, Any]) -> dict[str, str]:
        scoped = await self.values.scope_values(project, "env", "production")
        vault = await self.values.scope_values(project, "vault", "production")
        out = {f"env:{app}:{k}": s.fingerprint for app, kv in scoped.items()
               for k, s in kv.items()}
        out.update({f"vault:{k}": s.fingerprint for kv in vault.values() for k, s in kv.items()})
        return out

    async def base_spec(self, project: dict[str, Any]) -> dict[str, Any]:
        """The spec of the latest deployment that ran (or was asked for), else defaults."""
        last = await self.latest(project["id"], ("running", *ACTIVE, "superseded"))
        spec: dict[str, Any] = {"ssps": 1, "database_url": None, "commit": None}
        if last is not None:
            spec.update({k: v for k, v in (last.get("spec") or {}).items()
                         if k in ("ssps", "database_url", "commit", "link")})
        return spec

    async def admit(self, project: dict[str, Any], spec: dict[str, Any], trigger: str,
                    started_by: str, extra: list[tuple[str, dict[str, Any]]], *,
                    idempotent: bool = True, rollback_of: str | None = None
                    ) -> dict[str, Any]:
        """Admit one deployment (see the module doc); returns ``{deployment, existing}``."""
        fps = await self._env_fps(project)
        h = spec_hash(spec, fps)
        for _ in range(8):
            rows = await self.store.one(
                "SELECT * FROM deployment WHERE project = $p AND status IN $s "
                "ORDER BY version DESC", {"p": project["id"],
                                          "s": [*ACTIVE, "running"]}, read=True) or []
            if idempotent:
                same = [r for r in rows if r.get("spec_hash") == h]
                if same:
                    return {"deployment": public(same[0]), "existing": True}
            queued = sum(1 for r in rows if r["status"] == "queued")
            if queued >= MAX_QUEUED:
                raise TooMany(f"project {project['slug']} already has {queued} deployments "
                              f"queued (at most {MAX_QUEUED}); cancel one or wait",
                              code="queue_full")
            top = await self.store.one(
                "SELECT VALUE version FROM deployment WHERE project = $p "
                "ORDER BY version DESC LIMIT 1", {"p": project["id"]}, read=True) or []
            version = (top[0] if top else 0) + 1
            did = new_id("dep")
            at = now()
            row = {"tenant": project["tenant"], "project": project["id"],
                   "project_slug": project["slug"], "version": version, "spec": spec,
                   "spec_hash": h, "trigger": trigger, "status": "queued",
                   "progress": {"done": 0, "total": 0, "step": "queued"},
                   "started_by": started_by, "created_at": at, "started_at": None,
                   "finished_at": None, "error": None, "rollback_of": rollback_of,
                   "cancel_requested": False, "attempts": 0}
            try:
                await self.store.tx([
                    ("CREATE $id CONTENT $c RETURN NONE", {"id": rid("deployment", did),
                                                           "c": row}),
                    (guard("array::len(SELECT VALUE id FROM deployment WHERE project = $p "
                           "AND status = 'queued') > $max", 429,
                           f"project {project['slug']}: the deployment queue is full"),
                     {"p": project["id"], "max": MAX_QUEUED}),
                    *extra,
                ])
            except Duplicate:
                continue  # another admission took this version: read again
            log.info("deployment %s v%d of %s admitted (%s)", did, version, project["slug"],
                     trigger)
            return {"deployment": public({**row, "id": did}), "existing": False}
        raise Conflict("too many concurrent deployments of this project; try again",
                       code="busy")

    async def deploy(self, project: dict[str, Any], args: dict[str, Any], who: str,
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        spec = await self.base_spec(project)
        if args.get("ssps") is not None:
            spec["ssps"] = check_ssps(args["ssps"])
        if "database_url" in args:
            spec["database_url"] = check_db_url(args["database_url"])
        if args.get("commit") is not None:
            spec["commit"] = args["commit"]
        return await self.admit(project, spec, args.get("trigger", "api"), who, extra)

    async def scale(self, project: dict[str, Any], ssps: Any, who: str,
                    extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        spec = await self.base_spec(project)
        spec["ssps"] = check_ssps(ssps)
        return await self.admit(project, spec, "api", who, extra)

    async def rollback(self, project: dict[str, Any], ref: Any, who: str,
                       extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        target = await self.find(project, ref)
        if target.get("healthy_at") is None:
            raise Conflict(f"deployment v{target['version']} never ran ({target['status']}); "
                           "roll back to one that did", code="never_ran")
        spec = {k: v for k, v in (target.get("spec") or {}).items() if k != "restart"}
        return await self.admit(project, spec, "rollback", who, extra, idempotent=False,
                                rollback_of=row_id(target))

    async def restart(self, project: dict[str, Any], opts: dict[str, Any], who: str,
                      extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        current = await self.latest(project["id"], ("running",))
        if current is None:
            raise Conflict(f"project {project['slug']} has no running deployment to restart",
                           code="not_running")
        roles = opts.get("roles") or []
        if not isinstance(roles, list) or any(r not in ROLES for r in roles):
            raise BadRequest(f"roles: a list of {', '.join(ROLES)} (empty: scheduler and SSPs)")
        chosen: list[str] = sorted(set(roles)) or ["scheduler", "ssps"]
        if opts.get("surreal"):
            chosen = sorted({*chosen, "db"})
        if opts.get("clean"):
            chosen = sorted({*chosen, "scheduler"})
        restart: dict[str, Any] = {"roles": chosen,
                   "upgrade": bool(opts.get("upgrade")), "clean": bool(opts.get("clean")),
                   "surreal": bool(opts.get("surreal")), "at": now().isoformat()}
        spec = {**{k: v for k, v in (current.get("spec") or {}).items() if k != "restart"},
                "restart": restart}
        return await self.admit(project, spec, "restart", who, extra, idempotent=False)

    async def cancel(self, project: dict[str, Any], ref: Any,
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        row = await self.find(project, ref)
        did = row_id(row)
        if row["status"] == "queued":
            got = await self.store.tx([
                ("UPDATE $id SET status = 'cancelled', finished_at = $at, "
                 "progress.step = 'cancelled' WHERE status = 'queued' RETURN VALUE id",
                 {"id": rid("deployment", did), "at": now()}),
                *extra])
            if not got or not got[0]:  # the worker took it meanwhile: cancel in flight
                return await self.cancel(project, did, extra)
            return {"deployment": public({**row, "status": "cancelled"}), "cancelled": True}
        if row["status"] in IN_FLIGHT:
            await self.store.tx([("UPDATE $id SET cancel_requested = true RETURN NONE",
                                  {"id": rid("deployment", did)}), *extra])
            return {"deployment": public({**row, "cancel_requested": True}),
                    "cancelled": False, "note": "cancel requested: the worker stops it "
                    "before its next role; the previous deployment keeps serving"}
        raise Conflict(f"deployment v{row['version']} is {row['status']}; only a queued or "
                       "in-flight deployment can be cancelled", code="not_cancellable")

    # ------------------------------------------------------------------ logs
    async def logs(self, project: dict[str, Any], ref: Any, instance: str | None,
                   a: dict[str, Any], after: int | None, limit: int) -> dict[str, Any]:
        """Lines of a deployment (its deploy log and its instances), oldest first from
        ``after``; bounded by ``limit`` (at most LOG_LIMIT_MAX)."""
        row = await self.find(project, ref)
        did = row_id(row)
        conds = ["deployment = $d"]
        vars: dict[str, Any] = {"d": did, "n": limit + 1}
        if instance is not None:
            conds.append("(instance = $i OR role = $i)")
            vars["i"] = instance
        if a.get("level"):
            lv = a["level"]
            if lv not in LEVELS:
                raise BadRequest(f"level: one of {', '.join(LEVELS)}")
            conds.append("level IN $lv")
            vars["lv"] = list(LEVELS[LEVELS.index(lv):])
        if a.get("q"):
            conds.append("string::contains(string::lowercase(text), $q)")
            vars["q"] = str(a["q"]).lower()
        for name, op in (("since", ">="), ("until", "<=")):
            if a.get(name):
                try:
                    vars[name] = datetime.fromisoformat(str(a[name]).replace("Z", "+00:00"))
                except ValueError:
                    raise BadRequest(f"{name}: an ISO 8601 time") from None
                conds.append(f"at {op} ${name}")
        if after is not None:
            conds.append("seq > $after")
            vars["after"] = int(after)
        rows = await self.store.one(
            f"SELECT role, instance, stream, level, text, at, seq FROM log_line WHERE "
            f"{' AND '.join(conds)} ORDER BY seq LIMIT $n", vars, read=True) or []
        dropped = await self.store.one(
            "SELECT VALUE lines_dropped FROM instance WHERE deployment = $d", {"d": did},
            read=True) or []
        page = rows[:limit]
        more = len(rows) > limit
        return {"deployment": {"id": did, "version": row["version"], "status": row["status"]},
                "lines": [{k: _iso(r.get(k)) for k in ("at", "role", "level", "stream", "text")}
                          for r in page],
                "truncated": more or any(bool(d) for d in dropped),
                "more": more, "next": page[-1]["seq"] if page else after,
                "lines_dropped": sum(int(d or 0) for d in dropped)}

    # ------------------------------------------------------------------ the cloud link
    async def link_auth(self, slug: Any, secret: str | None) -> tuple[dict[str, Any],
                                                                     dict[str, Any]]:
        """The project and deployment a scheduler's link credential belongs to; raises
        :class:`LinkRefused` otherwise (one answer for every failure)."""
        if not isinstance(slug, str) or not 0 < len(slug) <= 60 or not secret:
            raise LinkRefused()
        rows = await self.store.one(
            "SELECT * FROM deployment WHERE project_slug = $s AND status IN $st "
            "AND link_hash IS NOT NONE", {"s": slug, "st": ["deploying", "running"]},
            read=True) or []
        want = link_hash(secret)
        found = None
        for r in rows:  # every row compared: the time does not say which one matched
            if hmac.compare_digest(str(r["link_hash"]), want):
                found = r
        if found is None:
            raise LinkRefused()
        project = await self.store.get("project", found["project"])
        if project is None or project.get("deleted_at") is not None:
            raise LinkRefused()
        return {**project, "id": row_id(project)}, dict(found)


class LinkRefused(CloudError):
    status = 401
    code = "cloud_auth"

    def __init__(self) -> None:
        super().__init__("the platform does not accept this scheduler's link credential "
                         "(SVC_CLOUD_PROJECT and SVC_AUTH_SECRET of a deployed stack)")


def check_ssps(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SSPS:
        raise BadRequest(f"ssps: an integer from 1 to {MAX_SSPS}")
    return v


def check_db_url(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str) or not re.match(r"^(wss?|https?)://[^\s]{1,400}$", v):
        raise BadRequest("database_url: a SurrealDB URL (ws://, wss://, http://, https://), "
                         "or null for a database host of the deployment's own")
    return v
