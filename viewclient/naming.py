"""Names and small rules the client shares with the service: the view record, the edge
table a user's edges live in, durations."""

from __future__ import annotations

import re
from typing import Any

from surrealdb import RecordID

QUERY_TABLE = "_00_query"
SINGLE_TABLE = "_00_list_ref"
_PLAIN_USER = re.compile(r"user:([A-Za-z0-9]+)")
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_SECS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def ttl_secs(ttl: str) -> float:
    """`10m`, `30s`, `1h30m` -> seconds; ValueError on anything else."""
    parts = _DURATION.findall(ttl)
    if not parts or "".join(n + u for n, u in parts) != ttl:
        raise ValueError(f"ttl {ttl!r} is not a duration such as 30s or 10m")
    return sum(int(n) * _UNIT_SECS[u] for n, u in parts)


def record_text(rid: Any) -> str:
    """Canonical text of a record id as the SDK gives it (`user:alice`)."""
    if isinstance(rid, RecordID):
        key: Any = rid.id
        if isinstance(key, str) and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            return f"{rid.table_name}:⟨{key}⟩"
        return f"{rid.table_name}:{key}"
    return str(rid)


def edge_table(auth_text: str, ref_mode: str) -> str:
    """The edge table the service writes this user's view edges to, from the auth id's
    canonical text as SurrealDB prints it (`<string> $auth.id`). The service's naming rule:
    `_00_list_ref_user_<key>` for a plain `user:<alnum>`, else `_` + hex of that text; mode
    `single` shares `_00_list_ref`."""
    if ref_mode == "single":
        return SINGLE_TABLE
    text = auth_text
    m = _PLAIN_USER.fullmatch(text)
    suffix = m.group(1) if m else "_" + text.encode().hex()
    return "_00_list_ref_user_" + suffix
