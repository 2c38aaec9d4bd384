"""Evaluation contexts: what a predicate or projection reads beyond the row it evaluates.

:class:`Cx` follows record links through the store and records the records read
(``reads``) and the subquery state read (``subs``: ``(table, field, key)`` scans, or the
windows of :mod:`engine.join`); the engine turns them into dependency indexes
(:mod:`engine.deps`). :data:`NOLINKS` is the context of evaluations that never follow a link
(nothing to record).
"""

from __future__ import annotations

from typing import Any

from surrealdb import RecordID

from engine.store import Store, rid_text


class Cx:
    """Evaluation context: follows record links through the store and records what it read."""

    __slots__ = ("extra", "last", "reads", "store", "subs")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads: set[str] = set()
        self.subs: list[Any] = []
        # members that are no dict in the output: the rows of SELECT VALUE subqueries
        # (record id text -> the value it shows), and per output row of the last VALUE or
        # grouped run, the (id, value) pairs of the rows it stands for
        self.extra: dict[str, Any] = {}
        self.last: list[list[tuple[str, Any]]] = []

    def fetch(self, rid: RecordID) -> dict[str, Any] | None:
        """The linked row (None when it does not exist); the read is recorded."""
        text = rid_text(rid)
        self.reads.add(text)
        t = self.store.tables.get(rid.table_name)
        if t is None:
            return None
        return t.rows.get(text)


class NoLinks(Cx):
    """Context for evaluation that never follows links (nothing to record): a :class:`Cx`
    with no store, so the compiled engine (engine.native) takes it where a Cx is typed."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def fetch(self, rid: RecordID) -> None:  # pragma: no cover - never called
        raise AssertionError("a link-free predicate followed a link")


NOLINKS = NoLinks()
