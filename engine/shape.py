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
from engine.functions import EvalError, arith, call, index, negate
from engine.parser import Expr, Query
from engine.values import NONE, get_path, truthy

_FOLDABLE = frozenset({"arith", "neg", "nullish", "call", "index"})
_AGGREGATES = frozenset({"count", "math::sum", "math::mean", "math::min", "math::max"})


def _has_param(e: Any) -> bool:
    if type(e) is not tuple or not e:
        return False
    if e[0] == "param":
        return True
    return any(_has_param(x) for x in e[1:])


class _Normaliser:
    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params
        self.values: list[Any] = []
        # projection expressions keep their literals (a projection's constants are part of
        # its shape; only parameters vary between the views of one shape)
        self.keep_literals = False
        self.grouped = False  # normalising the items of a GROUP BY query

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
        if k in _FOLDABLE:
            if k == "call" and self.grouped and e[1] in _AGGREGATES:
                return False, None  # over a group, not a constant (`count()`)
            return self._fold(e)
        return False, None

    def _fold(self, e: Expr) -> tuple[bool, Any]:
        """A pure expression over constants, computed once (False when it raises: then every
        row evaluates it, and raises, as SurrealDB would)."""
        k = e[0]
        parts = ([e[2], e[3]] if k in ("arith", "nullish") else [e[1]] if k == "neg"
                 else list(e[2]) if k == "call" else [e[1]])
        vals = []
        for p in parts:
            ok, v = self.const_value(p)
            if not ok:
                return False, None
            vals.append(v)
        try:
            if k == "arith":
                return True, arith(e[1], vals[0], vals[1])
            if k == "neg":
                return True, negate(vals[0])
            if k == "nullish":
                a = vals[0]
                if e[1] == "??":
                    return True, (vals[1] if a is None or a is NONE else a)
                return True, (a if truthy(a) else vals[1])
            if k == "call":
                return True, call(e[1], *vals)
            i = e[2]
            if i[0] == "last":
                return True, index(vals[0], ...)
            ok, iv = self.const_value(i)
            if not ok:
                return False, None
            return True, index(vals[0], iv)
        except EvalError:
            return False, None

    def expr(self, e: Expr) -> Expr:
        ok, value = self.const_value(e)
        if ok:
            if self.keep_literals and not _has_param(e):
                return ("lit", value)
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
        if k in ("arith", "nullish"):
            return (k, e[1], self.expr(e[2]), self.expr(e[3]))
        if k == "neg":
            return ("neg", self.expr(e[1]))
        if k == "call":
            return ("call", e[1], tuple(self.expr(x) for x in e[2]))
        if k == "index":
            i = e[2]
            if i[0] == "param":
                ok, iv = self.const_value(i)
                i = self.slot(iv)
            return ("index", self.expr(e[1]), i)
        if k == "get":
            return ("get", self.expr(e[1]), e[2])
        if k == "deref":
            return ("deref", self.expr(e[1]))
        if k == "subquery":
            keep = self.keep_literals
            self.keep_literals = False
            try:
                return ("subquery", self.query(e[1]))
            finally:
                self.keep_literals = keep
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
            elif it.kind == "expr":
                assert it.expr is not None
                self.keep_literals = True
                self.grouped = q.group is not None
                try:
                    items.append(replace(it, expr=self.expr(it.expr)))
                finally:
                    self.keep_literals = self.grouped = False
            else:
                items.append(it)
        where = self.expr(q.where) if q.where is not None else None
        limit = self.count(q.limit, "LIMIT")
        start = self.count(q.start, "START")
        return replace(q, items=tuple(items), where=where, limit=limit, start=start)


def normalise(q: Query, params: Mapping[str, Any] | None) -> tuple[Query, tuple[Any, ...]]:
    """Return (shape, slot values): the query with every constant replaced by ``("slot", i)``."""
    n = _Normaliser(params or {})
    shape = n.query(q)
    validate(shape)
    return shape, tuple(n.values)


def order_key(q: Query, path: tuple[str, ...]) -> Expr:
    """What an ORDER BY path (which must name a selected field) sorts by, as an expression
    over the row: ``("field", source path)`` for a selected field, or the expression a
    projection item computes at that name.

    SurrealDB 3.x orders by the selected output; the key of a row is therefore read from the
    field the projection puts at that output path. ``SELECT VALUE`` orders by the row's own
    fields.
    """
    if q.value:
        return ("field", path)
    for it in q.items:
        if it.kind == "field" and path[: len(it.out)] == it.out:
            return ("field", it.path + path[len(it.out):])
        if it.kind == "expr" and not it.implicit and path[: len(it.out)] == it.out:
            assert it.expr is not None
            if len(path) > len(it.out):
                return ("get", it.expr, path[len(it.out):])
            return it.expr
        if it.kind in ("sub", "linkall") and path[: len(it.out)] == it.out:
            raise QueryRejected(
                f"ORDER BY {'.'.join(path)} over a subquery or link.* result is not supported"
            )
    if any(it.kind == "all" for it in q.items):
        return ("field", path)
    raise QueryRejected(f"ORDER BY {'.'.join(path)} must name a field of the selection")


def order_source(q: Query, path: tuple[str, ...]) -> tuple[str, ...] | None:
    """The source path of an ORDER BY key read from a field (:func:`order_key`), None when
    the key is a computed expression."""
    key = order_key(q, path)
    return tuple(key[1]) if key[0] == "field" else None


def _check_split(q: Query) -> None:
    """SPLIT splits the row on a source path the selection reads (SurrealDB refuses another:
    missing split idiom); no window over split rows, no grouping or VALUE."""
    if q.limit is not None or q.start is not None:
        raise QueryRejected("SPLIT with LIMIT/START is not supported: a window over split rows "
                            "can hold part of a row; select the rows without SPLIT")
    if q.value or q.group is not None:
        raise QueryRejected("SPLIT with SELECT VALUE or GROUP BY is not supported")
    star = any(it.kind == "all" for it in q.items)
    for path in q.split:
        if not star and not any(it.kind == "field" and it.path == path for it in q.items):
            raise QueryRejected(f"SPLIT {'.'.join(path)} must name a field of the selection")


def _has_slot(e: Any) -> bool:
    if type(e) is not tuple or not e:
        return False
    if e[0] == "slot":
        return True
    return any(_has_slot(x) for x in e[1:])


def validate(q: Query) -> None:
    """Reject queries SurrealDB itself would refuse or that the engine cannot order."""
    for path, _desc in q.order if q.group is None else ():
        key = order_key(q, path)
        if key[0] != "field" and _has_slot(key):
            raise QueryRejected(
                f"ORDER BY {'.'.join(path)}: the expression it names reads a parameter, "
                "which the views of one shape do not share; order by a field or an "
                "expression of the row alone")
    outs = [it.out for it in q.items if it.kind != "all"]
    for it in q.items:
        if it.kind == "sub":
            assert it.sub is not None
            validate(it.sub)
    if q.split:
        _check_split(q)
    if q.group is not None:
        from engine.aggregate import AggSpec

        AggSpec(q)  # refuses what a grouped view cannot keep
    if q.value:
        if q.fetch:
            raise QueryRejected("FETCH with SELECT VALUE is not supported: follow the link in "
                                "the value instead (`SELECT VALUE author.* FROM ...`)")
        if q.omit:
            raise QueryRejected("OMIT with SELECT VALUE is not supported (a value has no "
                                "fields to leave out)")
    del outs
