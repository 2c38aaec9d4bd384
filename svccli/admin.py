"""`svc admin add|list|remove`: the `_00_admin` roster of the admin listener.

An entry is bound to one record: the user's record id (`user:alice`), or a sign-in name or
e-mail that `add` resolves to the one record holding it now. A roster sign-in succeeds only
when the signed-in record is an entry's record (`scheduler.admin.sessions`); what a user types
at sign-in is never compared with the roster, so signing up as `CAROL`, or as `carol` through
another access method later, does not make anyone `carol`.

Resolving an identifier: the tables the database's record access methods sign in to (the
tables their SIGNIN and SIGNUP clauses select from; service accesses `_00_*` excepted) are
searched for records with a top-level field equal to the identifier, exactly. Exactly one
record: it is bound. None, or several (a look-alike signed up already): refused, naming what
was found, and the record id is asked for instead.

Rows: `_00_admin:⟨ident⟩ {ident, record, note, added_at}`. The table is defined (service-only
permissions) when missing, so the roster works before `svc schema apply` too.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, TextIO

from surrealdb import RecordID

from dbclient import Database, DbConfig
from dbclient.sql import is_identifier
from engine.values import parse_record_id, record_id_text

DEFINE = ("DEFINE TABLE IF NOT EXISTS _00_admin TYPE NORMAL SCHEMALESS "
          "COMMENT 'operator roster for the admin listener (managed by the CLI)' "
          "PERMISSIONS NONE")
_RECORD_ACCESS = re.compile(r"\bTYPE\s+RECORD\b", re.IGNORECASE)
_FROM = re.compile(r"\b(?:FROM|CREATE|UPSERT|INSERT\s+INTO)\s+(?:ONLY\s+)?([A-Za-z_][A-Za-z0-9_]*)",
                   re.IGNORECASE)
_MAX_SHOWN = 5


class RosterError(ValueError):
    """The identifier cannot be bound to exactly one record (the message says why)."""


def _check(ident: str) -> str:
    ident = ident.strip()
    if not ident or len(ident) > 300:
        raise ValueError("the identifier must be 1 to 300 characters")
    return ident


def _as_record(ident: str) -> RecordID | None:
    """`ident` as a record id when it is one (`table:key` with a plain table name)."""
    table, sep, _ = ident.partition(":")
    if not sep or not is_identifier(table):
        return None
    try:
        rid = parse_record_id(ident)
    except ValueError:
        return None
    return RecordID(rid.table_name, rid.id)


async def account_tables(db: Database) -> list[str]:
    """The tables the database's record access methods sign users in to."""
    info = await db.query_one("INFO FOR DB") or {}
    accesses = info.get("accesses", {}) if isinstance(info, dict) else {}
    tables = info.get("tables", {}) if isinstance(info, dict) else {}
    found: set[str] = set()
    for name, text in accesses.items():
        if str(name).startswith("_00_") or not _RECORD_ACCESS.search(str(text)):
            continue
        found.update(t for t in _FROM.findall(str(text)) if t in tables)
    return sorted(found)


async def resolve(db: Database, ident: str) -> RecordID:
    """The one record `ident` names (see the module docstring); RosterError otherwise."""
    rid = _as_record(ident)
    if rid is not None:
        return rid
    tables = await account_tables(db)
    if not tables:
        raise RosterError(f"{ident!r} is not a record id, and no record access method of the "
                          "database names a table to look it up in: give the record id "
                          "(e.g. user:alice)")
    matches: list[Any] = []
    for table in tables:
        rows = await db.query_one(
            f"SELECT VALUE id FROM {table} WHERE $i INSIDE object::values($this) LIMIT 10",
            {"i": ident}) or []
        matches += rows
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RosterError(f"no account in {', '.join(tables)} has {ident!r} as a field value: "
                          "add the record id once the user exists (e.g. user:alice)")
    shown = ", ".join(record_id_text(m) for m in matches[:_MAX_SHOWN])
    raise RosterError(f"{ident!r} names several accounts ({shown}): add the record id of the "
                      "right one")


async def add(cfg: DbConfig, ident: str, note: str | None, out: TextIO = sys.stdout) -> int:
    ident = _check(ident)
    async with Database(cfg) as db:
        await db.query(DEFINE)
        try:
            record = await resolve(db, ident)
        except RosterError as e:
            sys.stderr.write(f"svc admin add: {e}\n")
            return 2
        await db.query("UPSERT $id CONTENT { ident: $ident, record: $record, note: $note, "
                       "added_at: time::now() } RETURN NONE",
                       {"id": RecordID("_00_admin", ident), "ident": ident, "record": record,
                        "note": note})
    bound = record_id_text(record)
    out.write(f"added {ident} to the admin roster" +
              (f" (bound to {bound})\n" if bound != ident else "\n"))
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
        rows = await db.query_one("SELECT ident, record, note, added_at FROM _00_admin "
                                  "ORDER BY ident") or []
    for r in rows:
        added = r.get("added_at")
        record = r.get("record")
        out.write(json.dumps({"ident": r.get("ident"),
                              "record": record_id_text(record) if record is not None else None,
                              "note": r.get("note"),
                              "added_at": added.isoformat() if hasattr(added, "isoformat")
                              else added}) + "\n")
    return 0
