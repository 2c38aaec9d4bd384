"""GROUP BY / GROUP ALL views: per-group aggregates kept by deltas.

A shape ``SELECT k, count() AS n, math::sum(x) AS s FROM t WHERE ... GROUP BY k`` is kept
in two layers:

- **rows**: the shape's circuit runs the row-level query ``SELECT <k>, <x> FROM t WHERE ...``
  (:func:`row_query`) with the engine's usual machinery (index of materialisations,
  projection groups, dependencies, deltas). A row's projected output is its *contribution*:
  its group key values and the arguments of the aggregates. A row is its own member: an
  aggregate row stands for the rows of its group (engine/README, "Members"), so the view's
  members are the rows that qualify, and a write moves exactly the member it changes.
- **groups**: each materialisation keeps an :class:`AggState`: per group (keyed by
  SurrealDB equality of the key values) the row count and one accumulator per aggregate,
  updated from the flush's per-row entries (``was shown -> is shown``, old and new
  contribution). A write costs one removal and one addition per materialisation showing the
  row: never a pass over a group. ``math::min``/``math::max`` keep the group's values in a
  sorted list, so a retraction finds the next one.

The aggregates SurrealDB 3.x computes over a group (checked against it, see
``tests/engine/test_aggregates.py``): ``count()`` rows; ``count(v)`` rows where ``v`` is
truthy; ``math::sum`` of the numbers (other values are skipped; ints wrap around 64 bits,
any decimal makes the sum a decimal, else any float a float); ``math::mean`` the sum as a
float over how many numbers (NaN for none); ``math::min``/``math::max`` the first smallest
or largest number in row order (inf / -inf for none). A per-row argument that raises is
NONE (SurrealDB does the same inside a group). Float sums are exact and rounded once, where
SurrealDB adds in row order: they differ only when that order rounds (a documented
deviation). Groups come in key order; ORDER BY names outputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from decimal import Context, Decimal
from typing import Any

from sortedcontainers import SortedList
from surrealdb import RecordID

from engine.compile import compile_expr
from engine.errors import QueryRejected
from engine.functions import _dec, _to_decimal, _wrap
from engine.matindex import exact_key, xkey
from engine.parser import Expr, Item, Path, Query
from engine.values import NONE, sort_key, truthy

#: the aggregate functions over a group, by name
AGGREGATES = {"count": "count", "math::sum": "sum", "math::mean": "mean",
              "math::min": "min", "math::max": "max"}
_UNSUPPORTED_GROUP_FNS = ("math::median", "math::stddev", "math::variance", "math::mode",
                          "math::product", "math::percentile", "math::spread",
                          "math::interquartile", "math::midhinge", "math::trimean",
                          "math::nearestrank", "math::top", "math::bottom", "time::min",
                          "time::max", "array::group", "array::distinct", "array::join")
_EXACT_SCALE = 1074  # every finite double is an integer multiple of 2**-1074
_BIG = Context(prec=200)


def _children(e: tuple[Any, ...]) -> list[Any]:
    """The sub-expressions of a node (or the items of a tuple of expressions)."""
    parts = e[1:] if type(e[0]) is str else e
    return [x for x in parts if type(x) is tuple and x]


def _contains_agg(e: Any) -> bool:
    if type(e) is not tuple or not e:
        return False
    if e[0] == "call" and e[1] in AGGREGATES:
        return True
    return any(_contains_agg(x) for x in _children(e))


def _fields_outside_aggs(e: Any, acc: list[Any]) -> None:
    """Field reads of ``e`` that are not inside an aggregate call."""
    if type(e) is not tuple or not e:
        return
    k = e[0]
    if k == "call" and e[1] in AGGREGATES:
        return
    if k in ("field", "parent"):
        acc.append(e)
        return
    for x in _children(e):
        _fields_outside_aggs(x, acc)


class AggSpec:
    """What a grouped shape computes: its keys, its aggregates and its output items."""

    def __init__(self, q: Query) -> None:
        assert q.group is not None
        self.q = q
        self.group_all = not q.group
        if q.value or q.fetch or q.omit or q.split:
            clause = ("SELECT VALUE" if q.value else "FETCH" if q.fetch else "OMIT" if q.omit
                      else "SPLIT")
            raise QueryRejected(f"{clause} with GROUP BY is not supported")
        if q.limit is not None or q.start is not None:
            raise QueryRejected("LIMIT/START over groups is not supported: a grouped view "
                                "shows every group (ORDER BY orders them); filter the rows "
                                "with WHERE")
        outs = {it.out: it for it in q.items if it.kind != "all" and not it.implicit}
        if any(it.kind == "all" for it in q.items):
            raise QueryRejected("SELECT * cannot be grouped (SurrealDB refuses it too): name "
                                "the grouped fields and the aggregates")
        # group keys, in GROUP BY order, each read from the item of that name
        self.keys: list[Expr] = []
        self.key_items: dict[int, int] = {}  # item index -> key index
        for path in q.group:
            it = outs.get(path)
            if it is None:
                raise QueryRejected(f"GROUP BY {'.'.join(path)} must name an item of the "
                                    "selection (SurrealDB: missing group idiom)")
            if it.kind == "field":
                e: Expr = ("field", it.path)
            elif it.kind == "expr" and it.expr is not None and not _contains_agg(it.expr):
                e = it.expr
            else:
                raise QueryRejected(f"GROUP BY {'.'.join(path)}: only a field or an expression "
                                    "of the row can be grouped by")
            self.key_items[q.items.index(it)] = len(self.keys)
            self.keys.append(e)
        # aggregate calls, each once, and the items computed from them
        self.aggs: list[tuple[str, Expr | None]] = []
        self.args: list[Expr] = []  # the row-level arguments, one per aggregate with one
        self.items: list[tuple[Path, int | Callable[..., Any]]] = []
        for i, it in enumerate(q.items):
            if i in self.key_items:
                self.items.append((it.out, self.key_items[i]))
                continue
            if it.kind == "sub":
                raise QueryRejected("subqueries in a grouped selection are not supported")
            if it.kind in ("field", "linkall") or it.expr is None:
                raise QueryRejected(
                    f"{'.'.join(it.out)} is neither grouped nor aggregated (SurrealDB collects "
                    "an array of its values): group by it, or aggregate it with count(), "
                    "math::sum(), math::mean(), math::min() or math::max()")
            loose: list[Any] = []
            _fields_outside_aggs(it.expr, loose)
            if loose:
                raise QueryRejected(
                    f"{'.'.join(it.out)} reads fields outside an aggregate: group by them, or "
                    "aggregate them with count(), math::sum(), math::mean(), math::min() or "
                    "math::max()")
            post = self._post(it.expr)
            fn = compile_expr(post)[0]
            self.items.append((it.out, fn))
        # the contribution's output names, keys then arguments (engine.aggregate.row_query)
        self.names = tuple([f"k{i}" for i in range(len(self.keys))]
                           + [f"a{i}" for i in range(len(self.args))])
        self.order = list(q.order)
        for path, _desc in self.order:
            if not any(out == path[:len(out)] for out, _ in self.items):
                raise QueryRejected(f"ORDER BY {'.'.join(path)} must name an output of the "
                                    "grouped selection")

    def _post(self, e: Expr) -> Expr:
        """``e`` with each aggregate call replaced by its value over the group
        (``("aggval", i)``)."""
        if type(e) is not tuple or not e:
            return e
        if e[0] == "call":
            name = e[1]
            if name in _UNSUPPORTED_GROUP_FNS:
                raise QueryRejected(
                    f"{name}() over a group is not supported (it needs every value of the "
                    "group at each change); the engine keeps count(), math::sum(), "
                    "math::mean(), math::min() and math::max() by deltas")
            if name in AGGREGATES:
                args = e[2]
                kind = AGGREGATES[name]
                if kind == "count":
                    if len(args) > 1:
                        raise QueryRejected("count() takes at most one argument")
                    arg = args[0] if args else None
                elif len(args) != 1:
                    raise QueryRejected(f"{name}() takes one argument over a group")
                else:
                    arg = args[0]
                if arg is not None and _contains_agg(arg):
                    raise QueryRejected(f"{name}() of an aggregate is not supported")
                key = (kind, arg)
                if key not in self.aggs:
                    self.aggs.append(key)
                    if arg is not None:
                        self.args.append(arg)
                return ("aggval", self.aggs.index(key))
            return ("call", name, tuple(self._post(x) for x in e[2]))
        k = e[0]
        if k in ("arith", "nullish", "cmp"):
            return (k, e[1], self._post(e[2]), self._post(e[3]))
        if k in ("and", "or"):
            return (k, self._post(e[1]), self._post(e[2]))
        if k in ("not", "neg"):
            return (k, self._post(e[1]))
        if k == "index":
            return ("index", self._post(e[1]), e[2])
        if k == "get":
            return ("get", self._post(e[1]), e[2])
        if k == "array":
            return ("array", tuple(self._post(x) for x in e[1]))
        if k == "object":
            return ("object", e[1], tuple(self._post(x) for x in e[2]))
        return e

    def arg_index(self, i: int) -> int | None:
        """Where aggregate ``i``'s argument sits among the row's contribution values."""
        kind, arg = self.aggs[i]
        if arg is None:
            return None
        return len(self.keys) + self.args.index(arg)

    # -- output ---------------------------------------------------------------------------
    def rows(self, state: AggState, S: tuple[Any, ...]) -> list[dict[str, Any]]:
        """The view's result: one row per group, in key order or ORDER BY."""
        return [out for _, out in self.rows_grouped(state, S)]

    def rows_grouped(self, state: AggState,
                     S: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """:meth:`rows` with each row's group key (:meth:`group_of`)."""
        groups = state.groups
        if self.group_all and not groups:
            groups = {(): Group(self)}
        entries = []
        for gk, g in sorted(groups.items(), key=_group_order):
            vals = tuple(a.value() for a in g.accs)
            out: dict[str, Any] = {}
            for path, how in self.items:
                v = g.key[how] if isinstance(how, int) else how({}, S, vals, None)
                _set(out, path, v)
            entries.append((gk, out))
        for path, desc in reversed(self.order):
            entries.sort(key=_output_key(path), reverse=desc)
        return entries

    def group_of(self, contrib: Any) -> tuple[Any, ...]:
        """The group (key) a row's contribution falls in."""
        return tuple(xkey(k) for k in _values(contrib, self)[:len(self.keys)])


def _group_order(item: tuple[tuple[Any, ...], Group]) -> tuple[Any, ...]:
    """Groups come in the order of their keys (SurrealDB's value order)."""
    return tuple(sort_key(k) for k in item[1].key)


def _output_key(path: Path) -> Callable[[tuple[Any, dict[str, Any]]], Any]:
    def key(entry: tuple[Any, dict[str, Any]]) -> Any:
        return sort_key(_get(entry[1], path))
    return key


def _set(out: dict[str, Any], path: Path, v: Any) -> None:
    cur = out
    for seg in path[:-1]:
        nxt = cur.get(seg)
        if type(nxt) is not dict:
            nxt = cur[seg] = {}
        cur = nxt
    cur[path[-1]] = v


def _get(out: dict[str, Any], path: Path) -> Any:
    cur: Any = out
    for seg in path:
        if type(cur) is not dict:
            return NONE
        cur = cur.get(seg, NONE)
    return cur


def row_query(q: Query) -> Query:
    """The row-level query of a grouped shape: each row's group key values and aggregate
    arguments, as named expression items (``k0``.., ``a0``..), under the same WHERE."""
    spec = AggSpec(q)
    items = [_row_item(e, f"k{i}") for i, e in enumerate(spec.keys)]
    items += [_row_item(e, f"a{i}") for i, e in enumerate(spec.args)]
    if not items:
        items = [Item("field", ("id",), ("id",))]
    return replace(q, items=tuple(items), order=(), limit=None, start=None, fetch=(),
                   value=False, omit=(), group=None, split=())


def _row_item(e: Expr, name: str) -> Item:
    """A key or argument as an item of the row-level query: a field of the row itself as a
    field item (it reads the row alone, so a registration projects it without an evaluation
    context per row), anything else as an expression."""
    if type(e) is tuple and len(e) == 2 and e[0] == "field" and len(e[1]) == 1:
        return Item("field", e[1], (name,))
    return Item("expr", (), (name,), expr=e)


# --------------------------------------------------------------------------------------------
# Group state


class _Count:
    __slots__ = ("n", "pos")

    def __init__(self, pos: int | None) -> None:
        self.pos = pos
        self.n = 0

    def add(self, rid: str, c: tuple[Any, ...], sign: int) -> None:
        if self.pos is None or truthy(c[self.pos]):
            self.n += sign

    def fill(self, rows: list[tuple[str, tuple[Any, ...]]]) -> None:
        pos = self.pos
        self.n += len(rows) if pos is None else sum(1 for _, c in rows if truthy(c[pos]))

    def value(self) -> Any:
        return self.n


class _Sum:
    """Exact sums of the ints, floats (as multiples of 2**-1074) and decimals of a group."""

    __slots__ = ("dec", "fdec", "flt", "ints", "n", "ndec", "nflt", "ninf", "nnan", "pinf",
                 "pos")

    def __init__(self, pos: int | None) -> None:
        self.pos = pos
        self.ints = 0
        self.flt = 0
        self.dec = Decimal(0)
        self.fdec = Decimal(0)  # the floats as decimals (what a decimal sum adds)
        self.n = self.nflt = self.ndec = self.pinf = self.ninf = self.nnan = 0

    def add(self, rid: str, c: tuple[Any, ...], sign: int) -> None:
        assert self.pos is not None
        self._add(c[self.pos], sign)

    def fill(self, rows: list[tuple[str, tuple[Any, ...]]]) -> None:
        # ints, the common case, summed in one pass; the rest value by value
        pos = self.pos
        assert pos is not None
        ints = 0
        n = 0
        for _, c in rows:
            v = c[pos]
            if type(v) is int:
                ints += v
                n += 1
            else:
                self._add(v, 1)
        self.ints += ints
        self.n += n

    def _add(self, v: Any, sign: int) -> None:
        t = type(v)
        if t is int:
            self.ints += sign * v
        elif t is float:
            self.nflt += sign
            if v != v:  # noqa: PLR0124
                self.nnan += sign
            elif v == float("inf"):
                self.pinf += sign
            elif v == float("-inf"):
                self.ninf += sign
            else:
                m, e = v.as_integer_ratio()
                # v = m / e with e a power of two: exact as an integer times 2**-1074
                self.flt += sign * m * (2**_EXACT_SCALE // e)
                self.fdec = _BIG.add(self.fdec, sign * _to_decimal(v))
        elif t is Decimal:
            self.ndec += sign
            self.dec = _BIG.add(self.dec, sign * v)
        else:
            return
        self.n += sign

    def value(self) -> Any:
        if self.ndec:
            return _dec(_BIG.add(_BIG.add(self.dec, self.fdec), Decimal(self.ints)))
        if self.nflt:
            if self.nnan or (self.pinf and self.ninf):
                return float("nan")
            if self.pinf:
                return float("inf")
            if self.ninf:
                return float("-inf")
            return (self.ints * 2**_EXACT_SCALE + self.flt) / 2**_EXACT_SCALE
        return _wrap(self.ints)


class _Mean(_Sum):
    __slots__ = ()

    def value(self) -> Any:
        if not self.n:
            return float("nan")
        return float(super().value()) / self.n


class _Extreme:
    """min or max of a group's numbers, with retractions.

    A new group keeps its numbers unordered (row -> number) and its best entry, found in
    one pass: ordering every contributing row was most of a grouped view's registration
    (87120 S04, a max over 20-50k orders: a quarter of each view). The rows in order
    (value, then row order) are built the first time they are needed, when the best row
    is retracted (or a row is added twice), and kept by each change from then on."""

    __slots__ = ("best", "entries", "largest", "pos", "vals")

    def __init__(self, pos: int | None, largest: bool) -> None:
        self.pos = pos
        self.largest = largest
        # ordered mode: every entry (sort key, row key, row, value); None while unordered
        self.entries: SortedList | None = None
        # unordered mode: row -> number, and the best entry (None: no number)
        self.vals: dict[str, Any] | None = {}
        self.best: tuple[Any, ...] | None = None

    def add(self, rid: str, c: tuple[Any, ...], sign: int) -> None:
        assert self.pos is not None
        v = c[self.pos]
        t = type(v)
        if t is not int and t is not float and t is not Decimal:
            return
        vals = self.vals
        if vals is not None:
            best = self.best
            if sign > 0:
                if rid not in vals:
                    vals[rid] = v
                    e = (sort_key(v), _rid_key(rid), rid, v)
                    if best is None or self._better(e, best):
                        self.best = e
                    return
            elif best is None or best[2] != rid:
                del vals[rid]  # the best entry stays the best
                return
            self._order()
        entries = self.entries
        assert entries is not None
        e = (sort_key(v), _rid_key(rid), rid, v)
        if sign > 0:
            entries.add(e)
        else:
            entries.remove(e)

    def _better(self, e: tuple[Any, ...], best: tuple[Any, ...]) -> bool:
        """Whether ``e`` is shown before ``best``: the smallest value (the largest for max),
        the first in row order among equal ones."""
        if e[0] == best[0]:
            return bool(e[1] < best[1])
        return bool(e[0] > best[0]) if self.largest else bool(e[0] < best[0])

    def _order(self) -> None:
        """Switch to ordered mode: every number in one sort."""
        vals = self.vals
        assert vals is not None
        self.entries = SortedList([(sort_key(v), _rid_key(rid), rid, v)
                                   for rid, v in vals.items()])
        self.vals = None
        self.best = None

    def fill(self, rows: list[tuple[str, tuple[Any, ...]]]) -> None:
        # the numbers kept unordered and the best one found in one pass, not sorted
        pos = self.pos
        vals = self.vals
        assert pos is not None and vals is not None and not vals
        vals = self.vals = {rid: c[pos] for rid, c in rows}
        kinds = set(map(type, vals.values()))
        if not kinds <= _INT:
            if not kinds <= _NUMBERS:
                vals = self.vals = {r: v for r, v in vals.items() if type(v) in _NUMBERS}
            kinds &= _NUMBERS
        if not vals:
            return
        if kinds == _INT:
            # equal ints are one value: the best's row is the first of its ties in row order
            top = max(vals.values()) if self.largest else min(vals.values())
            rid = min([r for r, v in vals.items() if v == top], key=_rid_key)
            self.best = (sort_key(top), _rid_key(rid), rid, top)
            return
        best = None
        for rid, v in vals.items():
            e = (sort_key(v), _rid_key(rid), rid, v)
            if best is None or self._better(e, best):
                best = e
        self.best = best

    def value(self) -> Any:
        entries = self.entries
        if entries is None:
            best = self.best
            if best is None:
                return float("-inf") if self.largest else float("inf")
            return best[3]
        if not entries:
            return float("-inf") if self.largest else float("inf")
        if not self.largest:
            return entries[0][3]
        # the largest value, first in row order among equal ones
        top = entries[-1][0]
        return entries[entries.bisect_left((top,))][3]


_INT = frozenset([int])
_NUMBERS = frozenset([int, float, Decimal])
_RID_KEYS: dict[str, Any] = {}  # ids the parser had to read (other keys than plain ints)
_PLAIN_TABLES: dict[str, bool] = {}  # table name -> whether it needs no escaping


def _rid_key(rid: str) -> Any:
    """The sort key of a record id given as its canonical text."""
    table, _, key = rid.partition(":")
    # `table:123`, the common case, without the parser and without a cache entry (a
    # registration over a table sorts every row's id once: the parser was 40% of a GROUP
    # ALL's registration, the cache of every id a third of the rest)
    if 0 < len(key) < 16 and key.isdigit() and key.isascii() and (key[0] != "0" or key == "0"):
        plain = _PLAIN_TABLES.get(table)
        if plain is None:
            plain = _PLAIN_TABLES[table] = _PLAIN_TABLE.match(table) is not None
        if plain:
            return (_ID_RANK, table, (_INT_KEY_RANK, int(key)))
    k = _RID_KEYS.get(rid)
    if k is None:
        from engine.values import parse_record_id

        if len(_RID_KEYS) > 1_000_000:
            _RID_KEYS.clear()
        k = _RID_KEYS[rid] = sort_key(parse_record_id(rid))
    return k


_PLAIN_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# the parts of sort_key(t:1) that do not depend on the id: its kind's rank, an int key's rank
_ID_RANK, _, (_INT_KEY_RANK, _) = sort_key(RecordID("t", 1))


def _acc(spec: AggSpec, i: int) -> Any:
    kind, _arg = spec.aggs[i]
    pos = spec.arg_index(i)
    if kind == "count":
        return _Count(pos)
    if kind == "sum":
        return _Sum(pos)
    if kind == "mean":
        return _Mean(pos)
    return _Extreme(pos, kind == "max")


class Group:
    """One group of a materialisation: its rows' count, key and accumulators."""

    __slots__ = ("accs", "key", "n", "variants")

    def __init__(self, spec: AggSpec) -> None:
        self.n = 0
        self.accs = [_acc(spec, i) for i in range(len(spec.aggs))]
        # the key values as shown: SurrealDB shows those of the group's first row (in row
        # order) when equal keys differ in kind (1, 1.0, 1dec): kind -> [values, rows]
        self.variants: dict[Any, list[Any]] = {}
        self.key: tuple[Any, ...] = tuple(NONE for _ in spec.keys)


class AggState:
    """The groups of one materialisation."""

    __slots__ = ("fills", "groups", "moved", "nkeys", "rows_of", "spec")

    def __init__(self, spec: AggSpec, rows_of: Callable[[], Any]) -> None:
        self.spec = spec
        self.nkeys = len(spec.keys)
        self.groups: dict[tuple[Any, ...], Group] = {}
        # the materialisation's shown rows with their contributions (as tuples), read only to choose
        # the key shown by a group whose equal keys differ in kind
        self.rows_of = rows_of
        self.fills = 0  # bulk fills (fill): a test counts them
        self.moved = 0  # contributions moved (move): tests count them

    def move(self, rid: str, old: Any, new: Any) -> None:
        """A row's contribution went from ``old`` to ``new`` (None: not shown)."""
        self.moved += 1
        if old is not None:
            self._apply(rid, _values(old, self.spec), -1)
        if new is not None:
            self._apply(rid, _values(new, self.spec), 1)

    def _apply(self, rid: str, c: tuple[Any, ...], sign: int) -> None:
        keys = c[:self.nkeys]
        gk = tuple(xkey(k) for k in keys)
        g = self.groups.get(gk)
        if g is None:
            if sign < 0:
                return
            g = self.groups[gk] = Group(self.spec)
        g.n += sign
        for a in g.accs:
            a.add(rid, c, sign)
        if g.n == 0:
            del self.groups[gk]
            return
        exact = tuple(_exact(k) for k in keys)
        var = g.variants.get(exact)
        if var is None:
            g.variants[exact] = [keys, sign]
        else:
            var[1] += sign
            if var[1] == 0:
                del g.variants[exact]
        if len(g.variants) == 1:
            g.key = next(iter(g.variants.values()))[0]
        else:
            g.key = self._first_key(gk)

    def fill(self, shown: Iterable[tuple[str, Any]]) -> None:
        """The groups of a new materialisation from its shown rows (rid, contribution) in
        one pass (:meth:`fill_values`)."""
        spec = self.spec
        self.fill_values([(rid, _values(c, spec)) for rid, c in shown])

    def fill_values(self, shown: list[tuple[str, tuple[Any, ...]]]) -> None:
        """:meth:`fill` from contributions as tuples (``AggSpec.names`` order): the rows
        bucketed by group, then each group's accumulators built from its bucket (min/max:
        their best row, no sort) and its key variants counted once."""
        assert not self.groups
        spec = self.spec
        nk = self.nkeys
        buckets: dict[tuple[Any, ...], list[tuple[str, tuple[Any, ...]]]] = {}
        if not nk:
            # GROUP ALL: one bucket, one key variant (no key)
            rows0 = shown
            self.fills += 1
            if rows0:
                g = self.groups[()] = Group(spec)
                g.n = len(rows0)
                for a in g.accs:
                    a.fill(rows0)
                g.variants[()] = [(), len(rows0)]
            return
        gk: tuple[Any, ...]
        for rid, c in shown:
            if nk == 1:
                k = c[0]
                gk = (k,) if type(k) is str else (xkey(k),)  # (xkey of a string is itself)
            else:
                gk = tuple([xkey(k) for k in c[:nk]])
            b = buckets.get(gk)
            if b is None:
                b = buckets[gk] = []
            b.append((rid, c))
        self.fills += 1
        for gk, rows in buckets.items():
            g = self.groups[gk] = Group(spec)
            g.n = len(rows)
            for a in g.accs:
                a.fill(rows)
            variants = g.variants
            if nk == 1 and type(gk[0]) is str:
                # (`GROUP BY status`) a string key holds equal strings only (no other kind's
                # xkey is a string): one variant, the string
                keys = rows[0][1][:1]
                variants[(_exact(gk[0]),)] = [keys, len(rows)]
                g.key = keys
                continue
            for _, c in rows:
                keys = c[:nk]
                exact = tuple(_exact(k) for k in keys)
                var = variants.get(exact)
                if var is None:
                    variants[exact] = [keys, 1]
                else:
                    var[1] += 1
            g.key = (next(iter(variants.values()))[0] if len(variants) == 1
                     else self._first_key(gk))

    def _first_key(self, gk: tuple[Any, ...]) -> tuple[Any, ...]:
        """The key values of the group's first row in row order (a scan of the shown rows:
        only for groups whose equal keys differ in kind)."""
        best = None
        for rid, c in self.rows_of():
            keys = c[:self.nkeys]
            if tuple(xkey(k) for k in keys) != gk:
                continue
            k = _rid_key(rid)
            if best is None or k < best[0]:
                best = (k, keys)
        assert best is not None
        return tuple(best[1])


def _values(contrib: Any, spec: AggSpec) -> tuple[Any, ...]:
    """A row's contribution (its projected output ``{k0.., a0..}``) as a tuple."""
    get = contrib.get
    return tuple([get(n, NONE) for n in spec.names])


def _exact(v: Any) -> Any:
    return exact_key(v)
