"""The query allowlist: `_00_query_allowlist` rows compile to allowed query shapes.

Row format (one row per `<app>__<version>`, id = that name): `{app: string, version: string,
released_at: datetime | string | NONE, queries: [surql, ...]}`. Each query is parsed and
normalised by the engine (`engine.shape.normalise`: constants and parameters become slots),
so a registration is allowed when its query has the same SHAPE as a listed one, whatever its
parameter values. A query that does not parse is listed in `skipped` as `[name, error]`.

Modes (`SVC_SSP_QUERY_ALLOWLIST`): `off` admits everything unchecked; `warn` logs a miss and
admits; `enforce` refuses a miss (403 `not_allowlisted`, decided before any database write).
Shapes over `_00_app_release` and `_00_user_feature` are always admitted (`allowed_builtin`).
The rows are read when the SSP becomes ready, after `POST /admin/reload`, on every change of a
`_00_query_allowlist` row (a LIVE subscription, `watch`: whatever the ingest transport, and
re-read after a reconnect, as changes may have been missed), and after a miss at most once
per 5 s (the fallback while LIVE is unavailable), so a release that was just written is picked
up without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dbclient import Database, DbError
from dbclient.clock import now_ms
from engine.errors import QueryRejected
from engine.parser import Query, parse
from engine.shape import normalise

log = logging.getLogger("ssp.allowlist")

ALLOWLIST_TABLE = "_00_query_allowlist"
BUILTIN_TABLES = ("_00_app_release", "_00_user_feature")
RELOAD_AFTER_MISS_SECS = 5.0
LIVE_RETRY_SECS = 30.0


def shape_of(surql: str) -> Any:
    """The engine's normalised shape of `surql` (QueryRejected/ValueError when unsupported)."""
    return normalise(parse(surql), {})[0]


@dataclass
class Decision:
    """The verdict on one registration."""

    allowed: bool
    counter: str  # allowed_static | allowed_any | allowed_builtin | warned | refused
    reason: str = ""


@dataclass
class Allowlist:
    """Compiled allowlist state and its counters (reported in `/info` `query_allowlist`)."""

    mode: str
    shapes: dict[Any, str] = field(default_factory=dict)
    loaded_at_ms: int = 0
    sources: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[list[str]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=lambda: {
        "checked": 0, "allowed_static": 0, "allowed_any": 0, "allowed_builtin": 0,
        "warned": 0, "refused": 0})
    last_refused: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=20))
    _last_miss_reload: float = 0.0
    reloads: int = 0  # loads done (reported in /info as `reloads`)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _live: Any = None  # the LIVE subscription (dbclient LiveSubscription)

    def compile(self, rows: list[dict[str, Any]]) -> None:
        """Replace the allowed shapes with those of `rows`."""
        shapes: dict[Any, str] = {}
        sources = []
        skipped = []
        for row in rows:
            rid = row.get("id")
            name = str(getattr(rid, "id", rid))
            queries = row.get("queries") or []
            count = 0
            if not isinstance(queries, list):
                skipped.append([name, "queries must be an array of query strings"])
                continue
            for i, q in enumerate(queries):
                if not isinstance(q, str):
                    skipped.append([f"{name}[{i}]", "not a string"])
                    continue
                try:
                    shapes.setdefault(shape_of(q), name)
                    count += 1
                except (QueryRejected, ValueError) as e:
                    skipped.append([f"{name}[{i}]", str(e)[:200]])
            released = row.get("released_at")
            if isinstance(released, datetime):
                released = released.isoformat()
            sources.append({"app": str(row.get("app", name.split("__")[0])),
                            "version": str(row.get("version", name.split("__")[-1])),
                            "released_at": released, "entries": count})
        self.shapes = shapes
        self.sources = sources
        self.skipped = skipped
        self.loaded_at_ms = now_ms()

    async def load(self, db: Database) -> None:
        """Read and compile `_00_query_allowlist` (a missing table means no entries)."""
        if self.mode == "off":
            return
        try:
            rows = await db.query_one("SELECT * FROM _00_query_allowlist", idempotent=True)
        except Exception as e:  # noqa: BLE001 - a missing table is an empty allowlist
            log.info("allowlist not loaded: %s", e)
            rows = []
        self.compile(list(rows or []))
        self.reloads += 1
        log.info("allowlist loaded: %d shapes from %d releases", len(self.shapes),
                 len(self.sources))

    async def subscribe(self, db: Database) -> bool:
        """LIVE on `_00_query_allowlist`: each change wakes `watch` (False: unavailable now,
        e.g. the table does not exist yet; `watch` retries). Subscribe before the load that
        makes the SSP ready, so no change falls between the two."""
        if self.mode == "off" or self._live is not None:
            return self._live is not None
        try:
            self._live = await db.live(ALLOWLIST_TABLE, lambda _n: self._changed.set())
        except DbError as e:
            log.info("LIVE on %s unavailable (%s); retrying in %.0f s", ALLOWLIST_TABLE, e,
                     LIVE_RETRY_SECS)
            return False
        return True

    async def watch(self, db: Database) -> None:
        """Reload on every change of a `_00_query_allowlist` row (a notification that arrives
        during a load is folded into one more load). Runs until cancelled."""
        if self.mode == "off":
            return
        while not await self.subscribe(db):
            # meanwhile misses still reload (RELOAD_AFTER_MISS_SECS)
            await asyncio.sleep(LIVE_RETRY_SECS)
            self._changed.set()  # what changed before the subscription is read too
        while True:
            await self._changed.wait()
            self._changed.clear()
            await self.load(db)

    async def stop(self) -> None:
        """End the LIVE subscription (at shutdown, before the connection closes; best
        effort: the socket closes next anyway)."""
        live, self._live = self._live, None
        if live is not None:
            with contextlib.suppress(DbError):
                await live.kill()

    async def check(self, db: Database, surql: str, *, parsed: Query | None = None) -> Decision:
        """Decide on a registration's query (call before any database write); `parsed` is
        `parse(surql)` when the caller has it already."""
        if self.mode == "off":
            return Decision(True, "allowed_any")
        self.counters["checked"] += 1
        try:
            shape = shape_of(surql) if parsed is None else normalise(parsed, {})[0]
        except (QueryRejected, ValueError) as e:
            # The engine will refuse it with 400 `rejected`; the allowlist has no say.
            return Decision(True, "allowed_any", str(e))
        if shape.table in BUILTIN_TABLES:
            return self._count(Decision(True, "allowed_builtin"))
        if shape in self.shapes:
            return self._count(Decision(True, "allowed_static"))
        now = time.monotonic()
        if now - self._last_miss_reload >= RELOAD_AFTER_MISS_SECS:
            self._last_miss_reload = now
            await self.load(db)
            if shape in self.shapes:
                return self._count(Decision(True, "allowed_static"))
        reason = f"query shape over {shape.table} is not in the allowlist"
        if self.mode == "warn":
            log.warning("allowlist miss (warn mode, admitted): %s", reason)
            return self._count(Decision(True, "warned", reason))
        self.last_refused.append({"at_epoch_ms": now_ms(), "table": shape.table,
                                  "surql": surql[:500], "reason": reason})
        return self._count(Decision(False, "refused", reason))

    def _count(self, d: Decision) -> Decision:
        self.counters[d.counter] = self.counters.get(d.counter, 0) + 1
        return d

    def info(self) -> dict[str, Any]:
        """The `/info` `query_allowlist` object."""
        return {"mode": self.mode, "loaded_at_epoch_ms": self.loaded_at_ms,
                "entries": len(self.shapes), "sources": list(self.sources),
                "skipped": list(self.skipped), "counters": dict(self.counters),
                "last_refused": list(self.last_refused), "reloads": self.reloads}
