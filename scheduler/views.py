"""Which SSP holds which view: the persistent view tracker and the load-balancing strategies.

The tracker maps a view id to ``{ssp_id, body, assigned_at}`` (``body``: the registration as
the client sent it, replayed verbatim when the view moves to another SSP). It lives in a
``sqlitedict`` file next to the replica (``views.sqlite``), JSON-encoded (no pickle: the
bodies come from clients), committed on every write; an in-memory dict mirrors it so lookups
and counts never touch the disk. ``ssp_id`` is ``None`` for a view whose SSP went away while no
other SSP was ready: it is placed again when one becomes ready.

Strategies (``load_balance``): ``round_robin`` cycles over the ready SSPs in id order;
``least_queries`` prefers the SSP with the fewest tracked views; ``least_load`` the lowest
heartbeat ``cpu_usage``, then ``memory_usage``. Each returns every candidate in preference
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

__all__ = ["Candidate", "ViewTracker", "rank_candidates"]


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
        self._mem[view_id] = entry
        self._db[view_id] = entry
        self._db.commit()
        return entry

    def pop(self, view_id: str) -> dict[str, Any] | None:
        """Forget ``view_id``; returns its entry (None when unknown)."""
        entry = self._mem.pop(view_id, None)
        if entry is not None:
            del self._db[view_id]
            self._db.commit()
        return entry

    def unassign(self, ssp_id: str) -> list[str]:
        """Mark every view of ``ssp_id`` as unplaced; returns their ids."""
        moved = [v for v, e in self._mem.items() if e["ssp_id"] == ssp_id]
        for v in moved:
            entry = dict(self._mem[v], ssp_id=None)
            self._mem[v] = entry
            self._db[v] = entry
        if moved:
            self._db.commit()
        return moved

    def of_ssp(self, ssp_id: str | None) -> list[str]:
        """Ids of the views assigned to ``ssp_id`` (None: the unplaced ones)."""
        return [v for v, e in self._mem.items() if e["ssp_id"] == ssp_id]

    def counts(self) -> dict[str | None, int]:
        """Tracked views per SSP id."""
        out: dict[str | None, int] = {}
        for e in self._mem.values():
            out[e["ssp_id"]] = out.get(e["ssp_id"], 0) + 1
        return out

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
    memory_usage: float


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
        ordered.sort(key=lambda c: (c.cpu_usage, c.memory_usage, c.views))
    return [c.ssp_id for c in ordered]
