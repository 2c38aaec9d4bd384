"""Row caches of a table (engine.store): values computed from one row each (sort entries,
flat projections), keyed by row id and dropped whenever the row is written or deleted.

The table holds its caches weakly: a cache lives as long as the plan that fills it. This
module stays out of the compiled engine (engine.native): mypyc 2.4 compiles calling a weak
reference whose referent is gone into a crash (the `None` it returns loses a reference), so
the weak references are made and called here, as Python.
"""

from __future__ import annotations

import weakref


class RowCache(dict):
    """Values computed from one row each, keyed by row id."""


class RowCaches:
    """The live row caches of one table."""

    __slots__ = ("refs",)

    def __init__(self) -> None:
        self.refs: list[weakref.ref[RowCache]] = []

    def new(self) -> RowCache:
        """A new cache (kept while the caller holds it)."""
        c = RowCache()
        self.refs = [r for r in self.refs if r() is not None]
        self.refs.append(weakref.ref(c))
        return c

    def forget(self, rid: str) -> None:
        """Drop ``rid``'s values from every live cache."""
        for r in self.refs:
            c = r()
            if c is not None:
                c.pop(rid, None)
