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

Range conjuncts ``link.field < <= > >= $slot`` find the linked records from the linked
table's equality index too, its int keys in order (engine.rangescan). A row whose link
leads nowhere reads ``NONE``, which SurrealDB orders before every number: such rows are
always candidates of a range conjunct. The conjuncts through one link narrow together (the
linked records passing all of them); of different links the smallest answer is kept.

Only for shapes whose every path through a link is one hop (``Plan.qhop``): a row left out
here registers no dependency, which is right only when a write to a linked record finds the
rows pointing at it through the index on the link field.
"""

from __future__ import annotations

from typing import Any

from engine.matindex import FLIP, RANGE_OPS
from engine.rangescan import number, range_filter, range_rows
from engine.store import Store, TableStore, ikey, rid_text
from engine.syntax import conjuncts
from engine.values import NONE, RecordID

_LINK = "\0r"


def link_conjuncts(where: Any) -> list[tuple[str, str, int, str]]:
    """The top-level conjuncts ``link.field = $slot`` (either side), ``link.field IN $slot``
    and ``link.field < <= > >= $slot`` (either side) of a WHERE clause, as (link field,
    linked field, slot, operator as seen from the field: ``=``, ``in``, ``<``...)."""
    out: list[tuple[str, str, int, str]] = []
    for c in conjuncts(where):
        if c[0] != "cmp":
            continue
        if c[1] == "inside":
            f, other = c[2], c[3]
            if f[0] == "field" and len(f[1]) == 2 and other[0] == "slot":
                out.append((f[1][0], f[1][1], other[1], "in"))
            continue
        if c[1] != "=" and c[1] not in RANGE_OPS:
            continue
        op0: str = c[1]
        flipped = FLIP.get(op0, op0)
        for f, other, op in ((c[2], c[3], op0), (c[3], c[2], flipped)):
            if f[0] == "field" and len(f[1]) == 2 and other[0] == "slot":
                out.append((f[1][0], f[1][1], other[1], op))
                break
    return out


def link_candidates(store: Store, table: str, where: Any, S: tuple[Any, ...]
                    ) -> set[str] | None:
    """A superset of the rows of ``table`` that pass the WHERE clause's link conjuncts,
    from the linked tables' indexes (None: no such conjunct can narrow the scan)."""
    by_link: dict[str, list[tuple[str, str, Any]]] = {}
    for link, field, slot, op in link_conjuncts(where):
        by_link.setdefault(link, []).append((field, op, S[slot]))
    best: set[str] | None = None
    for link, conds in by_link.items():
        found = _through(store, table, link, conds)
        if found is not None and (best is None or len(found) < len(best)):
            best = found
    return best


def _through(store: Store, table: str, link: str, conds: list[tuple[str, str, Any]]
             ) -> set[str] | None:
    """The rows of ``table`` whose ``link`` may lead to a record passing every condition
    ``(field, op, value)`` it can answer, or whose ``link`` holds anything but a plain link
    (None: no condition narrows)."""
    ts = store.table(table)
    idx = ts.index(link)
    targets, others = _kinds(ts, link, idx)
    ranged = any(op in RANGE_OPS for _, op, _ in conds)
    out: set[str] = set()
    for name in targets:
        lt = store.tables.get(name)
        if lt is None:
            continue
        passing = _passing(lt, conds)
        if passing is None:
            return None
        rows = lt.rows
        for trid in passing:
            rids = idx.get(ikey(rows[trid].get("id", NONE)))
            if rids is not None:
                out |= rids
    for k in others:
        rids = idx.get(k)
        if rids is not None:
            out |= rids  # not a plain link: the WHERE clause decides, row by row
    if ranged:
        # a row whose link names no record reads NONE, which passes `<` and `<=`
        out |= _dangling(store, ts, link, idx, targets)
    return out


def _passing(lt: TableStore, conds: list[tuple[str, str, Any]]) -> Any:
    """A superset of the records of ``lt`` passing the conditions (None: none of them can
    narrow)."""
    best: Any = None
    for field, op, value in sorted(conds, key=_cheap_first):
        got: set[str] | None
        if op == "=" or op == "in":
            got = _equal(lt, field, op, value)
        elif best is not None and len(best) * 4 < len(lt.rows):
            # few records already: testing each costs less than the range's set
            if number(value):
                best = range_filter(lt.rows, best, field, [(op, value, None)])
            continue
        else:
            got = range_rows(lt, field, [(op, value)])
        if got is None:
            continue
        best = got if best is None else [r for r in best if r in got]
    return best


def _cheap_first(cond: tuple[str, str, Any]) -> int:
    return 0 if cond[1] == "=" or cond[1] == "in" else 1


def _equal(lt: TableStore, field: str, op: str, value: Any) -> set[str] | None:
    """The records of ``lt`` whose ``field`` may equal ``value`` (``in``: one of its
    elements); None when that cannot narrow."""
    if op == "in":
        # `IN` an array: the linked value equals one of its elements (`IN` a string or an
        # object tests substrings or keys: no index answers those)
        if type(value) is not list and type(value) is not tuple:
            return None
        if any(v is NONE or v is None for v in value):
            return None  # a dangling link reads NONE: every row could pass
        values = list(value)
    else:
        if value is NONE or value is None:
            return None  # a dangling link reads NONE: every row could pass
        values = [value]
    fidx = lt.index(field)
    out: set[str] = set()
    for v in values:
        s = fidx.get(ikey(v))
        if s:
            out |= s
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


def _dangling(store: Store, ts: TableStore, link: str, idx: dict[Any, set[str]],
              targets: list[str]) -> set[str]:
    """The rows whose plain link in ``link`` names a record that does not exist (they read
    NONE through it); kept until this table's or a linked table's next write."""
    version = (ts.writes, tuple(store.table(n).writes for n in targets))
    kept = ts.links.get(link + "\0dangling")
    if kept is not None and kept[0] == version:
        return set(kept[2])
    out: list[str] = []
    for k in idx:
        if type(k) is tuple and len(k) == 3 and k[0] == _LINK:
            tk = type(k[2])
            if tk is int or tk is str:
                lt = store.tables.get(k[1])
                if lt is None or rid_text(RecordID(k[1], k[2])) not in lt.rows:
                    out.extend(idx[k])
    ts.links[link + "\0dangling"] = (version, [], out)
    return set(out)
