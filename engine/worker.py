"""The shard-worker loop: a transport-agnostic message handler around one :class:`ViewEngine`.

Messages and replies are plain dicts of msgpack-friendly values (the SSP wires them to
ZeroMQ). Row values inside ``record``/``rows``/``params`` must already be SurrealDB-typed
(decode them with the ipc codec before calling :meth:`ShardWorker.handle`).

Requests (``kind``):

- ``{"kind": "load", "table": str, "rows": [row, ...]}`` -> ``{"ok": True, "count": int}``
- ``{"kind": "register", "view_id": str, "surql": str, "params": {...}}``
  -> ``{"ok": True, "members": [id, ...]}`` or ``{"ok": False, "error": "rejected", "message": str}``.
  Registering an id the engine holds replaces its view only once the new one is built: a
  refused (or failed) replacement leaves the old view exactly as it was.
- ``{"kind": "unregister", "view_id": str}`` -> ``{"ok": True}``
- ``{"kind": "ingest", "events": [[table, op, id, record], ...]}``
  -> ``{"ok": True, "groups": [[[view_id, ...], {"added": [...], "removed": [...],
  "updated": [...]}], ...]}``: the views sharing one delta travel as one group (a change
  reaching a materialisation of 100 views is one delta on the wire, not 100 copies); each view
  is in one group at most (:meth:`ViewEngine.ingest_batch_groups`).
- ``{"kind": "members", "view_id": str}`` -> ``{"ok": True, "members": [...]}``
- ``{"kind": "hashes", "tables": [str, ...]}`` -> ``{"ok": True, "hashes": {table: int}, "counts": {...}}``

Any failure answers ``{"ok": False, "error": <code>, "message": str}`` instead of raising, so a
bad message can never kill the shard. Codes: ``rejected`` (the query is outside the supported
language or its limits), ``bad_message`` (a malformed message), ``internal`` (anything else: a
bug or exhausted resources; logged with its traceback, and the engine's state may be
inconsistent, so the caller should rebuild the shard). The message is never empty.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from engine.core import ViewDelta, ViewEngine
from engine.errors import QueryRejected

log = logging.getLogger(__name__)

# A view being replaced is first built under this side id (never a real view id: those are
# `query:...` texts), so the old one stays registered until the new one exists.
_REPLACING = "\x00replacing:"


def delta_to_wire(d: ViewDelta) -> dict[str, list[str]]:
    """A ViewDelta as sorted lists (deterministic, msgpack-friendly)."""
    return {"added": sorted(d.added), "removed": sorted(d.removed), "updated": sorted(d.updated)}


def groups_to_wire(parts: list[tuple[Collection[str], ViewDelta]]) -> list[list[Any]]:
    """``(view ids, delta)`` groups as wire lists ``[[view_id, ...], wire delta]``; groups
    holding the same delta object are merged (one conversion, one copy on the wire)."""
    out: list[list[Any]] = []
    done: dict[int, list[Any]] = {}
    for views, d in parts:
        g = done.get(id(d))
        if g is None:
            g = done[id(d)] = [list(views), delta_to_wire(d)]
            out.append(g)
        else:
            g[0].extend(views)
    return out


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
            return {"ok": False, "error": "bad_message", "message": _describe(exc)}
        except Exception as exc:  # answered, never raised into the transport
            self.errors += 1
            log.exception("shard message %s failed unexpectedly", kind)
            return {"ok": False, "error": "internal",
                    "message": f"the engine failed on {kind}: {_describe(exc)}"}

    def _load(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        table = msg["table"]
        self.engine.load(table, msg.get("rows") or [])
        return {"ok": True, "count": self.engine.table_count(table)}

    def _register(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        view_id, surql, params = msg["view_id"], msg["surql"], msg.get("params") or {}
        if not isinstance(view_id, str) or view_id not in self.engine.views:
            members = self.engine.register(view_id, surql, params)
            return {"ok": True, "members": sorted(members)}
        # Replacing: build the new view beside the old one first (a refusal raises here and
        # the old view is untouched); the real id then joins the materialisation just built,
        # which costs no second evaluation.
        side = _REPLACING + view_id
        self.engine.register(side, surql, params)
        try:
            members = self.engine.register(view_id, surql, params)
        finally:
            self.engine.unregister(side)
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
        groups = self.engine.ingest_batch_groups(events)
        self.events_applied += len(events)
        return {"ok": True, "groups": groups_to_wire(groups)}

    def _members(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        return {"ok": True, "members": sorted(self.engine.members(msg["view_id"]))}

    def _hashes(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        tables = msg.get("tables") or []
        return {
            "ok": True,
            "hashes": {t: self.engine.table_hash(t) for t in tables},
            "counts": {t: self.engine.table_count(t) for t in tables},
        }


def _describe(exc: BaseException) -> str:
    """`Type: text`, cut short (a RecursionError's text alone says little)."""
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text[:500]}"


_HANDLERS = {
    "load": ShardWorker._load,
    "register": ShardWorker._register,
    "unregister": ShardWorker._unregister,
    "ingest": ShardWorker._ingest,
    "members": ShardWorker._members,
    "hashes": ShardWorker._hashes,
}
