"""Shape normalisation: a query with its literals and parameters replaced by numbered slots.

Views whose queries differ only in constants (``author = user:1`` vs ``author = $auth.id`` with
another user) normalise to the same :class:`~engine.parser.Query` and share one compiled
circuit; the constants travel separately as the slot values of each materialisation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from engine.errors import QueryRejected
from engine.parser import Expr, Query
from engine.values import NONE, get_path


class _Normaliser:
    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params
        self.values: list[Any] = []

    def slot(self, value: Any) -> Expr:
        self.values.append(value)
        return ("slot", len(self.values) - 1)

    def param_value(self, name: str, path: tuple[str, ...]) -> Any:
        if name not in self.params:
            value: Any = NONE
        else:
            value = self.params[name]
        if path:
            value = get_path(value, path)
        return value

    def const_value(self, e: Expr) -> tuple[bool, Any]:
        """(True, value) when ``e`` is a constant (literal, parameter, or array/object of them)."""
        k = e[0]
        if k == "lit":
            return True, e[1]
        if k == "param":
            return True, self.param_value(e[1], e[2])
        if k == "array":
            out = []
            for item in e[1]:
                ok, v = self.const_value(item)
                if not ok:
                    return False, None
                out.append(v)
            return True, out
        if k == "object":
            obj = {}
            for key, item in zip(e[1], e[2]):
                ok, v = self.const_value(item)
                if not ok:
                    return False, None
                obj[key] = v
            return True, obj
        return False, None

    def expr(self, e: Expr) -> Expr:
        ok, value = self.const_value(e)
        if ok:
            return self.slot(value)
        k = e[0]
        if k in ("and", "or"):
            return (k, self.expr(e[1]), self.expr(e[2]))
        if k == "not":
            return ("not", self.expr(e[1]))
        if k == "cmp":
            return ("cmp", e[1], self.expr(e[2]), self.expr(e[3]))
        if k == "array":
            return ("array", tuple(self.expr(x) for x in e[1]))
        if k == "object":
            return ("object", e[1], tuple(self.expr(x) for x in e[2]))
        return e  # field, parent

    def count(self, e: Expr | None, clause: str) -> Expr | None:
        if e is None:
            return None
        ok, value = self.const_value(e)
        if not ok:
            raise QueryRejected(f"{clause} must be a constant")
        if value is NONE or value is None:
            return None
        if type(value) is not int or value < 0:
            raise QueryRejected(f"{clause} must be a non-negative integer, got {value!r}")
        return self.slot(value)

    def query(self, q: Query) -> Query:
        items = []
        for it in q.items:
            if it.kind == "sub":
                assert it.sub is not None
                items.append(replace(it, sub=self.query(it.sub)))
            else:
                items.append(it)
        where = self.expr(q.where) if q.where is not None else None
        limit = self.count(q.limit, "LIMIT")
        start = self.count(q.start, "START")
        return Query(tuple(items), q.table, where, q.order, limit, start, q.fetch)


def normalise(q: Query, params: Mapping[str, Any] | None) -> tuple[Query, tuple[Any, ...]]:
    """Return (shape, slot values): the query with every constant replaced by ``("slot", i)``."""
    n = _Normaliser(params or {})
    shape = n.query(q)
    validate(shape)
    return shape, tuple(n.values)


def order_source(q: Query, path: tuple[str, ...]) -> tuple[str, ...]:
    """Map an ORDER BY path (which must name a selected field) to the source path on the row.

    SurrealDB 3.x orders by the selected output; the key of a row is therefore read from the
    field the projection puts at that output path.
    """
    for it in q.items:
        if it.kind == "field" and path[: len(it.out)] == it.out:
            return it.path + path[len(it.out):]
        if it.kind in ("sub", "linkall") and path[: len(it.out)] == it.out:
            raise QueryRejected(
                f"ORDER BY {'.'.join(path)} over a subquery or link.* result is not supported"
            )
    if any(it.kind == "all" for it in q.items):
        return path
    raise QueryRejected(f"ORDER BY {'.'.join(path)} must name a field of the selection")


def validate(q: Query) -> None:
    """Reject queries SurrealDB itself would refuse or that the engine cannot order."""
    for path, _desc in q.order:
        order_source(q, path)
    for it in q.items:
        if it.kind == "sub":
            assert it.sub is not None
            validate(it.sub)
