"""Which SSP holds which view: the persistent view tracker and the load-balancing strategies.

The tracker maps a view id to ``{ssp_id, body, assigned_at}`` (``body``: the registration as
the client sent it, replayed verbatim when the view moves to another SSP). It lives in a
``sqlitedict`` file next to the replica (``views.sqlite``), JSON-encoded (no pickle: the
bodies come from clients), committed on every write; an in-memory dict mirrors it so lookups
and counts never touch the disk. ``ssp_id`` is ``None`` for a view whose SSP went away while no
other SSP was ready: it is placed again when one becomes ready.

Strategies (``load_balance``): ``round_robin`` cycles over the ready SSPs in id order;
``least_queries`` prefers the SSP with the fewest tracked views; ``least_load`` puts SSPs at or
over their memory ceiling (heartbeat ``memory_usage`` >= ``memory_limit_mb``, the SSP's
``SVC_SSP_MEMORY_LIMIT_MB``; 1024 when an older SSP omits it) last, and otherwise prefers the
lowest heartbeat ``cpu_usage``, then the smallest ``memory_usage / memory_limit_mb``. Each returns every candidate in preference
order, so a caller can fall back to the next one when the first is unreachable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlitedict import SqliteDict

from scheduler.config import LoadBalance

#: the spec's SVC_SSP_MEMORY_LIMIT_MB default, for heartbeats without `memory_limit_mb`
DEFAULT_MEMORY_LIMIT_MB = 1024.0

__all__ = ["DEFAULT_MEMORY_LIMIT_MB", "Candidate", "ViewTracker", "rank_candidates"]


class ViewTracker:
    """view id -> ``{"ssp_id", "body", "assigned_at"}``, persisted in a sqlitedict file."""

    def __init__(self, path: Path, *, clear: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = SqliteDict(str(path), tablename="views", autocommit=False,
                              encode=json.dumps, decode=json.loads)
        if clear:
            self._db.clear()
            self._db.commit()
        self._mem: dict[str, dict[str, Any]] = dict(self._db.items())
        # views per SSP id, kept with every write: placement reads it per registration, and
        # counting the tracked views each time made N registrations cost O(N^2)
        self._counts: dict[str | None, int] = {}
        for e in self._mem.values():
            self._count(e["ssp_id"], 1)

    def _count(self, ssp_id: str | None, d: int) -> None:
        n = self._counts.get(ssp_id, 0) + d
        if n:
            self._counts[ssp_id] = n
        else:
            self._counts.pop(ssp_id, None)

    def _put(self, view_id: str, entry: dict[str, Any]) -> None:
        old = self._mem.get(view_id)
        if old is not None:
            self._count(old["ssp_id"], -1)
        self._mem[view_id] = entry
        self._count(entry["ssp_id"], 1)
        self._db[view_id] = entry

    def __len__(self) -> int:
        return len(self._mem)

    def __contains__(self, view_id: object) -> bool:
        return view_id in self._mem

    def get(self, view_id: str) -> dict[str, Any] | None:
        """The entry of ``view_id`` or None."""
        return self._mem.get(view_id)

    def items(self) -> list[tuple[str, dict[str, Any]]]:
        """A copy of every (view id, entry)."""
        return list(self._mem.items())

    def set(self, view_id: str, ssp_id: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        """Record ``view_id`` on ``ssp_id`` now; returns the stored entry."""
        entry = {"ssp_id": ssp_id, "body": dict(body), "assigned_at": time.time()}
        self._put(view_id, entry)
        self._db.commit()
        return entry

    def pop(self, view_id: str) -> dict[str, Any] | None:
        """Forget ``view_id``; returns its entry (None when unknown)."""
        entry = self._mem.pop(view_id, None)
        if entry is not None:
            self._count(entry["ssp_id"], -1)
            del self._db[view_id]
            self._db.commit()
        return entry

    def unassign(self, ssp_id: str) -> list[str]:
        """Mark every view of ``ssp_id`` as unplaced; returns their ids."""
        moved = [v for v, e in self._mem.items() if e["ssp_id"] == ssp_id]
        for v in moved:
            # `was`: the SSP held it last (`reclaim`)
            self._put(v, dict(self._mem[v], ssp_id=None, was=ssp_id))
        if moved:
            self._db.commit()
        return moved

    def reclaim(self, ssp_id: str) -> list[str]:
        """Assign back to ``ssp_id`` the unplaced views it held last (an SSP restarted
        warm builds them from its snapshot: ``SspPool.register_ssp``); returns their ids."""
        back = [v for v, e in self._mem.items()
                if e["ssp_id"] is None and e.get("was") == ssp_id]
        for v in back:
            entry = {k: x for k, x in self._mem[v].items() if k != "was"}
            self._put(v, dict(entry, ssp_id=ssp_id))
        if back:
            self._db.commit()
        return back

    def of_ssp(self, ssp_id: str | None) -> list[str]:
        """Ids of the views assigned to ``ssp_id`` (None: the unplaced ones)."""
        return [v for v, e in self._mem.items() if e["ssp_id"] == ssp_id]

    def counts(self) -> dict[str | None, int]:
        """Tracked views per SSP id (a copy)."""
        return dict(self._counts)

    def close(self) -> None:
        """Commit and close the file."""
        self._db.commit()
        self._db.close()


@dataclass(frozen=True)
class Candidate:
    """What a strategy knows about one ready SSP."""

    ssp_id: str
    views: int  # tracked views on it
    cpu_usage: float
    memory_usage: float  # MB
    # the SSP's SVC_SSP_MEMORY_LIMIT_MB from its heartbeat (the spec's default when absent)
    memory_limit_mb: float = DEFAULT_MEMORY_LIMIT_MB

    @property
    def memory_share(self) -> float:
        """Memory in use as a share of the SSP's ceiling (1.0 = at its limit)."""
        return self.memory_usage / self.memory_limit_mb if self.memory_limit_mb > 0 else 1.0


def rank_candidates(strategy: LoadBalance, candidates: Sequence[Candidate],
                    turn: int) -> list[str]:
    """Ready SSP ids in the order ``strategy`` prefers them (``turn``: round-robin counter)."""
    ordered = sorted(candidates, key=lambda c: c.ssp_id)
    if not ordered:
        return []
    if strategy is LoadBalance.ROUND_ROBIN:
        k = turn % len(ordered)
        ordered = ordered[k:] + ordered[:k]
    elif strategy is LoadBalance.LEAST_QUERIES:
        ordered.sort(key=lambda c: c.views)
    else:
        # An SSP at or over its memory ceiling goes last whatever its CPU; otherwise the lowest
        # CPU, then the smallest share of its own ceiling (SSPs may have different limits).
        ordered.sort(key=lambda c: (c.memory_share >= 1.0, c.cpu_usage, c.memory_share,
                                    c.views))
    return [c.ssp_id for c in ordered]
