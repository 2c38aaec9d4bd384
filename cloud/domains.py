"""Custom domains of a project: add, verify through a DNS TXT record, remove.

Adding a hostname answers the record to publish: ``TXT _svc-verify.<hostname>`` with the
value ``svc-verify=<token>``. Verifying looks it up with dnspython, against
``SVC_CLOUD_DNS_RESOLVER`` when set (tests point it at a local server), else the system's
resolver, and moves the domain to ``verified``, or to ``failed`` with the reason (no such
name, no TXT record, a different value, the resolver did not answer); a failed domain can be
verified again. A hostname belongs to one project on the platform at a time.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import dns.asyncresolver
import dns.exception
import dns.resolver

from cloud.errors import BadRequest, Conflict, NotFound
from cloud.store import Duplicate, Store, limit_guard, new_id, now, rid, row_id

__all__ = ["TXT_LABEL", "Domains", "TxtLookup", "check_hostname"]

TXT_LABEL = "_svc-verify"
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def check_hostname(value: Any) -> str:
    if not isinstance(value, str):
        raise BadRequest("hostname: a domain name such as app.example.com")
    try:
        host = value.strip().rstrip(".").encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise BadRequest("hostname: not a valid internationalised domain name") from None
    labels = host.split(".")
    if len(host) > 253 or len(labels) < 2 or not all(_LABEL.match(lb) for lb in labels) \
            or labels[-1].isdigit():
        raise BadRequest("hostname: a domain name such as app.example.com (labels of "
                         "letters, digits and hyphens; not an IP address)")
    return host


class TxtLookup:
    """TXT records of a name, through the configured resolvers (or the system's)."""

    def __init__(self, resolvers: tuple[tuple[str, int], ...], timeout: float = 5.0) -> None:
        if resolvers:
            r = dns.asyncresolver.Resolver(configure=False)
            r.nameservers = [h for h, _ in resolvers]
            r.port = resolvers[0][1]
        else:
            r = dns.asyncresolver.Resolver()
        r.lifetime = timeout
        r.timeout = timeout
        self.resolver = r

    async def txt(self, name: str) -> tuple[list[str] | None, str | None]:
        """``(values, None)`` or ``(None, reason)``."""
        try:
            answer = await self.resolver.resolve(name, "TXT", search=False)
        except dns.resolver.NXDOMAIN:
            return None, f"{name} does not exist (NXDOMAIN)"
        except dns.resolver.NoAnswer:
            return None, f"{name} has no TXT record"
        except dns.resolver.NoNameservers:
            return None, "no DNS server answered for the name (SERVFAIL or refused)"
        except (dns.exception.Timeout, dns.resolver.LifetimeTimeout):
            return None, "the DNS lookup timed out"
        except dns.exception.DNSException as e:
            return None, f"the DNS lookup failed: {type(e).__name__}"
        return [b"".join(r.strings).decode("utf-8", "replace") for r in answer], None


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row_id(row), "hostname": row["hostname"], "state": row["state"],
            "reason": row.get("reason"),
            "verification": {"type": "TXT", "name": f"{TXT_LABEL}.{row['hostname']}",
                             "value": f"svc-verify={row['token']}"},
            "created_at": row.get("created_at"), "checked_at": row.get("checked_at"),
            "verified_at": row.get("verified_at")}


class Domains:
    def __init__(self, store: Store, lookup: TxtLookup, *, max_per_project: int) -> None:
        self.store = store
        self.lookup = lookup
        self.max_per_project = max_per_project

    async def listing(self, project: dict[str, Any], after: str | None, limit: int
                   ) -> tuple[list[dict[str, Any]], str | None]:
        rows = await self.store.one(
            "SELECT * FROM domain WHERE project = $p AND hostname > $after ORDER BY hostname "
            "LIMIT $n", {"p": project["id"], "after": after or "", "n": limit + 1},
            read=True) or []
        return ([_public(r) for r in rows[:limit]],
                rows[limit - 1]["hostname"] if len(rows) > limit else None)

    async def find(self, project: dict[str, Any], hostname: Any) -> dict[str, Any]:
        host = check_hostname(hostname)
        rows = await self.store.one("SELECT * FROM domain WHERE hostname = $h AND project = $p",
                                    {"h": host, "p": project["id"]}, read=True)
        if not rows:
            raise NotFound(f"{host} is not a domain of project {project['slug']}")
        return dict(rows[0])

    async def add(self, project: dict[str, Any], hostname: Any,
                  extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        host = check_hostname(hostname)
        did = new_id("dom")
        row = {"tenant": project["tenant"], "project": project["id"], "hostname": host,
               "state": "pending", "reason": "publish the TXT record, then domain_verify",
               "token": secrets.token_hex(16), "created_at": now()}
        try:
            await self.store.tx([
                ("CREATE $id CONTENT $c RETURN NONE", {"id": rid("domain", did), "c": row}),
                limit_guard("array::len(SELECT VALUE id FROM domain WHERE project = $p)",
                            "domains_per_project", self.max_per_project, project["tenant"],
                            {"p": project["id"]}),
                *extra,
            ])
        except Duplicate:
            raise Conflict(f"hostname: {host} is already added to a project on this platform",
                           code="exists") from None
        return _public({**row, "id": did})

    async def verify(self, project: dict[str, Any], hostname: Any,
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        row = await self.find(project, hostname)
        name = f"{TXT_LABEL}.{row['hostname']}"
        want = f"svc-verify={row['token']}"
        values, reason = await self.lookup.txt(name)
        if values is not None:
            if want in values:
                state, reason = "verified", None
            else:
                state = "failed"
                reason = (f"{name} has {len(values)} TXT value(s), none of them {want}")
        else:
            state = "failed"
        at = now()
        changes = {"state": state, "reason": reason, "checked_at": at,
                   "verified_at": at if state == "verified" else row.get("verified_at")}
        await self.store.tx([("UPDATE $id MERGE $c RETURN NONE", {"id": row["id"],
                                                                  "c": changes}), *extra])
        return _public({**row, **changes})

    async def remove(self, project: dict[str, Any], hostname: Any,
                     extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        row = await self.find(project, hostname)
        await self.store.tx([("DELETE $id", {"id": row["id"]}), *extra])
        return {"hostname": row["hostname"], "removed": True}
