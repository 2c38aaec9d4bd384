"""``POST /proxy/query``: the few statements an SSP bootstrap sends, answered from the replica.

The replica is not a database engine, so only these shapes are served (case-insensitive,
``<t>`` a plain identifier, ``<n>`` a positive integer literal or a ``$name`` variable):

1. ``SELECT * FROM <t> ORDER BY id LIMIT <n>``
2. ``SELECT * FROM <t> WHERE id > $last ORDER BY id LIMIT <n>`` (``vars.last``: record id text
   or a RecordID)
3. ``SELECT count() AS n FROM <t> GROUP ALL`` -> ``[{"n": count}]``, ``[]`` when 0 (as SurrealDB)
4. ``INFO FOR DB`` / ``INFO FOR TABLE <t>``: schema is not in the replica; forwarded upstream.
5. ``TABLES`` (our extension): the replica's non-empty table names.

Anything else is :class:`ProxyInvalid` (400). Answers have SurrealDB's HTTP shape
``[{"status": "OK", "result": ...}]``, encoded as CBOR (the SDK's encoder: record ids,
datetimes, decimals keep their types) when the client accepts ``application/cbor``, else as
lossy JSON (record ids and datetimes as text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from surrealdb.data.cbor import encode as cbor_encode

from engine.jsonvalues import json_default
from engine.values import NONE, RecordID
from scheduler.replica import Replica

__all__ = ["ProxyInvalid", "Statement", "encode_cbor", "encode_json",
           "parse_statement", "run_statement"]

_IDENT = r"([A-Za-z_][A-Za-z0-9_]*)"
_LIMIT = r"LIMIT\s+(\d+|\$[A-Za-z_][A-Za-z0-9_]*)"
_END = r"\s*;?\s*"
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("first", re.compile(rf"\s*SELECT\s+\*\s+FROM\s+{_IDENT}\s+ORDER\s+BY\s+id(?:\s+ASC)?\s+"
                         rf"{_LIMIT}{_END}", re.IGNORECASE)),
    ("after", re.compile(rf"\s*SELECT\s+\*\s+FROM\s+{_IDENT}\s+WHERE\s+id\s*>\s*\$last\s+"
                         rf"ORDER\s+BY\s+id(?:\s+ASC)?\s+{_LIMIT}{_END}", re.IGNORECASE)),
    ("count", re.compile(rf"\s*SELECT\s+count\(\)\s+AS\s+n\s+FROM\s+{_IDENT}\s+GROUP\s+ALL"
                         rf"{_END}", re.IGNORECASE)),
    ("info_db", re.compile(rf"\s*INFO\s+FOR\s+DB{_END}", re.IGNORECASE)),
    ("info_table", re.compile(rf"\s*INFO\s+FOR\s+TABLE\s+{_IDENT}{_END}", re.IGNORECASE)),
    ("tables", re.compile(rf"\s*TABLES{_END}", re.IGNORECASE)),
]
_SERVED = ("the replica serves only SELECT * FROM <t> ORDER BY id LIMIT <n>, "
           "SELECT * FROM <t> WHERE id > $last ORDER BY id LIMIT <n>, "
           "SELECT count() AS n FROM <t> GROUP ALL, INFO FOR DB, INFO FOR TABLE <t> and TABLES")
MAX_LIMIT = 100_000


class ProxyInvalid(ValueError):
    """The query is not one the replica serves, or its variables are wrong (400)."""


@dataclass(frozen=True)
class Statement:
    """A parsed proxy statement."""

    kind: str  # first, after, count, info_db, info_table, tables
    table: str | None = None
    limit: int | None = None
    last: str | RecordID | None = None
    text: str = ""


def _limit(token: str, vars: Mapping[str, Any]) -> int:
    if token.startswith("$"):
        value = vars.get(token[1:])
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProxyInvalid(f"vars.{token[1:]} must be an integer (the LIMIT)")
    else:
        value = int(token)
    if not 1 <= value <= MAX_LIMIT:
        raise ProxyInvalid(f"LIMIT must be between 1 and {MAX_LIMIT}, got {value}")
    return value


def parse_statement(query: Any, vars: Any) -> Statement:
    """Recognise one served statement; ProxyInvalid naming the problem otherwise."""
    if not isinstance(query, str):
        raise ProxyInvalid("query must be a string")
    if vars is None:
        vars = {}
    if not isinstance(vars, Mapping):
        raise ProxyInvalid("vars must be an object")
    for kind, pattern in _PATTERNS:
        m = pattern.fullmatch(query)
        if m is None:
            continue
        if kind == "first":
            return Statement(kind, m.group(1), _limit(m.group(2), vars))
        if kind == "after":
            last = vars.get("last")
            if not (isinstance(last, str) and last) and not isinstance(last, RecordID):
                raise ProxyInvalid("vars.last must be a record id (text or RecordID)")
            return Statement(kind, m.group(1), _limit(m.group(2), vars), last)
        if kind in ("count", "info_table"):
            return Statement(kind, m.group(1), text=query.strip().rstrip(";"))
        return Statement(kind, text=query.strip().rstrip(";"))
    raise ProxyInvalid(_SERVED)


async def run_statement(st: Statement, replica: Replica,
                        upstream: Callable[[str], Awaitable[Any]]) -> Any:
    """The statement's result value. ProxyInvalid for a bad ``$last``; replica errors and
    upstream errors (``dbclient`` types) propagate."""
    import asyncio

    if st.kind == "first":
        assert st.table is not None and st.limit is not None
        return await asyncio.to_thread(replica.page, st.table, None, st.limit)
    if st.kind == "after":
        assert st.table is not None and st.limit is not None and st.last is not None
        last = st.last
        try:
            return await asyncio.to_thread(replica.page, st.table, last, st.limit)
        except ValueError as e:
            raise ProxyInvalid(f"vars.last: {e}") from None
    if st.kind == "count":
        assert st.table is not None
        n = replica.count(st.table)
        return [{"n": n}] if n else []
    if st.kind == "tables":
        return replica.tables()
    return await upstream(st.text)


# ----------------------------------------------------------------------------- encoding

def _strip_none(value: Any) -> Any:
    # SurrealDB never returns a field holding NONE: the field is absent.
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not NONE}
    if isinstance(value, list):
        return [None if v is NONE else _strip_none(v) for v in value]
    return value


def encode_cbor(result: Any) -> bytes:
    """``[{"status": "OK", "result": result}]`` as SurrealDB CBOR."""
    body = [{"status": "OK", "result": result}]
    try:
        return bytes(cbor_encode(body))
    except (BufferError, TypeError):
        return bytes(cbor_encode(_strip_none(body)))


def encode_json(result: Any) -> bytes:
    """``[{"status": "OK", "result": result}]`` as JSON (`engine.jsonvalues.json_default`:
    lossy, record ids and datetimes become text)."""
    return json.dumps([{"status": "OK", "result": result}], default=json_default,
                      separators=(",", ":")).encode()
