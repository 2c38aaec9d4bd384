"""The AST of the supported SurrealQL SELECT subset (what `engine.parser.parse` returns:
`Query`, `Item`, expression tuples described in `engine.parser`) and the parser's limits and
operator tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Expr = tuple[Any, ...]
Path = tuple[str, ...]

#: Longest query text accepted, in characters.
MAX_QUERY_CHARS = 100_000
#: Deepest nesting accepted: both the brackets open at once (parentheses, ``[]``, ``{}``,
#: ``NOT``/``!``, projection subqueries) and the height of each expression tree (one level per
#: comparison, NOT, array, object and AND/OR node; see the module docstring for chains).
MAX_DEPTH = 64

#: Canonical comparison operator names used in the AST.
COMPARISON_OPS = frozenset(
    {
        "=", "!=", "<", "<=", ">", ">=",
        "contains", "containsnot", "containsany", "containsall",
        "inside", "notinside",
    }
)

_KEYWORD_OPS = {
    "CONTAINS": "contains",
    "CONTAINSNOT": "containsnot",
    "CONTAINSANY": "containsany",
    "CONTAINSALL": "containsall",
    "INSIDE": "inside",
    "IN": "inside",
    "NOTINSIDE": "notinside",
    "IS": "=",
}
_UNSUPPORTED_KEYWORD_OPS = {
    "CONTAINSNONE", "NONEINSIDE", "ALLINSIDE", "ANYINSIDE", "OUTSIDE", "INTERSECTS", "MATCHES",
}
_SYMBOL_OPS = {"=": "=", "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
#: comparisons SurrealDB evaluates after the relational ones (`true = 2 < 1` is false)
EQUALITY_OPS = frozenset({"=", "!="})
#: arithmetic operators (AST ``("arith", op, a, b)``), by binding level
ADDITIVE_OPS = frozenset({"+", "-"})
MULTIPLICATIVE_OPS = frozenset({"*", "/", "%", "×", "÷"})
_ARITH_NAMES = {"×": "*", "÷": "/"}
#: null-coalescing (`??`: the left side unless NONE or NULL) and truthy-or (`?:`)
NULLISH_OPS = frozenset({"??", "?:"})
_UNSUPPORTED_SYMBOL_OPS = {
    "?=", "*=", "!~", "?~", "*~", "~", "@@", "∋", "∌", "⊇",
    "⊃", "⊅", "∈", "∉", "⊆", "⊂", "⊄", "+=", "-=", "->", "<-", "<->",
}

# Clauses SurrealDB's SELECT accepts that this engine does not; each is refused by name.
_UNSUPPORTED_CLAUSES = {
    "WITH": "WITH",
    "TIMEOUT": "TIMEOUT",
    "PARALLEL": "PARALLEL",
    "EXPLAIN": "EXPLAIN",
    "TEMPFILES": "TEMPFILES",
    "VERSION": "VERSION",
}


@dataclass(frozen=True)
class Item:
    """One projection item.

    kind: ``all`` (``*``), ``field`` (a path, output at ``out``), ``linkall`` (``path.*``),
    ``sub`` (a subquery, optionally indexed with ``[n]``), ``expr`` (any other expression:
    functions, arithmetic, indexing, comparisons; its value is put at ``out``).
    """

    kind: str
    path: Path = ()
    out: Path = ()
    sub: Query | None = None
    index: int | None = None
    expr: Expr | None = None
    # named by SurrealDB's default rather than AS (`tags[0]` shows as `tags`): such a name
    # is no ORDER BY or SPLIT idiom
    implicit: bool = False


@dataclass(frozen=True)
class Query:
    """A parsed SELECT statement of the supported subset.

    ``value``: ``SELECT VALUE`` (one item; each row is that item's value, not an object).
    ``omit``: paths removed from every output row (``OMIT``). ``group``: the ``GROUP BY``
    output names (``()`` with ``GROUP ALL``; None without grouping). ``split``: ``SPLIT``
    paths (each row repeated once per element of the array at that path)."""

    items: tuple[Item, ...]
    table: str
    where: Expr | None = None
    order: tuple[tuple[Path, bool], ...] = ()  # (path, descending)
    limit: Expr | None = None
    start: Expr | None = None
    fetch: tuple[Path, ...] = field(default_factory=tuple)
    value: bool = False
    omit: tuple[Path, ...] = ()
    group: tuple[Path, ...] | None = None
    split: tuple[Path, ...] = ()


# Walks of an expression tree every planner needs (the circuit's index plan, joins,
# semi-joins, the plan's equality lookups): written once here, beside the tree's shape.

def conjuncts(e: Expr | None) -> list[Expr]:
    """The top-level AND-ed parts of a WHERE expression (none for no WHERE)."""
    if e is None:
        return []
    if e[0] == "and":
        return conjuncts(e[1]) + conjuncts(e[2])
    return [e]


def conjoin(parts: list[Expr]) -> Expr | None:
    """The parts AND-ed back together, left to right (None for no parts)."""
    out: Expr | None = None
    for c in parts:
        out = c if out is None else ("and", out, c)
    return out


def collect_slots(e: Any, acc: set[int], *, into_queries: bool = False) -> None:
    """Add to ``acc`` the parameter slots ``e`` reads; with ``into_queries``, also those of
    the subqueries inside it (their WHERE, LIMIT, START and projections)."""
    if into_queries and isinstance(e, Query):
        query_slots(e, acc)
        return
    if type(e) is not tuple or not e:
        return
    if e[0] == "slot" and len(e) == 2 and type(e[1]) is int:
        acc.add(e[1])
        return
    for x in e:
        collect_slots(x, acc, into_queries=into_queries)


def query_slots(q: Query, acc: set[int]) -> None:
    """The slots a whole query reads, its subqueries' included."""
    for e in (q.where, q.limit, q.start):
        collect_slots(e, acc, into_queries=True)
    for it in q.items:
        if it.sub is not None:
            query_slots(it.sub, acc)
        collect_slots(it.expr, acc, into_queries=True)
