"""Deltas: what a view's membership did, computed from what happened to its top-level rows.

A view's members are the record ids of its result tree: the union, over its visible top-level
rows, of each row's *tree* (every dict with a record-id ``id`` in the row's output, mapped to
that dict). Trees belong to the shape's shared projection (:mod:`engine.proj`); a
materialisation only knows which rows it shows. So a flush reduces, per materialisation, to a
list of *entries* ``(row, was visible, is visible)`` and each row's :class:`Rec` (its tree
before and after the flush).

A member is **clean** when the only row whose tree holds it is that one row, before and after
the flush: its presence in a view is then that row's visibility, and every view in the same
situation gets the same :class:`ViewDelta` object (built once per row, shared by reference).
Members held by several rows (a user shown as the author of many threads, a row nested in
another row of the same table) take the general path: presence is recomputed per view from
the rows that hold it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from surrealdb import RecordID

from engine.store import rid_text
from engine.values import NONE

EMPTY: frozenset[str] = frozenset()
NO_TREE: dict[str, Any] = {}


class ViewDelta(NamedTuple):
    """What one view's membership did: records that entered, left, or changed content."""

    added: frozenset[str]
    removed: frozenset[str]
    updated: frozenset[str]


_MISSING = object()
# kinds whose equality is type-exact already (compared inline, without a call)
_PLAIN = frozenset({int, str, float, bool, type(None)})


def same(a: Any, b: Any) -> bool:
    """Type-exact equality of result values (1 and 1.0 differ, as a client sees them).

    Outputs compared here mostly share their values (an output is rebuilt from the same row,
    a subquery's rows come from a cache): each element is tested for identity, and plain
    scalars of one type compared, before any recursive call. The dict and list loops are
    written out twice on purpose: one helper over (value, value) pairs for both measured
    +1.5% instructions on the mix (callgrind), the whole gain of the inline tests."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict:
        if len(a) != len(b):
            return _same_but_none(a, b)
        get = b.get
        for k, v in a.items():
            w = get(k, _MISSING)
            if v is w:
                continue
            tv = type(v)
            if tv is not type(w):
                # a key holding NONE is a key the client does not see (an absent one)
                return w is _MISSING and _same_but_none(a, b)
            if tv in _PLAIN:
                if v != w and (tv is not float or v == v or w == w):
                    return False  # (NaN and NaN: the same value shown)
            elif not same(v, w):
                return False
        return True
    if ta is list or ta is tuple:
        if len(a) != len(b):
            return False
        for v, w in zip(a, b):
            if v is w:
                continue
            tv = type(v)
            if tv is not type(w):
                return False
            if tv in _PLAIN:
                if v != w and (tv is not float or v == v or w == w):
                    return False  # (NaN and NaN: the same value shown)
            elif not same(v, w):
                return False
        return True
    if ta is RecordID:
        return bool(a.table_name == b.table_name) and same(a.id, b.id)
    if ta is float and a != a:
        return bool(b != b)
    return bool(a == b)


def _same_but_none(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Dicts equal once their keys holding NONE are left out: a client never sees such a
    key (a FETCH of a missing record gives the key NONE where the row had no field), so a
    row whose only difference is one is not updated."""
    ka = [k for k, v in a.items() if v is not NONE]
    kb = [k for k, v in b.items() if v is not NONE]
    if len(ka) != len(kb):
        return False
    for k in ka:
        w = b.get(k, NONE)
        if w is NONE or not same(a[k], w):
            return False
    return True


def has_nested(out: Any) -> bool:
    """True when a dict holds a dict or a list (it may then embed other members)."""
    for v in out.values():
        t = type(v)
        if t is dict or t is list:
            return True
    return False


class Rec:
    """One projected row across a flush: its tree before (``t0``) and after (``t1``); an empty
    tree when the row was not (or is no longer) projected."""

    __slots__ = ("_cache", "_diff", "clean", "hint", "rid", "t0", "t1")

    def __init__(self, rid: str, t0: dict[str, Any], t1: dict[str, Any], clean: bool) -> None:
        self.rid = rid
        self.t0 = t0
        self.t1 = t1
        self.clean = clean
        self._diff: tuple[frozenset[str], frozenset[str], frozenset[str]] | None = None
        self._cache: dict[tuple[bool, bool], ViewDelta | None] | None = None
        # (output before, output after) when the projection knows they differ (an item's
        # value at its own key changed): the row's content is then not compared again
        self.hint: tuple[Any, Any] | None = None

    def diff(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        """(members only after, members only before, members in both whose content changed)."""
        d = self._diff
        if d is None:
            t0, t1 = self.t0, self.t1
            if t0 is t1:
                d = (EMPTY, EMPTY, EMPTY)
            else:
                # the key sets' differences in C; only the common members are walked, and
                # those a window edit left alone are the same objects (one identity test)
                k0 = t0.keys()
                k1 = t1.keys()
                added = frozenset(k1 - k0)
                removed = frozenset(k0 - k1)
                upd: list[str] = []
                get = t0.get
                hint = self.hint
                h0 = h1 = _MISSING
                if hint is not None:
                    h0, h1 = hint
                for m, c in t1.items():
                    o = get(m, _MISSING)
                    if o is not c and o is not _MISSING and (
                            (c is h1 and o is h0) or not same(o, c)):
                        upd.append(m)
                d = (added, removed, frozenset(upd))
            self._diff = d
        return d

    def preset(self, d: tuple[frozenset[str], frozenset[str], frozenset[str]]) -> None:
        """The diff, known by the projection from the members that moved (proj._patch)."""
        self._diff = d

    def changed(self) -> bool:
        """True when a view showing the row throughout sees a change."""
        a, r, u = self.diff()
        return bool(a or r or u)

    def delta(self, was: bool, now: bool) -> ViewDelta | None:
        """The delta of a view where this row went from ``was`` to ``now`` visible and whose
        members of this row are all clean (shared by every such view)."""
        key = (was, now)
        cache = self._cache
        if cache is None:
            cache = self._cache = {}
        elif key in cache:
            return cache[key]
        d: ViewDelta | None = None
        if was and now:
            a, r, u = self.diff()
            if a or r or u:
                d = ViewDelta(a, r, u)
        elif now:
            if self.t1:
                d = ViewDelta(frozenset(self.t1), EMPTY, EMPTY)
        elif was and self.t0:
            d = ViewDelta(EMPTY, frozenset(self.t0), EMPTY)
        cache[key] = d
        return d


Entry = tuple[str, bool, bool]


def merge_clean(parts: Iterable[ViewDelta | None]) -> ViewDelta | None:
    """Union of the deltas of rows whose members are all clean (their member sets are
    disjoint, so the union is the net change)."""
    ds = [d for d in parts if d is not None]
    if len(ds) <= 1:
        # one row's delta: its added and updated members are already apart
        return ds[0] if ds else None
    added = EMPTY.union(*[d.added for d in ds])
    updated = EMPTY.union(*[d.updated for d in ds])
    return ViewDelta(added, EMPTY.union(*[d.removed for d in ds]),
                     updated - added if updated and added else updated)


#: members :func:`counted_delta` visited, over the process's life: a work count the tests
#: read (one list item, so the compiled module updates it in place)
COUNTED = [0]

#: a member held by more rows than this: the view counts its members (:func:`counted_delta`)
#: instead of asking each holder whether the view shows it (:func:`owner_delta`)
FEW_OWNERS = 16
#: what :func:`owner_delta` answers when some member has more holders than it walks
MANY = object()


def owner_delta(
    entries: Iterable[Entry],
    rec: Callable[[str], Rec],
    owners: Callable[[str, int], tuple[list[str], list[str]] | None],
    holds_start: Callable[[str], bool],
    holds_now: Callable[[str], bool],
) -> Any:
    """A view's net delta when some member may be held by several rows, from the rows that
    hold each member (``owners(member, limit)``: before and now, None past the limit), when
    every member involved has at most :data:`FEW_OWNERS` (a comment moving from one
    thread to another); :data:`MANY` otherwise."""
    cand: set[str] = set()
    for rid, was, now in entries:
        r = rec(rid)
        if was:
            cand.update(r.t0)
        if now:
            cand.update(r.t1)
    added: list[str] = []
    removed: list[str] = []
    updated: list[str] = []
    for m in cand:
        got = owners(m, FEW_OWNERS)
        if got is None:
            return MANY
        before, after = got
        c0 = [rec(o).t0[m] for o in before if holds_start(o)]
        c1 = [rec(o).t1[m] for o in after if holds_now(o)]
        if c1 and not c0:
            added.append(m)
        elif c0 and not c1:
            removed.append(m)
        elif c0 and c1:
            now_set = set(after)
            common = [o for o in before if o in now_set and holds_start(o) and holds_now(o)]
            if common:
                if any(not same(rec(o).t0[m], rec(o).t1[m]) for o in common):
                    updated.append(m)
            elif not same(c0[0], c1[0]):
                updated.append(m)
    if added or removed or updated:
        return ViewDelta(frozenset(added), frozenset(removed), frozenset(updated))
    return None


def apply_counts(entries: Iterable[Entry], rec: Callable[[str], Rec],
                 cnt: dict[str, int]) -> None:
    """Move a view's member counts (see :func:`counted_delta`) by entries whose delta was
    computed without them (every member involved clean)."""
    for rid, was, now in entries:
        r = rec(rid)
        if was:
            for m in r.t0:
                if m != rid:
                    n = cnt.get(m, 0) - 1
                    if n > 0:
                        cnt[m] = n
                    else:
                        cnt.pop(m, None)
        if now:
            for m in r.t1:
                if m != rid:
                    cnt[m] = cnt.get(m, 0) + 1


def counted_delta(
    entries: Iterable[Entry],
    rec: Callable[[str], Rec],
    cnt: dict[str, int],
    fresh: bool,
    holds_start: Callable[[str], bool],
    holds_now: Callable[[str], bool],
) -> ViewDelta | None:
    """A view's net delta when some member may be held by several rows.

    ``cnt`` counts, per member, the view's visible rows whose tree holds it (the row itself
    not counted: its own visibility says whether it is shown): the multiplicities of the
    view's nested members, as DBSP's ``distinct`` keeps them. A member is in the view when
    its count is positive or it is a visible row. ``fresh``: the counts were just computed
    from the current state (they already include these entries); otherwise they are moved
    by them here. ``rec(row)`` gives the row's trees before/after; ``holds_start`` /
    ``holds_now`` whether the view showed a row before / shows it now. Costs the trees of
    the rows entering or leaving and the diffs of the others, never the number of rows
    holding a member.
    """
    ents = list(entries)
    # The members an entry can move: the whole trees of rows entering or leaving the view,
    # only the diff of rows it shows throughout. A member outside every diff is held with
    # the same content before and after by each row holding it: its count, presence and
    # content stay, so it is not walked (a row whose subquery window gained one of its 5,000
    # rows costs that one member, not the 5,000).
    touched: set[str] = set()
    for rid, was, now in ents:
        r = rec(rid)
        if was and now:
            if r.t0 is not r.t1:
                a, rm, u = r.diff()
                touched.update(a)
                touched.update(rm)
                touched.update(u)
        else:
            if was:
                touched.update(r.t0)
            if now:
                touched.update(r.t1)
    d: dict[str, int] = {}
    c0: dict[str, Any] = {}  # a content of each member before, from an entry row
    c1: dict[str, Any] = {}
    upd: set[str] = set()
    top: dict[str, tuple[bool, bool]] = {}
    for rid, was, now in ents:
        r = rec(rid)
        top[rid] = (was, now)
        t0 = r.t0 if was else NO_TREE
        t1 = r.t1 if now else NO_TREE
        if was and now:
            if rid in touched:
                # the row itself: its content is its own output (a dict wins over what a
                # VALUE subquery of another row shows of it: that row's status, a string),
                # so it is taken from its own tree whatever row came first
                if rid in t0:
                    c0[rid] = t0[rid]
                if rid in t1:
                    c1[rid] = t1[rid]
            if t1 is t0:
                continue
            # only the members of the row's own diff: any other member it holds, it holds
            # before and after with the same content (its count nets to zero; a member whose
            # content changed is in the diff of each row showing it, so in `upd`). Walking
            # the members other entries touched instead made a batch cost each row shown
            # throughout the batch's whole touched set (issue 33: batches 0.85x as fast).
            # The diff, computed once per row and shared by every view, also names the
            # members whose content changed: no member compared again here.
            a, rm, u = r.diff()
            if u:
                upd.update(u)
            COUNTED[0] += len(a) + len(rm) + len(u)
            for m in rm:
                if m != rid:
                    d[m] = d.get(m, 0) - 1
                if m not in c0:
                    c0[m] = t0[m]
            for m in a:
                if m != rid:
                    d[m] = d.get(m, 0) + 1
                if m not in c1:
                    c1[m] = t1[m]
            for m in u:
                if m not in d:
                    d[m] = 0  # named as updated by the loop below (it is in `upd`)
                if m not in c0:
                    c0[m] = t0[m]
                if m not in c1:
                    c1[m] = t1[m]
            continue
        COUNTED[0] += len(t0) + len(t1)
        for m, c in t0.items():
            if m != rid:
                d[m] = d.get(m, 0) - 1
            if m not in c0:
                c0[m] = c
        for m, c in t1.items():
            if m != rid:
                d[m] = d.get(m, 0) + 1
            if m not in c1:
                c1[m] = c
    added: list[str] = []
    removed: list[str] = []
    updated: list[str] = []
    for m in {**d, **top}:
        n = cnt.get(m, 0)
        dm = d.get(m, 0)
        if fresh:
            before, after = n - dm, n
        else:
            before, after = n, n + dm
            if dm:
                if after > 0:
                    cnt[m] = after
                else:
                    cnt.pop(m, None)
        vis = top.get(m)
        if vis is None:
            pb = before > 0 or holds_start(m)
            pa = after > 0 or holds_now(m)
        else:
            pb = before > 0 or vis[0]
            pa = after > 0 or vis[1]
        if pa:
            if not pb:
                added.append(m)
            elif m in upd or (m in c0 and m in c1 and not same(c0[m], c1[m])):
                updated.append(m)
        elif pb:
            removed.append(m)
    if added or removed or updated:
        return ViewDelta(frozenset(added), frozenset(removed), frozenset(updated))
    return None


def tree_members(out: Any, acc: dict[str, Any]) -> None:
    """Every dict with a record-id ``id`` in an output tree: id text -> that dict."""
    t = type(out)
    if t is dict:
        rid = out.get("id")
        if type(rid) is RecordID:
            acc[rid_text(rid)] = out
        for v in out.values():
            tv = type(v)
            if tv is dict or tv is list:
                tree_members(v, acc)
    elif t is list:
        for v in out:
            tv = type(v)
            if tv is dict or tv is list:
                tree_members(v, acc)


#: entries a store's cache of members per row (``Store.rmembers``, see
#: :func:`rows_members`) holds at most: cleared when full
ROW_MEMBERS_MAX = 8192
#: rows holding nested rows that :func:`rows_members` walked (not found in its cache):
#: a work count the tests read
ROWS_WALKED = [0]


def rows_members(value: list[Any], acc: dict[str, Any],
                 cache: dict[int, tuple[Any, dict[str, Any]]]) -> None:
    """``tree_members(value, acc)`` for a list of row outputs (a subquery's rows), each row
    holding nested rows walked once while it is the same object: a window whose rows hold
    other rows (each with its own top ten) is walked again by its parents whenever one row
    changed, and the rows that did not change then cost one dict update each.

    ``cache`` (the engine's ``Store.rmembers``): id of a row, or of a list of rows inside
    one -> (that object, its members). Outputs and subquery values are never changed in
    place (a changed row is a new dict, an edited window a new list), so an entry holding
    its object stays right; at :data:`ROW_MEMBERS_MAX` entries it is cleared."""
    for o in value:
        t = type(o)
        if t is dict:
            if not has_nested(o):
                rid = o.get("id")
                if type(rid) is RecordID:
                    acc[rid_text(rid)] = o
                continue
            got = cache.get(id(o))
            if got is not None and got[0] is o:
                acc.update(got[1])
                continue
            m = _row_members(o, cache)
            if len(cache) >= ROW_MEMBERS_MAX:
                cache.clear()
            cache[id(o)] = (o, m)
            acc.update(m)
        elif t is list:
            tree_members(o, acc)


def _row_members(o: dict[str, Any], cache: dict[int, tuple[Any, dict[str, Any]]]
                 ) -> dict[str, Any]:
    """``tree_members(o)`` of a row output, the lists it holds (a nested subquery's rows,
    the same list object in every row showing that window) walked once while they are the
    same object (``cache``, see rows_members)."""
    ROWS_WALKED[0] += 1
    m: dict[str, Any] = {}
    rid = o.get("id")
    if type(rid) is RecordID:
        m[rid_text(rid)] = o
    for v in o.values():
        tv = type(v)
        if tv is list:
            if len(v) < 4:
                tree_members(v, m)  # cheaper walked than looked up
                continue
            got = cache.get(id(v))
            if got is not None and got[0] is v:
                m.update(got[1])
                continue
            lm: dict[str, Any] = {}
            tree_members(v, lm)
            if len(cache) >= ROW_MEMBERS_MAX:
                cache.clear()
            cache[id(v)] = (v, lm)
            m.update(lm)
        elif tv is dict:
            tree_members(v, m)
    return m
