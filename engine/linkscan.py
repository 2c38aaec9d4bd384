"""Candidates of a view whose WHERE follows a record link, taken from the linked table.

``SELECT ... FROM order WHERE product.category = $cat AND status = $st``: evaluating the
link for every row of ``order`` (or of its ``status`` bucket) costs a fetch and a walk per
row, about 60 ms per new materialisation over 50k orders. The conjunct
``link.field = $slot`` holds for a row only when its link leads to a record whose ``field``
equals the slot value (``link.field IN $list``: one of the list's values, each looked up as
below), so the candidates are found the other way round:

1. the linked records that pass: the linked table's equality index on ``field``
   (:meth:`engine.store.TableStore.index`) at the slot value's key;
2. the rows pointing at them: this table's equality index on the link field (kept anyway
   for the write path, engine.core ``_hops``) at each record's id key;
3. plus every row whose link field holds something that is not a plain record link (an
   array, an object, a link with an odd key): those are evaluated as before.

The full WHERE clause is still evaluated on every candidate, so the candidates only need to
be a superset of the rows that qualify. Why it is one: equality indexes put SurrealDB-equal
values under one key, and a link that reaches a record has the same index key as that
record's id; a row whose link leads nowhere reads ``NONE`` there, which equals no slot value
but NONE (the one value for which no candidates are given: :func:`link_candidates` answers
None and the caller scans).

Only for shapes whose every path through a link is one hop (``Plan.qhop``): a row left out
here registers no dependency, which is right only when a write to a linked record finds the
rows pointing at it through the index on the link field.
"""

from __future__ import annotations

from typing import Any

from engine.store import Store, TableStore, ikey
from engine.syntax import conjuncts
from engine.values import NONE

_LINK = "\0r"


def link_conjuncts(where: Any) -> list[tuple[str, str, int, bool]]:
    """The top-level conjuncts ``link.field = $slot`` (either side) and ``link.field IN
    $slot`` of a WHERE clause, as (link field, linked field, slot, whether IN)."""
    out: list[tuple[str, str, int, bool]] = []
    for c in conjuncts(where):
        if c[0] != "cmp":
            continue
        if c[1] == "inside":
            f, other = c[2], c[3]
            if f[0] == "field" and len(f[1]) == 2 and other[0] == "slot":
                out.append((f[1][0], f[1][1], other[1], True))
            continue
        if c[1] != "=":
            continue
        for f, other in ((c[2], c[3]), (c[3], c[2])):
            if f[0] == "field" and len(f[1]) == 2 and other[0] == "slot":
                out.append((f[1][0], f[1][1], other[1], False))
                break
    return out


def link_candidates(store: Store, table: str, where: Any, S: tuple[Any, ...]
                    ) -> set[str] | None:
    """A superset of the rows of ``table`` that pass the WHERE clause's link conjuncts,
    from the linked tables' indexes (None: no such conjunct can narrow the scan)."""
    best: set[str] | None = None
    for link, field, slot, listed in link_conjuncts(where):
        value = S[slot]
        if listed:
            # `IN` an array: the linked value equals one of its elements (`IN` a string
            # or an object tests substrings or keys: no index answers those)
            if type(value) is not list and type(value) is not tuple:
                continue
            if any(v is NONE or v is None for v in value):
                continue  # a dangling link reads NONE: every row could pass
            found = set()
            for v in value:
                found |= _one(store, table, link, field, v)
        else:
            if value is NONE or value is None:
                continue  # a dangling link reads NONE: every row could pass
            found = _one(store, table, link, field, value)
        if best is None or len(found) < len(best):
            best = found
    return best


def _one(store: Store, table: str, link: str, field: str, value: Any) -> set[str]:
    """The rows of ``table`` whose ``link`` may lead to a record whose ``field`` equals
    ``value``, or whose ``link`` holds anything but a plain link."""
    ts = store.table(table)
    idx = ts.index(link)
    targets, others = _kinds(ts, link, idx)
    out: set[str] = set()
    for k in others:
        rids = idx.get(k)
        if rids is not None:
            out.update(rids)  # not a plain link: the WHERE clause decides, row by row
    want = ikey(value)
    for name in targets:
        lt = store.tables.get(name)
        if lt is None:
            continue
        rows = lt.rows
        for rid in lt.index(field).get(want, ()):
            row = rows.get(rid)
            if row is None:
                continue
            rids = idx.get(ikey(row.get("id", NONE)))
            if rids is not None:
                out.update(rids)
    return out


def _kinds(ts: TableStore, link: str, idx: dict[Any, set[str]]
           ) -> tuple[list[str], list[Any]]:
    """(the tables the plain links of field ``link`` name, its other index keys): one walk
    over the index's keys, kept until the table's next write (views registered one after
    the other share it)."""
    kept = ts.links.get(link)
    if kept is not None and kept[0] == ts.writes:
        return kept[1], kept[2]
    targets: dict[str, None] = {}
    others: list[Any] = []
    for k in idx:
        if type(k) is tuple and len(k) == 3 and k[0] == _LINK:
            tk = type(k[2])
            if tk is int or tk is str:
                targets[k[1]] = None
                continue
        others.append(k)
    found = (ts.writes, list(targets), others)
    ts.links[link] = found
    return found[1], found[2]
