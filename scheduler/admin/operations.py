"""Operation records: long-running admin actions (restarts, reclone, rehash, rolling restarts).

A record (spec "Operation record"): ``id, kind, target, requested_by {subject, mode},
started_at, finished_at`` (epoch ms), ``status`` (``running``, ``done``, ``failed``),
``message`` (the closing one), ``progress`` (``{done, total, current}`` for a rolling restart)
and ``details`` (e.g. the SSP's version when a clean restart was asked). 50 are kept, newest
first; a running one is never evicted.

Each operation also opens an ``operator_action`` incident on its target whose events carry the
``operation_id``; it ends ``recorded`` when the operation is done and ``failed`` when it fails.

The list is written to ``admin-operations.json`` beside the replica (at most once per second)
so a scheduler restart asked through the admin API can be completed by the next process; any
other operation still running in the file was driven by the process that stopped, and is
``failed`` at load ("interrupted by a scheduler restart").

Watchers (the operations SSE stream) wait on :attr:`OperationLog.channel`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dbclient.clock import now_ms
from ipc.statefile import read_state, replace_file
from scheduler.admin.sse import Channel
from scheduler.incidents import IncidentStore

log = logging.getLogger("scheduler.admin.operations")

__all__ = ["KEPT", "OperationLog"]

KEPT = 50
FILE = "admin-operations.json"
#: kinds a new process completes after a restart it was asked for
CONTINUED_KINDS = ("scheduler_restart",)



class OperationLog:
    """See the module docstring."""

    def __init__(self, directory: Path | None, incidents: IncidentStore) -> None:
        self.path = directory / FILE if directory is not None else None
        self.incidents = incidents
        self.ops: dict[str, dict[str, Any]] = {}
        self.channel = Channel()
        self._incident_of: dict[str, str] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last_write = 0.0
        self.continued: list[dict[str, Any]] = []  # running records a restart left to us
        self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        raw = read_state(self.path, "operation history", log)
        for op in raw if isinstance(raw, list) else []:
            if not isinstance(op, dict) or not isinstance(op.get("id"), str):
                continue
            op.setdefault("progress", None)
            op.setdefault("details", {})
            if op.get("status") == "running":
                if op.get("kind") in CONTINUED_KINDS:
                    self.continued.append(op)
                else:
                    op.update(status="failed", finished_at=now_ms(),
                              message="interrupted by a scheduler restart")
            self.ops[op["id"]] = op
        for inc in self.incidents.items.values():
            for ev in inc["events"]:
                if ev.get("operation_id") in self.ops:
                    self._incident_of[ev["operation_id"]] = inc["id"]

    # ------------------------------------------------------------------ writers
    def start(self, kind: str, target: str, who: Mapping[str, Any], *,
              progress: dict[str, Any] | None = None, details: dict[str, Any] | None = None,
              message: str = "") -> dict[str, Any]:
        """A new running operation (and its operator_action incident)."""
        op_id = f"op-{uuid.uuid4().hex[:12]}"
        op: dict[str, Any] = {"id": op_id, "kind": kind, "target": target,
              "requested_by": {"subject": who.get("subject"), "mode": who.get("mode")},
              "started_at": now_ms(), "finished_at": None, "status": "running",
              "message": message or f"{kind} of {target} started", "progress": progress,
              "details": details or {}}
        self.ops[op_id] = op
        version = (details or {}).get("version")
        self._incident_of[op_id] = self.incidents.open(
            target, "operator_action",
            f"{kind} of {target} asked by {who.get('subject')} ({who.get('mode')})",
            severity="info", operation_id=op_id,
            version=version if isinstance(version, str) else None)
        self._trim()
        self._changed()
        return op

    def update(self, op_id: str, *, progress: dict[str, Any] | None = None,
               message: str | None = None, note: str | None = None) -> None:
        """Progress or an intermediate message (``note`` also becomes an incident event)."""
        op = self.ops.get(op_id)
        if op is None:
            return
        if progress is not None:
            op["progress"] = progress
        if message is not None:
            op["message"] = message
        if note is not None and op_id in self._incident_of:
            self.incidents.event(self._incident_of[op_id], note, operation_id=op_id)
        self._changed()

    def finish(self, op_id: str, ok: bool, message: str) -> None:
        """``done`` or ``failed`` with the closing message."""
        op = self.ops.get(op_id)
        if op is None or op["status"] != "running":
            return
        op.update(status="done" if ok else "failed", finished_at=now_ms(), message=message)
        log.info("operation %s (%s %s) %s: %s", op_id, op["kind"], op["target"],
                 op["status"], message)
        iid = self._incident_of.get(op_id)
        if iid is not None:
            self.incidents.end(iid, "recorded" if ok else "failed", message, operation_id=op_id)
        self._trim()
        self._changed()

    def _trim(self) -> None:
        excess = len(self.ops) - KEPT
        if excess <= 0:
            return
        oldest = sorted((o for o in self.ops.values() if o["status"] != "running"),
                        key=lambda o: o["started_at"])
        for o in oldest[:excess]:
            del self.ops[o["id"]]
            self._incident_of.pop(o["id"], None)

    # ------------------------------------------------------------------ readers
    def get(self, op_id: str) -> dict[str, Any] | None:
        return self.ops.get(op_id)

    def listing(self) -> list[dict[str, Any]]:
        """Newest first."""
        return sorted(self.ops.values(), key=lambda o: o["started_at"], reverse=True)

    def running(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [o for o in self.listing() if o["status"] == "running"
                and (kind is None or o["kind"] == kind)]

    # ------------------------------------------------------------------ persistence
    def _changed(self) -> None:
        self.channel.publish({"operations": self.listing()})
        if self.path is None or self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.write()
            return
        wait = max(0.0, self._last_write + 1.0 - time.monotonic())
        self._timer = loop.call_later(wait, self._timed_write)

    def _timed_write(self) -> None:
        self._timer = None
        self.write()

    def write(self) -> None:
        if self.path is None:
            return
        self._last_write = time.monotonic()
        try:
            replace_file(self.path, json.dumps(self.listing(), separators=(",", ":"),
                                               default=str).encode("utf-8"))
        except OSError as e:
            log.warning("operation history not written: %s", e)

    def shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.write()
