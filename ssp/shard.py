"""A shard worker process: one `ViewEngine` behind a ZeroMQ ROUTER (`python -m ssp.shard`).

The hub owns the registry and the rows; a shard owns the circuits of the views whose id hashes
to it. Rows reach every shard, so a view on any shard sees the tables it reads, its subqueries
and record links included:

- loads (bootstrap pages, a table found by the schema poll, the rebuild of a restarted shard)
  arrive as arena handles (`load_handles`): the shard maps the hub's row arena read-only
  (`--arena-dir`, see `ssp.rowarena`) and decodes the rows from it, so no row crosses the
  socket for a load and the hub keeps the row bytes once per host;
- every event arrives with its row (`ingest`), the same bytes to every shard.

Each shard still keeps the decoded rows its circuits evaluate (the engine's working set).

A registration may leave rows lazy (`engine.lazy`: shown from columns, not projected yet);
while no request has arrived for `IDLE_S`, the shard projects them in slices of
`COMPLETE_SLICE` rows (`Shard.complete_when_idle`), so later writes do not pay for it.

Wire format (over `ipc.rpc`, msgpack): `{"kind": str, "data": bytes}` where `data` is
`engine.values.pack_value(payload)` so SurrealDB types (record ids, datetimes, decimals,
durations) cross the process boundary intact. The payload is the `engine.worker` message minus
`kind`. Replies are the worker's plain dicts (record ids as text); `result` replies carry
`data` bytes of the packed result rows.
"""

from __future__ import annotations

import ipc.lazysdk  # noqa: F401  (first: the SDK's unused transports load on first use)

# isort: split

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from engine import gcpolicy
from engine.arena import ArenaError, ArenaReader
from engine.values import pack_value, record_id_text, unpack_value
from engine.worker import ShardWorker, groups_to_wire
from ipc.exitnow import exit_now
from ipc.rpc import RpcServer
from ssp.rowarena import unpack_handles

log = logging.getLogger("ssp.shard")

IDLE_S = 0.002  # no request for this long: the shard is idle
COMPLETE_SLICE = 256  # lazy rows projected per idle slice (a few ms; a request waits that)


def encode_request(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A hub -> shard request: `kind` plus the SurrealDB-typed payload packed as bytes."""
    return {"kind": kind, "data": pack_value(payload)}


class Shard:
    """Decodes requests and runs them on the worker; never raises to the transport."""

    def __init__(self, index: int, arena_dir: str | None = None) -> None:
        self.index = index
        self.worker = ShardWorker()
        self.arena_dir = arena_dir
        self._reader: ArenaReader | None = None
        self.last_request = 0.0  # time.monotonic() when the last request was answered
        self.lazy_work = asyncio.Event()  # set when a request may have left lazy rows

    async def complete_when_idle(self) -> None:
        """Project the engine's lazy rows while no request arrives (runs until cancelled)."""
        while True:
            await self.lazy_work.wait()
            self.lazy_work.clear()
            while self.worker.engine.lazy_rows():
                idle = time.monotonic() - self.last_request
                if idle < IDLE_S:
                    await asyncio.sleep(IDLE_S - idle)
                    continue
                try:
                    self.worker.engine.complete(COMPLETE_SLICE)
                except Exception:  # a bug: the rows stay lazy (writes still project them)
                    log.exception("shard %d: projecting lazy rows failed; left to the writes",
                                  self.index)
                    return
                await asyncio.sleep(0)  # let a request that arrived meanwhile in first

    async def handle(self, msg: Any) -> dict[str, Any]:
        """Answer one request (the engine work is synchronous, so requests run in order).

        Never raises: an unexpected error is logged with its traceback and answered
        `internal` with its type and text (the hub restarts a shard that answers that)."""
        try:
            return self._handle(msg)
        except Exception as e:  # the transport's generic reply would lose the cause
            kind = msg.get("kind") if isinstance(msg, dict) else None
            log.exception("shard %d: %s failed unexpectedly", self.index, kind)
            text = str(e) or repr(e)
            return {"ok": False, "error": "internal",
                    "message": f"shard {self.index} failed on {kind}: "
                               f"{type(e).__name__}: {text[:500]}"}
        finally:
            self.last_request = time.monotonic()
            if self.worker.engine.has_lazy():
                self.lazy_work.set()

    def _handle(self, msg: Any) -> dict[str, Any]:
        if not isinstance(msg, dict) or not isinstance(msg.get("kind"), str):
            return {"ok": False, "error": "bad_message", "message": "expected {kind, data}"}
        kind = msg["kind"]
        if kind == "ping":
            return {"ok": True, "index": self.index, "pid": os.getpid()}
        try:
            payload = unpack_value(msg["data"]) if msg.get("data") is not None else {}
        except (ValueError, TypeError, KeyError) as e:
            return {"ok": False, "error": "bad_message", "message": f"undecodable payload: {e}"}
        if not isinstance(payload, dict):
            return {"ok": False, "error": "bad_message", "message": "payload must be a map"}
        if kind == "result":
            return self._result(payload)
        if kind == "stats":
            eng = self.worker.engine
            return {"ok": True, "views": len(eng.views), "circuits": len(eng.circuits),
                    "lazy_rows": eng.lazy_rows(),
                    "tables": {t: eng.table_count(t) for t in eng.store.tables},
                    "events_applied": self.worker.events_applied}
        if kind == "subqueries":  # GET /debug/view/:id (ssp.hub.introspection)
            try:
                state = self.worker.engine.subquery_state(str(payload.get("view_id")))
            except KeyError:
                return {"ok": False, "error": "not_found", "message": "no such view"}
            return {"ok": True, "subquery_cache": state}
        if kind == "load_many":
            return self._load_many(payload)
        if kind == "load_handles":
            return self._load_handles(payload)
        payload["kind"] = kind
        return self.worker.handle(payload)

    def _load_many(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Several tables' rows in one round trip (bootstrap, new tables, shard rebuild).

        With views registered, rows go through `ingest_batch` so the views that read a
        table loaded late (found by the schema poll) get their deltas instead of silently
        missing the rows."""
        eng = self.worker.engine
        groups: list[list[Any]] = []  # in table order: a view reading two tables gets both
        for table, rows in payload.get("tables", {}).items():
            if not eng.views:
                out = self.worker.handle({"kind": "load", "table": table, "rows": rows})
                if not out.get("ok"):
                    return out
                continue
            try:
                got = eng.ingest_batch_groups(
                    [(table, "CREATE", record_id_text(r["id"]), r) for r in rows])
            except (KeyError, TypeError, ValueError) as e:
                return {"ok": False, "error": "bad_message", "message": str(e)}
            groups.extend(groups_to_wire(got))
        return {"ok": True, "groups": groups}

    def _load_handles(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`load_many` with each table's rows given as arena handles (`pack_handles` bytes)."""
        if self.arena_dir is None:
            return {"ok": False, "error": "bad_message", "message": "this shard has no arena"}
        if self._reader is None:
            try:
                self._reader = ArenaReader(self.arena_dir)
            except ArenaError as e:
                return {"ok": False, "error": "arena", "message": str(e)}
        get = self._reader.get
        tables: dict[str, list[Any]] = {}
        try:
            for table, raw in (payload.get("tables") or {}).items():
                tables[table] = [unpack_value(get(h)) for h in unpack_handles(raw)]
        except (ArenaError, ValueError, TypeError) as e:
            return {"ok": False, "error": "arena", "message": f"unreadable rows: {e}"}
        return self._load_many({"tables": tables})

    def _result(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            rows = self.worker.engine.result(payload["view_id"])
        except KeyError:
            return {"ok": False, "error": "not_found", "message": "no such view on this shard"}
        return {"ok": True, "data": pack_value(rows)}


async def serve(index: int, endpoint: str, arena_dir: str | None = None) -> None:
    """Serve shard `index` on `endpoint` until SIGTERM/SIGINT."""
    shard = Shard(index, arena_dir)
    server = RpcServer(endpoint, shard.handle)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = loop.create_task(server.serve())
    completer = loop.create_task(shard.complete_when_idle())
    parent = os.getppid()

    async def orphan_watch() -> None:
        # The shard runs in its own session (a signal to the SSP's process group is the hub's
        # to handle); if the hub dies without stopping it, exit instead of lingering.
        while os.getppid() == parent:
            await asyncio.sleep(1.0)
        log.warning("shard %d: the hub is gone; exiting", index)
        stop.set()

    watch = loop.create_task(orphan_watch())
    log.info("shard %d serving on %s (pid %d)", index, endpoint, os.getpid())
    await stop.wait()
    watch.cancel()
    completer.cancel()
    task.cancel()
    server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: `python -m ssp.shard --index I --endpoint ipc://...`."""
    p = argparse.ArgumentParser(prog="ssp.shard", description="SSP shard worker")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--arena-dir", default=None, help="the hub's row arena, mapped read-only")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s shard-{args.index} %(levelname)s %(message)s")
    gcpolicy.configure()  # a shard holds a view engine: see engine.gcpolicy
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is a dependency; plain asyncio still works without it
        pass
    asyncio.run(serve(args.index, args.endpoint, args.arena_dir))
    return 0


if __name__ == "__main__":
    exit_now(main())
