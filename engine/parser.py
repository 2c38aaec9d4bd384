"""Tokenizer and recursive-descent parser for the supported SurrealQL SELECT subset.

The parser produces a small AST made of tuples (cheap to hash, so a normalised AST doubles as
the shape key of a query).  Anything outside the subset raises :class:`QueryRejected` with a
message naming the clause, function or operator, so no clause is ever dropped silently.

Expression nodes:

- ``("lit", value)``               literal (SurrealDB-typed Python value; NONE sentinel for NONE)
- ``("param", name, path)``        ``$name.path`` (not ``$parent``)
- ``("parent", path)``             ``$parent.path`` (correlation with the outer row)
- ``("field", path)``              field path on the current row (may traverse record links)
- ``("array", items)``             array literal whose items are expressions
- ``("and", a, b)``, ``("or", a, b)``, ``("not", a)``
- ``("cmp", op, a, b)``            op in :data:`COMPARISON_OPS`
- ``("arith", op, a, b)``          ``+ - * / % **``
- ``("neg", a)``                   unary minus of a non-literal
- ``("nullish", op, a, b)``        ``a ?? b`` (a unless NONE/NULL), ``a ?: b`` (a when truthy)
- ``("call", name, args)``         a function of :mod:`engine.functions`
- ``("index", base, i)``           ``base[i]``: i is ``("lit", int | str)``, a parameter or
                                   ``("last",)`` for ``[$]``
- ``("get", base, path)``          a field path read from a computed value (``tags[0].name``)
- ``("subquery", Query)``          ``(SELECT VALUE ...)`` as a value (only ``x IN (sub)``:
                                   :mod:`engine.semijoin`)
- ``("graph", hops)``              ``->edge->table`` from the row: hops ``(arrow, edge,
                                   target)``, target None when the path ends at the edges
- ``("deref", e)``                 ``e.*``: record ids replaced by their rows
- ``("slot", i)``                  only after normalisation (see :mod:`engine.shape`)

A chain of ``n`` terms joined by the same AND (or OR) is built as a balanced binary tree
(height ``ceil(log2 n)``), not a left-leaning one (height ``n - 1``): both evaluate the terms
left to right with the same short-circuit, and every later stage (normalisation, compilation,
dependency walks) recurses over the tree, so a wide query stays shallow.

Limits (documented in ``engine/README.md``): a query longer than :data:`MAX_QUERY_CHARS`, or
nested deeper than :data:`MAX_DEPTH`, is refused with :class:`QueryRejected` naming the limit.
Everything the parser accepts is therefore shallow enough for the recursive stages after it.
"""

from __future__ import annotations

from typing import Any

from engine.errors import QueryRejected
from engine.grammar import _Parser, _too_deep
from engine.lexer import (
    Tok,
    parse_datetime,
    tokenize,
)
from engine.syntax import (
    COMPARISON_OPS,
    MAX_DEPTH,
    MAX_QUERY_CHARS,
    Expr,
    Item,
    Path,
    Query,
)

__all__ = ["COMPARISON_OPS", "MAX_DEPTH", "MAX_QUERY_CHARS", "Expr", "Item", "Path", "Query",
           "Tok", "parse", "parse_cached", "parse_datetime", "query_tables", "tokenize"]

_COMPOSITE = frozenset({"and", "or", "not", "cmp", "array", "object", "arith", "nullish",
                        "neg", "call", "index", "get", "deref"})


def _height(e: Expr) -> int:
    """Height of an expression tree (leaves 0), computed without recursion."""
    best = 0
    stack: list[tuple[Expr, int]] = [(e, 0)]
    while stack:
        node, above = stack.pop()
        if node[0] not in _COMPOSITE:
            continue
        level = above + 1
        best = max(best, level)
        k = node[0]
        if k in ("cmp", "arith", "nullish"):
            children: Any = (node[2], node[3])
        elif k == "array":
            children = node[1]
        elif k in ("object", "call"):
            children = node[2]
        elif k == "index":
            children = (node[1], node[2])
        elif k in ("get", "deref"):
            children = (node[1],)
        else:
            children = node[1:]
        stack.extend((c, level) for c in children)
    return best


def _subqueries(e: Any, acc: list[Query]) -> None:
    """The subqueries used as values inside an expression (``x IN (SELECT VALUE ...)``)."""
    stack = [e]
    while stack:
        node = stack.pop()
        if type(node) is not tuple or not node:
            continue
        if node[0] == "subquery":
            acc.append(node[1])
            continue
        stack.extend(x for x in node if type(x) is tuple)


def _check_heights(q: Query) -> None:
    """Every expression tree of ``q`` and of its subqueries is at most MAX_DEPTH high."""
    queries = [q]
    while queries:
        cur = queries.pop()
        exprs = [cur.where, cur.limit, cur.start, *(it.expr for it in cur.items)]
        for e in exprs:
            if e is not None and _height(e) > MAX_DEPTH:
                raise QueryRejected(_too_deep())
            _subqueries(e, queries)
        queries.extend(it.sub for it in cur.items if it.sub is not None)


def query_tables(q: Query) -> tuple[list[str], list[str]]:
    """(every table the query reads by name, the tables of its projection subqueries), each
    sorted. Tables reached only by following record links are not named by the query and
    are not included (which ones depends on the data)."""
    subs: set[str] = set()
    pending = [it.sub for it in q.items if it.sub is not None]
    _subqueries(q.where, pending)
    while pending:
        cur = pending.pop()
        subs.add(cur.table)
        pending.extend(it.sub for it in cur.items if it.sub is not None)
        _subqueries(cur.where, pending)
    return sorted(subs | {q.table}), sorted(subs)


def parse(text: str) -> Query:
    """Parse one SELECT statement of the supported subset or raise :class:`QueryRejected`."""
    if not isinstance(text, str):
        raise QueryRejected(f"the query must be a string, got {type(text).__name__}")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryRejected(f"the query is {len(text):,} characters long; the limit is "
                            f"{MAX_QUERY_CHARS:,} (MAX_QUERY_CHARS)")
    if not text.strip():
        raise QueryRejected("the query is empty")
    q = _Parser(text).statement()
    _check_heights(q)
    return q


_PARSED: dict[str, Query] = {}
_PARSED_MAX = 10_000


def parse_cached(text: str) -> Query:
    """:func:`parse`, remembered by text: many registrations share a query text (per-user
    views), parsing is pure and a ``Query`` is immutable. A query that does not parse is
    not remembered (it raises every time); the memory is cleared when it holds
    ``_PARSED_MAX`` texts."""
    q = _PARSED.get(text) if type(text) is str else None
    if q is None:
        q = parse(text)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = q
    return q
