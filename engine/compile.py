"""Compile normalised WHERE expressions into Python functions.

A predicate compiles once per shape into ``f(row, S, par, cx) -> bool`` where ``S`` holds the
slot values of one materialisation, ``par`` is the ``$parent`` row (NONE at top level) and
``cx`` is the evaluation context that resolves record links and records which linked records
were read (the dependencies that can move the row in or out later).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from surrealdb import RecordID

from engine import values as V
from engine.errors import QueryRejected
from engine.parser import Expr
from engine.values import NONE


class Resolver(Protocol):
    """What path walking needs from the engine: fetch a linked row, recording the read."""

    def fetch(self, rid: RecordID) -> dict[str, Any] | None: ...


def walk(v: Any, path: tuple[str, ...], cx: Resolver) -> Any:
    """SurrealDB field path semantics with record links followed (and recorded) through ``cx``.

    A field of an array maps over its elements; a field of a record id reads the linked row
    (NONE when it does not exist); a field of anything else is NONE.
    """
    i = 0
    n = len(path)
    while i < n:
        t = type(v)
        if t is dict:
            v = v.get(path[i], NONE)
        elif t is RecordID:
            target = cx.fetch(v)
            if target is None:
                return NONE
            v = target.get(path[i], NONE)
        elif t is list or t is tuple:
            rest = path[i:]
            return [walk(x, rest, cx) for x in v]
        else:
            return NONE
        i += 1
    return v


_CMP_FUNCS: dict[str, Callable[[Any, Any], bool]] = {
    "=": V.equals,
    "!=": V.not_equals,
    "<": V.less,
    "<=": V.less_equal,
    ">": V.greater,
    ">=": V.greater_equal,
    "contains": V.contains,
    "containsnot": V.contains_not,
    "containsany": V.contains_any,
    "containsall": V.contains_all,
    "inside": V.inside,
    "notinside": V.not_inside,
}


class _Gen:
    def __init__(self) -> None:
        self.consts: list[Any] = []
        self.uses_links = False

    def const(self, v: Any) -> str:
        self.consts.append(v)
        return f"K[{len(self.consts) - 1}]"

    def value(self, e: Expr) -> str:
        k = e[0]
        if k == "slot":
            return f"S[{e[1]}]"
        if k == "lit":
            return self.const(e[1])
        if k == "field":
            path = e[1]
            if len(path) == 1:
                return f"row.get({path[0]!r}, NONE)"
            self.uses_links = True
            return f"walk(row, {path!r}, cx)"
        if k == "parent":
            path = e[1]
            if not path:
                return "par"
            self.uses_links = True
            if len(path) == 1:
                # the parent is a row (a dict): one segment reads it without a walk
                return (f"(par.get({path[0]!r}, NONE) if type(par) is dict "
                        f"else walk(par, {path!r}, cx))")
            return f"walk(par, {path!r}, cx)"
        if k == "array":
            return "[" + ", ".join(self.value(x) for x in e[1]) + "]"
        if k == "object":
            return "{" + ", ".join(f"{key!r}: {self.value(x)}" for key, x in zip(e[1], e[2])) + "}"
        if k in ("cmp", "and", "or", "not"):
            return self.boolean(e)
        raise QueryRejected(f"unsupported expression {k}")

    def boolean(self, e: Expr) -> str:
        k = e[0]
        if k == "and":
            return f"({self.boolean(e[1])} and {self.boolean(e[2])})"
        if k == "or":
            return f"({self.boolean(e[1])} or {self.boolean(e[2])})"
        if k == "not":
            return f"(not {self.boolean(e[1])})"
        if k == "cmp":
            op = e[1]
            a = self.value(e[2])
            b = self.value(e[3])
            return f"{_fname(op)}({a}, {b})"
        return f"truthy({self.value(e)})"


def _fname(op: str) -> str:
    return "op_" + {"=": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}.get(op, op)


def compile_predicate(e: Expr | None) -> tuple[Callable[..., bool], bool]:
    """Compile a WHERE expression into ``f(row, S, par, cx)``; also say whether it reads links."""
    if e is None:
        return (lambda row, S, par, cx: True), False
    g = _Gen()
    body = g.boolean(e)
    env: dict[str, Any] = {
        "NONE": NONE,
        "walk": walk,
        "truthy": V.truthy,
        "K": g.consts,
    }
    for op, f in _CMP_FUNCS.items():
        env[_fname(op)] = f
    src = f"def _pred(row, S, par, cx):\n    return {body}\n"
    # Generated from our own AST (field names go through repr), never from raw query text.
    exec(compile(src, "<view-predicate>", "exec"), env)  # noqa: S102
    return env["_pred"], g.uses_links


def compile_value(path: tuple[str, ...]) -> Callable[[dict[str, Any], Resolver], Any]:
    """A getter for one (possibly link-following) path on a row."""
    if len(path) == 1:
        key = path[0]
        return lambda row, cx: row.get(key, NONE)
    return lambda row, cx: walk(row, path, cx)


def compile_expr(e: Expr) -> Callable[..., Any]:
    """Compile a value expression (a ``$parent`` path, a slot, an array of them...) into
    ``f(row, S, par, cx)``, evaluated with the operators of :func:`compile_predicate`."""
    g = _Gen()
    body = g.value(e)
    env: dict[str, Any] = {"NONE": NONE, "walk": walk, "truthy": V.truthy, "K": g.consts}
    for op, f in _CMP_FUNCS.items():
        env[_fname(op)] = f
    src = f"def _value(row, S, par, cx):\n    return {body}\n"
    # Generated from our own AST (field names go through repr), never from raw query text.
    exec(compile(src, "<view-value>", "exec"), env)  # noqa: S102
    return env["_value"]
