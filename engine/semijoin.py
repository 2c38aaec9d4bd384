"""Semi-joins: ``WHERE x IN (SELECT VALUE v FROM t WHERE ...)``, kept from the inner side.

The inner query is uncorrelated (its WHERE may read parameters, not ``$parent``), so its
answer is one multiset of values per set of parameter values: an :class:`InnerSet` counts
each value (by SurrealDB equality, ``engine.matindex.xkey``) and remembers what each inner
row contributes. A write to the inner table moves one row's value; only when a value's
count goes 0 -> 1 or 1 -> 0 can an outer row's condition change.

An outer row evaluating ``x IN set`` records that it read the token of ``(set, key of x)``
(a read like a record link's, ``engine.deps``): when that key enters or leaves the set,
exactly the rows that asked for it are qualified again (views: ``Deps.quals``; projection
subqueries: ``Deps.reads``). A write therefore costs the inner row's move plus the outer
rows whose value flipped, never a scan of either table. Shapes with a semi-join keep their
qualifying rows (explicit materialisations), as link-following conditions do.

Supported forms: ``x IN (sub)``, ``x INSIDE (sub)``, ``x NOT IN (sub)``, ``x NOTINSIDE
(sub)``, ``(sub) CONTAINS x``, ``(sub) CONTAINSNOT x``. The inner query is ``SELECT VALUE
<expression> FROM table [WHERE <condition>]``: no ORDER BY, LIMIT or START (the set would
depend on an order), no ``$parent`` and no nested subqueries. Where its value or condition
follows a record link, the inner row is evaluated again when that record is written.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from typing import Any

from engine.compile import compile_expr, compile_predicate
from engine.cx import Cx
from engine.deps import Readers
from engine.errors import QueryRejected
from engine.matindex import _LINK, exact_key, xkey
from engine.parser import Query
from engine.rangescan import index_bounds, own_conditions, range_rows
from engine.store import _EXACT, ikey
from engine.syntax import collect_slots, conjuncts
from engine.values import NONE

_IDS = count(1)
_TOKENS = 100_000  # tokens kept per inner set at most


def _correlated(e: Any) -> bool:
    """Whether an expression reads ``$parent`` or holds a subquery."""
    if type(e) is not tuple or not e:
        return False
    k = e[0]
    if k in ("parent", "subquery"):
        return True
    parts = e[1:] if type(k) is str else e
    return any(_correlated(x) for x in parts if type(x) is tuple)


class SemiSpec:
    """One semi-join of a shape's condition: the inner query compiled, and its live sets
    (one per value of the inner query's parameters)."""

    def __init__(self, q: Query) -> None:
        if not q.value:
            raise QueryRejected("a subquery in WHERE must be SELECT VALUE (`x IN (SELECT VALUE "
                                "f FROM t WHERE ...)`): a plain SELECT answers objects")
        bad = ("LIMIT" if q.limit is not None else "START" if q.start is not None else
               "GROUP BY" if q.group is not None else "SPLIT" if q.split else None)
        if bad is not None:
            raise QueryRejected(f"{bad} in a WHERE subquery is not supported: the engine keeps "
                                "the subquery's whole answer as a set")
        # ORDER BY alone does not change which values the set holds
        item = q.items[0]
        if item.kind == "field":
            value: Any = ("field", item.path)
        elif item.kind == "expr" and item.expr is not None:
            value = item.expr
        else:
            raise QueryRejected("a WHERE subquery's value must be a field or an expression of "
                                "its row")
        if _correlated(value) or _correlated(q.where):
            raise QueryRejected("a WHERE subquery must not read $parent nor hold subqueries: "
                                "the engine keeps its answer as one set (correlated semi-joins "
                                "are not supported; select the parent's rows with a condition "
                                "on their own fields)")
        self.q = q
        # the outer expression this set is tested against (set by engine.compile)
        self.outer: Any = None
        self.table = q.table
        self.pred = compile_predicate(q.where)[0]
        self.value = compile_expr(value)[0]
        acc: set[int] = set()
        collect_slots(q.where, acc)
        collect_slots(value, acc)
        self.slots = tuple(sorted(acc))
        self.sets: dict[Any, InnerSet] = {}
        # the set the last `contains` used, by the identity of its slot values: a new view
        # evaluates every row of its table with one tuple S, and its set's key (an exact
        # key of each parameter, lists walked element by element) cost about 40% of that
        # registration when made per row
        self._last_S: Any = None
        self._last_set: InnerSet | None = None

    def key(self, S: tuple[Any, ...]) -> Any:
        """Which set a materialisation's slot values use."""
        return tuple(exact_key(S[i]) for i in self.slots)

    def contains(self, S: tuple[Any, ...], x: Any, cx: Any) -> bool:
        """``x IN set``, noting the read of ``x``'s key (so a change of it requalifies)."""
        s = self._last_set
        if s is None or S is not self._last_S:
            s = self.sets[self.key(S)]
            self._last_S = S
            self._last_set = s
        k = xkey(x)
        if not s.keyed:
            # (orders told by the set itself need no read: a token made and kept per key
            # and view cost a string per key, and a set insertion per row, at registration)
            cx.reads.add(s.token(k))
        return k in s.counts

    def open(self, S: tuple[Any, ...], store: Any,
             links: dict[str, dict[Any, None]]) -> InnerSet:
        """The set for ``S`` (built from the inner table's rows when new), one more user;
        ``links``: the engine's index of the sets whose rows read a record through a link."""
        key = self.key(S)
        s = self.sets.get(key)
        if s is None:
            s = self.sets[key] = InnerSet(self, S, key, store, links)
            s.build()
        s.refs += 1
        return s

    def close(self, S: tuple[Any, ...]) -> InnerSet | None:
        """One user less; the set when it was the last (dropped)."""
        key = self.key(S)
        s = self.sets.get(key)
        if s is None:
            return None
        s.refs -= 1
        if s.refs > 0:
            return None
        del self.sets[key]
        self._last_S = None
        self._last_set = None
        s.readers.clear()
        return s


class InnerSet:
    """The inner query's answer for one set of parameter values, as counts per value."""

    __slots__ = ("S", "counts", "ikeys", "key", "keyed", "prefix", "readers", "refs", "rows",
                 "spec", "store", "tokens")

    def __init__(self, spec: SemiSpec, S: tuple[Any, ...], key: Any, store: Any,
                 index: dict[str, dict[Any, None]]) -> None:
        self.spec = spec
        self.S = S
        self.key = key
        self.store = store
        self.counts: dict[Any, int] = {}
        self.rows: dict[str, Any] = {}  # inner row -> the key of its value
        # records read through links while evaluating an inner row, both ways (a write to
        # one of them evaluates those rows again)
        self.readers = Readers(self, index)
        self.refs = 0
        self.prefix = f"\0semi{next(_IDS)}:"
        # key -> its token, made once: every outer row reading a key keeps the token in its
        # reads (a view over 20k rows kept 20k strings of its own, and made each by repr)
        self.tokens: dict[Any, str] = {}
        # orders whose rows test a field of their own against this set (engine.plan, "qkeyed")
        # -> that field: a key entering or leaving requalifies the rows the table's equality
        # index holds under it, so those rows register nothing each (a set per row and view,
        # ~600 bytes a row, was most of the memory of such views)
        self.keyed: dict[Any, str] = {}
        # equality-index keys (engine.store.ikey) of the set's keys where they are not the
        # key itself (keys of numbers, of links with large int ids, ...)
        self.ikeys: dict[Any, Any] = {}

    def token(self, k: Any) -> str:
        """What an outer row reading key ``k`` depends on (never a record id text)."""
        tokens = self.tokens
        t = tokens.get(k)
        if t is None:
            if len(tokens) >= _TOKENS:
                tokens.clear()  # a cache: equal tokens are equal strings
            t = tokens[k] = self.prefix + repr(k)
        return t

    def index_key(self, k: Any) -> Any:
        """The equality-index key (``ikey``) of the values whose set key is ``k``."""
        if type(k) is str or _plain_link(k):
            return k
        return self.ikeys[k]

    def _key(self, row: dict[str, Any], cx: Cx) -> Any:
        """The set key of an inner row's value (_ABSENT: the row is not in the set)."""
        spec = self.spec
        if not spec.pred(row, self.S, NONE, cx):
            return _ABSENT
        v = spec.value(row, self.S, NONE, cx)
        k = xkey(v)
        if type(k) is not str and not _plain_link(k) and k not in self.ikeys:
            self.ikeys[k] = ikey(v)
        return k

    def _value_key(self, rid: str, row: dict[str, Any] | None) -> Any:
        cx = Cx(self.store)
        k = _ABSENT if row is None else self._key(row, cx)
        self.readers.note(rid, frozenset(cx.reads))
        return k

    def build(self) -> None:
        """Every inner row that may pass evaluated once (a new set): as :meth:`_value_key`
        row by row, with one context while rows read nothing through links (a new set has
        no reads to move: only the rows that read records are noted). The rows failing a
        range or string equality on a field of their own (``karma >= $lo AND karma < $hi``,
        ``status = $s``) are not evaluated: only a write to such a row, which evaluates it
        (:meth:`update`), can bring it in, so it needs no reads noted either."""
        counts = self.counts
        mine = self.rows
        store = self.store
        note = self.readers.note
        cx = Cx(store)
        ts = store.table(self.spec.table)
        rows = ts.rows
        cands = _candidates(ts, self.spec.q.where, self.S)
        for rid in rows if cands is None else cands:
            row = rows[rid]
            k = self._key(row, cx)
            if k is not _ABSENT:
                mine[rid] = k
                counts[k] = counts.get(k, 0) + 1
            if cx.reads or cx.subs or cx.extra or cx.last:
                if cx.reads:
                    note(rid, frozenset(cx.reads))
                cx = Cx(store)

    def reread(self, text: str, flipped: Flipped) -> None:
        """The record ``text`` changed: evaluate again the inner rows that read it."""
        rids = self.readers.rows(text)
        if rids:
            rows = self.store.table(self.spec.table).rows
            for rid in list(rids):
                self.update(rid, rows.get(rid), flipped)

    def update(self, rid: str, new: dict[str, Any] | None, flipped: Flipped) -> None:
        """The inner row ``rid`` is now ``new`` (None: deleted); ``flipped(self, key, token)``
        for each value that entered or left the set."""
        old_k = self.rows.get(rid, _ABSENT)
        new_k = self._value_key(rid, new)
        if old_k == new_k and (old_k is _ABSENT or type(old_k) is type(new_k)):
            return
        counts = self.counts
        if old_k is not _ABSENT:
            n = counts[old_k] - 1
            if n:
                counts[old_k] = n
            else:
                del counts[old_k]
                flipped(self, old_k, self.token(old_k))
                if old_k != new_k:
                    self.ikeys.pop(old_k, None)
            del self.rows[rid]
        if new_k is not _ABSENT:
            n = counts.get(new_k, 0)
            counts[new_k] = n + 1
            self.rows[rid] = new_k
            if n == 0:
                flipped(self, new_k, self.token(new_k))


_ABSENT: Any = object()


def _candidates(ts: Any, where: Any, S: tuple[Any, ...]) -> Any:
    """A superset of the rows of ``ts`` passing ``where``, from the table's indexes (None:
    no conjunct narrows them to under half the table): a string equality ``field = $s``,
    else the range conjuncts of one field (engine.rangescan)."""
    for c in conjuncts(where):
        if c[0] != "cmp" or c[1] != "=":
            continue
        for a, b in ((c[2], c[3]), (c[3], c[2])):
            if a[0] == "field" and len(a[1]) == 1 and b[0] == "slot" and type(S[b[1]]) is str:
                # (a string's index key is the string: engine.store.ikey)
                return ts.index(a[1][0]).get(S[b[1]], ())
    for field, fc in own_conditions(where, S).items():
        got = range_rows(ts, field, index_bounds(fc))
        if got is not None:
            return got
    return None

#: what a set tells when a value enters or leaves it: (the set, the value's key, its token)
Flipped = Callable[[InnerSet, Any, str], None]


def _plain_link(k: Any) -> bool:
    """Whether a set key is a link's with a str or exact int id (``xkey``), which is also
    its equality-index key (``ikey``)."""
    if type(k) is not tuple or len(k) != 3 or k[0] != _LINK:
        return False
    i = k[2]
    return type(i) is str or (type(i) is int and -_EXACT < i < _EXACT)
