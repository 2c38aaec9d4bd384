"""Lazy projected rows: a new view's rows shown without projecting them one by one.

A shape ``SELECT *, (SELECT id, n FROM child WHERE link = $parent.id ORDER BY n DESC LIMIT
k) AS name FROM parent WHERE ...`` ("each row with its top children") projects a row by
running the subquery for it: 40-60 us per row, so half a second for a view over 10,000 rows.
Yet a view's registration needs only its members: the rows, and the children each row shows.
Over the child table's columns (:mod:`engine.columns`) those are one sort for all rows
(:func:`engine.columns.top_per_parent`).

So :func:`bulk` keeps such rows *lazy*: ``Proj.lazy`` maps the row to the record ids of the
children it shows (in rank order), and nothing else is stored for it: no output, no tree, no
dependency, no owner. A lazy row is projected for real (:meth:`engine.proj.Proj.force`) on
the first write that can change it, before the write reaches the store
(:meth:`engine.write.WritePath._force_lazy`): the row itself, or a child row whose link
names it before or after the write. It is then exactly the projection the row had when the
view registered (nothing it reads changed since, or it would have been projected then), and
the flush proceeds as for any projected row.

Laziness needs every member of a lazy row to be held by that row alone, so that no
other row's change can depend on it:

- a child belongs to one parent (``link = $parent.id``, the child table is not the parent's);
- the parent's own values hold no members: a row with an object (or a list holding objects
  or lists) is projected at once, and a write of such a row to the parent table projects
  every lazy row of the group and ends its laziness (:data:`engine.proj.Proj.spec` None);
- a link whose key is neither an int nor a string can equal an int key (``t:1.0`` is
  ``t:1``): a child written with one projects every lazy row of the group.

Anything the columns cannot decide exactly (a sort value that is not an int, a child key
that is not an int) falls back to projecting each row.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
from surrealdb import RecordID

from engine.columns import CONTAINER, UNSURE, group_firsts, table_code, top_per_parent
from engine.plan import Cx, Plan
from engine.shape import order_source
from engine.store import ikey, rid_text

LAZY_MIN = 64  # fewer new rows are projected at once: not worth a pass over the columns
_EXACT = 2**53


class Spec(NamedTuple):
    """What a lazy shape reads: its subquery, the link, the output key, the sort fields, the
    other fields its rows show."""

    sub: Plan
    link: str
    name: str
    order: list[tuple[str, bool]]
    parent_code: int
    shown: list[str]


def spec_of(plan: Plan) -> Spec | None:
    """The lazy form of ``plan``'s projection, or None when it has none."""
    if (plan.fetch or plan.omit or plan.split or len(plan.items) != 2
            or plan.items[0][0] != "all"):
        return None
    item = plan.items[1]
    if item[0] != "sub" or item[2] is not None or len(item[3]) != 1:
        return None
    sub: Plan = item[1]
    q = sub.q
    if sub.eq is None or sub.residual is not None or sub.fetch or sub.flat is None:
        return None
    link, other = sub.eq
    if other[0] != "parent" or tuple(other[1]) != ("id",) or link == "id":
        return None
    if sub.table == plan.table or not sub.row_entries:
        return None
    order: list[tuple[str, bool]] = []
    for path, desc in q.order:
        src = order_source(q, path)
        if src is None or len(src) != 1:
            return None
        order.append((src[0], desc))
    has_id = False
    sort = {f for f, _ in order}
    shown: list[str] = []
    for it in q.items:
        if it.kind != "field" or len(it.path) != 1:
            return None
        if it.path == ("id",):
            if it.out != ("id",):
                return None
            has_id = True
        elif it.path[0] not in sort:
            # a value that may hold members of its own: the shown children's are checked
            shown.append(it.path[0])
    if not has_id:
        return None
    return Spec(sub, link, item[3][0], order, table_code(plan.table), shown)


def deep(row: dict[str, Any], skip: str) -> bool:
    """Whether a row's own values may hold members (an object, a list of objects or lists);
    the output key ``skip`` is replaced by the subquery's value and does not count."""
    for k, v in row.items():
        t = type(v)
        if t is dict:
            if k != skip:
                return True
        elif t is list and k != skip:
            for x in v:
                tx = type(x)
                if tx is dict or tx is list:
                    return True
    return False


def bulk(proj: Any, shown: list[str]) -> None:
    """Show ``shown`` (rows a new materialisation of ``proj`` shows): rows already projected
    or lazy stay, the others become lazy where :func:`spec_of` allows, else are projected."""
    outs = proj.outs
    lazy = proj.lazy
    rows = proj.store.table(proj.plan.table).rows
    todo = [r for r in shown if r not in outs and r not in lazy]
    spec: Spec | None = proj.spec
    if spec is not None and len(todo) >= LAZY_MIN:
        name = spec.name
        ids: list[int] = []
        lz: list[str] = []
        strs: list[str] = []
        lzs: list[str] = []
        eager: list[str] = []
        for rid in todo:
            row = rows[rid]
            if deep(row, name):
                # a row whose values may hold members: no laziness for this group
                proj.end_lazy()
                break
            k = row["id"].id
            tk = type(k)
            if tk is int and -_EXACT < k < _EXACT:
                lz.append(rid)
                ids.append(k)
            elif tk is str:
                lzs.append(rid)
                strs.append(k)
            else:
                eager.append(rid)
        else:
            if _lazy_rows(proj, spec, lz, ids, lzs, strs):
                todo = eager
    project = proj.project
    for rid in todo:
        if rid not in outs:
            project(rid, rows[rid], None)


def _lazy_rows(proj: Any, spec: Spec, lz: list[str], ids: list[int], lzs: list[str],
               strs: list[str]) -> bool:
    """Make ``lz`` (parents with int keys ``ids``) and ``lzs`` (string keys ``strs``) lazy;
    False when the columns cannot decide."""
    sub = spec.sub
    t = proj.store.table(sub.table)
    cols = t.columns([spec.link] + [f for f, _ in spec.order] + spec.shown)
    lo, hi = sub.window(proj.S)
    got = top_per_parent(cols, spec.link, spec.parent_code, np.array(ids, dtype=np.int64),
                         strs, spec.order, t.rows, lo, hi)
    if got is None:
        return False
    keys, slots = got
    for f in spec.shown:
        if len(slots) and (cols.tags[f][slots] == CONTAINER).any():
            return False  # a child shows an object or array: projected row by row
    lazy = proj.lazy
    empty: tuple[str, ...] = ()
    groups: dict[int, tuple[str, ...]] = {}
    if len(keys):
        sl = slots.tolist()
        rid_of = cols.rid_of
        texts: tuple[str, ...] = itemgetter(*sl)(rid_of) if len(sl) > 1 else (rid_of[sl[0]],)
        first = group_firsts(keys)
        starts = np.flatnonzero(first).tolist()
        klist = keys[first].tolist()
        ends = starts[1:]
        ends.append(len(texts))
        groups = {k: texts[a:b] for k, a, b in zip(klist, starts, ends)}
    get = groups.get
    for rid, k in zip(lz, ids):
        lazy[rid] = get(2 * k, empty)
    if lzs:
        code = cols.strs.get
        for rid, s in zip(lzs, strs):
            c = code(s)
            lazy[rid] = empty if c is None else get(2 * c + 1, empty)
    return True


def warm(proj: Any, rids: list[str]) -> None:
    """After projecting lazy rows ahead of writes: build the groups of their subquery's join
    (engine.join; a run's sort entries of every child otherwise), as running the subquery
    would have, so the first write reaching a row does not."""
    spec: Spec | None = proj.spec
    if spec is None or not rids:
        return
    sub = spec.sub
    store = proj.store
    prows = store.table(proj.plan.table).rows
    j = sub.join(store, proj.S)
    if j is not None:
        for rid in rids:
            row = prows.get(rid)
            if row is not None:
                j.warm(row)
        return
    t = store.table(sub.table)
    ecache, _ = sub.row_caches(t)
    idx = t.index(spec.link)
    crows = t.rows
    entry = sub.entry
    cx = Cx(store)
    for rid in rids:
        row = prows.get(rid)
        if row is None:
            continue
        for c in idx.get(ikey(row["id"]), ()):
            if c not in ecache:
                crow = crows.get(c)
                if crow is not None:
                    ecache[c] = entry(crow, c, cx)


def child_parent(link: str, parent_table: str, row: dict[str, Any] | None) -> Any:
    """The parent record id a child row's ``link`` names (None: none); ``...`` when the
    link's key may equal an int key without being one (project every lazy row)."""
    if row is None:
        return None
    v = row.get(link)
    if type(v) is not RecordID or v.table_name != parent_table:
        return None
    tk = type(v.id)
    if tk is int or tk is str:
        return v
    return ...


# ------------------------------------------------------------------ rows reading links
#
# A shape showing fields through record links (``SELECT id, user.name AS who,
# product.seller.name AS seller FROM order``) projects a row by reading a record per hop and
# registering each read as a dependency: ~16 us a row compiled, 0.8 s for a view over 50,000
# orders, while its members are the rows alone. Such rows are kept lazy too (``Proj.lazy``
# maps each to no children): nothing is stored for them, and a row is projected for real
# before the first write that can change it, found from the written record through the
# tables' equality indexes on the link fields, hop by hop back to the row
# (:func:`reaching`). What the projection may show is checked on the columns first: a row
# is a member of its view on its own only when no value it shows can hold a record (an
# object or an array), and every hop's link has a key the index decides (an int or a string).


class PathSpec(NamedTuple):
    """What a lazy shape of link paths reads: each path of two or more segments, and the
    row fields it shows directly (None: ``*``, every field)."""

    paths: list[tuple[str, ...]]
    own: list[str] | None


def path_spec_of(plan: Plan) -> PathSpec | None:
    """The lazy form of a projection of fields and link paths, or None.

    Not for ``FETCH`` or ``link.*``: the record they show whole is a member several rows
    hold, and the group counts a member's holders among projected rows only (``Proj.own``),
    so a row could not be lazy while another holding the same record is projected."""
    if (plan.fetch or plan.omit or plan.split or plan.value or plan.simple
            or plan.star_only):
        return None
    if plan.agg is not None:
        return _grouped_spec(plan)
    paths: list[tuple[str, ...]] = []
    own: list[str] | None = []
    has_id = False
    star = False
    outs: set[tuple[str, ...]] = set()
    for it in plan.q.items:
        if it.kind == "all":
            own = None
            star = True
            continue
        if it.kind != "field" or len(it.out) != 1 or it.out in outs:
            return None
        outs.add(it.out)
        if it.path == ("id",):
            if it.out != ("id",):
                return None
            has_id = True
        elif it.out == ("id",):
            return None  # the output's id is not the row's: its member is not the row
        elif len(it.path) == 1:
            if own is not None:
                own.append(it.path[0])
        else:
            paths.append(tuple(it.path))
    if not paths or not (has_id or star):
        return None
    return PathSpec(paths, own)


def _grouped_spec(plan: Plan) -> PathSpec | None:
    """The lazy form of a grouped shape's row-level query (engine.aggregate.row_query) when
    each key and aggregate argument is a field of the row itself: a row's contribution is
    then its fields as stored (``membership.fill_groups``), and its only member is the row
    (``Plan.self_member``) once no shown value is an object or array (checked as for link
    paths). Keys or arguments computed or read through links stay eager."""
    own: list[str] = []
    for it in plan.q.items:
        if it.kind != "field" or len(it.path) != 1 or len(it.out) != 1:
            return None
        own.append(it.path[0])
    return PathSpec([], own)


def _tables_of(tags: np.ndarray) -> list[str] | None:
    """The tables the links of a column point into; None when a value is neither a link
    with an int or string key nor a plain value (an object, an array, an undecidable key)."""
    if len(tags) == 0:
        return []
    if ((tags == UNSURE) | (tags == CONTAINER)).any():
        return None
    linked = tags[tags >= 2]
    if not len(linked):
        return []
    # table codes are small and even (columns.table_code): count them (np.unique's first
    # call imports numpy.ma, ~20-70 ms of a registration)
    codes = (np.flatnonzero(np.bincount(linked >> 1)) << 1).tolist()
    names = {c: t for t, c in _table_codes().items()}
    return [names[c] for c in codes]


def _table_codes() -> dict[str, int]:
    from engine.columns import _TABLES
    return _TABLES


def path_levels(store: Any, table: str, spec: PathSpec) -> list[list[set[str]]] | None:
    """Per path, the tables of its records at each hop (from the link columns of the tables
    before it); None when a hop or a shown value cannot be decided on the columns."""
    out: list[list[set[str]]] = []
    for path in spec.paths:
        levels: list[set[str]] = []
        at = {table}
        for j, f in enumerate(path):
            nxt: set[str] = set()
            last = j == len(path) - 1
            for t in sorted(at):
                ts = store.table(t)
                if not ts.rows:
                    continue
                tags = ts.columns([f]).tags[f]
                if last:
                    if (tags == CONTAINER).any():
                        return None  # a shown value may hold records
                    continue
                got = _tables_of(tags)
                if got is None:
                    return None
                nxt.update(got)
            if last:
                break
            levels.append(nxt)
            at = nxt
        out.append(levels)
    return out


def bulk_paths(proj: Any, shown: list[str]) -> list[str]:
    """Show ``shown`` (rows a new materialisation of a shape of link paths shows): rows
    already projected or lazy stay, the others become lazy where the columns can decide,
    else are projected. Returns the tables the new lazy rows' projections read (to be
    noted for the write path)."""
    outs = proj.outs
    todo = [r for r in shown if r not in outs and r not in proj.lazy]
    if not todo:
        return []
    got: list[str] | None = None
    if len(todo) >= LAZY_MIN:
        got = _lazy_paths(proj, todo)
    elif proj.lazy:
        # a few more rows of a group already lazy join it, checked row by row (a pass over
        # whole tables' columns would cost more than projecting them)
        got = _lazy_paths(proj, todo, _walked_levels(proj, todo))
    if got is None:
        rows = proj.store.table(proj.plan.table).rows
        for rid in todo:
            proj.project(rid, rows[rid], None)
        return []
    return got


def _walked_levels(proj: Any, todo: list[str]) -> list[list[set[str]]] | None:
    """``path_levels`` for a few rows, read from their own paths (not the whole tables'
    columns), merged with the group's: None when a row's path meets a value the columns
    could not decide (an object or array on the way or shown, a link whose key is neither
    an int nor a string)."""
    spec: PathSpec | None = proj.pspec
    if spec is None or len(proj.levels) != len(spec.paths):
        return None
    levels = [[set(at) for at in lv] for lv in proj.levels]
    rows = proj.store.table(proj.plan.table).rows
    get = proj.store.get
    for rid in todo:
        for path, lv in zip(spec.paths, levels):
            v: Any = rows[rid]
            n = len(path)
            for j in range(n):
                x = v.get(path[j])
                tx = type(x)
                if j == n - 1:
                    if tx is dict or tx is list or tx is tuple:
                        return None
                    break
                if tx is RecordID:
                    k = x.id
                    tk = type(k)
                    if not (tk is str or (tk is int and -_EXACT < k < _EXACT)):
                        return None
                    lv[j].add(x.table_name)
                    v = get(x.table_name, rid_text(x))
                    if v is None:
                        break  # a dangling link: its table is noted, the path ends
                elif tx is dict or tx is list or tx is tuple:
                    return None
                else:
                    break  # a plain value: the rest of the path is NONE
    return levels


def _lazy_paths(proj: Any, todo: list[str], walked: Any = None) -> list[str] | None:
    """``bulk_paths`` for rows none of which is projected or lazy (``walked``: their
    levels from ``_walked_levels``, else from the columns); None when they cannot be
    decided (nothing was done)."""
    spec: PathSpec | None = proj.pspec
    if spec is None or (walked is None and len(todo) < LAZY_MIN):
        return None
    lazy = proj.lazy
    store = proj.store
    table = proj.plan.table
    ts = store.table(table)
    if spec.own is None:
        rows = ts.rows
        for rid in todo:
            if deep(rows[rid], ""):
                return None
    elif spec.own:
        # the shown rows' own values, read where they are (encoding a column of the whole
        # table, created_at over 100k comments, cost a small view ~60 ms)
        rows = ts.rows
        for f in spec.own:
            kinds = {type(rows[rid].get(f)) for rid in todo}
            if dict in kinds or list in kinds or tuple in kinds:
                return None
    levels = walked if walked is not None else path_levels(store, table, spec)
    if levels is None:
        return None
    proj.levels = levels
    tables = {table}
    for lv in levels:
        for at in lv:
            tables.update(at)
    empty: tuple[str, ...] = ()
    lazy.update(dict.fromkeys(todo, empty))
    return sorted(tables)


def reaching(proj: Any, table: str, rid_key: Any) -> set[str]:
    """The rows of ``proj``'s table whose link paths read the record of ``table`` with the
    index key ``rid_key`` (a superset: index keys may collide)."""
    spec: PathSpec | None = proj.pspec
    assert spec is not None
    store = proj.store
    ptable = proj.plan.table
    got: set[str] = set()
    for path, levels in zip(spec.paths, proj.levels):
        for k in range(1, len(path)):
            if table not in levels[k - 1]:
                continue
            keys = [rid_key]
            for j in range(k - 1, 0, -1):
                nxt: list[Any] = []
                for t in levels[j - 1]:
                    ts = store.table(t)
                    idx = ts.index(path[j])
                    rows = ts.rows
                    for key in keys:
                        for r in idx.get(key, ()):
                            row = rows.get(r)
                            if row is not None:
                                nxt.append(ikey(row["id"]))
                keys = nxt
                if not keys:
                    break
            idx0 = store.table(ptable).index(path[0])
            for key in keys:
                hits = idx0.get(key)
                if hits:
                    got.update(hits)
    return got
