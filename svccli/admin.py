"""`svc admin add|list|remove`: the `_00_admin` roster of the admin listener.

An entry is an identifier: a record id (`user:alice`) or the sign-in name or e-mail the user
types; a roster sign-in succeeds when the signed-in record id or the identifier given equals
an entry (`scheduler.admin.sessions`). Rows: `_00_admin:⟨ident⟩ {ident, note, added_at}`. The
table is defined (service-only permissions) when missing, so the roster works before
`svc schema apply` too.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from surrealdb import RecordID

from dbclient import Database, DbConfig

DEFINE = ("DEFINE TABLE IF NOT EXISTS _00_admin TYPE NORMAL SCHEMALESS "
          "COMMENT 'operator roster for the admin listener (managed by the CLI)' "
          "PERMISSIONS NONE")


def _check(ident: str) -> str:
    ident = ident.strip()
    if not ident or len(ident) > 300:
        raise ValueError("the identifier must be 1 to 300 characters")
    return ident


async def add(cfg: DbConfig, ident: str, note: str | None, out: TextIO = sys.stdout) -> int:
    ident = _check(ident)
    async with Database(cfg) as db:
        await db.query(DEFINE)
        await db.query("UPSERT $id CONTENT { ident: $ident, note: $note, "
                       "added_at: time::now() } RETURN NONE",
                       {"id": RecordID("_00_admin", ident), "ident": ident, "note": note})
    out.write(f"added {ident} to the admin roster\n")
    return 0


async def remove(cfg: DbConfig, ident: str, out: TextIO = sys.stdout) -> int:
    ident = _check(ident)
    async with Database(cfg) as db:
        await db.query(DEFINE)
        gone = await db.query_one("DELETE $id RETURN BEFORE",
                                  {"id": RecordID("_00_admin", ident)})
    if not gone:
        out.write(f"{ident} is not on the admin roster\n")
        return 1
    out.write(f"removed {ident} from the admin roster\n")
    return 0


async def listing(cfg: DbConfig, out: TextIO = sys.stdout) -> int:
    async with Database(cfg) as db:
        await db.query(DEFINE)
        rows = await db.query_one("SELECT ident, note, added_at FROM _00_admin "
                                  "ORDER BY ident") or []
    for r in rows:
        added = r.get("added_at")
        out.write(json.dumps({"ident": r.get("ident"), "note": r.get("note"),
                              "added_at": added.isoformat() if hasattr(added, "isoformat")
                              else added}) + "\n")
    return 0
