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

from engine import functions as F
from engine import values as V
from engine.errors import QueryRejected
from engine.parser import Expr
from engine.store import ikey
from engine.values import NONE


class Resolver(Protocol):
    """What path walking needs from the engine: fetch a linked row, recording the read."""

    def fetch(self, rid: RecordID) -> dict[str, Any] | None: ...


def walk(v: Any, path: tuple[str, ...], cx: Resolver,
         end: Callable[[Any, Any], Any] | None = None) -> Any:
    """SurrealDB field path semantics with record links followed (and recorded) through ``cx``.

    A field of an array maps over its elements; a field of a record id reads the linked row
    (NONE when it does not exist); a field of anything else is NONE. ``end`` (the rest of
    the idiom after the path, ``.*``) applies to the value the path reaches, or to each
    element's where the walk maps over an array.
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
            return [walk(x, rest, cx, end) for x in v]
        else:
            return NONE
        i += 1
    return v if end is None else end(v, cx)


def deref(v: Any, cx: Any) -> Any:
    """``v.*``: a record id becomes its row (NONE when missing), arrays map over their
    elements, objects stay, anything else is NONE."""
    t = type(v)
    if t is RecordID:
        row = cx.fetch(v)
        return NONE if row is None else row
    if t is list or t is tuple:
        return [deref_element(x, cx) for x in v]
    if t is dict:
        return v
    return NONE


def deref_element(v: Any, cx: Any) -> Any:
    if type(v) is RecordID:
        row = cx.fetch(v)
        return NONE if row is None else row
    return v


def traverse(row: dict[str, Any], hops: tuple[tuple[str, str, str | None], ...],
             cx: Any) -> list[Any]:
    """``->edge->table`` from ``row``: at each hop, the edges whose ``in`` (``->``) or
    ``out`` (``<-``) is one of the current records, in edge id order (SurrealDB's graph
    index order), then their other end when it is in the target table. An edge is a row of
    the edge table with record links ``in`` and ``out``. Reads are recorded in ``cx`` as
    subquery scans ``(edge table, in|out, key)`` and as tokens (engine.core requalifies
    the rows of views whose condition traversed a changed edge).

    A hop's edges from one record are kept on the edge table (``TableStore.hops``) until an
    edge at that record is written: a parent projected again because a record at the far
    end changed (a liked thread's title) reads them instead of sorting its edges again."""
    start = row.get("id", NONE)
    if type(start) is not RecordID:
        return []
    current: list[Any] = [start]
    store = cx.store
    for arrow, edge, target in hops:
        near, far = ("in", "out") if arrow == "->" else ("out", "in")
        t = store.table(edge)
        memo = t.hops.get(near)
        if memo is None:
            memo = t.hops[near] = {}
        found: list[Any] = []
        for r in current:
            key = ikey(r)
            cx.subs.append((edge, near, key))
            cx.reads.add(graph_token(edge, near, key))
            got = memo.get(key)
            if got is not None and (got[0] is r or V.equals(got[0], r)):
                pairs = got[1]
            else:
                pairs = _edges(t, near, far, key, r)
                memo[key] = (r, pairs)
            for eid, o in pairs:
                if target is None:
                    found.append(eid)
                elif target == "?" or o.table_name == target:
                    found.append(o)
        current = found
    return current


#: edges read by ``_edges`` over the process's life (a work count the tests read)
EDGES_READ = [0]


def _edges(t: Any, near: str, far: str, key: Any, r: Any) -> list[tuple[Any, Any]]:
    """(edge id, other end) of the edges of table ``t`` whose ``near`` end is ``r`` (its
    index key ``key``) and whose other end is a record, in edge id order."""
    rows = t.rows
    edges = []
    ids = t.index(near).get(key, ())
    EDGES_READ[0] += len(ids)
    for eid in ids:
        e = rows[eid]
        other = e.get(near)
        o = e.get(far)
        if type(other) is RecordID and V.equals(other, r) and type(o) is RecordID:
            edges.append((V.sort_key(e["id"]), e["id"], o))
    edges.sort(key=_first)
    return [(x[1], x[2]) for x in edges]


def _first(pair: tuple[Any, ...]) -> Any:
    return pair[0]


def graph_token(edge: str, field: str, key: Any) -> str:
    """What a view's condition depends on when it traversed ``edge`` by ``field = key``."""
    return f"\0graph:{edge}:{field}:{key!r}"


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


# nodes whose evaluation can raise EvalError (SurrealDB answers an error there)
_RAISING = frozenset({"arith", "neg", "call"})


def can_raise(e: Any) -> bool:
    """Whether evaluating ``e`` may raise :class:`engine.functions.EvalError`."""
    if type(e) is not tuple or not e:
        return False
    if e[0] in _RAISING:
        return True
    return any(can_raise(x) for x in e[1:] if type(x) is tuple)


class _Gen:
    def __init__(self, semis: list[Any] | None = None,
                 make_semi: Callable[[Any], Any] | None = None) -> None:
        self.consts: list[Any] = []
        self.fns: list[Any] = []
        self.uses_links = False
        self.temps = 0
        self.semis = semis  # where the semi-joins of a condition go (engine.semijoin)
        # engine.semijoin.SemiSpec, passed in: that module compiles its inner query with this
        # one, so importing it here would tie the two modules (and the planner) in a cycle
        self.make_semi = make_semi

    def const(self, v: Any) -> str:
        self.consts.append(v)
        return f"K[{len(self.consts) - 1}]"

    def fn(self, f: Any) -> str:
        self.fns.append(f)
        return f"FN[{len(self.fns) - 1}]"

    def temp(self) -> str:
        self.temps += 1
        return f"_t{self.temps}"

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
        if k == "aggval":
            # an aggregate's value over a group (engine.aggregate passes them as `par`)
            return f"par[{int(e[1])}]"
        if k == "arith":
            return f"AR({e[1]!r}, {self.value(e[2])}, {self.value(e[3])})"
        if k == "neg":
            return f"NEG({self.value(e[1])})"
        if k == "call":
            args = ", ".join(self.value(x) for x in e[2])
            return f"{self.fn(F.FUNCTIONS[e[1]][0])}({args})"
        if k == "index":
            i = e[2]
            iv = "..." if i[0] == "last" else self.value(i)
            return f"IDX({self.value(e[1])}, {iv})"
        if k == "get":
            self.uses_links = True
            return f"walk({self.value(e[1])}, {tuple(e[2])!r}, cx)"
        if k == "deref":
            self.uses_links = True
            return f"DEREF({self.value(e[1])}, cx)"
        if k == "graph":
            self.uses_links = True  # reads the edge tables (engine.graph)
            return f"GRAPH(row, {tuple(e[1])!r}, cx)"
        if k == "nullish":
            t = self.temp()
            if e[1] == "??":
                return f"({self.value(e[3])} if NN({t} := {self.value(e[2])}) else {t})"
            return f"({t} if truthy({t} := {self.value(e[2])}) else {self.value(e[3])})"
        if k in ("and", "or"):
            # SurrealDB's AND/OR answer an operand, not a bool (`0 OR 'x'` is 'x')
            t = self.temp()
            first = self.value(e[1])
            second = self.value(e[2])
            if k == "and":
                return f"({second} if truthy({t} := {first}) else {t})"
            return f"({t} if truthy({t} := {first}) else {second})"
        if k in ("cmp", "not"):
            return self.boolean(e)
        if k == "subquery":
            raise QueryRejected(_SUBQUERY_FORMS)
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
            if e[3][0] == "subquery" and op in ("inside", "notinside"):
                return self.semi(e[3][1], e[2], op == "notinside")
            if e[2][0] == "subquery" and op in ("contains", "containsnot"):
                return self.semi(e[2][1], e[3], op == "containsnot")
            a = self.value(e[2])
            b = self.value(e[3])
            return f"{_fname(op)}({a}, {b})"
        return f"truthy({self.value(e)})"

    def semi(self, q: Any, x: Expr, negate: bool) -> str:
        """``x IN (SELECT VALUE ...)``: a lookup in the inner query's live set."""
        if self.semis is None or self.make_semi is None:
            raise QueryRejected(_SUBQUERY_FORMS)
        # The same subquery compiled again (a plan compiles its WHERE whole and, without the
        # equality its index looks up, as the residual) tests the same set: one spec, one
        # set built and maintained, not one per compilation (two 20k-row builds per view of
        # bench_mixes seed 101 S03, and two updates per write of the inner table)
        i = next((i for i, old in enumerate(self.semis) if old.q is q and old.outer is x),
                 None)
        if i is None:
            spec = self.make_semi(q)
            spec.outer = x  # what the outer row tests (engine.plan: sets keyed by a row field)
            self.semis.append(spec)
            i = len(self.semis) - 1
        self.uses_links = True  # the row's qualification reads the set (engine.semijoin)
        test = f"SJ[{i}].contains(S, {self.value(x)}, cx)"
        return f"(not {test})" if negate else test


def _fname(op: str) -> str:
    return "op_" + {"=": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}.get(op, op)


_SUBQUERY_FORMS = ("a subquery in WHERE is supported as `x IN (SELECT VALUE f FROM t WHERE ...)` "
                   "(also NOT IN, INSIDE, NOTINSIDE, and `(SELECT VALUE ...) CONTAINS x`)")


def _env(g: _Gen) -> dict[str, Any]:
    env: dict[str, Any] = {
        "SJ": g.semis,
        "NONE": NONE,
        "walk": walk,
        "truthy": V.truthy,
        "K": g.consts,
        "FN": g.fns,
        "AR": F.arith,
        "NEG": F.negate,
        "IDX": F.index,
        "NN": F.is_none_or_null,
        "GRAPH": traverse,
        "DEREF": deref,
        "EvalError": F.EvalError,
    }
    for op, f in _CMP_FUNCS.items():
        env[_fname(op)] = f
    return env


def compile_predicate(e: Expr | None, semis: list[Any] | None = None,
                      make_semi: Callable[[Any], Any] | None = None,
                      ) -> tuple[Callable[..., bool], bool]:
    """Compile a WHERE expression into ``f(row, S, par, cx)``; also say whether it reads links
    (or the live sets of semi-joins, built by ``make_semi`` from each subquery and appended to
    ``semis``: without both a subquery is refused).

    A row whose condition raises (a function given the wrong type: SurrealDB fails the whole
    query there) does not qualify: the predicate answers False for it."""
    if e is None:
        return (lambda row, S, par, cx: True), False
    g = _Gen(semis, make_semi)
    body = g.boolean(e)
    env = _env(g)
    if can_raise(e):
        src = (f"def _pred(row, S, par, cx):\n    try:\n        return {body}\n"
               f"    except EvalError:\n        return False\n")
    else:
        src = f"def _pred(row, S, par, cx):\n    return {body}\n"
    # Generated from our own AST (field names go through repr), never from raw query text.
    exec(compile(src, "<view-predicate>", "exec"), env)  # noqa: S102
    return env["_pred"], g.uses_links


def compile_expr(e: Expr) -> tuple[Callable[..., Any], bool]:
    """Compile a value expression into ``f(row, S, par, cx)`` (a projection item, an ORDER BY
    key); also say whether it reads links. Where SurrealDB would raise, the value is NONE."""
    g = _Gen()
    body = g.value(e)
    env = _env(g)
    if can_raise(e):
        src = (f"def _value(row, S, par, cx):\n    try:\n        return {body}\n"
               f"    except EvalError:\n        return NONE\n")
    else:
        src = f"def _value(row, S, par, cx):\n    return {body}\n"
    # Generated from our own AST (field names go through repr), never from raw query text.
    exec(compile(src, "<view-expression>", "exec"), env)  # noqa: S102
    return env["_value"], g.uses_links


def compile_value(path: tuple[str, ...]) -> Callable[[dict[str, Any], Resolver], Any]:
    """A getter for one (possibly link-following) path on a row."""
    if len(path) == 1:
        key = path[0]
        return lambda row, cx: row.get(key, NONE)
    return lambda row, cx: walk(row, path, cx)
