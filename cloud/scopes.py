"""Scopes of hosted MCP tokens and API keys (spec, Authentication 9) and tenant roles.

A credential holds a set of scopes; :func:`expand` turns the spec's two umbrella scopes into
the sets they stand for (``mcp:read``: every read scope; ``mcp:full``: every read and write
scope, without ``secrets:reveal``). The default for a new token is read-only (``mcp:read``).
Each tool and route needs exactly one scope. ``secrets:reveal`` is needed by no tool: it only
changes how secret values are rendered (``cloud.secret``).

Roles order what a member may do inside a tenant: ``viewer`` reads, ``member`` also writes
(and may see secret values), ``admin`` also manages members, deletes and transfers projects,
``owner`` also deletes the tenant and sets its limits. A request needs both: the scope on its
credential and the role in the tenant it acts in.
"""

from __future__ import annotations

from collections.abc import Iterable

from cloud.errors import BadRequest

__all__ = ["AREAS", "DEFAULT_SCOPES", "READ_SCOPES", "REVEAL", "ROLES", "SCOPES",
           "WRITE_SCOPES", "expand", "parse_scopes", "role_at_least"]

#: capability areas; part 2 of the platform serves deployments, logs and backups
AREAS = ("projects", "deployments", "logs", "env", "vault", "backups", "domains", "links",
         "tenants", "billing")
READ_SCOPES = frozenset(f"{a}:read" for a in AREAS)
WRITE_SCOPES = frozenset(f"{a}:write" for a in AREAS if a != "logs")
REVEAL = "secrets:reveal"
UMBRELLA = {"mcp:read": READ_SCOPES, "mcp:full": READ_SCOPES | WRITE_SCOPES}
SCOPES = frozenset(READ_SCOPES | WRITE_SCOPES | {REVEAL, *UMBRELLA})
DEFAULT_SCOPES = ("mcp:read",)

ROLES = ("viewer", "member", "admin", "owner")
_RANK = {r: i for i, r in enumerate(ROLES)}


def parse_scopes(value: object, field: str = "scopes") -> tuple[str, ...]:
    """The scopes as given (validated, deduplicated, order kept); the default when None."""
    if value is None:
        return DEFAULT_SCOPES
    if not isinstance(value, list) or not value:
        raise BadRequest(f"{field}: a non-empty array of scopes")
    out: list[str] = []
    for i, s in enumerate(value):
        if not isinstance(s, str) or s not in SCOPES:
            raise BadRequest(f"{field}[{i}]: not a scope (known: {', '.join(sorted(SCOPES))})")
        if s not in out:
            out.append(s)
    return tuple(out)


def expand(scopes: Iterable[str]) -> frozenset[str]:
    """Every concrete scope the given ones grant."""
    out: set[str] = set()
    for s in scopes:
        out |= UMBRELLA.get(s, {s})
    return frozenset(out)


def role_at_least(role: str, needed: str) -> bool:
    return _RANK.get(role, -1) >= _RANK[needed]
