"""Views honour their owner's select permission (`SVC_SSP_VIEW_PERMISSIONS`, default
`enforce`; SECURITY.md, "Views and row permissions").

The engine computes a view over every row of its tables, as the service (root) reads them.
Clients read the resulting edges through their own permissions, but an edge alone names a
record and says it matched the query: without this, a view registered for alice that names
bob's rows would put edges to them in alice's table, an id-and-predicate oracle over rows she
cannot read. So before the engine sees a query, each table the query reads by name (its FROM
and the FROM of every projection subquery) gets its `PERMISSIONS FOR select` rule for record
users:

- `FULL`: nothing changes;
- `WHERE <expr>`: the expression is ANDed into that (sub)query's WHERE, with `$auth` the
  view's identity (`$auth` alone is read as `$auth.id`, the way SurrealDB compares a record
  with it; `$auth.<field>` reads the identity's record, loaded when the view is registered);
- `NONE` (also the default of a table defined without permissions, and of a table that does
  not exist yet): the registration is refused, since the view could never show a row.

An expression the engine cannot evaluate (functions, `$token`, `$session`, subqueries, ...)
refuses the registration with 400 `rejected` naming the table: never a view that ignores it.
The rewrite is textual (the query's text is what the shards parse) and is checked by parsing
both texts: the rewritten query must be the original one with exactly the rules ANDed into
the WHEREs, or the registration is refused.

Limits (documented in SECURITY.md): a record reached only through a record link (`author.name`,
`FETCH author`) is a member whatever its own table's rule; a `$auth.<field>` value is the one
read at registration (a view registered again reads it again); a rule changed later applies to
views registered after the change.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbError
from engine.errors import QueryRejected
from engine.lexer import Tok, tokenize
from engine.parser import Query, parse_cached, query_tables
from engine.syntax import Expr

log = logging.getLogger("ssp.permissions")

__all__ = ["MODES", "Effective", "PermissionRefused", "PermissionsUnavailable", "ViewPermissions",
           "with_rules"]

MODES = ("enforce", "off")
#: how long the tables' rules are reused before `INFO FOR DB STRUCTURE` is read again
RULES_TTL_SECS = 5.0

_CLAUSE_AFTER_WHERE = {"ORDER", "LIMIT", "START", "FETCH", "SPLIT", "GROUP", "WITH", "TIMEOUT",
                       "PARALLEL", "EXPLAIN", "TEMPFILES", "VERSION", "OMIT"}
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}
_UNSAFE_PARAMS = {"token", "session", "access", "parent", "this", "value", "before", "after"}


class PermissionRefused(ValueError):
    """A view whose tables' select permission cannot be honoured (400 `rejected`)."""


class PermissionsUnavailable(Exception):
    """The rules (or the identity's fields they read) could not be read from the database:
    no verdict on the query, so a retryable 503 `SSP_NOT_READY`, never a 400."""


@dataclass(frozen=True)
class Effective:
    """What the engine evaluates for a view: the query with the rules in it, and the fields
    of the identity's record the rules read (`$auth.<field>`), None when they read none."""

    surql: str
    auth_fields: dict[str, Any] | None = None


def _is_kw(tok: Tok, *words: str) -> bool:
    return tok.kind == "ident" and not tok.quoted and str(tok.value).upper() in words


def _clause_starts(toks: list[Tok], i: int) -> bool:
    """Token `i` begins a clause after a WHERE (and is not a field named like one)."""
    t, nxt = toks[i], toks[i + 1] if i + 1 < len(toks) else toks[-1]
    if not _is_kw(t, *_CLAUSE_AFTER_WHERE):
        return False
    word = str(t.value).upper()
    if word in ("ORDER", "GROUP", "SPLIT"):
        return _is_kw(nxt, "BY") or word == "SPLIT"
    if word in ("LIMIT", "START"):
        return nxt.kind in ("num", "param") or _is_kw(nxt, "BY", "AT")
    if word == "FETCH":
        return nxt.kind == "ident"
    return True


@functools.lru_cache(maxsize=1024)
def _rule_text(rule: str) -> str:
    """The rule with `$auth` alone read as `$auth.id` (the engine's `$auth` is an object)."""
    toks = tokenize(rule)
    out = []
    last = 0
    for i, t in enumerate(toks):
        if t.kind == "param":
            name = str(t.value)
            if name in _UNSAFE_PARAMS:
                raise PermissionRefused(f"${name} is not known to the engine")
            if name == "auth" and not (toks[i + 1].kind == "op" and toks[i + 1].value == "."
                                       and toks[i + 1].glued):
                out.append(rule[last:t.pos] + "$auth.id")
                last = t.pos + len(t.text)
    out.append(rule[last:])
    return "".join(out)


def with_rules(text: str, rules: Mapping[str, str]) -> str:
    """`text` with `rules[table]` ANDed into the WHERE of every (sub)query on `table` (see
    the module docstring); PermissionRefused when the result is not exactly that query.
    Cached: the clients of an app register a few query texts many times over."""
    return _with_rules(text, tuple(sorted(rules.items())))


@functools.lru_cache(maxsize=4096)
def _with_rules(text: str, rule_items: tuple[tuple[str, str], ...]) -> str:
    rules = dict(rule_items)
    toks = tokenize(text)
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), applied from the end
    # one frame per SELECT: [depth, table, state, where_start]; state: proj|table|after|where
    frames: list[list[Any]] = []
    depth = 0
    for i, t in enumerate(toks):
        if t.kind == "eof" or (t.kind == "op" and t.value == ";"):
            _close_frames(frames, -1, t.pos, rules, edits)
            break
        if t.kind == "op" and t.value in _OPEN:
            depth += 1
            continue
        if t.kind == "op" and t.value in _CLOSE:
            _close_frames(frames, depth, t.pos, rules, edits)
            depth -= 1
            continue
        frame = frames[-1] if frames and frames[-1][0] == depth else None
        if _is_kw(t, "SELECT"):
            frames.append([depth, None, "proj", None])
        elif frame is not None and frame[2] == "proj" and _is_kw(t, "FROM"):
            frame[2] = "table"
        elif frame is not None and frame[2] == "table":
            frame[1] = str(t.value)
            frame[2] = "after"
            frame.append(t.pos + len(t.text))  # where a missing WHERE goes
        elif frame is not None and frame[2] == "after" and _is_kw(t, "WHERE"):
            frame[2] = "where"
            frame[3] = t.pos + len(t.text)
        elif frame is not None and frame[2] == "where" and _clause_starts(toks, i):
            _close_where(frame, t.pos, rules, edits)
    out = text
    for start, end, repl in sorted(edits, reverse=True):
        out = out[:start] + repl + out[end:]
    _verify(text, out, rules)
    return out


def _close_frames(frames: list[list[Any]], depth: int, pos: int, rules: Mapping[str, str],
                  edits: list[tuple[int, int, str]]) -> None:
    while frames and frames[-1][0] >= depth:
        frame = frames.pop()
        _close_where(frame, pos, rules, edits)
        if depth >= 0:
            return


def _close_where(frame: list[Any], pos: int, rules: Mapping[str, str],
                 edits: list[tuple[int, int, str]]) -> None:
    table, state = frame[1], frame[2]
    if table is None or table not in rules or state == "done":
        frame[2] = "done"
        return
    rule = rules[table]
    if state == "where":
        edits.append((frame[3], frame[3], " ("))
        edits.append((pos, pos, f") AND ({rule}) "))
    elif state == "after":
        edits.append((frame[4], frame[4], f" WHERE ({rule})"))
    frame[2] = "done"


def _rule_expr(table: str, rule: str) -> Expr:
    where = parse_cached(f"SELECT * FROM {table} WHERE {rule}").where
    assert where is not None
    return where


def _expected(q: Query, rules: Mapping[str, str]) -> Query:
    items = tuple(dataclasses.replace(it, sub=_expected(it.sub, rules)) if it.sub is not None
                  else it for it in q.items)
    where = q.where
    if q.table in rules:
        rule = _rule_expr(q.table, rules[q.table])
        where = rule if where is None else ("and", where, rule)
    return dataclasses.replace(q, items=items, where=where)


def _verify(original: str, rewritten: str, rules: Mapping[str, str]) -> None:
    try:
        want = _expected(parse_cached(original), rules)
        got = parse_cached(rewritten)
    except QueryRejected as e:
        raise PermissionRefused(f"the rewritten query does not parse: {e}") from None
    if got != want:
        raise PermissionRefused("the select permissions could not be placed in the query "
                                "exactly (a field named like a clause keyword?)")


def _auth_fields_read(rule_texts: Mapping[str, str]) -> bool:
    """A rule reads a field of the identity's record besides its id."""
    for rule in rule_texts.values():
        toks = tokenize(rule)
        for i, t in enumerate(toks[:-2]):
            if t.kind == "param" and t.value == "auth" and toks[i + 1].value == "." \
                    and toks[i + 2].kind == "ident" and toks[i + 2].value != "id":
                return True
    return False


class ViewPermissions:
    """The tables' select rules (cached) and the effective query of a view."""

    def __init__(self, db: Database, mode: str = "enforce") -> None:
        self.db = db
        self.mode = mode
        self._rules: dict[str, Any] = {}
        self._read_at = float("-inf")
        self.counters = {"rewritten": 0, "refused": 0}

    def invalidate(self) -> None:
        """Read the rules again on next use (a schema change was seen)."""
        self._read_at = float("-inf")

    async def _table_rules(self) -> dict[str, Any]:
        if time.monotonic() - self._read_at > RULES_TTL_SECS:
            info = await self.db.query_one("INFO FOR DB STRUCTURE", idempotent=True)
            tables = info.get("tables", []) if isinstance(info, dict) else []
            self._rules = {str(t.get("name")): (t.get("permissions") or {}).get("select", False)
                           for t in tables if isinstance(t, dict)}
            self._read_at = time.monotonic()
        return self._rules

    async def effective(self, surql: str, query: Query, auth: RecordID | None) -> Effective:
        """The query the engine runs for a view of `auth` (PermissionRefused: 400;
        PermissionsUnavailable: 503, the database did not answer)."""
        if self.mode == "off":
            return Effective(surql)
        try:
            rules = await self._table_rules()
        except DbError as e:
            raise PermissionsUnavailable(f"the tables' select permissions are unreadable "
                                         f"({e}); retry") from None
        texts: dict[str, str] = {}
        for table in query_tables(query)[0]:
            rule = rules.get(table, False)
            if rule is True:
                continue
            if rule is False or not isinstance(rule, str):
                self.counters["refused"] += 1
                raise PermissionRefused(
                    f"table {table} lets record users select nothing (PERMISSIONS NONE, the "
                    "default of a table defined without permissions, or no such table): a "
                    "view over it could never show a row; define PERMISSIONS FOR select")
            try:
                texts[table] = _rule_text(rule)
                _rule_expr(table, texts[table])
            except (QueryRejected, PermissionRefused) as e:
                self.counters["refused"] += 1
                raise PermissionRefused(
                    f"the select permission of table {table} ({rule[:200]}) is outside what "
                    f"the engine evaluates: {e}") from None
        if not texts:
            return Effective(surql)
        try:
            rewritten = with_rules(surql, texts)
        except PermissionRefused:
            self.counters["refused"] += 1
            raise
        fields: dict[str, Any] | None = None
        if _auth_fields_read(texts):
            fields = {}
            if auth is not None:
                try:
                    row = await self.db.query_one("SELECT * FROM ONLY $a", {"a": auth},
                                                  idempotent=True)
                except DbError as e:
                    raise PermissionsUnavailable(
                        f"the identity's fields the select permissions read are unreadable "
                        f"({e}); retry") from None
                fields = {k: v for k, v in (row or {}).items() if k != "id"}
        self.counters["rewritten"] += 1
        return Effective(rewritten, fields)
