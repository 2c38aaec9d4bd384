"""The audit trail: who did what, in which tenant and project, with which credential.

Every write is audited in the same transaction as the write itself (:func:`entry`), so an
acknowledged change always has its entry and a failed one has none. A read that reveals
secret values is audited before the values are returned (no entry, no values). Entries name
keys, never values.
"""

from __future__ import annotations

from typing import Any

from cloud.identity import Principal
from cloud.store import Store, new_id, now, rid, row_id

__all__ = ["Audit", "entry"]


def entry(p: Principal, tenant: str, action: str, *, project: str | None = None,
          target: str | None = None, detail: dict[str, Any] | None = None
          ) -> tuple[str, dict[str, Any]]:
    """The statement that records one audit entry."""
    at = now()
    # ids sort in time order (microseconds, then a random tail): pages follow the id
    key = f"aud_{int(at.timestamp() * 1e6):017d}{new_id('', 6)}"
    return ("CREATE $id CONTENT $c RETURN NONE", {"id": rid("audit_event", key), "c": {
        "tenant": tenant, "project": project, "action": action, "target": target,
        "actor": p.user_id, "actor_email": p.email, "credential": p.kind,
        "credential_id": p.token_id, "at": at, "detail": detail or {}}})


class Audit:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def record(self, p: Principal, tenant: str, action: str, **kw: Any) -> None:
        await self.store.run(*entry(p, tenant, action, **kw))

    async def listing(self, tenant: str, action: str | None, before: str | None, limit: int
                   ) -> tuple[list[dict[str, Any]], str | None]:
        cond = " AND action = $a" if action else ""
        rows = await self.store.one(
            f"SELECT * FROM audit_event WHERE tenant = $t{cond} AND id < $before "
            "ORDER BY id DESC LIMIT $n",
            {"t": tenant, "a": action, "before": rid("audit_event", before or "aud_~"),
             "n": limit + 1}, read=True) or []
        items = [{"at": r["at"], "action": r["action"], "project": r.get("project"),
                  "target": r.get("target"), "actor": r.get("actor_email"),
                  "credential": r.get("credential"), "detail": r.get("detail") or {}}
                 for r in rows[:limit]]
        return items, (row_id(rows[limit - 1]) if len(rows) > limit else None)
