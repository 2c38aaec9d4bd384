"""Just enough SurrealQL to find LIVE SELECT and KILL statements in a query's text.

The engine in this build has no live queries, so the host answers these statements itself and
passes the rest of a query to the engine unchanged.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from surrealdb.data.types.table import Table

from dbclient.surqltext import skipped_span


class LiveSyntaxError(ValueError):
    """A LIVE or KILL statement the host cannot serve; the message says why."""


_QUICK = re.compile(r"\b(live|kill)\b", re.IGNORECASE)
_OPEN = {"(": ")", "[": "]", "{": "}"}


def _scan(text: str) -> list[tuple[int, str]]:
    """Positions and characters of `text` that are at nesting depth 0 and outside strings and
    comments; the basis of splitting and keyword search."""
    out: list[tuple[int, str]] = []
    depth: list[str] = []
    i, n = 0, len(text)
    while i < n:
        skipped = skipped_span(text, i)
        if skipped is not None:
            i = skipped[1]
            continue
        c = text[i]
        if c in _OPEN:
            depth.append(_OPEN[c])
        elif depth and c == depth[-1]:
            depth.pop()
        elif not depth:
            out.append((i, c))
        i += 1
    return out


def split_statements(text: str) -> list[str]:
    """The statements of a query, without their `;` separators; empty ones dropped."""
    parts: list[str] = []
    start = 0
    for pos, c in _scan(text):
        if c == ";":
            parts.append(text[start:pos])
            start = pos + 1
    parts.append(text[start:])
    return [p for p in (s.strip() for s in parts) if p]


def _keyword_positions(text: str, word: str) -> list[int]:
    """Top-level positions of a keyword (whole word, any case)."""
    top = {pos for pos, _ in _scan(text)}
    return [m.start() for m in re.finditer(rf"\b{word}\b", text, re.IGNORECASE)
            if m.start() in top]


def mentions_live(text: str) -> bool:
    """Cheap test: could this query hold a LIVE or KILL statement?"""
    if not _QUICK.search(text):
        return False
    return any(statement_kind(s) for s in split_statements(text))


def statement_kind(stmt: str) -> str | None:
    """'live', 'kill' or None for a statement the engine runs."""
    m = re.match(r"(live\s+select|kill)\b", stmt, re.IGNORECASE)
    if m is None:
        return None
    return "live" if m.group(1).lower().startswith("live") else "kill"


@dataclass(frozen=True)
class LiveSpec:
    """A parsed LIVE SELECT."""

    table: str
    diff: bool
    fields: str  # projection text, "*" for whole rows
    where: str | None


def _table_name(token: str, variables: dict[str, Any]) -> str:
    token = token.strip()
    if token.startswith("$"):
        value = variables.get(token[1:])
        if isinstance(value, Table):
            return value.table_name
        if isinstance(value, str) and value:
            return value
        raise LiveSyntaxError(f"LIVE SELECT: parameter {token} is not a table name")
    if token.startswith("`") and token.endswith("`") and len(token) > 1:
        return token[1:-1]
    if token.startswith("⟨") and token.endswith("⟩"):
        return token[1:-1]
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
        return token
    raise LiveSyntaxError(f"LIVE SELECT: only a table can follow FROM, got {token[:60]!r}")


def parse_live(stmt: str, variables: dict[str, Any]) -> LiveSpec:
    """Parse `LIVE SELECT [DIFF | fields] FROM table [WHERE cond]`."""
    m = re.match(r"live\s+select\s+", stmt, re.IGNORECASE)
    if m is None:
        raise LiveSyntaxError("not a LIVE SELECT statement")
    body = stmt[m.end():]
    froms = _keyword_positions(body, "from")
    if not froms:
        raise LiveSyntaxError("LIVE SELECT needs FROM <table>")
    head, rest = body[:froms[0]].strip(), body[froms[0] + 4:].strip()
    diff = False
    if re.fullmatch(r"diff", head, re.IGNORECASE):
        diff, head = True, "*"
    elif re.match(r"value\b", head, re.IGNORECASE):
        raise LiveSyntaxError("LIVE SELECT VALUE is not supported by this host")
    if not head:
        raise LiveSyntaxError("LIVE SELECT needs DIFF or a field list")
    for clause in ("fetch", "order", "limit", "start", "group", "split", "timeout"):
        if _keyword_positions(rest, clause):
            raise LiveSyntaxError(f"LIVE SELECT does not support {clause.upper()}")
    where = None
    wheres = _keyword_positions(rest, "where")
    if wheres:
        where = rest[wheres[0] + 5:].strip()
        rest = rest[:wheres[0]].strip()
        if not where:
            raise LiveSyntaxError("LIVE SELECT: empty WHERE")
    if "," in rest:
        raise LiveSyntaxError("LIVE SELECT: only one table can follow FROM")
    return LiveSpec(_table_name(rest, variables), diff, head, where)


_UUID_LITERAL = re.compile(r"""^u?(['"])([0-9a-fA-F-]{32,36})\1$""")


def parse_kill(stmt: str, variables: dict[str, Any]) -> uuid.UUID:
    """The live query id named by `KILL u'...'`, `KILL '...'` or `KILL $param`."""
    m = re.match(r"kill\s+(.+)$", stmt.strip(), re.IGNORECASE | re.DOTALL)
    if m is None:
        raise LiveSyntaxError("KILL needs a live query id")
    target = m.group(1).strip()
    if target.startswith("$"):
        return as_uuid(variables.get(target[1:]))
    lit = _UUID_LITERAL.match(target)
    if lit is None:
        raise LiveSyntaxError(f"KILL: not a live query id: {target[:60]!r}")
    return as_uuid(lit.group(2))


def as_uuid(value: Any) -> uuid.UUID:
    """A live query id from a UUID or its text."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise LiveSyntaxError(f"not a live query id: {str(value)[:60]!r}") from None
