"""Pool and machine records: ``pools.sqlite3`` beside the replica (the scheduler's store).

The spec keeps pause "across redeploys" and lists terminal machines in the admin API, so both
survive a scheduler restart. They are the scheduler's own bookkeeping, not tenant data, which
is why they live with the replica and the incident store rather than in the database.
Writes are small and rare (a state change, a pause, a breaker move); heartbeats update memory
only and reach the file with the next state change or every flush of ``last_contact``.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dbclient.clock import now_ms

ACTIVE = ("booting", "ready", "draining")
TERMINAL = ("destroyed", "lost", "failed")
KEEP_TERMINAL = 200  # terminal machine records kept per pool (newest)



@dataclass
class Machine:
    """One machine of a pool. ``running`` holds the job ids handed to it and not reported."""

    id: str
    pool: str
    state: str = "booting"
    slots: int = 1
    created_at: int = field(default_factory=now_ms)
    ready_at: int | None = None
    last_contact_at: int | None = None
    removed_at: int | None = None
    removal_reason: str | None = None
    provider_ref: dict[str, Any] = field(default_factory=dict)
    token_hash: str = ""
    running: list[str] = field(default_factory=list)
    drain_reason: str | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "pool": self.pool, "state": self.state, "slots": self.slots,
                "slots_in_use": len(self.running), "jobs": list(self.running),
                "created_at": self.created_at, "ready_at": self.ready_at,
                "last_contact_at": self.last_contact_at, "removed_at": self.removed_at,
                "removal_reason": self.removal_reason, "drain_reason": self.drain_reason,
                "pid": self.provider_ref.get("pid")}


@dataclass
class PoolState:
    """What an operator or the breaker changed about a pool."""

    name: str
    paused: bool = False
    paused_at: int | None = None
    breaker: dict[str, Any] = field(default_factory=lambda: {
        "state": "closed", "failures": 0, "opened_at": None, "retry_at": None,
        "incident_id": None, "last_error": None})


class PoolStore:
    """The sqlite file; every method commits before it returns."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS pools (name TEXT PRIMARY KEY, doc TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS machines (id TEXT PRIMARY KEY, pool TEXT, "
                        "created_at INTEGER, doc TEXT)")

    def pools(self) -> dict[str, PoolState]:
        out = {}
        for name, doc in self.db.execute("SELECT name, doc FROM pools"):
            d = json.loads(doc)
            out[name] = PoolState(name, bool(d.get("paused")), d.get("paused_at"),
                                  {**PoolState(name).breaker, **(d.get("breaker") or {})})
        return out

    def save_pool(self, p: PoolState) -> None:
        self.db.execute("INSERT OR REPLACE INTO pools (name, doc) VALUES (?, ?)",
                        (p.name, json.dumps({"paused": p.paused, "paused_at": p.paused_at,
                                             "breaker": p.breaker})))

    def machines(self) -> list[Machine]:
        out = []
        for (doc,) in self.db.execute("SELECT doc FROM machines ORDER BY created_at"):
            d = json.loads(doc)
            out.append(Machine(**{k: v for k, v in d.items()
                                  if k in Machine.__dataclass_fields__}))
        return out

    def save_machine(self, m: Machine) -> None:
        self.db.execute("INSERT OR REPLACE INTO machines (id, pool, created_at, doc) "
                        "VALUES (?, ?, ?, ?)", (m.id, m.pool, m.created_at, json.dumps(asdict(m))))
        if m.state in TERMINAL:
            # Old terminal records go (newest KEEP_TERMINAL per pool stay listed).
            self.db.execute(
                "DELETE FROM machines WHERE pool = ? AND json_extract(doc, '$.state') IN "
                "('destroyed', 'lost', 'failed') AND id NOT IN (SELECT id FROM machines WHERE "
                "pool = ? AND json_extract(doc, '$.state') IN ('destroyed', 'lost', 'failed') "
                "ORDER BY created_at DESC LIMIT ?)", (m.pool, m.pool, KEEP_TERMINAL))

    def close(self) -> None:
        self.db.close()
