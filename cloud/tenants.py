"""Tenants (a user's personal one and teams), their members and roles, and the rule every
tenant-scoped request goes through: :func:`resolve_tenant`.

No tenant is ever "selected" in a session: each request names one (``tenant_id``, an id or a
slug) or gets its default (the API key's tenant, else the caller's personal tenant), and every
answer names the tenant it acted in. A tenant the caller is not a member of is refused with
403 and the list of tenants the credential may use, never answered with an empty result.
"""

from __future__ import annotations

import re
from typing import Any

from cloud.audit import entry
from cloud.errors import BadRequest, Conflict, Forbidden, NotFound
from cloud.identity import Membership, Principal
from cloud.scopes import ROLES, role_at_least
from cloud.store import Duplicate, Store, guard, limit_guard, new_id, now, rid, row_id

__all__ = ["SLUG", "Tenants", "check_slug", "resolve_tenant"]

Stmt = tuple[str, dict[str, Any]]
SLUG = re.compile(r"^[a-z][a-z0-9-]{1,38}[a-z0-9]$")


def check_slug(value: Any, field: str = "slug") -> str:
    if not isinstance(value, str) or not SLUG.match(value) or "--" in value:
        raise BadRequest(f"{field}: 3 to 40 lowercase letters, digits and single hyphens, "
                         "starting with a letter")
    return value


def resolve_tenant(p: Principal, ref: str | None, role: str = "viewer") -> Membership:
    """The tenant a request acts in, checked: a member of it, with at least ``role``."""
    usable = p.usable()
    if ref is None:
        found = ([m for m in usable if m.tenant_id == p.bound_tenant] if p.bound_tenant
                 else [m for m in usable if m.tenant_id == p.personal_tenant])
    else:
        found = [m for m in usable if ref in (m.tenant_id, m.slug)]
    if not found:
        name = "the default tenant" if ref is None else f"tenant {ref[:60]!r}"
        raise Forbidden(f"{name} is not one this credential may use; it may use: "
                        f"{p.tenants_text()}", code="tenant_forbidden",
                        details={"tenants": p.tenants_detail()})
    m = found[0]
    if not role_at_least(m.role, role):
        raise Forbidden(f"your role in tenant {m.slug} is {m.role}; this needs {role} or "
                        "higher", code="role", details={"tenant": m.tenant_id})
    return m


def tenant_ref(m: Membership) -> dict[str, str]:
    """How an answer names the tenant it acted in."""
    return {"id": m.tenant_id, "slug": m.slug}


def _role(value: Any, field: str = "role") -> str:
    if value not in ROLES:
        raise BadRequest(f"{field}: one of {', '.join(ROLES)}")
    return str(value)


class Tenants:
    def __init__(self, store: Store, *, max_members: int) -> None:
        self.store = store
        self.max_members = max_members

    async def create(self, p: Principal, slug: Any, name: Any) -> dict[str, Any]:
        if p.kind == "api_key":
            raise Forbidden("an API key acts in its one tenant and cannot create tenants",
                            code="api_key_bound")
        slug = check_slug(slug)
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 100):
            raise BadRequest("name: a string of 1 to 100 characters")
        tid = new_id("ten")
        at = now()
        try:
            await self.store.tx([
                ("CREATE $id CONTENT $c", {"id": rid("tenant", tid), "c": {
                    "slug": slug, "name": name or slug, "kind": "team", "owner": p.user_id,
                    "created_at": at}}),
                ("CREATE $id CONTENT $c", {"id": rid("member", f"{tid}.{p.user_id}"), "c": {
                    "tenant": tid, "user": p.user_id, "role": "owner", "added_at": at}}),
                entry(p, tid, "tenant_create", target=slug),
            ])
        except Duplicate:
            raise Conflict(f"slug: tenant slug {slug} is taken", code="exists") from None
        return {"tenant": {"id": tid, "slug": slug}, "id": tid, "slug": slug,
                "name": name or slug, "kind": "team", "role": "owner"}

    async def get(self, m: Membership) -> dict[str, Any]:
        row = await self.store.one(
            "RETURN [(SELECT * FROM ONLY $id), array::len(SELECT VALUE id FROM member WHERE "
            "tenant = $t), array::len(SELECT VALUE id FROM project WHERE tenant = $t AND "
            "deleted_at IS NONE)]", {"id": rid("tenant", m.tenant_id), "t": m.tenant_id},
            read=True)
        t, members, projects = row
        if not t:
            raise NotFound(f"tenant {m.slug} no longer exists")
        return {"tenant": tenant_ref(m), "id": m.tenant_id, "slug": t["slug"],
                "name": t["name"], "kind": t["kind"], "role": m.role, "members": members,
                "projects": projects, "limits": t.get("limits") or {},
                "created_at": t.get("created_at")}

    async def update(self, m: Membership, name: Any, extra: list[Stmt]) -> dict[str, Any]:
        if not isinstance(name, str) or not 0 < len(name) <= 100:
            raise BadRequest("name: a string of 1 to 100 characters")
        await self.store.tx([("UPDATE $id SET name = $n RETURN NONE",
                              {"id": rid("tenant", m.tenant_id), "n": name}), *extra])
        return {"tenant": tenant_ref(m), "id": m.tenant_id, "name": name}

    async def delete(self, m: Membership, extra: list[Stmt]) -> dict[str, Any]:
        if m.kind == "personal":
            raise Conflict("a personal tenant is deleted with its user, not on its own",
                           code="personal_tenant")
        await self.store.tx([
            (guard("array::len(SELECT VALUE id FROM project WHERE tenant = $t) > 0", 409,
                   "the tenant still has projects (deleted ones included until purged): "
                   "transfer or delete them first"), {"t": m.tenant_id}),
            ("DELETE member WHERE tenant = $t", {"t": m.tenant_id}),
            ("DELETE $id", {"id": rid("tenant", m.tenant_id)}),
            ("DELETE $k", {"k": rid("tenant_key", m.tenant_id)}),
            *extra,
        ])
        return {"tenant": tenant_ref(m), "deleted": True}

    # ------------------------------------------------------------------ members
    async def members(self, m: Membership, after: str | None, limit: int
                      ) -> tuple[list[dict[str, Any]], str | None]:
        rows = await self.store.one(
            "SELECT user, role, added_at, type::record('user', user).email AS email "
            "FROM member WHERE tenant = $t AND user > $after ORDER BY user LIMIT $n",
            {"t": m.tenant_id, "after": after or "", "n": limit + 1}, read=True)
        rows = rows or []
        items = [{"user_id": r["user"], "email": r.get("email"), "role": r["role"],
                  "added_at": r.get("added_at")} for r in rows[:limit]]
        return items, (rows[limit - 1]["user"] if len(rows) > limit else None)

    async def _member(self, m: Membership, who: Any) -> dict[str, Any]:
        if not isinstance(who, str) or not who:
            raise BadRequest("user: a user id (usr_...) or e-mail")
        row = await self.store.one(
            "SELECT user, role, type::record('user', user).email AS email FROM member "
            "WHERE tenant = $t AND (user = $w OR type::record('user', user).email = $e)",
            {"t": m.tenant_id, "w": who, "e": who.strip().lower()}, read=True)
        if not row:
            raise NotFound(f"{who[:80]} is not a member of tenant {m.slug}")
        return dict(row[0])

    async def add_member(self, m: Membership, email: Any, role: Any, extra: list[Stmt]
                         ) -> dict[str, Any]:
        if m.kind == "personal":
            raise Conflict("a personal tenant has one member; create a team tenant to work "
                           "with others", code="personal_tenant")
        role = _role(role if role is not None else "member")
        if role == "owner" and m.role != "owner":
            raise Forbidden("only an owner can add another owner", code="role")
        if not isinstance(email, str) or "@" not in email:
            raise BadRequest("email: the e-mail of a user of this platform")
        user = await self.store.one("SELECT id FROM user WHERE email = $e LIMIT 1",
                                    {"e": email.strip().lower()}, read=True)
        if not user:
            raise NotFound("email: no user with this e-mail; they sign up first")
        uid = row_id(user[0])
        try:
            await self.store.tx([
                ("CREATE $id CONTENT $c RETURN NONE", {"id": rid("member", f"{m.tenant_id}.{uid}"),
                                                       "c": {"tenant": m.tenant_id, "user": uid,
                                                             "role": role, "added_at": now()}}),
                limit_guard("array::len(SELECT VALUE id FROM member WHERE tenant = $t)",
                            "members", self.max_members, m.tenant_id),
                *extra,
            ])
        except Conflict as e:
            if "limit" in e.message:
                raise
            raise Conflict(f"{email.strip().lower()} is already a member of {m.slug}",
                           code="exists") from None
        return {"tenant": tenant_ref(m), "user_id": uid, "email": email.strip().lower(),
                "role": role}

    @staticmethod
    def _owners_guard(m: Membership) -> Stmt:
        return (guard("array::len(SELECT VALUE id FROM member WHERE tenant = $t AND role = "
                      "'owner') < 1", 409, "a tenant keeps at least one owner"),
                {"t": m.tenant_id})

    async def update_member(self, m: Membership, who: Any, role: Any, extra: list[Stmt]
                            ) -> dict[str, Any]:
        role = _role(role)
        target = await self._member(m, who)
        if "owner" in (role, target["role"]) and m.role != "owner":
            raise Forbidden("only an owner can grant or take away the owner role",
                            code="role")
        await self.store.tx([
            ("UPDATE $id SET role = $r RETURN NONE",
             {"id": rid("member", f"{m.tenant_id}.{target['user']}"), "r": role}),
            self._owners_guard(m),
            *extra,
        ])
        return {"tenant": tenant_ref(m), "user_id": target["user"], "email": target["email"],
                "role": role}

    async def remove_member(self, m: Membership, who: Any, extra: list[Stmt]
                            ) -> dict[str, Any]:
        target = await self._member(m, who)
        if target["role"] == "owner" and m.role != "owner":
            raise Forbidden("only an owner can remove an owner", code="role")
        await self.store.tx([
            ("DELETE $id", {"id": rid("member", f"{m.tenant_id}.{target['user']}")}),
            self._owners_guard(m),
            *extra,
        ])
        return {"tenant": tenant_ref(m), "user_id": target["user"], "removed": True}

    # ------------------------------------------------------------------ limits
    async def limits(self, m: Membership, defaults: dict[str, int]) -> dict[str, int]:
        row = await self.store.one("SELECT VALUE limits FROM ONLY $id",
                                   {"id": rid("tenant", m.tenant_id)}, read=True)
        return {**defaults, **(row or {})}

    async def set_limits(self, m: Membership, limits: dict[str, int], extra: list[Stmt]
                         ) -> None:
        await self.store.tx([("UPDATE $id SET limits = $l RETURN NONE",
                              {"id": rid("tenant", m.tenant_id), "l": limits}), *extra])
