"""The shard-worker loop: a transport-agnostic message handler around one :class:`ViewEngine`.

Messages and replies are plain dicts of msgpack-friendly values (the SSP wires them to
ZeroMQ). Row values inside ``record``/``rows``/``params`` must already be SurrealDB-typed
(decode them with the ipc codec before calling :meth:`ShardWorker.handle`).

Requests (``kind``):

- ``{"kind": "load", "table": str, "rows": [row, ...]}`` -> ``{"ok": True, "count": int}``
- ``{"kind": "register", "view_id": str, "surql": str, "params": {...}}``
  -> ``{"ok": True, "members": [id, ...]}`` or ``{"ok": False, "error": "rejected", "message": str}``
- ``{"kind": "unregister", "view_id": str}`` -> ``{"ok": True}``
- ``{"kind": "ingest", "events": [[table, op, id, record], ...]}``
  -> ``{"ok": True, "deltas": {view_id: {"added": [...], "removed": [...], "updated": [...]}}}``
- ``{"kind": "members", "view_id": str}`` -> ``{"ok": True, "members": [...]}``
- ``{"kind": "hashes", "tables": [str, ...]}`` -> ``{"ok": True, "hashes": {table: int}, "counts": {...}}``

Any failure answers ``{"ok": False, "error": <code>, "message": str}`` instead of raising, so a
bad message can never kill the shard.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from engine.core import ViewDelta, ViewEngine
from engine.errors import QueryRejected

log = logging.getLogger(__name__)


def delta_to_wire(d: ViewDelta) -> dict[str, list[str]]:
    """A ViewDelta as sorted lists (deterministic, msgpack-friendly)."""
    return {"added": sorted(d.added), "removed": sorted(d.removed), "updated": sorted(d.updated)}


class ShardWorker:
    """Handles engine messages for one shard; counts what it did for health reporting."""

    def __init__(self, engine: ViewEngine | None = None) -> None:
        self.engine = engine if engine is not None else ViewEngine()
        self.events_applied = 0
        self.errors = 0

    def handle(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        """Dispatch one message; never raises."""
        kind = msg.get("kind") if isinstance(msg, Mapping) else None
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            self.errors += 1
            return {"ok": False, "error": "bad_message", "message": f"unknown kind {kind!r}"}
        try:
            return handler(self, msg)
        except QueryRejected as exc:
            return {"ok": False, "error": "rejected", "message": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            self.errors += 1
            log.warning("shard message %s failed: %s", kind, exc)
            return {"ok": False, "error": "bad_message", "message": f"{type(exc).__name__}: {exc}"}

    def _load(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        table = msg["table"]
        self.engine.load(table, msg.get("rows") or [])
        return {"ok": True, "count": self.engine.table_count(table)}

    def _register(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        members = self.engine.register(msg["view_id"], msg["surql"], msg.get("params") or {})
        return {"ok": True, "members": sorted(members)}

    def _unregister(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        self.engine.unregister(msg["view_id"])
        return {"ok": True}

    def _ingest(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        events: list[tuple[str, str, str, Any]] = []
        for e in msg.get("events") or []:
            if len(e) != 4:
                raise ValueError("an event is [table, op, id, record]")
            events.append((e[0], e[1], e[2], e[3]))
        deltas = self.engine.ingest_batch(events)
        self.events_applied += len(events)
        return {"ok": True, "deltas": {v: delta_to_wire(d) for v, d in deltas.items()}}

    def _members(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        return {"ok": True, "members": sorted(self.engine.members(msg["view_id"]))}

    def _hashes(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        tables = msg.get("tables") or []
        return {
            "ok": True,
            "hashes": {t: self.engine.table_hash(t) for t in tables},
            "counts": {t: self.engine.table_count(t) for t in tables},
        }


_HANDLERS = {
    "load": ShardWorker._load,
    "register": ShardWorker._register,
    "unregister": ShardWorker._unregister,
    "ingest": ShardWorker._ingest,
    "members": ShardWorker._members,
    "hashes": ShardWorker._hashes,
}
