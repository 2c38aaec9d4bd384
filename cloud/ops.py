"""Every operation of the control plane (``cloud.api.Op``): one entry per MCP tool and REST
route, in ``tools/list`` order. The handlers are thin: arguments to a service call, its
answer back. Descriptions are short on purpose: ``tools/list`` for an ``mcp:full`` token is
counted in a test (an agent pays for every word of it on every session).

Part 2 of the platform (deployments, logs, backups) adds its areas as tuples to ``OPS``.
"""

from __future__ import annotations

from typing import Any

from cloud.api import Ctx, Op
from cloud.errors import BadRequest, NotFound
from cloud.values import check_key, check_scope

__all__ = ["OPS", "op_named"]

_STR = {"type": "string", "minLength": 1, "maxLength": 200}
_NAME = {"type": "string", "minLength": 1, "maxLength": 100}
_SLUG = {"type": "string", "minLength": 3, "maxLength": 40,
         "description": "lowercase letters, digits, hyphens"}
_ENV = {"type": "string", "maxLength": 32, "description": "environment (default production)"}
_APP = {"type": ["string", "null"], "maxLength": 63,
        "description": "app name; omit for every app"}
_KEY = {"type": "string", "minLength": 1, "maxLength": 128, "description": "variable name"}
_ROLE = {"enum": ["viewer", "member", "admin", "owner"]}


# ---------------------------------------------------------------------- tenants
async def tenants_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    usable = [m for m in ctx.principal.usable() if ctx.after is None or m.slug > ctx.after]
    usable.sort(key=lambda m: m.slug)
    page = usable[:ctx.limit]
    nxt = page[-1].slug if len(usable) > ctx.limit else None
    return ctx.page([m.public() for m in page], nxt,
                    personal_tenant=ctx.principal.personal_tenant)


async def tenant_get(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    return await ctx.services.tenants.get(ctx.tenant)


async def tenant_create(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return await ctx.services.tenants.create(ctx.principal, a["slug"], a.get("name"))


async def tenant_update(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    return await ctx.services.tenants.update(ctx.tenant, a["name"], ctx.audit())


async def tenant_delete(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    return await ctx.services.tenants.delete(ctx.tenant, ctx.audit())


async def members_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    items, nxt = await ctx.services.tenants.members(ctx.tenant, ctx.after, ctx.limit)
    return ctx.page(items, nxt)


async def member_add(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    return await ctx.services.tenants.add_member(
        ctx.tenant, a["email"], a.get("role"),
        ctx.audit(target=a["email"], detail={"role": a.get("role") or "member"}))


async def member_update(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    return await ctx.services.tenants.update_member(
        ctx.tenant, a["user"], a["role"], ctx.audit(target=a["user"], detail={"role": a["role"]}))


async def member_remove(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    return await ctx.services.tenants.remove_member(ctx.tenant, a["user"],
                                                     ctx.audit(target=a["user"]))


async def audit_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    items, nxt = await ctx.services.audit.listing(ctx.tenant.tenant_id, a.get("action"),
                                               ctx.after, ctx.limit)
    return ctx.page(items, nxt)


# ---------------------------------------------------------------------- projects
async def projects_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    items, nxt = await ctx.services.projects.listing(ctx.tenant, ctx.after, ctx.limit,
                                                  bool(a.get("deleted")))
    return ctx.page(items, nxt)


async def project_get(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    from cloud.projects import public

    assert ctx.project is not None
    return {"project": public(ctx.project)}


async def project_create(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    out = await ctx.services.projects.create(ctx.tenant, a["slug"], a.get("name"),
                                             ctx.principal.email,
                                             ctx.audit(target=a["slug"]))
    return {"project": out}


async def project_update(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    return {"project": await ctx.services.projects.update(ctx.project, a["name"],
                                                          ctx.audit())}


async def project_delete(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    return {"project": await ctx.services.projects.delete(ctx.project, ctx.audit())}


async def project_restore(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    return {"project": await ctx.services.projects.restore(ctx.project, ctx.audit())}


async def project_transfer(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    # audited in both tenants, with the move
    from cloud.audit import entry

    dest = [m for m in ctx.principal.usable() if a["to_tenant_id"] in (m.tenant_id, m.slug)]
    extra = ctx.audit(detail={"to": a["to_tenant_id"]})
    if dest:
        extra.append(entry(ctx.principal, dest[0].tenant_id, "project_transfer_in",
                           project=ctx.project["id"],
                           detail={"from": ctx.project["tenant"]}))
    out = await ctx.services.projects.transfer(ctx.principal, ctx.project, a["to_tenant_id"],
                                               extra)
    return {"tenant": out.pop("tenant"), "project": out}


# ---------------------------------------------------------------------- env and vault
def _scope(a: dict[str, Any], kind: str) -> tuple[str, str]:
    return check_scope(a.get("environment"), a.get("app"), kind)


async def env_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, app = _scope(a, "env")
    items, nxt = await ctx.services.values.listing(ctx.project, "env", env, app, ctx.after,
                                                ctx.limit)
    return ctx.page(items, nxt, environment=env, app=app or None)


async def env_versions(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, app = _scope(a, "env")
    key = check_key(a["key"])
    items, nxt = await ctx.services.values.versions(ctx.project, "env", env, app, key,
                                                    ctx.after, ctx.limit)
    return ctx.page(items, nxt, key=key, environment=env, app=app or None)


async def env_set(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, app = _scope(a, "env")
    vars_ = a.get("vars", {})
    return await ctx.services.values.set(
        ctx.project, "env", env, app, vars_, replace=bool(a.get("replace")),
        actor=ctx.principal.email,
        extra=ctx.audit(detail={"environment": env, "app": app or None,
                                "keys": sorted(vars_)[:100] if isinstance(vars_, dict) else [],
                                "replace": bool(a.get("replace"))}))


async def env_delete(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, app = _scope(a, "env")
    key = check_key(a["key"])
    out = await ctx.services.values.set(ctx.project, "env", env, app, {key: None},
                                        replace=False, actor=ctx.principal.email,
                                        extra=ctx.audit(target=key,
                                                        detail={"environment": env}))
    if not out["removed"]:
        raise NotFound(f"key: {key} is not set in {env}" + (f"/{app}" if app else ""))
    return out


async def vault_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, _ = _scope(a, "vault")
    items, nxt = await ctx.services.values.listing(ctx.project, "vault", env, "", ctx.after,
                                                ctx.limit)
    return ctx.page(items, nxt, environment=env)


async def vault_get(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, _ = _scope(a, "vault")
    return {"secret": await ctx.services.values.get(ctx.project, "vault", env, "",
                                                    check_key(a["key"]))}


async def vault_set(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, _ = _scope(a, "vault")
    key = check_key(a["key"])
    return await ctx.services.values.set(ctx.project, "vault", env, "", {key: a["value"]},
                                         replace=False, actor=ctx.principal.email,
                                         extra=ctx.audit(target=key,
                                                         detail={"environment": env}))


async def vault_generate(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, _ = _scope(a, "vault")
    key = check_key(a["key"])
    value = ctx.services.values.generate(a.get("length"), a.get("charset"))
    out = await ctx.services.values.set(
        ctx.project, "vault", env, "", {key: value}, replace=False,
        actor=ctx.principal.email, generated=True,
        extra=ctx.audit(target=key, detail={"environment": env, "generated": True}))
    assert ctx.project is not None
    fp = ctx.services.fingerprints.of(ctx.project["tenant"], value)
    return {**out, "secret": {"key": key, "fingerprint": fp, "generated": True,
                              "version": out["versions"].get(key)}}


async def vault_delete(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    env, _ = _scope(a, "vault")
    key = check_key(a["key"])
    out = await ctx.services.values.set(ctx.project, "vault", env, "", {key: None},
                                        replace=False, actor=ctx.principal.email,
                                        extra=ctx.audit(target=key,
                                                        detail={"environment": env}))
    if not out["removed"]:
        raise NotFound(f"key: {key} is not in the vault of {env}")
    return out


# ---------------------------------------------------------------------- domains and links
async def domains_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    items, nxt = await ctx.services.domains.listing(ctx.project, ctx.after, ctx.limit)
    return ctx.page(items, nxt)


async def domain_add(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return {"domain": await ctx.services.domains.add(ctx.project, a["hostname"],
                                                     ctx.audit(target=a["hostname"]))}


async def domain_verify(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return {"domain": await ctx.services.domains.verify(ctx.project, a["hostname"],
                                                        ctx.audit(target=a["hostname"]))}


async def domain_remove(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return {"domain": await ctx.services.domains.remove(ctx.project, a["hostname"],
                                                        ctx.audit(target=a["hostname"]))}


async def links_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    items, nxt = await ctx.services.links.listing(ctx.project, ctx.after, ctx.limit)
    return ctx.page(items, nxt)


async def link_create(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return {"link": await ctx.services.links.create(
        ctx.project, a["url"], a.get("branch"), a.get("path"),
        ctx.audit(detail={"url": a["url"], "branch": a.get("branch") or "main"}))}


async def link_check(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return {"link": await ctx.services.links.check_by_id(ctx.project, a["link_id"], [])}


async def link_commits(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    items, nxt = await ctx.services.links.commits(ctx.project, a["link_id"], ctx.after,
                                                  ctx.limit)
    return ctx.page(items, nxt, link_id=a["link_id"])


async def link_delete(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return {"link": await ctx.services.links.delete(ctx.project, a["link_id"],
                                                    ctx.audit(target=a["link_id"]))}


# ---------------------------------------------------------------------- deployments and logs
async def deployments_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    items, nxt = await ctx.services.deployments.listing(ctx.project, a.get("status"),
                                                        ctx.after, ctx.limit)
    return ctx.page(items, nxt)


async def deployment_get(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return await ctx.services.deployments.detail(ctx.project, a["deployment"])


async def deployment_create(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    args = {k: a[k] for k in ("ssps", "database_url") if k in a}
    return await ctx.services.deployments.deploy(
        ctx.project, args, ctx.principal.email,
        ctx.audit(detail={k: v for k, v in args.items() if k != "database_url"}))


async def deployment_cancel(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return await ctx.services.deployments.cancel(ctx.project, a["deployment"],
                                                 ctx.audit(target=str(a["deployment"])))


async def deployment_rollback(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return await ctx.services.deployments.rollback(ctx.project, a["deployment"],
                                                   ctx.principal.email,
                                                   ctx.audit(target=str(a["deployment"])))


async def deployment_restart(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    opts: dict[str, Any] = {k: a[k] for k in ("roles", "upgrade", "clean", "surreal") if k in a}
    return await ctx.services.deployments.restart(ctx.project, opts, ctx.principal.email,
                                                  ctx.audit(detail=opts))


async def deployment_scale(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return await ctx.services.deployments.scale(ctx.project, a["ssps"], ctx.principal.email,
                                                 ctx.audit(detail={"ssps": a["ssps"]}))


async def _logs(ctx: Ctx, a: dict[str, Any], instance: str | None) -> dict[str, Any]:
    from cloud.deployments import LOG_LIMIT_MAX

    limit = int(a.get("limit", 100))
    if not 1 <= limit <= LOG_LIMIT_MAX:
        raise BadRequest(f"limit: from 1 to {LOG_LIMIT_MAX}")
    filters = {k: a.get(k) for k in ("deployment", "level", "q", "since", "until",
                                      "instance")}
    list_id = f"logs|{ctx.project['id'] if ctx.project else ''}|{instance}|{sorted(filters.items())}"
    after = ctx.services.cursors.decode(list_id, a["cursor"]) if a.get("cursor") else None
    out = await ctx.services.deployments.logs(ctx.project, a["deployment"], instance, a,
                                              after, limit)
    nxt = out.pop("next")
    out["next_cursor"] = ctx.services.cursors.encode(list_id, nxt) if nxt is not None else None
    return out


async def deployment_logs(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return await _logs(ctx, a, a.get("instance"))


async def backups_list(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    got = await ctx.services.backups.call(ctx.project, "GET", "/backups")
    return {"backups": got}


async def backup_create(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    body = {"name": a["name"]} if a.get("name") else {}
    got = await ctx.services.backups.call(ctx.project, "POST", "/backups", body)
    await ctx.services.store.tx(ctx.audit(detail=body))
    return dict(got)


async def backup_restore(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    fwd = ctx.services.backups
    got = await fwd.call(ctx.project, "POST", fwd.backup_path(a["backup_id"]) + "/restore", {})
    await ctx.services.store.tx(ctx.audit(target=a["backup_id"]))
    return dict(got)


async def backup_restore_status(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    fwd = ctx.services.backups
    return dict(await fwd.call(ctx.project, "GET",
                               fwd.backup_path(a["backup_id"]) + "/restore"))


async def backup_delete(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.project is not None
    fwd = ctx.services.backups
    got = await fwd.call(ctx.project, "DELETE", fwd.backup_path(a["backup_id"]))
    await ctx.services.store.tx(ctx.audit(target=a["backup_id"]))
    return dict(got)


async def backups_config_get(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    return {"config": await ctx.services.backup_config.get(ctx.project),
            "last_run": await ctx.services.backup_config.last_run(ctx.project)}


async def backups_configure(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {k: a[k] for k in ("enabled", "schedule", "retention") if k in a}
    return {"config": await ctx.services.backup_config.set(
        ctx.project, body, ctx.principal.email, ctx.audit(detail=body))}


# ---------------------------------------------------------------------- billing
async def usage_get(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    out = await ctx.services.usage.report(
        ctx.tenant.tenant_id, ctx.project["id"] if ctx.project else None, a.get("since"),
        a.get("until"), ctx.after, ctx.limit)
    nxt = out.pop("next")
    return ctx.page(out.pop("items"), nxt, **out)


async def limits_get(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    limits = await ctx.services.tenants.limits(ctx.tenant, ctx.services.default_limits)
    t = await ctx.services.tenants.get(ctx.tenant)
    return {"limits": limits, "in_use": {"projects": t["projects"], "members": t["members"]}}


async def limits_set(ctx: Ctx, a: dict[str, Any]) -> dict[str, Any]:
    assert ctx.tenant is not None
    defaults = ctx.services.default_limits
    given = a["limits"]
    for k, v in given.items():
        if k not in defaults:
            raise BadRequest(f"limits.{k[:60]}: unknown limit (known: {', '.join(defaults)})")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise BadRequest(f"limits.{k}: an integer >= 0, or null for the default")
    current = await ctx.services.tenants.limits(ctx.tenant, {})
    merged = {k: v for k, v in {**current, **given}.items() if v is not None}
    await ctx.services.tenants.set_limits(ctx.tenant, merged,
                                          ctx.audit(detail={"limits": merged}))
    return {"limits": {**defaults, **merged}}


def _read(name: str, desc: str, scope: str, path: str, handler: Any, **kw: Any) -> Op:
    return Op(name, desc, scope, "read", "GET", path, handler, **kw)


def _write(name: str, desc: str, scope: str, method: str, path: str, handler: Any,
           **kw: Any) -> Op:
    return Op(name, desc, scope, "write", method, path, handler, role=kw.pop("role", "member"),
              **kw)


def _destroy(name: str, desc: str, scope: str, path: str, handler: Any, **kw: Any) -> Op:
    return Op(name, desc, scope, "destructive", kw.pop("method", "DELETE"), path, handler,
              role=kw.pop("role", "admin"), **kw)


_P = "/v1/projects/{project}"
_T = "/v1/tenants/{tenant_id}"

PROJECTS: tuple[Op, ...] = (
    _read("projects_list", "List projects (deleted: true lists soft-deleted ones).",
          "projects:read", "/v1/projects", projects_list, props={"deleted": {"type": "boolean"}},
          paged=True),
    _read("project_get", "One project.", "projects:read", _P, project_get, project="required"),
    _write("project_create", "Create a project; its slug is global and fixed.",
           "projects:write", "POST", "/v1/projects", project_create,
           props={"slug": _SLUG, "name": _NAME}, required=("slug",)),
    _write("project_update", "Rename a project.", "projects:write", "PATCH", _P,
           project_update, project="required", props={"name": _NAME}, required=("name",)),
    _destroy("project_delete", "Soft-delete a project (restorable for the retention window).",
             "projects:write", _P, project_delete, project="required", confirm="project"),
    _write("project_restore", "Restore a soft-deleted project.", "projects:write", "POST",
           _P + "/restore", project_restore, project="deleted", role="admin"),
    _destroy("project_transfer", "Move a project to another tenant (admin in both).",
             "projects:write", _P + "/transfer", project_transfer, method="POST",
             project="required", confirm="project", props={"to_tenant_id": _STR},
             required=("to_tenant_id",)),
)

ENV: tuple[Op, ...] = (
    _read("env_list", "Environment variables of a project environment (and app).",
          "env:read", _P + "/env", env_list, project="required",
          props={"environment": _ENV, "app": _APP}, paged=True),
    _read("env_versions", "Versions of one variable, newest first.", "env:read",
          _P + "/env/{key}/versions", env_versions, project="required",
          props={"key": _KEY, "environment": _ENV, "app": _APP}, required=("key",),
          paged=True),
    _write("env_set", "Set variables by merging (null removes one); replace: true drops "
           "the others.", "env:write", "PATCH", _P + "/env", env_set, project="required",
           props={"environment": _ENV, "app": _APP, "replace": {"type": "boolean"},
                  "vars": {"type": "object", "maxProperties": 200,
                           "additionalProperties": {"type": ["string", "null"]}}},
           required=("vars",)),
    _destroy("env_delete", "Remove one variable.", "env:write", _P + "/env/{key}",
             env_delete, project="required", role="member", confirm="key",
             props={"key": _KEY, "environment": _ENV, "app": _APP}, required=("key",)),
)

VAULT: tuple[Op, ...] = (
    _read("vault_list", "Vault secrets of a project environment.", "vault:read",
          _P + "/vault", vault_list, project="required", props={"environment": _ENV},
          paged=True),
    _read("vault_get", "One vault secret.", "vault:read", _P + "/vault/{key}", vault_get,
          project="required", props={"key": _KEY, "environment": _ENV}, required=("key",)),
    _write("vault_set", "Store a vault secret.", "vault:write", "PUT", _P + "/vault/{key}",
           vault_set, project="required",
           props={"key": _KEY, "environment": _ENV,
                  "value": {"type": "string", "maxLength": 32768}},
           required=("key", "value")),
    _write("vault_generate", "Generate a random secret server-side; its value is never "
           "returned.", "vault:write", "POST", _P + "/vault/{key}/generate", vault_generate,
           project="required", reveal=False,
           props={"key": _KEY, "environment": _ENV,
                  "length": {"type": "integer", "minimum": 16, "maximum": 256},
                  "charset": {"enum": ["alnum", "hex", "base64url"]}},
           required=("key",)),
    _destroy("vault_delete", "Remove a vault secret.", "vault:write", _P + "/vault/{key}",
             vault_delete, project="required", role="member", confirm="key",
             props={"key": _KEY, "environment": _ENV}, required=("key",)),
)

DOMAINS: tuple[Op, ...] = (
    _read("domains_list", "Custom domains with state and the TXT record to publish.",
          "domains:read", _P + "/domains", domains_list, project="required", paged=True),
    _write("domain_add", "Add a custom domain (pending until verified).", "domains:write",
           "POST", _P + "/domains", domain_add, project="required",
           props={"hostname": {"type": "string", "maxLength": 253}}, required=("hostname",)),
    _write("domain_verify", "Check the domain's TXT record now.", "domains:write", "POST",
           _P + "/domains/{hostname}/verify", domain_verify, project="required",
           props={"hostname": {"type": "string", "maxLength": 253}}, required=("hostname",)),
    _destroy("domain_remove", "Remove a custom domain.", "domains:write",
             _P + "/domains/{hostname}", domain_remove, project="required", role="member",
             confirm="hostname", props={"hostname": {"type": "string", "maxLength": 253}},
             required=("hostname",)),
)

LINKS: tuple[Op, ...] = (
    _read("links_list", "Git repositories linked to a project.", "links:read",
          _P + "/links", links_list, project="required", paged=True),
    _read("link_commits", "Commits noticed on a link's branch, newest first.",
          "links:read", _P + "/links/{link_id}/commits", link_commits, project="required",
          props={"link_id": _STR}, required=("link_id",), paged=True),
    _write("link_create", "Link a git repository (url, branch, path in the repo).",
           "links:write", "POST", _P + "/links", link_create, project="required",
           props={"url": {"type": "string", "maxLength": 500},
                  "branch": {"type": "string", "maxLength": 200},
                  "path": {"type": "string", "maxLength": 200}}, required=("url",)),
    _write("link_check", "Read the branch head now; a new commit is recorded.",
           "links:write", "POST", _P + "/links/{link_id}/check", link_check,
           project="required", props={"link_id": _STR}, required=("link_id",)),
    _destroy("link_delete", "Unlink a repository.", "links:write", _P + "/links/{link_id}",
             link_delete, project="required", role="member", confirm="link_id",
             props={"link_id": _STR}, required=("link_id",)),
)

_DEP = {"type": "string", "minLength": 1, "maxLength": 40, "description": "id or version"}
_LOGQ = {"level": {"enum": ["debug", "info", "warning", "error"]},
         "q": {"type": "string", "maxLength": 200}, "since": {"type": "string"},
         "until": {"type": "string"}, "limit": {"type": "integer", "maximum": 500},
         "cursor": {"type": "string"}}

DEPLOYMENTS: tuple[Op, ...] = (
    _read("deployments_list", "Deployments of a project, newest first.", "deployments:read",
          _P + "/deployments", deployments_list, project="required", paged=True,
          props={"status": {"enum": ["queued", "building", "deploying", "running", "failed",
                                     "cancelled", "superseded"]}}),
    _read("deployment_get", "One deployment with its instances.", "deployments:read",
          _P + "/deployments/{deployment}", deployment_get, project="required",
          props={"deployment": _DEP}, required=("deployment",)),
    _write("deployment_create", "Deploy; an unchanged spec answers the existing one.", "deployments:write", "POST", _P + "/deployments",
           deployment_create, project="required",
           props={"ssps": {"type": "integer", "minimum": 1, "maximum": 8},
                  "database_url": {"type": ["string", "null"], "maxLength": 400}}),
    _write("deployment_cancel", "Cancel a queued or in-flight deployment.",
           "deployments:write", "POST", _P + "/deployments/{deployment}/cancel",
           deployment_cancel, project="required", props={"deployment": _DEP},
           required=("deployment",)),
    _write("deployment_rollback", "Redeploy an earlier deployment's spec.",
           "deployments:write", "POST", _P + "/deployments/{deployment}/rollback",
           deployment_rollback, project="required", props={"deployment": _DEP},
           required=("deployment",)),
    _write("deployment_restart", "Restart roles of the running deployment.",
           "deployments:write", "POST", _P + "/restart", deployment_restart,
           project="required",
           props={"roles": {"type": "array", "maxItems": 3,
                            "items": {"enum": ["db", "scheduler", "ssps"]}},
                  "upgrade": {"type": "boolean"}, "clean": {"type": "boolean"},
                  "surreal": {"type": "boolean"}}),
    _write("deployment_scale", "Set the number of SSPs.",
           "deployments:write", "POST", _P + "/scale", deployment_scale, project="required",
           props={"ssps": {"type": "integer", "minimum": 1, "maximum": 8}},
           required=("ssps",)),
)

LOGS: tuple[Op, ...] = (
    _read("deployment_logs", "A deployment's log lines, oldest first.", "logs:read", _P + "/deployments/{deployment}/logs",
          deployment_logs, project="required",
          props={"deployment": _DEP, "instance": {"type": "string", "description": "id or "
                                                  "role (ssp-1)"}, **_LOGQ},
          required=("deployment",)),
)

_BID = {"type": "string", "minLength": 1, "maxLength": 200}

BACKUPS: tuple[Op, ...] = (
    _read("backups_list", "Backups, restores and storage of the running deployment.",
          "backups:read", _P + "/backups", backups_list, project="required"),
    _write("backup_create", "Take a backup now (an operation).", "backups:write", "POST",
           _P + "/backups", backup_create, project="required",
           props={"name": {"type": "string", "maxLength": 100}}),
    _destroy("backup_restore", "Restore a backup over the project's data.", "backups:write",
             _P + "/backups/{backup_id}/restore", backup_restore, method="POST",
             project="required", confirm="backup_id", props={"backup_id": _BID},
             required=("backup_id",)),
    _read("backup_restore_status", "The latest restore of a backup.", "backups:read",
          _P + "/backups/{backup_id}/restore", backup_restore_status, project="required",
          props={"backup_id": _BID}, required=("backup_id",)),
    _destroy("backup_delete", "Soft-delete a backup.", "backups:write",
             _P + "/backups/{backup_id}", backup_delete, project="required",
             confirm="backup_id", props={"backup_id": _BID}, required=("backup_id",)),
    _read("backups_config_get", "Scheduled-backup settings.", "backups:read",
          _P + "/backups/config", backups_config_get, project="required"),
    _write("backups_configure", "Set scheduled backups (cron, retention days).", "backups:write", "PUT", _P + "/backups/config", backups_configure,
           project="required",
           props={"enabled": {"type": "boolean"}, "schedule": {"type": ["string", "null"]},
                  "retention": {"type": ["integer", "null"]}}),
)

TENANTS: tuple[Op, ...] = (
    _read("tenants_list", "Tenants this credential may use, with your role.",
          "tenants:read", "/v1/tenants", tenants_list, tenant=False, paged=True),
    _read("tenant_get", "One tenant with member and project counts.", "tenants:read", _T,
          tenant_get),
    _read("members_list", "Members of a tenant with their roles.", "tenants:read",
          _T + "/members", members_list, paged=True),
    _read("audit_list", "Audit entries of a tenant, newest first.", "tenants:read",
          _T + "/audit", audit_list, role="admin", props={"action": _STR}, paged=True),
    _write("tenant_create", "Create a team tenant; you become its owner.", "tenants:write",
           "POST", "/v1/tenants", tenant_create, tenant=False,
           props={"slug": _SLUG, "name": _NAME}, required=("slug",)),
    _write("tenant_update", "Rename a tenant.", "tenants:write", "PATCH", _T, tenant_update,
           role="admin", props={"name": _NAME}, required=("name",)),
    _destroy("tenant_delete", "Delete a team tenant without projects.", "tenants:write", _T,
             tenant_delete, role="owner", confirm="tenant"),
    _write("member_add", "Add a platform user to a team by e-mail.", "tenants:write", "POST",
           _T + "/members", member_add, role="admin",
           props={"email": {"type": "string", "maxLength": 254}, "role": _ROLE},
           required=("email",)),
    _write("member_update", "Change a member's role.", "tenants:write", "PATCH",
           _T + "/members/{user}", member_update, role="admin",
           props={"user": {**_STR, "description": "user id or e-mail"}, "role": _ROLE},
           required=("user", "role")),
    _destroy("member_remove", "Remove a member from a team.", "tenants:write",
             _T + "/members/{user}", member_remove, confirm="user",
             props={"user": {**_STR, "description": "user id or e-mail"}},
             required=("user",)),
)

BILLING: tuple[Op, ...] = (
    _read("usage_get", "Usage totals and hourly rows (default: last 24 h).", "billing:read",
          "/v1/usage", usage_get, project="optional",
          props={"since": {"type": "string", "maxLength": 40},
                 "until": {"type": "string", "maxLength": 40}}, paged=True),
    _read("limits_get", "A tenant's limits and what is in use.", "billing:read",
          _T + "/limits", limits_get),
    _write("limits_set", "Set a tenant's limits (null: back to the default).",
           "billing:write", "PUT", _T + "/limits", limits_set, role="owner",
           props={"limits": {"type": "object", "maxProperties": 20,
                             "additionalProperties": {"type": ["integer", "null"]}}},
           required=("limits",)),
)

#: every area in tools/list order
OPS: tuple[Op, ...] = (*PROJECTS, *DEPLOYMENTS, *LOGS, *BACKUPS, *ENV, *VAULT, *DOMAINS,
                       *LINKS, *TENANTS, *BILLING)
_BY_NAME = {o.name: o for o in OPS}
assert len(_BY_NAME) == len(OPS), "operation names must be unique"


def op_named(name: str) -> Op | None:
    return _BY_NAME.get(name)
