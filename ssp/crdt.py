"""`POST /crdt/apply`: merge a Loro update into a `@crdt` field (spec, SSP endpoints).

Body (JSON): `{id, field, update, table?, version?}`

- `id`: the row's record id text (`doc:1`, `doc:⟨a b⟩`); the row must exist (404 otherwise).
  `table`, when sent, must be the id's table.
- `field`: a top-level field of that table marked `@crdt` (below), else 400.
- `update`: base64 (standard or URL-safe, padding optional) of a Loro update or snapshot
  (`doc.export(ExportMode.Updates(...))` / `Snapshot()` in any Loro binding). The field's
  value is the document's root container named after the field: a client edits
  `doc.getText("body")` for field `body` (a text gives a string; a map an object; a list an
  array).
- `version` (optional): base64 of the client's `oplog_vv.encode()`; the reply then carries
  `update`, every change the client lacks (the other writers' edits), ready to import.

Reply 200 `{id, field, value, version, update?}`: the merged value (as written to the row) and
the merged document's version vector (base64). 400 `invalid`: malformed body, not a `@crdt`
field, bytes Loro cannot decode, an update that depends on changes this server does not have
(Loro leaves it pending: send updates from the server's `version`), no root container named
after the field, or a merged value the field's type refuses. A refused update changes nothing:
it is applied to a fork of the cached document and the fork replaces it only once the row and
`_00_crdt` are written.

Merging: Loro's merge is commutative and idempotent, so concurrent updates in any order give
one value. Per document, applies are serialised in this SSP; across SSPs `_00_crdt.rev` is
checked in the writing transaction, and a writer that lost the race imports the stored state
(a merge) and writes again.

`@crdt` detection: a field whose COMMENT contains `@crdt` (`INFO FOR TABLE t STRUCTURE`, read
per apply, so a schema change counts at once). `SVC_CRDT_FIELDS` (`{"doc": ["body"]}`)
overrides detection for the tables it names (an empty list turns CRDT off for that table);
other tables are still detected. State: `_00_crdt:[table, record key, field]` `{tb, rid, field,
state (bytes: a Loro snapshot), rev, updated_at}`, no access for record users. The first apply
starts from an empty document: a value written to the field without Loro is not seeded into
it, and the next apply overwrites it.

A deleted record's documents are removed by a sweep every `TTL_CLEANUP_INTERVAL_SECS`
(`sweep_orphans`: the state rows whose `rid` no longer exists, and their cached documents).
A record created again under that id starts from an empty document, as a new one does: an
apply finding its document's stored state gone (swept by this or another SSP while cached
here) starts over from the update alone instead of writing the old document back.

`SVC_CRDT_CACHE_SIZE` (10000) documents stay decoded in an LRU; an evicted one is read back from
`_00_crdt`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loro import ExportMode, LoroDoc, VersionVector
from surrealdb import RecordID

from dbclient import Database, DbError, DbQueryError, DbTimeout
from engine.jsonvalues import to_json
from engine.values import parse_record_id, record_id_text
from ipc.messages import ErrorCode, error_reply, not_ready, reply

__all__ = ["CrdtFields", "crdt_routes"]

log = logging.getLogger("ssp.crdt")

STATE_TABLE = "_00_crdt"
CRDT_MARK = "@crdt"
MAX_ATTEMPTS = 5
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_ID = 512
_CONFLICT = "crdt_conflict"
_NO_ROW = "crdt_no_row"
DEFINE_STATE = (f"DEFINE TABLE IF NOT EXISTS {STATE_TABLE} TYPE NORMAL SCHEMALESS "
                "COMMENT 'Loro state of @crdt fields, id [table, record key, field]' "
                "PERMISSIONS NONE")

Route = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]


class Refused(Exception):
    """An apply answered with a 4xx (status, message); nothing was changed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _invalid(message: str) -> Refused:
    return Refused(400, message)


@dataclass(frozen=True)
class Apply:
    """A validated `/crdt/apply` body."""

    rid: str  # record id text
    table: str
    field: str
    update: bytes
    version: bytes | None

    @classmethod
    def from_body(cls, body: Any) -> Apply:
        """Validate the body (see the module docstring); Refused 400 names the bad field."""
        if not isinstance(body, dict):
            raise _invalid("the body must be a JSON object {id, field, update}")
        rid = body.get("id")
        if not isinstance(rid, str) or len(rid) > _MAX_ID:
            raise _invalid("id: is required (a record id <table>:<key>)")
        table, sep, key = rid.partition(":")
        if not sep or not key or not _IDENT.match(table):
            raise _invalid(f"id: must be a record id <table>:<key>, got {rid[:80]!r}")
        if body.get("table") is not None and body.get("table") != table:
            raise _invalid(f"table: {str(body.get('table'))[:80]!r} is not the id's table")
        field = body.get("field")
        if not isinstance(field, str) or not _IDENT.match(field):
            raise _invalid("field: must be a top-level field name (a plain identifier)")
        update = _b64(body.get("update"), "update")
        if not update:
            raise _invalid("update: is empty")
        version = _b64(body["version"], "version") if body.get("version") is not None else None
        return cls(rid, table, field, update, version)


def _b64(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise _invalid(f"{name}: must be a base64 string")
    text = value.strip().replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"{name}: is not valid base64") from None


def _loro_call(what: str, fn: Callable[[], Any]) -> Any:
    """Run a Loro call that may refuse its input. The binding raises a bare BaseException
    (not an Exception subclass) for undecodable bytes: only that exact type is caught, so a
    KeyboardInterrupt or a cancellation still goes through."""
    try:
        return fn()
    except BaseException as e:  # see above
        if type(e) is not BaseException and not isinstance(e, (ValueError, RuntimeError)):
            raise
        raise _invalid(f"{what}: {str(e)[:200]}") from None


def _import(doc: LoroDoc, data: bytes, what: str) -> Any:
    """`doc.import_(data)`; Refused 400 naming `what` when Loro cannot decode it."""
    return _loro_call(what, lambda: doc.import_(data))


def _with_update(doc: LoroDoc, update: bytes, hint: str) -> LoroDoc:
    """`doc` with a client's update imported; Refused 400 when Loro cannot decode it or when
    it depends on changes `doc` lacks (`hint` says what to send instead)."""
    status = _import(doc, update, "update: Loro cannot import it")
    if status.pending is not None:
        raise _invalid(f"update: it depends on changes this server does not have; {hint}")
    return doc


def detect(structure: Mapping[str, Any]) -> list[str]:
    """The `@crdt` fields of an `INFO FOR TABLE t STRUCTURE` result (top-level names)."""
    out = []
    for f in structure.get("fields") or []:
        name = str(f.get("name") or "")
        if CRDT_MARK in str(f.get("comment") or "") and _IDENT.match(name):
            out.append(name)
    return out


class _Entry:
    __slots__ = ("doc", "rev")

    def __init__(self, doc: LoroDoc, rev: int) -> None:
        self.doc = doc
        self.rev = rev


class CrdtFields:
    """Documents of `@crdt` fields: an LRU of decoded Loro documents over `_00_crdt`."""

    def __init__(self, db: Database, overrides: Mapping[str, list[str]], cache_size: int) -> None:
        self.db = db
        self.overrides = {t: list(fs) for t, fs in overrides.items()}
        self.cache_size = max(0, cache_size)
        self.cache: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._state_defined = False

    async def fields_of(self, table: str) -> list[str]:
        """The table's CRDT fields (override, else detection); Refused for no such table."""
        if table in self.overrides:
            return self.overrides[table]
        try:
            structure = await self.db.query_one(f"INFO FOR TABLE {table} STRUCTURE",
                                                idempotent=True)
        except DbQueryError as e:
            raise _invalid(f"table {table}: {e.engine_message}") from None
        return detect(structure or {})

    async def apply(self, body: Any) -> dict[str, Any]:
        """Merge one update (module docstring); returns the reply body or raises Refused."""
        req = Apply.from_body(body)
        if req.field not in await self.fields_of(req.table):
            raise _invalid(f"field {req.field} of {req.table} is not a @crdt field (mark it "
                           "with COMMENT '@crdt' or list it in SVC_CRDT_FIELDS)")
        key = (_canonical(req.rid), req.field)  # one document however the id is spelled
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                return await self._apply_locked(req, key)
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]

    async def _apply_locked(self, req: Apply, key: tuple[str, str]) -> dict[str, Any]:
        entry = self.cache.get(key)
        if entry is None:
            entry = await self._load(req)
        # A fork takes the update: the cached document changes only once the write succeeded.
        doc = _with_update(entry.doc.fork(), req.update,
                           "send the updates since the server's version (or a snapshot)")
        since = None
        if req.version is not None:
            version = req.version
            since = _loro_call("version: not a Loro version vector",
                               lambda: VersionVector.decode(version))
        rev = entry.rev
        for _attempt in range(MAX_ATTEMPTS):
            value = self._value(doc, req.field)
            state = doc.export(ExportMode.Snapshot())
            try:
                await self._write(req, value, state, rev)
                break
            except DbQueryError as e:
                msg = e.engine_message
                if _NO_ROW in msg:
                    raise Refused(404, f"record {req.rid} does not exist") from None
                if _CONFLICT not in msg:
                    raise _invalid(f"the merged value cannot be written to {req.rid}."
                                   f"{req.field}: {msg}") from None
            # Another SSP wrote this document since we read it: merge its state and retry.
            stored, rev = await self._read(req)
            if stored is not None:
                _import(doc, stored, "stored state")
            else:
                # the stored state is gone (its record was deleted and swept): the document
                # starts over, like the first apply of a new record
                doc = _with_update(LoroDoc(), req.update,
                                   "send a snapshot (the document was reset)")
        else:
            raise Refused(503, "the document is being written by others; try again")
        self._remember(key, _Entry(doc, rev + 1))
        out: dict[str, Any] = {
            "id": req.rid, "field": req.field, "value": to_json(value),
            "version": base64.b64encode(doc.oplog_vv.encode()).decode("ascii")}
        if since is not None:
            out["update"] = base64.b64encode(doc.export(ExportMode.Updates(since))
                                             ).decode("ascii")
        return out

    @staticmethod
    def _value(doc: LoroDoc, field: str) -> Any:
        value = doc.get_deep_value()
        if not isinstance(value, dict) or field not in value:
            raise _invalid(f"update: the document has no root container named {field!r} "
                           f"(edit doc.getText({field!r}) or another root named after the "
                           "field)")
        return value[field]

    async def _ensure_state_table(self) -> None:
        if not self._state_defined:
            await self.db.query(DEFINE_STATE)
            self._state_defined = True

    async def _read(self, req: Apply) -> tuple[bytes | None, int]:
        await self._ensure_state_table()
        row = await self.db.query_one(
            f"SELECT state, rev FROM ONLY type::record('{STATE_TABLE}', "
            "[$tb, record::id(type::record($rid)), $f])",
            {"tb": req.table, "rid": req.rid, "f": req.field}, idempotent=True)
        if not row:
            return None, 0
        return row.get("state"), int(row.get("rev") or 0)

    async def _load(self, req: Apply) -> _Entry:
        try:
            stored, rev = await self._read(req)
        except DbQueryError as e:
            raise _invalid(f"id: {e.engine_message}") from None
        doc = LoroDoc()
        if stored is not None:
            _import(doc, stored, "stored state")
        return _Entry(doc, rev)

    async def _write(self, req: Apply, value: Any, state: bytes, rev: int) -> None:
        cid = (f"type::record('{STATE_TABLE}', "
               "[$tb, record::id(type::record($rid)), $f])")
        ids = {"tb": req.table, "rid": req.rid, "f": req.field}
        await self.db.transaction([
            ((f"IF ((SELECT VALUE rev FROM ONLY {cid}) ?? 0) != $rev "
              f"{{ THROW '{_CONFLICT}' }}"), {**ids, "rev": rev}),
            (f"IF !record::exists(type::record($rid)) {{ THROW '{_NO_ROW}' }}",
             {"rid": req.rid}),
            ((f"UPSERT {cid} SET tb = $tb, rid = type::record($rid), field = $f, "
              "state = $state, rev = $next, updated_at = time::now() RETURN NONE"),
             {**ids, "state": state, "next": rev + 1}),
            (f"UPDATE type::record($rid) SET {req.field} = $v RETURN NONE",
             {"rid": req.rid, "v": value}),
        ])

    async def sweep_orphans(self) -> int:
        """Delete the stored documents of records that no longer exist, and their cached
        documents; returns how many rows went."""
        try:
            # the ids alone come back (a row's state can be megabytes)
            gone = await self.db.query_one(
                f"DELETE {STATE_TABLE} WHERE !record::exists(rid) "
                "RETURN $before.rid AS rid, $before.field AS field") or []
        except DbQueryError as e:
            if "does not exist" in e.engine_message:
                return 0  # no document was ever stored
            raise
        for r in gone:
            if isinstance(r.get("rid"), RecordID):
                self.cache.pop((record_id_text(r["rid"]), r.get("field")), None)
        return len(gone)

    async def sweep_loop(self, interval_secs: float,
                         hold: Callable[[], bool] = lambda: False) -> None:
        """`sweep_orphans` every `interval_secs`, except while `hold()` (a restore imports the
        database table by table: a record not imported yet must not cost its CRDT state)."""
        while True:
            await asyncio.sleep(interval_secs)
            if hold():
                continue
            try:
                n = await self.sweep_orphans()
                if n:
                    log.info("removed the CRDT state of %d deleted record field(s)", n)
            except DbError as e:
                log.warning("CRDT state sweep failed: %s", e)

    def _remember(self, key: tuple[str, str], entry: _Entry) -> None:
        if self.cache_size == 0:
            return
        self.cache[key] = entry
        self.cache.move_to_end(key)
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)


def _canonical(rid: str) -> str:
    """The canonical text of a record id as a client sent it (itself when unparsable)."""
    try:
        return record_id_text(parse_record_id(rid))
    except ValueError:
        return rid


def crdt_routes(fields_of: Callable[[Any], CrdtFields]) -> dict[str, Route]:
    """The hub's `POST /crdt/apply` handler."""

    async def apply(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        try:
            return reply(200, await fields_of(hub).apply(req.get("body")))
        except Refused as e:
            if e.status == 503:
                return not_ready(e.message)
            code = ErrorCode.NOT_FOUND if e.status == 404 else ErrorCode.INVALID
            return error_reply(e.status, code, e.message)
        except DbTimeout:
            raise  # 503 by the hub's one failure mapping

    return {"POST /crdt/apply": apply}
