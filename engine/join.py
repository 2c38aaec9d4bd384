"""Projection subqueries maintained as joins: the inner table grouped by the correlation key
once, each group's qualifying rows kept in order, windows shared by the parents that see the
same rows, and a write reaching only the windows it can change.

A subquery ``(SELECT ... FROM inner WHERE ... ORDER BY ... LIMIT l START s)`` projected for
each parent row is, in DBSP's terms, a join of the parents with the inner table followed by
a top-k per parent. Re-running it for every parent that scanned a changed key costs the size
of the group (a hot thread's 3,000 comments sorted again for each vote) and, when many
parents share a key (``category = $parent.category``: 2,500 products per category), that
times the parents. Here instead (:class:`Join`, one per subquery plan and values of the
slots it reads):

- its WHERE is split once (:func:`join_spec`) into **keys** (``inner_field =
  <expression of $parent>``: the group a parent reads), an **inner** filter (conjuncts that
  read neither ``$parent`` nor a link: applied once per inner row, not per parent),
  **bounds** (``first_order_field < <= > >= <expression of $parent>``: a slice of the
  group's order, found by bisection), a **linked** filter (conjuncts that read no
  ``$parent`` but follow a path of several segments, ``user.karma >= 10``: applied once per
  inner row like the inner filter, with the records it read noted, so that a write to one
  of them tests again exactly the rows that read it) and a **residual** (anything else:
  tested per window while it is read);
- a :class:`Group` keeps the sort entries of its qualifying rows in order (a plain list:
  bisection and slices in C), built from the table's equality index the first time a
  parent reads it, and maintained row by row from then on;
- a :class:`Win` is one window of a group: the parents with equal bounds (and equal values
  of the ``$parent`` paths the residual reads) see the same rows, computed once and
  shared (their value is the same list object). It records its **cut**: the last entry it
  depends on (its last row when full, else the bound's end or none);
- a write to the inner table moves the row's entry in its group(s) and reaches the windows
  whose range ``(lower bound, cut]`` holds the entry before or after the write: those are
  detached and their parents marked (the projection reruns them at the flush, through
  :meth:`Join.run` again). Entries after a window's cut cannot change it, so a vote on the
  50th comment of a thread showing its top 5 reaches nothing. With one bound from the
  parent and no residual, a group's windows are sorted by that bound and their cuts follow
  it, so the windows a write reaches are found by one bisection and a walk that stops at
  the first window it cannot reach.

A window without START over flat outputs (every row of the group between the bounds that
passes the residual, or the first LIMIT of them: ``category = $parent.category AND stock <
$parent.stock``, ``thread = $parent.id ORDER BY score DESC LIMIT 5``) is not detached by a
write: the write removes its entry and inserts the new one where it stands
(:meth:`Join._edit`: one bisection, the residual asked of the written row for the window's
parent). With a LIMIT, an entry entering a full window pushes its last entry out, and an entry
leaving it pulls in the next entry after its cut that passes the residual (one entry without a
residual). The window keeps its members (:meth:`Win.tree`) edited the same way, so a write
that changes one row of a group of 5,000 costs its own entry in each window it reaches, not
the group, in the window, in the projection (``proj._item_tree``) or in the delta
(``delta.counted_delta`` walks only the members some row's diff names). A window with START
keeps its entries from the group's first (those before the page too) and is edited the same
way; its rows are then taken again from START on (:meth:`Join._edit_paged`: an entry before
the page shifts every row of it, which costs the page, not the group).

With a residual that is one bound from the parent (``stock < $parent.stock`` ordered by
``created_at``), a group keeps its windows sorted by the bound's value (``Group.rkeys``): a
write that changes only what the residual reads reaches the windows whose bound lies
between the old and the new value, and any other write walks from its value to the first
window whose cut is before its entry (:meth:`Join._rcands`).

A parent registers the windows it read through its dependencies (the :class:`Win` objects
themselves are the tokens in ``Cx.subs``; :meth:`engine.deps.Deps.set_proj` adds and
drops them). A group lives while some parent reads one of its windows.

Not joins (run per parent as before, :meth:`engine.plan.Plan.run`): lookups by ``id``
(``id = $parent.author``: one row, an index lookup already) and subqueries whose ORDER BY
follows a record link.

A window whose rows read other records (``seller.karma``, a nested lookup or subquery, a
residual through a link) is cached too, computed once for all its parents: what its rows read
is registered in the engine's :class:`engine.deps.Deps` with the window itself as the reader,
not with each parent. When its rows are not flat outputs, it has no START and its residual (if
any) reads only the rows and fields of ``$parent``, it is kept **row by row**
(:meth:`Join._rowwise`, ``Win.rows``): each row registers what it read under its own id, a
change to one of those records marks that row (:meth:`Win.stale`, projected again at the next
read: :meth:`Join._redo`), an inner write projects only its own row (:meth:`Join._edit_rows`),
and a window whose outputs stayed the same marks no parent. Any other such window is detached
by :meth:`Win.stale` and its parents marked, whose next read computes it again once.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from decimal import Decimal
from typing import Any

from surrealdb import RecordID

from engine.compile import compile_expr, compile_predicate
from engine.cx import NOLINKS, Cx
from engine.delta import rows_members, same
from engine.deps import Readers
from engine.matindex import FLIP, RANGE_OPS, exact_key, xkey
from engine.shape import order_source
from engine.store import ikey, rid_text
from engine.syntax import conjoin, conjuncts, query_slots
from engine.value_order import sort_key
from engine.values import NONE

# what a write does to an entry's place in a group (Join._reach)
LEAVE = 0  # the entry left the group (its row no longer qualifies, moved, or is deleted)
ENTER = 1  # the entry entered the group
STAY = 2  # the row stays at the same entry; its output or its residual may have changed
# the row stays at the same entry with the same output; only fields its residual reads
# changed: a window whose residual the row passes before and after (or neither) keeps it
KEEP = 3

# window modes: how the windows a write reaches are found in a group
ONE = 0  # no bound from the parent, no residual: one window per group
LO = 1  # one lower bound from the parent: windows sorted by it, cuts follow
HI = 2  # one upper bound from the parent: same, walked from the top
ANY = 3  # anything else: every window of the group is tested

#: id(a window's new value) -> (its old value, its new value, member -> (output before or
#: None, output after or None)) of each edit in place since the flush began (Join._edit):
#: the parents of the window take their member changes from it instead of comparing the
#: two values (engine.proj._member_changes). The values are held here, so the ids stay
#: theirs; cleared once the flush re-projected (engine.flush.settle)
EDITS: dict[int, tuple[list[Any], list[Any], dict[str, tuple[Any, Any]]]] = {}


def _log_edit(old: list[Any], new: list[Any], events: list[tuple[Any, bool]]) -> None:
    """Note an edit of a window from ``old`` to ``new``: ``events`` the outputs that left
    (False) and entered (True), in the order the edit made them."""
    net: dict[str, tuple[Any, Any]] = {}
    for o, inn in events:
        k = _member_key(o)
        if k is None:
            return  # a row holding other records: its parents compare the values
        was = net.get(k)
        before = was[0] if was is not None else (None if inn else o)
        net[k] = (before, o if inn else None)
    EDITS[id(new)] = (old, new, net)


class _Top:
    """Compares above every value a sort entry holds: ``(k, TOP)`` follows every entry whose
    first key is ``k``, where ``(k,)`` precedes them."""

    __slots__ = ()

    def __lt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return other is self

    def __gt__(self, other: object) -> bool:
        return other is not self

    def __ge__(self, other: object) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return 7


TOP = _Top()


def jkey(v: Any) -> Any:
    """The group key of a correlation value: :func:`engine.matindex.xkey`, with a link
    whose key is an integral number read as the int key (``thread:1.0`` is ``thread:1``
    to SurrealDB, as the equality index's keys have it)."""
    if type(v) is RecordID:
        k: Any = v.id
        tk = type(k)
        if (tk is float or tk is Decimal) and k == k and k == int(k):
            return xkey(RecordID(v.table_name, int(k)))
    return xkey(v)


class _Bottom:
    """Compares below every sort key: the place of windows without a parent among the
    residual-bound windows of a group."""

    __slots__ = ("rank",)

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __lt__(self, other: object) -> bool:
        if type(other) is _Bottom:
            return self.rank < other.rank
        return True

    def __le__(self, other: object) -> bool:
        if type(other) is _Bottom:
            return self.rank <= other.rank
        return True

    def __gt__(self, other: object) -> bool:
        if type(other) is _Bottom:
            return self.rank > other.rank
        return False

    def __ge__(self, other: object) -> bool:
        if type(other) is _Bottom:
            return self.rank >= other.rank
        return False

    def __eq__(self, other: object) -> bool:
        return type(other) is _Bottom and self.rank == other.rank

    def __hash__(self) -> int:
        return 11 + self.rank


_BOTTOM = _Bottom(0)
_BOTTOM_NEXT = _Bottom(1)  # after every _BOTTOM, before every sort key


def _bisect_right(keys: list[Any], k: Any) -> int:
    """``bisect_right`` by ``<`` alone (sort keys and _Bottom compare only that way)."""
    lo, hi = 0, len(keys)
    while lo < hi:
        mid = (lo + hi) // 2
        if k < keys[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


class JoinSpec:
    """How a subquery plan's WHERE clause splits into keys, filter, bounds and residual."""

    __slots__ = ("build", "fields", "inner", "kfields", "kfns", "linner", "lo", "hi", "mode",
                 "out_fields", "proj_fields", "rbound", "resid", "rfns", "rtest", "slots")

    def __init__(self) -> None:
        self.kfields: tuple[str, ...] = ()
        self.kfns: list[Any] = []  # parent-side value of each key
        self.inner: Any = None  # predicate on the inner row alone
        # predicate on the inner row and the records its links reach (no $parent): kept per
        # row like ``inner``, the row tested again when a record it read is written
        self.linner: Any = None
        self.lo: tuple[Any, bool] | None = None  # (parent-side value, strict) in entry order
        self.hi: tuple[Any, bool] | None = None  # (parent-side value, inclusive)
        self.resid: Any = None  # predicate f(row, S, par, cx) of the rest
        self.rfns: list[Any] | None = []  # values of the $parent paths the residual reads
        # the residual reads fields of $parent without following a link from it: any parent
        # of a window answers it for a written inner row as every parent of the window would
        self.rtest = False
        # the residual is one bound ``inner_field op <expression of $parent fields>``:
        # (field, the row passes windows of higher bounds (< <=), parent-side value fn);
        # a group keeps its windows sorted by that bound (Group.rkeys), so a write finds
        # the windows whose answer it can change by bisection
        self.rbound: tuple[str, bool, Any] | None = None
        self.mode = ONE
        self.build: tuple[str, Any] | None = None  # (field, value fn): an inner equality
        self.fields: frozenset[str] | None = None  # inner fields read (None: whole row)
        # inner fields the projection and the residual read
        self.out_fields: frozenset[str] | None = None
        # inner fields the projection alone reads (None: the whole row): a write changing
        # none of them shows the same output wherever the row stays
        self.proj_fields: frozenset[str] | None = None
        self.slots: tuple[int, ...] = ()  # slots the window depends on


def _reads(e: Any, acc: dict[str, Any]) -> None:
    """Collect what an expression reads: ``parent`` (paths), ``fields`` (inner paths),
    ``opaque`` (a part this walk does not know, e.g. a nested query)."""
    if type(e) is not tuple or not e:
        acc["opaque"] = True
        return
    k = e[0]
    if k in ("lit", "slot"):
        return
    if k in ("graph", "deref"):
        # reads other tables (edges, linked rows): no group's entries may depend on it
        acc["opaque"] = True
        return
    if k == "object" or k == "call":
        for x in e[2]:  # (keys or the function's name, values or arguments)
            _reads(x, acc)
        return
    if k == "get":
        _reads(e[1], acc)  # (base, path read from its value)
        return
    if k == "parent":
        acc["parent"].append(tuple(e[1]))
        return
    if k == "field":
        acc["fields"].append(tuple(e[1]))
        return
    for x in e[1:]:
        if type(x) is tuple:
            if x and type(x[0]) is str:
                _reads(x, acc)
            else:
                for y in x:  # a tuple of expressions (array items, object values)
                    if type(y) is tuple:
                        _reads(y, acc)
                    elif not isinstance(y, (str, int)):
                        acc["opaque"] = True
        elif not isinstance(x, (str, int, bool)) and x is not None:
            acc["opaque"] = True


def _what(e: Any) -> dict[str, Any]:
    acc: dict[str, Any] = {"parent": [], "fields": [], "opaque": False}
    _reads(e, acc)
    return acc


def join_spec(plan: Any) -> JoinSpec | None:
    """The join form of a subquery plan, or None when it is run per parent."""
    q = plan.q
    if not plan.row_entries:
        return None  # ORDER BY follows a link: entries depend on other tables
    if plan.agg is not None or plan.split:
        return None  # a grouped or SPLIT subquery: its rows are no ordered window of entries
    if plan.semis:
        # a semi-join in its WHERE: the live sets the plan opened answer it, per parent run
        return None
    parts = _join_parts(q)
    if parts is None:
        return None
    keys, inner, linked, resid, lo, hi = parts
    spec = JoinSpec()
    spec.kfields = tuple(k for k, _ in keys)
    spec.kfns = [compile_expr(other)[0] for _, other in keys]
    if inner:
        spec.inner = compile_predicate(conjoin(inner))[0]
        spec.build = _build_key(inner)
    if linked:
        spec.linner = compile_predicate(conjoin(linked))[0]
    spec.lo = lo
    spec.hi = hi
    if resid:
        spec.resid = compile_predicate(conjoin(resid))[0]
        paths: list[tuple[str, ...]] = []
        for c in resid:
            paths += _what(c)["parent"]
        if any(not p for p in paths):
            spec.rfns = None  # reads $parent itself: windows are per parent row
        else:
            spec.rfns = [compile_expr(("parent", p))[0] for p in dict.fromkeys(paths)]
            spec.rtest = all(len(p) == 1 for p in paths)
            if spec.rtest and len(resid) == 1 and lo is None and hi is None:
                side = _field_vs_parent(resid[0])
                if side is not None and side[1] in RANGE_OPS:
                    spec.rbound = (side[0], side[1] in ("<", "<="),
                                   compile_expr(side[2])[0])
    if resid or (lo is not None and hi is not None):
        spec.mode = ANY
    elif lo is not None:
        spec.mode = LO
    elif hi is not None:
        spec.mode = HI
    spec.fields, spec.out_fields, spec.proj_fields = _read_fields(q, resid)
    # every slot the subquery reads, its projection and nested subqueries included: a
    # window's value is shared by the parents of one join state, so two views whose nested
    # subquery differs in a parameter must not share it
    own: set[int] = set()
    query_slots(q, own)
    spec.slots = tuple(sorted(own))
    return spec


def _join_parts(q: Any) -> tuple[list[tuple[str, Any]], list[Any], list[Any], list[Any],
                                  tuple[Any, bool] | None, tuple[Any, bool] | None] | None:
    """The WHERE conjuncts sorted by what they join on: the equality keys against the parent
    (inner field, parent-side expression), the conjuncts of the inner rows alone, those of
    the inner rows and the records their paths reach (``user.karma >= 10``), the residual
    ones, and the bounds a parent sets on the first ORDER BY field (low, high: compiled
    expression, strict). None when the subquery looks a row up by id."""
    first: str | None = None
    desc = False
    if q.order:
        src = order_source(q, q.order[0][0])
        if src is not None and len(src) == 1:
            first = src[0]
        desc = q.order[0][1]
    keys: list[tuple[str, Any]] = []
    inner: list[Any] = []
    linked: list[Any] = []
    resid: list[Any] = []
    lo: tuple[Any, bool] | None = None
    hi: tuple[Any, bool] | None = None
    for c in conjuncts(q.where):
        w = _what(c)
        multi = any(len(p) != 1 for p in w["fields"])
        if not w["parent"]:
            # a path of several segments may follow a link: what it read is recorded per row
            (resid if w["opaque"] else linked if multi else inner).append(c)
            continue
        side = _field_vs_parent(c) if not w["opaque"] else None
        if side is not None:
            f, op, other = side
            if op == "=":
                if f == "id":
                    return None  # a lookup by id: one row, the index path already
                if all(f != k for k, _ in keys):
                    keys.append((f, other))
                    continue
            elif op in RANGE_OPS and f == first:
                # in the order of the entries (DESC reverses it), which end it bounds
                low = op in ((">", ">=") if not desc else ("<", "<="))
                strict = op in (">", "<")
                if low and lo is None:
                    lo = (compile_expr(other)[0], strict)
                    continue
                if not low and hi is None:
                    hi = (compile_expr(other)[0], not strict)
                    continue
        resid.append(c)
    return keys, inner, linked, resid, lo, hi


def _build_key(inner: list[Any]) -> tuple[str, Any] | None:
    """The first `field = constant` of the inner conjuncts (the field and its compiled
    value), or None."""
    for c in inner:
        if (c[0] == "cmp" and c[1] == "=" and c[2][0] == "field" and len(c[2][1]) == 1
                and c[3][0] in ("slot", "lit")):
            return (c[2][1][0], compile_expr(c[3])[0])
    return None


def _read_fields(q: Any, resid: list[Any]
                 ) -> tuple[frozenset[str] | None, frozenset[str] | None,
                            frozenset[str] | None]:
    """The inner fields anything reads (a write changing none of them changes no window),
    those of the output and of the residual (a row staying at its place in its group
    changes a window through them), and those of the output alone; None: the whole row."""
    acc: set[str] = set()
    whole = False
    for c in conjuncts(q.where):
        for p in _what(c)["fields"]:
            acc.add(p[0])
    for path, _d in q.order:
        src = order_source(q, path)
        if src is None:
            whole = True  # ORDER BY an expression: the fields it reads are not listed here
        else:
            acc.add(src[0])
    out: set[str] = {"id"}
    for it in q.items:
        if it.kind == "all":
            whole = True
        elif it.kind in ("field", "linkall"):
            out.add(it.path[0])
        else:
            # an expression, a nested subquery: what it reads of this row is not listed here
            whole = True
    if q.fetch or q.omit:
        whole = True
    rfields: set[str] = set()
    for c in resid:
        for p in _what(c)["fields"]:
            rfields.add(p[0])
    if whole:
        return None, None, None
    return frozenset(acc | out), frozenset(out | rfields), frozenset(out)


def _field_vs_parent(c: Any) -> tuple[str, str, Any] | None:
    """``(inner field, op, parent-side expression)`` of a comparison between a one-segment
    inner field and an expression reading ``$parent`` but no inner field."""
    if c[0] != "cmp":
        return None
    op, a, b = c[1], c[2], c[3]
    for f, other, o in ((a, b, op), (b, a, FLIP.get(op, op))):
        if f[0] == "field" and len(f[1]) == 1:
            w = _what(other)
            if w["parent"] and not w["fields"] and not w["opaque"]:
                return f[1][0], o, other
    return None


def _reuse(value: list[Any], old: list[Any]) -> list[Any]:
    """``value`` with each row output equal to the one the window's previous value showed
    for the same record replaced by that one: the window's parents then compare their
    outputs (engine.proj) and members (engine.delta.Rec.diff) by identity, once per row
    changed instead of once per row and parent."""
    prev: dict[str, Any] = {}
    for o in old:
        if type(o) is dict:
            i = o.get("id")
            if type(i) is RecordID:
                prev[rid_text(i)] = o
    if not prev:
        return value
    out = []
    for o in value:
        if type(o) is dict:
            i = o.get("id")
            if type(i) is RecordID:
                p = prev.get(rid_text(i))
                if p is not None and same(p, o):
                    o = p
        out.append(o)
    return out


def _merge(cx: Cx, reads: set[str], subs: list[Any]) -> None:
    """Let a parent's context hold what a window's rows read, as if it had read them."""
    cx.reads |= reads
    cx.subs.extend(subs)


def _merge_extra(cx: Cx, wextra: dict[str, Any]) -> None:
    """The rows of VALUE subqueries a window's rows show, for the parent's members."""
    extra = cx.extra
    for m, v in wextra.items():
        if m not in extra:
            extra[m] = v


def _member_key(out: Any) -> str | None:
    """The one member of a flat output (its id's text), None when it may hold others or
    none (then the window's members are found again from its rows)."""
    if type(out) is not dict:
        return None
    i = out.get("id")
    if type(i) is not RecordID:
        return None
    for v in out.values():
        t = type(v)
        if t is dict or t is list:
            return None
    return rid_text(i)


class Win:
    """One window of a group: the rows some parents see, its cut, the parents."""

    __slots__ = ("attached", "cut", "dirty", "ents", "group", "hi", "key", "lo", "medit",
                 "members", "extra", "limit", "pairs", "par", "parents", "reads", "rk", "rows",
                 "start", "value")

    def __init__(self, group: Group, key: Any, lo: Any, hi: Any) -> None:
        self.group = group
        self.key = key
        self.lo = lo
        self.hi = hi
        self.cut: Any = None
        # (projection group, row) -> how many times its projection read this window
        # projection group -> its one parent row reading this window once (a correlated
        # window: one parent), or parent row -> reads. Not keyed by (group, row) pairs: no
        # tuple a parent, which cost each row of a view beside an uncorrelated window
        # about 100 bytes
        self.parents: dict[Any, Any] = {}
        self.value: list[Any] | None = None
        # SELECT VALUE: (row, value) of each row shown (its members: engine.plan.item_value)
        self.pairs: list[list[tuple[str, Any]]] | None = None
        self.attached = True
        # a parent row it was computed for (any of them gives the residual the same values):
        # a write tests its row's residual against it before reaching the window
        self.par: Any = None
        # a window without LIMIT or START over flat outputs: its entries (aligned with
        # ``value``), so that a write edits the window where the entry stands instead of
        # slicing the group again (Join._edit); None: the window is computed again
        self.ents: list[Any] | None = None
        # the members of ``value`` (id text -> output), shared by its parents' trees and
        # edited with the window; None until a parent asks (see tree())
        self.members: dict[str, Any] | None = None
        self.medit = False  # every row shows only itself: members edit one by one
        self.limit: int | None = None  # the LIMIT of an edited window (``ents``)
        # START of an edited window: ``ents`` then holds the entries before it too (its
        # first START + LIMIT), ``limit`` counts them, and ``value`` shows ``ents[start:]``
        self.start = 0
        # what the rows read beyond themselves (records, subquery scans and windows), for
        # a window cached although they do: registered in the engine's Deps with the
        # window as their reader (it is marked as a parent is: stale()); None: nothing
        self.reads: tuple[set[str], list[Any]] | None = None
        self.extra: dict[str, Any] = {}  # the rows of VALUE subqueries its rows show
        self.rk: Any = None  # its place among the residual-bound windows (Group.rkeys)
        # a window kept row by row (Join._rowwise: rows that are not flat outputs, no
        # residual or one reading only the rows and the parent, no START): row id -> (what
        # its output read, the VALUE rows it shows), each row registered in Deps on its own
        # (reader: this window, the row's id), so a change marks only the rows that read it
        # (``dirty``: projected again at the next read, Join._redo) and an inner write
        # projects only its own row (Join._edit_rows)
        self.rows: dict[str, tuple[Any, Any]] | None = None
        self.dirty: set[str] | None = None

    def stale(self, mark: Any, row: str = "") -> None:
        """Something the rows read changed (engine.flush.Pending.mark; ``row``: the row
        that read it): a window kept row by row notes that row, to project it again at its
        next read (Join._redo); any other is detached. Its parents are marked, whose next
        read computes it again."""
        rows = self.rows
        if rows is not None and row in rows:
            d = self.dirty
            if d is None:
                self.dirty = {row}
            else:
                d.add(row)
        else:
            g = self.group
            g.join.detach(g, self)
        for proj, rid in self.readers():
            mark(proj, rid, self)

    def readers(self) -> list[tuple[Any, str]]:
        """Every (projection group, row) reading this window (a copy: marking may change
        the registrations)."""
        out: list[tuple[Any, str]] = []
        for proj, rows in self.parents.items():
            if type(rows) is str:
                out.append((proj, rows))
            else:
                for rid in rows:
                    out.append((proj, rid))
        return out

    def tree(self) -> dict[str, Any]:
        """The members of the window's rows, as ``tree_members(value)`` finds them: kept
        while the window is edited in place, so its parents do not walk the rows again.
        Shared by reference: its readers copy it (``proj._tree_of``), never change it."""
        m = self.members
        if m is None:
            m = {}
            value = self.value
            assert value is not None
            self.group.join.walked += len(value)
            self.medit = True
            for o in value:
                k = _member_key(o)
                if k is None:
                    # a row holding other records (or none): the general walk, not edited
                    m = {}
                    rows_members(value, m, self.group.join.store.rmembers)
                    self.medit = False
                    break
                m[k] = o
            self.members = m
        return m

    def add(self, proj: Any, rid: str) -> None:
        """A parent's projection read this window (engine.deps)."""
        parents = self.parents
        rows = parents.get(proj)
        if rows is None:
            parents[proj] = rid
            self.group.n += 1
            return
        if type(rows) is str:
            if rows == rid:
                parents[proj] = {rid: 2}
                return
            rows = parents[proj] = {rows: 1}
        n = rows.get(rid)
        if n is None:
            rows[rid] = 1
            self.group.n += 1
        else:
            rows[rid] = n + 1

    def drop(self, proj: Any, rid: str) -> None:
        """A parent's projection no longer reads this window."""
        rows = self.parents.get(proj)
        if rows is None:
            return
        if type(rows) is str:
            if rows != rid:
                return
            del self.parents[proj]
        else:
            n = rows.get(rid)
            if n is None:
                return
            if n > 1:
                rows[rid] = n - 1
                return
            del rows[rid]
            if not rows:
                del self.parents[proj]
        g = self.group
        g.n -= 1
        if not self.parents and self.attached:
            g.join.detach(g, self)
        if g.n == 0:
            g.join.drop_group(g)

    def scan(self) -> tuple[str, str | None, Any]:
        """``(table, field, key)`` as a scan would name it (``subquery_state``)."""
        j = self.group.join
        f = j.spec.kfields[0] if j.spec.kfields else None
        return j.table, f, self.group.key

    def describe(self) -> tuple[Any, ...]:
        """What the window is, without object identities (tests compare engines)."""
        return ("win", *self.scan(), self.lo, self.hi, self.cut)


class Group:
    """The qualifying rows of one correlation key, in order, and the windows read of them."""

    __slots__ = ("bkeys", "bwins", "entries", "join", "key", "n", "prev", "pv", "rkeys",
                 "rwins", "wins")

    def __init__(self, join: Join, key: Any, pv: Any) -> None:
        self.join = join
        self.key = key
        self.pv = pv  # the parent-side value of the first key (the index lookup)
        self.entries: list[Any] | None = None  # built on first read
        self.wins: dict[Any, Win] = {}
        # LO / HI modes: the windows sorted by their bound from the parent
        self.bkeys: list[Any] = []
        self.bwins: list[Win] = []
        # a residual bound (JoinSpec.rbound): the windows sorted by the sort key of the
        # bound's parent-side value
        self.rkeys: list[Any] = []
        self.rwins: list[Win] = []
        self.n = 0  # parents registered on its windows
        # window key -> the value of a detached window whose rows read other records, until
        # it is computed again (_reuse keeps the outputs that did not change)
        self.prev: dict[Any, list[Any]] = {}


class Join:
    """A subquery plan's join state for one value of the slots it reads."""

    __slots__ = ("S", "built", "edited", "groups", "lreads", "plan", "projected", "reached",
                 "sliced", "spec", "store", "table", "tested", "walked")

    def __init__(self, plan: Any, spec: JoinSpec, S: tuple[Any, ...], store: Any) -> None:
        self.plan = plan
        self.spec = spec
        self.S = S
        self.store = store
        self.table: str = plan.table
        self.groups: dict[Any, Group] = {}
        # the records the linked filter (spec.linner) read: record -> inner rows, and back
        self.lreads = Readers(self, store.jlinks)
        # work done, for tests and the debug route: groups built, windows a write reached,
        # windows it edited in place, group entries sliced into windows, window rows walked
        # for their members
        self.built = 0
        self.reached = 0
        self.edited = 0
        self.sliced = 0
        self.walked = 0
        self.tested = 0  # windows a write tested (bounds, cut, residual)
        self.projected = 0  # window rows projected that are not flat outputs

    # -- keys -------------------------------------------------------------------------
    def row_key(self, row: dict[str, Any]) -> Any:
        """The group an inner row belongs to."""
        f = self.spec.kfields
        if len(f) == 1:
            return jkey(row.get(f[0], NONE))
        return tuple([jkey(row.get(x, NONE)) for x in f])

    def _parent_key(self, S: tuple[Any, ...], par: Any, cx: Any) -> tuple[Any, Any]:
        fns = self.spec.kfns
        if not fns:
            return (), None
        if len(fns) == 1:
            v = fns[0](None, S, par, cx)
            return jkey(v), v
        vals = [fn(None, S, par, cx) for fn in fns]
        return tuple([jkey(v) for v in vals]), vals[0]

    def _group(self, key: Any, pv: Any) -> Group:
        g = self.groups.get(key)
        if g is None:
            if not self.groups:
                self.store.joins.setdefault(self.table, {})[self] = None
            g = self.groups[key] = Group(self, key, pv)
        return g

    def drop_group(self, g: Group) -> None:
        """Forget a group no parent reads."""
        if self.groups.get(g.key) is g:
            del self.groups[g.key]
        for w in g.wins.values():
            self._unwatch(w)
        g.wins = {}
        g.prev = {}
        g.bkeys = []
        g.bwins = []
        g.rkeys = []
        g.rwins = []
        g.entries = None
        if not self.groups:
            self.lreads.clear()
            joins = self.store.joins.get(self.table)
            if joins is not None:
                joins.pop(self, None)
                if not joins:
                    del self.store.joins[self.table]
            self.plan.forget_join(self)

    def clear(self) -> None:
        """Forget every group (the engine closes)."""
        for g in list(self.groups.values()):
            for w in g.wins.values():
                w.parents = {}
                w.reads = None  # the engine's dependency indexes are cleared with it
                w.rows = None
                w.dirty = None
            g.wins = {}
            g.bwins = []
            g.rkeys = []
            g.rwins = []
        self.groups = {}
        self.lreads.clear()

    # -- reading ----------------------------------------------------------------------
    def _probe(self, fn: Any, S: tuple[Any, ...], par: Any, cx: Any, top: bool) -> Any:
        """The bound's position among the entries: ``(first key,)`` before the entries
        whose first sort key equals the bound's, ``(first key, TOP)`` after them."""
        src = self.plan.first_source
        v = fn(None, S, par, cx)
        k = self.plan.entry({src: v}, "", NOLINKS)[0]
        return (k, TOP) if top else (k,)

    def build(self, g: Group) -> list[Any]:
        """The group's qualifying entries, in order, from the stored rows."""
        spec = self.spec
        plan = self.plan
        t = self.store.table(self.table)
        rows = t.rows
        S = self.S
        cands: Any
        if spec.kfields:
            cands = t.index(spec.kfields[0]).get(ikey(g.pv), ())
        elif spec.build is not None:
            cands = t.index(spec.build[0]).get(ikey(spec.build[1](None, S, NONE, NOLINKS)), ())
        else:
            cands = rows.keys()
        # the index bucket of a string holds exactly the rows holding that string (only NaN
        # shares a string key, "\0nan"): their group key is the group's, not checked per row
        keyed = bool(spec.kfields) and not (
            len(spec.kfields) == 1 and type(g.pv) is str and g.pv != "\0nan")
        inner = spec.inner
        linner = spec.linner
        ecache = plan.row_caches(t)[0]
        entry = plan.entry
        out: list[Any] = []
        key = g.key
        for rid in cands:
            row = rows.get(rid)
            if row is None:
                continue
            if keyed and self.row_key(row) != key:
                continue
            if inner is not None and not inner(row, S, NONE, NOLINKS):
                continue
            if linner is not None and not self._linked(rid, row):
                continue
            e = ecache.get(rid)
            if e is None:
                e = ecache[rid] = entry(row, rid, NOLINKS)
            out.append(e)
        out.sort()
        g.entries = out
        self.built += 1
        return out

    def run(self, S: tuple[Any, ...], par: Any, cx: Cx) -> list[Any]:
        """The subquery's result for parent ``par``; the window read goes to ``cx.subs``."""
        plan = self.plan
        start, end = plan.window(S)
        limit = None if end is None else end - start
        if limit == 0:
            return []
        gk, pv = self._parent_key(S, par, cx)
        g = self.groups.get(gk)
        if g is None:
            g = self._group(gk, pv)
        lo, hi, wk = self._window_key(S, par, cx)
        w = g.wins.get(wk)
        if w is not None and w.value is not None:
            if w.dirty and not self._redo(w):
                self.detach(g, w)
                return self.run(S, par, cx)
            if w.extra:
                _merge_extra(cx, w.extra)
            cx.subs.append(w)
            if w.pairs is not None:
                cx.last = w.pairs
            return w.value
        t = self.store.table(self.table)
        spec = self.spec
        pre: tuple[list[Any], Any, Cx | None] | None = None
        if self._rowwise(start):
            pre = self._slice(g, lo, hi, 0, limit, t.rows, S, par)
            rcx = pre[2]
            if rcx is None or not (rcx.reads or rcx.subs or rcx.extra):
                # kept row by row (the residual, if any, read only the rows and the parent)
                if w is None:
                    w = Win(g, wk, lo, hi)
                    if spec.rtest:
                        w.par = par
                    self._attach(g, w)
                if spec.rtest:
                    w.par = par
                w.cut = pre[1]
                w.limit = limit
                self._fill_rows(w, pre[0], t.rows,
                                g.prev.pop(wk, None) if g.prev else None)
                if w.extra:
                    _merge_extra(cx, w.extra)
                cx.subs.append(w)
                value = w.value
                assert value is not None
                return value
        paged = (start > 0 and plan.flat is not None and not plan.value
                 and (spec.resid is None or spec.rtest))
        if paged:
            # a page of flat outputs: kept with the entries before it, so that a write edits
            # it where its entry stands (Join._edit_paged) instead of slicing it again
            pids, cut, wcx = self._slice(g, lo, hi, 0, None if limit is None else start + limit,
                                         t.rows, S, par)
            ids = pids[start:]
        elif pre is not None:
            ids, cut, wcx = pre
        else:
            ids, cut, wcx = self._slice(g, lo, hi, start, limit, t.rows, S, par)
        value, wcx = self._outputs(ids, t, S, cx, wcx)
        if w is None:
            w = Win(g, wk, lo, hi)
            if self.spec.rtest:
                w.par = par
            self._attach(g, w)
        w.cut = cut
        if self.spec.rtest:
            w.par = par
        if wcx is None or (not wcx.reads and not wcx.subs and not wcx.extra):
            w.value = value
            w.members = None
            if plan.value:
                w.pairs = cx.last
            elif (start == 0 and plan.flat is not None
                  and (self.spec.resid is None or self.spec.rtest)):
                # the first entries between the bounds that pass the residual (all of them,
                # or the first ``limit``): a write edits them where its entry stands, an
                # entry leaving a full window pulls in the next one (Join._edit)
                w.ents = ids
                w.limit = limit
            elif paged:
                w.ents = pids
                w.start = start
                w.limit = None if limit is None else start + limit
        else:
            # the rows (or the residual) read other records, nested subqueries or hold the
            # rows of VALUE subqueries: the window is kept with what they read, registered
            # with the window as their reader; a change to any of it detaches the window
            # (Win.stale) before a parent reads it again
            if g.prev:
                old = g.prev.pop(wk, None)
                if old is not None:
                    value = _reuse(value, old)
            w.ents = None
            w.value = value
            w.members = None
            if plan.value:
                w.pairs = cx.last
            w.extra = wcx.extra
            deps = self.store.deps
            if deps is not None:
                w.reads = (wcx.reads, wcx.subs)
                deps.set_proj(w, "", None, w.reads)
            else:  # a store without an engine: each parent registers what the rows read
                w.value = None
                _merge(cx, wcx.reads, wcx.subs)
            if wcx.extra:
                _merge_extra(cx, wcx.extra)
        cx.subs.append(w)
        return value

    def _unwatch(self, w: Win) -> None:
        """Drop what window ``w``'s rows read from the dependency indexes."""
        rows = w.rows
        if rows is not None:
            w.rows = None
            w.dirty = None
            w.value = None
            w.ents = None
            deps = self.store.deps
            for rid, st in rows.items():
                if st[0] is not None:
                    deps.set_proj(w, rid, st[0], None)
            return
        reads = w.reads
        if reads is None:
            return
        w.reads = None
        w.value = None
        self.store.deps.set_proj(w, "", reads, None)

    def _window_key(self, S: tuple[Any, ...], par: Any, cx: Cx) -> tuple[Any, Any, Any]:
        """The bounds parent ``par`` sets on the first ORDER BY field (low, high entries),
        and the key of its window in the group (the bounds and what the residual reads)."""
        spec = self.spec
        lo = self._probe(spec.lo[0], S, par, cx, spec.lo[1]) if spec.lo is not None else None
        hi = self._probe(spec.hi[0], S, par, cx, spec.hi[1]) if spec.hi is not None else None
        rk: Any = ()
        if spec.resid is not None:
            if spec.rfns is None:
                rk = exact_key(par)
            else:
                rk = tuple([exact_key(fn(None, S, par, cx)) for fn in spec.rfns])
        return lo, hi, (lo, hi, rk)

    def _slice(self, g: Group, lo: Any, hi: Any, start: int, limit: int | None, rows: Any,
               S: tuple[Any, ...], par: Any) -> tuple[list[Any], Any, Cx | None]:
        """The window's entries: the group's between the bounds, after ``start``, at most
        ``limit`` (the residual tested row by row); the entry the window ends at (``cut``);
        and the context the residual read through (None: there is no residual)."""
        spec = self.spec
        entries = g.entries
        if entries is None:
            entries = self.build(g)
        a = bisect_left(entries, lo) if lo is not None else 0
        b = bisect_left(entries, hi) if hi is not None else len(entries)
        cut: Any = hi
        if spec.resid is None:
            s0 = a + start
            if limit is not None and s0 + limit <= b:
                ids = entries[s0:s0 + limit]
                cut = ids[-1]
            else:
                ids = entries[s0:b]
            self.sliced += len(ids)
            return ids, cut, None
        resid = spec.resid
        wcx = Cx(self.store)
        ids = []
        skip = start
        for i in range(a, b):
            e = entries[i]
            self.sliced += 1
            if not resid(rows[e[-1]], S, par, wcx):
                continue
            if skip:
                skip -= 1
                continue
            ids.append(e)
            if limit is not None and len(ids) == limit:
                cut = e
                break
        return ids, cut, wcx

    def _outputs(self, ids: list[Any], t: Any, S: tuple[Any, ...], cx: Cx, wcx: Cx | None
                 ) -> tuple[list[Any], Cx | None]:
        """The window's rows projected (flat outputs kept per row), and the context the
        projection read through (None: flat rows read nothing)."""
        plan = self.plan
        rows = t.rows
        flat = plan.flat
        if flat is not None:
            fcache = plan.row_caches(t)[1]
            value = []
            for e in ids:
                rid = e[-1]
                o = fcache.get(rid)
                if o is None:
                    o = fcache[rid] = flat(rows[rid])
                value.append(o)
            return value, wcx
        if wcx is None:
            wcx = Cx(self.store)
        self.projected += len(ids)
        if plan.value:
            pairs = [(e[-1], plan.project(self.store, S, rows[e[-1]], wcx)) for e in ids]
            cx.last = [[p] for p in pairs]
            return [v for _, v in pairs], wcx
        return [plan.project(self.store, S, rows[e[-1]], wcx) for e in ids], wcx

    # -- windows kept row by row ------------------------------------------------------------
    def _rowwise(self, start: int) -> bool:
        """Whether a window is kept row by row (Win.rows): its rows are not flat outputs
        (they read other records, nested subqueries or compute expressions), its residual
        (if any) reads fields of ``$parent`` without following a link from it (what rows
        it holds then depends on the rows alone: an inner write changes it where its entry
        stands; a residual that reads another record is found while slicing, and that
        window is computed as before), no START and no VALUE rows of its own, and the store
        has an engine's dependency indexes to register each row's reads in."""
        plan = self.plan
        spec = self.spec
        return (start == 0 and plan.flat is None and not plan.value and not plan.split
                and (spec.resid is None or spec.rtest) and self.store.deps is not None)

    def _row_out(self, rid: str, row: dict[str, Any]) -> tuple[Any, Any, Any]:
        """An inner row's output, what it read (None: nothing) and the VALUE rows it shows
        (None: none), each in its own context."""
        rcx = Cx(self.store)
        self.projected += 1
        o = self.plan.project(self.store, self.S, row, rcx)
        d = (rcx.reads, rcx.subs) if rcx.reads or rcx.subs else None
        return o, d, (rcx.extra or None)

    def _set_row(self, w: Win, rid: str, d: Any, x: Any) -> bool:
        """Register what row ``rid`` of ``w`` read now (replacing what it read before);
        whether the VALUE rows it shows changed (a VALUE subquery may show the same values
        from other rows: the output is the same, its members are not)."""
        rows = w.rows
        assert rows is not None
        old = rows.get(rid)
        od = old[0] if old is not None else None
        if od is not None or d is not None:
            self.store.deps.set_proj(w, rid, od, d)
        rows[rid] = (d, x)
        ox = old[1] if old is not None else None
        if ox is None or x is None:
            return ox is not x
        if ox.keys() != x.keys():
            return True
        for m, v in x.items():
            if not same(v, ox[m]):
                return True
        return False

    def _unset_row(self, w: Win, rid: str) -> None:
        rows = w.rows
        assert rows is not None
        old = rows.pop(rid, None)
        if old is not None and old[0] is not None:
            self.store.deps.set_proj(w, rid, old[0], None)

    def _extras(self, w: Win) -> None:
        """The VALUE rows the window's rows show, merged in row order (the first wins, as
        one context shared by the rows would keep them)."""
        rows = w.rows
        assert rows is not None and w.ents is not None
        extra: dict[str, Any] = {}
        for e in w.ents:
            x = rows[e[-1]][1]
            if x:
                for m, v in x.items():
                    if m not in extra:
                        extra[m] = v
        w.extra = extra

    def _fill_rows(self, w: Win, ids: list[Any], rows_of: dict[str, Any],
                   old: list[Any] | None) -> None:
        """Compute window ``w`` row by row from its entries ``ids``; ``old``: the value of
        the window it replaces (its unchanged outputs are kept, see _reuse)."""
        if w.rows is not None:
            self._unwatch(w)
        w.rows = {}
        w.dirty = None
        value = []
        for e in ids:
            rid = e[-1]
            o, d, x = self._row_out(rid, rows_of[rid])
            self._set_row(w, rid, d, x)
            value.append(o)
        if old is not None:
            value = _reuse(value, old)
        w.ents = list(ids)
        w.value = value
        w.members = None
        w.medit = False
        self._extras(w)

    def _redo(self, w: Win) -> bool:
        """Project again the rows of ``w`` whose reads changed (Win.stale); the window's
        value is a new list only when some output changed. False when a row is gone (the
        window is computed again)."""
        dirty = w.dirty
        w.dirty = None
        ents = w.ents
        value = w.value
        if not dirty or ents is None or value is None:
            return True
        rows_of = self.store.table(self.table).rows
        new: list[Any] | None = None
        xmoved = False
        for j, e in enumerate(ents):
            rid = e[-1]
            if rid not in dirty:
                continue
            row = rows_of.get(rid)
            if row is None:
                return False
            o, d, x = self._row_out(rid, row)
            if self._set_row(w, rid, d, x):
                xmoved = True
            if not same(o, value[j]):
                if new is None:
                    new = list(value)
                new[j] = o
        if new is not None:
            w.value = new
            w.members = None
        if new is not None or xmoved:
            self._extras(w)
        return True

    def _edit_rows(self, w: Win, e: Any, rows: tuple[Any, ...], op: int) -> bool | None:
        """An inner write at entry ``e`` reached window ``w`` (kept row by row). A row that
        kept its entry and the residual's answer (STAY, KEEP) costs its own projection.
        Otherwise the window's entries are taken again from the group (one bisection and a
        slice, the residual asked of each entry up to the limit when there is one), the
        written row projected again, rows that entered projected and rows that left
        unregistered; the others keep their outputs. True when the value changed (a new
        list), False when it did not (its parents are not marked), None when the group is
        gone (the window is detached)."""
        g = w.group
        entries = g.entries
        old = w.ents
        value = w.value
        if entries is None or old is None or value is None or w.rows is None:
            return None
        if op == STAY or op == KEEP:
            # the row kept its entry: when the residual's answer for it is the one the
            # window shows (held and passes, or neither), the window holds the same rows
            # and only the row's own output may have changed
            j = bisect_left(old, e)
            held = j < len(old) and old[j] == e
            row = rows[-1]
            ok = self._passes(w, row) if row is not None else False
            if ok is None:
                return None
            if held == ok:
                self.edited += 1
                if not held:
                    return False
                assert row is not None
                rid = e[-1]
                o, d, xt = self._row_out(rid, row)
                xmoved = self._set_row(w, rid, d, xt)
                if w.dirty is not None:
                    w.dirty.discard(rid)
                if same(o, value[j]):
                    if not xmoved:
                        return False
                    self._extras(w)  # the same output showing other VALUE rows
                    return True
                one = list(value)
                one[j] = o
                w.value = one
                w.members = None
                self._extras(w)
                return True
        rows_of = self.store.table(self.table).rows
        if self.spec.resid is not None and w.par is None:
            return None
        # the residual asked of the rows between the bounds, for the window's parent (one
        # context for all: a residual that read another record gives the window up)
        ids, cut, rcx = self._slice(g, w.lo, w.hi, 0, w.limit, rows_of, self.S, w.par)
        if rcx is not None and (rcx.reads or rcx.subs or rcx.extra):
            return None
        me = e[-1]
        pos: dict[str, int] = {x[-1]: i for i, x in enumerate(old)}
        dirty = w.dirty
        new: list[Any] = []
        moved = len(ids) != len(old)
        xmoved = False
        for k, x in enumerate(ids):
            rid = x[-1]
            was = pos.pop(rid, None)
            if was is not None and rid != me:
                new.append(value[was])
                if was != k:
                    moved = True
                continue
            o, d, xt = self._row_out(rid, rows_of[rid])
            if self._set_row(w, rid, d, xt):
                xmoved = True
            if dirty is not None:
                dirty.discard(rid)
            if was is not None and was == k and same(o, value[was]):
                o = value[was]
            else:
                moved = True
            new.append(o)
        for rid in pos:
            self._unset_row(w, rid)
            moved = True
        w.ents = ids
        w.cut = cut
        self.edited += 1
        if not moved:
            if not xmoved:
                return False
            self._extras(w)  # the same outputs showing other VALUE rows
            return True
        w.value = new
        w.members = None
        self._extras(w)
        return True

    def adopt(self, par: Any, ents: list[Any], value: list[Any]) -> Win:
        """The window a lazy row shows (engine.lazy): its children's entries in order and
        their outputs, known without reading the group (which is built on first need)."""
        gk, pv = self._parent_key(self.S, par, NOLINKS)
        g = self.groups.get(gk)
        if g is None:
            g = self._group(gk, pv)
        wk = (None, None, ())
        w = g.wins.get(wk)
        if w is not None and w.value is not None:
            return w
        start, end = self.plan.window(self.S)
        limit = None if end is None else end - start
        if w is None:
            w = Win(g, wk, None, None)
            self._attach(g, w)
        w.cut = ents[-1] if limit is not None and len(ents) == limit and ents else None
        w.value = value
        return w

    def warm(self, par: Any) -> None:
        """Build the group ``par`` reads now (idle work: its first write will not)."""
        gk, pv = self._parent_key(self.S, par, NOLINKS)
        g = self.groups.get(gk)
        if g is not None and g.entries is None:
            self.build(g)

    def _rkey(self, w: Win) -> Any:
        """Where a window stands among its group's residual-bound windows (its bound's sort
        key); None: it has no parent to ask (tested whatever a write's value)."""
        rb = self.spec.rbound
        if rb is None or w.par is None:
            return None
        cx = Cx(self.store)
        v = rb[2](None, self.S, w.par, cx)
        return sort_key(v)

    def _attach(self, g: Group, w: Win) -> None:
        g.wins[w.key] = w
        if self.spec.rbound is not None:
            k = self._rkey(w)
            w.rk = k if k is not None else _BOTTOM
            i = bisect_left(g.rkeys, w.rk)
            g.rkeys.insert(i, w.rk)
            g.rwins.insert(i, w)
        mode = self.spec.mode
        if mode == LO or mode == HI:
            k = w.lo if mode == LO else w.hi
            i = bisect_left(g.bkeys, k)
            g.bkeys.insert(i, k)
            g.bwins.insert(i, w)

    def detach(self, g: Group, w: Win) -> None:
        """Take ``w`` out of its group: the next read of its bounds computes a new window."""
        if not w.attached:
            return
        w.attached = False
        if w.reads is not None or w.rows is not None:
            if w.value is not None and not self.plan.value:
                # its rows' outputs, for the window computed again in its place (_reuse)
                g.prev[w.key] = w.value
            self._unwatch(w)  # a detached window is read no more: nor are its rows' reads
        if g.wins.get(w.key) is w:
            del g.wins[w.key]
        if self.spec.rbound is not None:
            rw = g.rwins
            i = bisect_left(g.rkeys, w.rk)
            while i < len(rw):
                if rw[i] is w:
                    del g.rkeys[i]
                    del rw[i]
                    break
                i += 1
        mode = self.spec.mode
        if mode == LO or mode == HI:
            k = w.lo if mode == LO else w.hi
            i = bisect_left(g.bkeys, k)
            while i < len(g.bwins):
                if g.bwins[i] is w:
                    del g.bkeys[i]
                    del g.bwins[i]
                    break
                i += 1

    def _reset(self, g: Group, w: Win) -> None:
        """A write changed window ``w``, which cannot be edited in place (a VALUE window, a
        window whose rows read other records): its value is computed again at its next
        read, into the same object. Its parents then keep the same token, so the write
        costs each of them no dependency move (a detached window was replaced by a new
        one, which every parent registered with and the old one dropped)."""
        if w.value is None:
            return  # reset already (another write of the batch), or never cached
        if w.reads is not None:
            if not self.plan.value:
                # its rows' outputs, for the value computed again (_reuse)
                g.prev[w.key] = w.value
            self._unwatch(w)  # what the rows read is registered again by the next read
        w.value = None
        w.members = None
        w.pairs = None
        w.ents = None
        w.extra = {}

    # -- writes -----------------------------------------------------------------------
    def _find(self, rid: str, row: dict[str, Any] | None, fresh: bool) -> Any:
        """(group, entry or None when the row does not qualify) of an inner row, or None
        when no parent reads its group."""
        if row is None:
            return None
        g = self.groups.get(self.row_key(row) if self.spec.kfields else ())
        if g is None:
            return None
        inner = self.spec.inner
        if inner is not None and not inner(row, self.S, NONE, NOLINKS):
            return (g, None)
        plan = self.plan
        if self.spec.linner is not None:
            if fresh:
                if not self._linked(rid, row):
                    return (g, None)
            else:
                # the old row qualified as its group holds it: the records it read may be
                # written already (a row linking to itself)
                e = plan.entry(row, rid, NOLINKS)
                ents = g.entries
                if ents is not None:
                    i = bisect_left(ents, e)
                    return (g, e if i < len(ents) and ents[i] == e else None)
                if not self.spec.linner(row, self.S, NONE, Cx(self.store)):
                    return (g, None)
                return (g, e)
        if fresh:
            ecache = plan.row_caches(self.store.table(self.table))[0]
            e = ecache.get(rid)
            if e is None:
                e = ecache[rid] = plan.entry(row, rid, NOLINKS)
            return (g, e)
        return (g, plan.entry(row, rid, NOLINKS))

    def touch(self, rid: str, old: dict[str, Any] | None, new: dict[str, Any] | None,
              changed: set[str] | None, mark: Any) -> None:
        """An inner row was written (``old`` -> ``new``, None: absent): move its entry and
        mark the parents of the windows it can change."""
        spec = self.spec
        if changed is not None and spec.fields is not None and changed.isdisjoint(spec.fields):
            return
        go = self._find(rid, old, False)
        gn = self._find(rid, new, True)
        if go is None and gn is None:
            return
        if go is not None and gn is not None and go[0] is gn[0] and go[1] == gn[1]:
            e = go[1]
            if e is None:
                return  # qualifies neither before nor after
            out = spec.out_fields
            if changed is not None and out is not None and changed.isdisjoint(out):
                return  # same place, same output
            pf = spec.proj_fields
            if (changed is not None and pf is not None and changed.isdisjoint(pf)
                    and spec.rtest):
                # same place, same output, only what the residual reads changed: a window
                # changes only where the residual's answer for the row did (KEEP)
                self._reach(go[0], e, mark, (old, new), KEEP)
                return
            self._reach(go[0], e, mark, (old, new), STAY)
            return
        if go is not None and go[1] is not None:
            g = go[0]
            ents = g.entries
            if ents is not None:
                i = bisect_left(ents, go[1])
                if i < len(ents) and ents[i] == go[1]:
                    del ents[i]
            self._reach(g, go[1], mark, (old,), LEAVE)
        if gn is not None and gn[1] is not None:
            g = gn[0]
            if g.entries is not None:
                insort(g.entries, gn[1])
            self._reach(g, gn[1], mark, (new,), ENTER)

    def _holds(self, resid: Any, rows: tuple[Any, ...], par: Any) -> bool:
        """Whether some version of an inner row passes the residual for parent ``par``."""
        for r in rows:
            if r is not None and resid(r, self.S, par, Cx(self.store)):
                return True
        return False

    def _rcands(self, g: Group, rows: tuple[Any, ...], op: int, e: Any) -> list[Win]:
        """The windows of a residual bound whose answer a row's versions can change: for a
        row keeping its entry (KEEP), those whose bound lies between the row's old and new
        values; otherwise those the row passes in some version (the bounds above its value
        for ``<``/``<=``, below for ``>``/``>=``) up to the first whose cut is before the
        entry ``e``. Both ends inclusive: the residual itself decides the windows at a
        bound equal to a value (and those without a parent, kept at the front, are always
        candidates).

        The early stop: a window lets through the rows of every window whose bound is
        further from the row's value (``stock < 9`` holds every row ``stock < 5`` does), so
        its first ``start + limit`` rows end no later than theirs: the cuts only move back
        along the walk, and past the first cut before ``e`` none can hold it."""
        rb = self.spec.rbound
        assert rb is not None
        f, up, _fn = rb
        keys = [sort_key(r.get(f, NONE)) for r in rows if r is not None]
        rk = g.rkeys
        rw = g.rwins
        nfree = bisect_left(rk, _BOTTOM_NEXT)  # windows without a parent (at the front)
        if not keys:
            return list(rw)
        a0 = min(keys)
        b0 = max(keys)
        if op == KEEP:
            lo_i = bisect_left(rk, a0)
            hi_i = _bisect_right(rk, b0)
        elif up:
            lo_i = bisect_left(rk, a0)
            hi_i = len(rk)
        else:
            lo_i = nfree
            hi_i = _bisect_right(rk, b0)
        out = rw[:nfree]
        if op == KEEP:
            out.extend(rw[max(lo_i, nfree):hi_i])
        elif up:
            for i in range(max(lo_i, nfree), hi_i):
                w = rw[i]
                if w.cut is not None and w.cut < e:
                    break
                out.append(w)
        else:
            for i in range(hi_i - 1, nfree - 1, -1):
                w = rw[i]
                if w.cut is not None and w.cut < e:
                    break
                out.append(w)
        return out

    def _same_answer(self, resid: Any, rows: tuple[Any, ...], par: Any) -> bool:
        """Whether the residual gives the row's old and new versions (``rows``) the same
        answer for parent ``par`` without reading another record: a row keeping its entry
        and its output then leaves the window as it was (in it before and after, or in it
        neither time)."""
        ans: list[bool] = []
        for r in rows:
            if r is None:
                return False
            cx = Cx(self.store)
            ans.append(bool(resid(r, self.S, par, cx)))
            if cx.reads or cx.subs or cx.extra:
                return False
        return ans[0] == ans[-1]

    # -- the linked filter: records its paths read ----------------------------------------
    def _linked(self, rid: str, row: dict[str, Any]) -> bool:
        """Whether an inner row passes the linked filter now; what it read is noted."""
        cx = Cx(self.store)
        ok = bool(self.spec.linner(row, self.S, NONE, cx))
        self.lreads.note(rid, frozenset(cx.reads))
        return ok

    def relink(self, tok: str, mark: Any) -> None:
        """Record ``tok`` was written: test again the inner rows whose linked filter read
        it, move those that entered or left their group and mark the windows they reach."""
        rids = self.lreads.rows(tok)
        if not rids:
            return
        spec = self.spec
        plan = self.plan
        t = self.store.table(self.table)
        rows = t.rows
        ecache = plan.row_caches(t)[0]
        for rid in list(rids):
            row = rows.get(rid)
            g = None if row is None else self.groups.get(
                self.row_key(row) if spec.kfields else ())
            if row is None or g is None or g.entries is None or (
                    spec.inner is not None and not spec.inner(row, self.S, NONE, NOLINKS)):
                self.lreads.note(rid, frozenset())  # no group of it is held: nothing to follow
                continue
            e = ecache.get(rid)
            if e is None:
                e = ecache[rid] = plan.entry(row, rid, NOLINKS)
            ents = g.entries
            i = bisect_left(ents, e)
            was = i < len(ents) and ents[i] == e
            now = self._linked(rid, row)
            if was == now:
                continue
            if now:
                ents.insert(i, e)
            else:
                del ents[i]
            self._reach(g, e, mark, (row,), ENTER if now else LEAVE)

    def _reach(self, g: Group, e: Any, mark: Any, rows: tuple[Any, ...], op: int) -> None:
        """Edit or detach the windows of ``g`` an entry at ``e`` can change; mark their
        parents. ``rows``: the inner row's versions at ``e``; a window whose residual none
        of them passes neither held nor holds the row, and the rows it shows stay the same.
        ``op``: what happened to the entry (LEAVE, ENTER, STAY)."""
        mode = self.spec.mode
        hit: list[Win] = []
        if mode == ONE or mode == ANY:
            resid = self.spec.resid if rows else None
            wins: Any = g.wins.values()
            if self.spec.rbound is not None and rows:
                wins = self._rcands(g, rows, op, e)
            for w in wins:
                self.tested += 1
                if (w.lo is None or w.lo < e) and (w.cut is None or not w.cut < e):
                    if op == KEEP and w.par is not None:
                        if self._same_answer(resid, rows, w.par):
                            continue
                    elif resid is not None and w.par is not None and not self._holds(
                            resid, rows, w.par):
                        continue
                    hit.append(w)
        else:
            # windows sorted by their bound; their cuts follow it (see the module docstring)
            bwins = g.bwins
            j = bisect_left(g.bkeys, e) - 1 if mode == LO else len(bwins) - 1
            while j >= 0:
                w = bwins[j]
                if w.cut is not None and w.cut < e:
                    break
                hit.append(w)
                j -= 1
        self.reached += len(hit)
        for w in hit:
            if w.rows is not None:
                moved = self._edit_rows(w, e, rows, op)
                if moved is None:
                    self.detach(g, w)
                elif not moved:
                    continue  # the same rows and outputs: its parents keep their value
            elif w.ents is None or not (self._edit_paged(w, e, rows, op) if w.start
                                        else self._edit(w, e, rows, op)):
                self._reset(g, w)
            for proj, rid in w.readers():
                mark(proj, rid, w)

    def _edit(self, w: Win, e: Any, rows: tuple[Any, ...], op: int) -> bool:
        """Edit a window starting at its group's first entry (no START) where entry ``e``
        stands: its own entry out, in again when the new row is between the bounds and
        passes the residual; with a LIMIT, the entry past the limit out (the window was
        full) or the next qualifying entry after its cut in (an entry left a full window).
        That costs O(log n) plus a copy of the value list (plus, for an entry leaving a
        window with a residual, the entries walked to the next one passing it), instead of
        slicing and projecting the window again. The value is a new list (the parents'
        outputs hold the old one until they are projected again); the entries and members
        are the window's own. False when the window cannot be edited (the residual read
        another record): it is detached."""
        ents = w.ents
        value = w.value
        if ents is None or value is None:
            return False
        out: Any = None
        if op != LEAVE:
            row = rows[-1]
            if row is not None and (w.lo is None or w.lo < e) and (w.hi is None or e < w.hi):
                ok = self._passes(w, row)
                if ok is None:
                    return False
                if ok:
                    out = self._out(e[-1], row)
        limit = w.limit
        full = limit is not None and len(ents) == limit
        members = w.members
        if members is not None and not w.medit:
            members = w.members = None
        new: list[Any] | None = None
        # the entry's old place (an entering entry is not there; were it, it is replaced)
        i = bisect_left(ents, e)
        events: list[tuple[Any, bool]] = []  # what left and entered, for the parents
        if i < len(ents) and ents[i] == e:
            new = list(value)
            del ents[i]
            gone = new.pop(i)
            events.append((gone, False))
            self._unmember(w, gone)
        if out is not None:
            if new is None:
                new = list(value)
            ents.insert(i, e)
            new.insert(i, out)
            events.append((out, True))
            self._member(w, out)
        if new is not None:
            if limit is not None:
                if len(ents) > limit:
                    # the entry past the limit leaves
                    del ents[limit:]
                    for o in new[limit:]:
                        events.append((o, False))
                        self._unmember(w, o)
                    del new[limit:]
                elif full and len(ents) < limit:
                    # an entry left a full window: the next one after its cut comes in
                    n = len(new)
                    if not self._refill(w, ents, new, w.cut):
                        return False
                    if len(new) > n:
                        events.append((new[-1], True))
                w.cut = ents[-1] if len(ents) == limit else w.hi
            w.value = new
            _log_edit(value, new, events)
        self.edited += 1
        return True

    def _edit_paged(self, w: Win, e: Any, rows: tuple[Any, ...], op: int) -> bool:
        """Edit a window with START as :meth:`_edit` edits one without, over its entries
        from the group's first (those before the page included), then show the entries
        from START on: an entry before the page shifts it by one, which costs the page's
        length, not the group's (a page used to be sliced again, the residual tested from
        the group's first entry). False when the residual read another record."""
        ents = w.ents
        if ents is None or w.value is None:
            return False
        inn = False
        if op != LEAVE:
            row = rows[-1]
            if row is not None and (w.lo is None or w.lo < e) and (w.hi is None or e < w.hi):
                ok = self._passes(w, row)
                if ok is None:
                    return False
                inn = ok
        limit = w.limit
        full = limit is not None and len(ents) == limit
        i = bisect_left(ents, e)
        if i < len(ents) and ents[i] == e:
            del ents[i]
        if inn:
            ents.insert(i, e)
        w.members = None  # found again from the new rows when a parent asks (Win.tree)
        if limit is not None:
            if len(ents) > limit:
                del ents[limit:]
            elif full and len(ents) < limit:
                if not self._refill(w, ents, [], w.cut):
                    return False
            w.cut = ents[-1] if len(ents) == limit else w.hi
        rows_of = self.store.table(self.table).rows
        w.value = [self._out(x[-1], rows_of[x[-1]]) for x in ents[w.start:]]
        self.edited += 1
        return True

    def _passes(self, w: Win, row: dict[str, Any]) -> bool | None:
        """Whether an inner row passes the window's residual for its parents (True without
        one); None when the answer read another record (the window is computed again)."""
        resid = self.spec.resid
        if resid is None:
            return True
        if w.par is None:
            return None
        cx = Cx(self.store)
        ok = bool(resid(row, self.S, w.par, cx))
        if cx.reads or cx.subs or cx.extra:
            return None
        return ok

    def _out(self, rid: str, row: dict[str, Any]) -> Any:
        """The flat output of an inner row (kept per row)."""
        plan = self.plan
        fcache = plan.row_caches(self.store.table(self.table))[1]
        out = fcache.get(rid)
        if out is None:
            out = fcache[rid] = plan.flat(row)
        return out

    def _refill(self, w: Win, ents: list[Any], value: list[Any], cut: Any) -> bool:
        """Append to a LIMIT window the first entry of its group after ``cut`` (before its
        upper bound) that passes the residual, if any. False when the residual read another
        record."""
        g = w.group
        entries = g.entries
        if entries is None:
            return False
        j = bisect_left(entries, cut)
        if j < len(entries) and entries[j] == cut:
            j += 1
        b = bisect_left(entries, w.hi) if w.hi is not None else len(entries)
        rows = self.store.table(self.table).rows
        while j < b:
            e = entries[j]
            self.sliced += 1
            row = rows[e[-1]]
            ok = self._passes(w, row)
            if ok is None:
                return False
            if ok:
                out = self._out(e[-1], row)
                ents.append(e)
                value.append(out)
                self._member(w, out)
                return True
            j += 1
        return True

    def _member(self, w: Win, out: Any) -> None:
        members = w.members
        if members is not None:
            k = _member_key(out)
            if k is None:
                w.members = None
            else:
                members[k] = out

    def _unmember(self, w: Win, out: Any) -> None:
        members = w.members
        if members is not None:
            k = _member_key(out)
            if k is None:
                w.members = None
            else:
                members.pop(k, None)
