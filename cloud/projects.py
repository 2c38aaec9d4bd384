"""Projects of a tenant: create, list, get, update, soft delete and restore, transfer.

A project's slug is unique on the platform (it is the scheduler's ``SVC_CLOUD_PROJECT``, which
names a project without its tenant) and fixed once created; its name can change. Deleting a
project marks it deleted: it disappears from lists, keeps its slug, and can be restored for
``SVC_CLOUD_PROJECT_RETENTION_DAYS``; after that the background worker purges it with its
values, domains and links.

:meth:`Projects.resolve` is the one way a request reaches a project: by slug or id, inside the
tenant the request acts in. A project that exists in another tenant is never answered as if it
did not exist at all: the error names the tenants the credential may use (and, when the caller
is a member there, the tenant that holds it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cloud.errors import BadRequest, Conflict, Forbidden, NotFound
from cloud.identity import Membership, Principal
from cloud.scopes import role_at_least
from cloud.store import Duplicate, Store, guard, limit_guard, new_id, now, rid, row_id
from cloud.tenants import check_slug, tenant_ref
from cloud.values import Values

__all__ = ["Projects", "public"]

CHILD_TABLES = ("value", "value_version", "domain", "repo_link", "repo_commit")


def public(row: dict[str, Any]) -> dict[str, Any]:
    out = {"id": row_id(row), "slug": row["slug"], "name": row.get("name"),
           "created_at": row.get("created_at"), "created_by": row.get("created_by")}
    if row.get("deleted_at") is not None:
        out["deleted_at"] = row["deleted_at"]
        out["restorable_until"] = row.get("purge_after")
    return out


class Projects:
    def __init__(self, store: Store, values: Values, *, retention_days: int,
                 max_projects: int) -> None:
        self.store = store
        self.values = values
        self.retention = timedelta(days=retention_days)
        self.max_projects = max_projects

    async def _find(self, ref: str) -> dict[str, Any] | None:
        if not isinstance(ref, str) or not 0 < len(ref) <= 60:
            raise BadRequest("project: a project slug or id")
        rows = await self.store.one(
            "SELECT * FROM project WHERE slug = $r OR id = $id LIMIT 1",
            {"r": ref, "id": rid("project", ref)}, read=True)
        return dict(rows[0]) if rows else None

    async def resolve(self, p: Principal, m: Membership, ref: Any, *,
                      deleted: bool = False) -> dict[str, Any]:
        """The project ``ref`` (slug or id) in tenant ``m``, as ``{id, tenant, slug, ...}``."""
        row = await self._find(ref)
        if row is not None and row["tenant"] == m.tenant_id \
                and (row.get("deleted_at") is not None) == deleted:
            return {**row, "id": row_id(row)}
        details = {"tenant": tenant_ref(m), "tenants": p.tenants_detail()}
        if row is not None and row["tenant"] != m.tenant_id:
            elsewhere = [u for u in p.usable() if u.tenant_id == row["tenant"]]
            if elsewhere:
                raise NotFound(f"project {ref} is not in tenant {m.slug}: it is in tenant "
                               f"{elsewhere[0].slug}; pass tenant_id: {elsewhere[0].slug}",
                               code="wrong_tenant", details=details)
        state = "deleted " if deleted else ""
        hint = (" (it is deleted: projects_list with deleted: true shows it, project_restore "
                "brings it back)" if row is not None and not deleted
                and row["tenant"] == m.tenant_id else "")
        raise NotFound(f"no {state}project {str(ref)[:60]} in tenant {m.slug}{hint}; tenants "
                       f"this credential may use: {p.tenants_text()}", details=details)

    async def listing(self, m: Membership, after: str | None, limit: int, deleted: bool
                   ) -> tuple[list[dict[str, Any]], str | None]:
        cond = "deleted_at IS NOT NONE" if deleted else "deleted_at IS NONE"
        rows = await self.store.one(
            f"SELECT * FROM project WHERE tenant = $t AND {cond} AND slug > $after "
            "ORDER BY slug LIMIT $n", {"t": m.tenant_id, "after": after or "", "n": limit + 1},
            read=True) or []
        return ([public(r) for r in rows[:limit]],
                rows[limit - 1]["slug"] if len(rows) > limit else None)

    async def create(self, m: Membership, slug: Any, name: Any, actor: str,
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        slug = check_slug(slug)
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 100):
            raise BadRequest("name: a string of 1 to 100 characters")
        pid = new_id("prj")
        row = {"tenant": m.tenant_id, "slug": slug, "name": name or slug, "created_at": now(),
               "created_by": actor, "deleted_at": None}
        try:
            await self.store.tx([
                ("CREATE $id CONTENT $c RETURN NONE", {"id": rid("project", pid), "c": row}),
                limit_guard("array::len(SELECT VALUE id FROM project WHERE tenant = $t)",
                            "projects", self.max_projects, m.tenant_id),
                *extra,
            ])
        except Duplicate:
            raise Conflict(f"slug: project slug {slug} is taken on this platform (slugs are "
                           "global: they name the project to its scheduler)",
                           code="exists") from None
        return public({**row, "id": pid})

    async def update(self, project: dict[str, Any], name: Any,
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        if not isinstance(name, str) or not 0 < len(name) <= 100:
            raise BadRequest("name: a string of 1 to 100 characters")
        await self.store.tx([("UPDATE $id SET name = $n RETURN NONE",
                              {"id": rid("project", project["id"]), "n": name}), *extra])
        return public({**project, "name": name})

    async def delete(self, project: dict[str, Any],
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        at = now()
        until = at + self.retention
        await self.store.tx([
            ("UPDATE $id SET deleted_at = $at, purge_after = $until RETURN NONE",
             {"id": rid("project", project["id"]), "at": at, "until": until}),
            *extra,
        ])
        return {**public({**project, "deleted_at": at, "purge_after": until}), "deleted": True}

    async def restore(self, project: dict[str, Any],
                      extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        await self.store.tx([
            ("UPDATE $id SET deleted_at = NONE, purge_after = NONE RETURN NONE",
             {"id": rid("project", project["id"])}),
            limit_guard("array::len(SELECT VALUE id FROM project WHERE tenant = $t AND "
                        "deleted_at IS NONE)", "projects", self.max_projects,
                        project["tenant"]),
            *extra,
        ])
        return public({**project, "deleted_at": None})

    async def transfer(self, p: Principal, project: dict[str, Any], to: Any,
                       extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        if not isinstance(to, str) or not to:
            raise BadRequest("to_tenant_id: the tenant (id or slug) to move the project to")
        target = [m for m in p.usable() if to in (m.tenant_id, m.slug)]
        if not target:
            raise Forbidden(f"to_tenant_id: {to[:60]} is not a tenant this credential may use; "
                            f"it may use: {p.tenants_text()}", code="tenant_forbidden",
                            details={"tenants": p.tenants_detail()})
        dest = target[0]
        if not role_at_least(dest.role, "admin"):
            raise Forbidden(f"your role in tenant {dest.slug} is {dest.role}; a transfer "
                            "needs admin or owner in both tenants", code="role")
        if dest.tenant_id == project["tenant"]:
            raise Conflict(f"project {project['slug']} is already in tenant {dest.slug}")
        stmts = [("UPDATE $id SET tenant = $t RETURN NONE",
                  {"id": rid("project", project["id"]), "t": dest.tenant_id}),
                 *[(f"UPDATE {t} SET tenant = $t WHERE project = $p RETURN NONE",
                    {"t": dest.tenant_id, "p": project["id"]})
                   for t in ("domain", "repo_link", "repo_commit")],
                 *await self.values.rekey_statements(project, dest.tenant_id),
                 limit_guard("array::len(SELECT VALUE id FROM project WHERE tenant = $t)",
                             "projects", self.max_projects, dest.tenant_id),
                 (guard("(SELECT VALUE tenant FROM ONLY $id) != $t", 409,
                        "the project changed tenant while this request ran"),
                  {"id": rid("project", project["id"]), "t": dest.tenant_id}),
                 *extra]
        await self.store.tx(stmts)
        return {**public(project), "tenant": tenant_ref(dest),
                "from_tenant": project["tenant"], "transferred": True}

    async def purge_expired(self) -> list[str]:
        """Delete projects past their retention, with everything that hangs off them."""
        rows = await self.store.one(
            "SELECT id, slug FROM project WHERE deleted_at IS NOT NONE AND purge_after < "
            "time::now()", read=True) or []
        purged = []
        for r in rows:
            pid = row_id(r)
            await self.store.tx([*[(f"DELETE {t} WHERE project = $p", {"p": pid})
                                   for t in CHILD_TABLES],
                                 ("DELETE $id", {"id": r["id"]})])
            purged.append(r["slug"])
        return purged
