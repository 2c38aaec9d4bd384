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
_UNSUPPORTED_SYMBOL_OPS = {
    "?=", "*=", "!~", "?~", "*~", "~", "+", "-", "*", "/", "**", "??", "?:", "@@", "∋", "∌", "⊇",
    "⊃", "⊅", "∈", "∉", "⊆", "⊂", "⊄", "×", "÷", "+=", "-=", "->", "<-", "<->", "%",
}

# Clauses SurrealDB's SELECT accepts that this engine does not; each is refused by name.
_UNSUPPORTED_CLAUSES = {
    "GROUP": "GROUP BY",
    "SPLIT": "SPLIT",
    "WITH": "WITH",
    "TIMEOUT": "TIMEOUT",
    "PARALLEL": "PARALLEL",
    "EXPLAIN": "EXPLAIN",
    "TEMPFILES": "TEMPFILES",
    "VERSION": "VERSION",
    "OMIT": "OMIT",
}


@dataclass(frozen=True)
class Item:
    """One projection item.

    kind: ``all`` (``*``), ``field`` (a path, output at ``out``), ``linkall`` (``path.*``),
    ``sub`` (a subquery, optionally indexed with ``[n]``).
    """

    kind: str
    path: Path = ()
    out: Path = ()
    sub: Query | None = None
    index: int | None = None


@dataclass(frozen=True)
class Query:
    """A parsed SELECT statement of the supported subset."""

    items: tuple[Item, ...]
    table: str
    where: Expr | None = None
    order: tuple[tuple[Path, bool], ...] = ()  # (path, descending)
    limit: Expr | None = None
    start: Expr | None = None
    fetch: tuple[Path, ...] = field(default_factory=tuple)
