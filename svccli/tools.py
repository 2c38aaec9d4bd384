"""Small operator tools: run SurrealQL (`svc sql`) and watch a view (`svc view watch`)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from surrealdb import RecordID

from dbclient import Database, DbConfig
from engine.jsonvalues import to_json
from engine.values import record_id_text
from ssp.naming import auth_record, edge_table, view_record


async def run_sql(cfg: DbConfig, text: str, out: TextIO = sys.stdout) -> None:
    """Run one query (any number of statements) and print each statement's result as JSON."""
    async with Database(cfg) as db:
        results = await db.query(text)
    out.writelines(json.dumps(to_json(r), ensure_ascii=False) + "\n" for r in results)


async def _view_snapshot(db: Database, view_id: str, ref_mode: str) -> tuple[dict[str, Any] | None, set[str]]:
    rec = view_record(view_id)
    row = await db.query_one("SELECT * FROM ONLY $q", {"q": rec})
    if not row:
        return None, set()
    auth = row.get("auth_id")
    auth_rid = auth if isinstance(auth, RecordID) else (auth_record(auth) if isinstance(auth, str) else None)
    table = edge_table(auth_rid, ref_mode)
    try:
        outs = await db.query_one(
            "SELECT VALUE out FROM type::table($t) WHERE in = $q AND !removed",
            {"t": table, "q": rec})
    except Exception:  # noqa: BLE001 - the edge table does not exist yet: no edges
        outs = []
    return row, {record_id_text(o) for o in outs or [] if isinstance(o, RecordID)}


async def watch_view(cfg: DbConfig, view_id: str, *, ref_mode: str = "dedicated",
                     interval: float = 0.5, seconds: float | None = None,
                     out: TextIO = sys.stdout, clock: Callable[[], float] = time.monotonic) -> None:
    """Print the view's `_00_query` state and every edge that appears or disappears."""
    async with Database(cfg) as db:
        last_state: tuple[Any, Any] | None = None
        members: set[str] = set()
        started = clock()
        while seconds is None or clock() - started < seconds:
            row, now = await _view_snapshot(db, view_id, ref_mode)
            state = (row.get("state"), row.get("rowCount")) if row else ("(no _00_query row)", None)
            if state != last_state:
                out.write(f"{view_id}: state={state[0]} rowCount={state[1]}\n")
                last_state = state
            out.writelines(f"  + {rid}\n" for rid in sorted(now - members))
            out.writelines(f"  - {rid}\n" for rid in sorted(members - now))
            out.flush()
            members = now
            await asyncio.sleep(interval)
