"""The typed encoding of row-change events (`ipc.typed`'s values): MessagePack with the
engine's ext types, so every SurrealDB value travels between our processes as stored.

`encode_event` packs one event (the scheduler packs each once for every SSP; `ipc.typed`
frames them into a batch); `ipc.typed.decode(data, ext_hook)` builds the values back (record
ids cached: links repeat); `check_record` gives a decoded record its id. The framing and the
decoding need no value types of ours and are `ipc.typed`'s; the values are this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.values import (
    EXT_RECORD_ID,
    RecordID,
    ext_value,
    pack_wire,
    parse_record_id,
    record_id_text,
)

__all__ = ["check_record", "encode_event", "ext_hook"]

_RID_CACHE: dict[bytes, RecordID] = {}
_RID_CACHE_MAX = 100_000


def encode_event(event: Mapping[str, Any], seq: int | None = None) -> bytes:
    """One event `{table, op, id, record}` (plus `seq`) as typed bytes.

    A scheduler packs each event once and joins the bytes into every SSP's batch
    (`ipc.typed.encode_batch`). `id` goes as text; a DELETE without a record gets `{id}`.
    TypeError for a value outside SurrealDB's row types."""
    rid = event["id"]
    text = rid if isinstance(rid, str) else record_id_text(rid)
    record = event.get("record")
    if record is None:
        record = {"id": rid if isinstance(rid, RecordID) else parse_record_id(text)}
    out = {"table": event["table"], "op": event["op"], "id": text, "record": record}
    if seq is not None:
        out["seq"] = seq
    return pack_wire(out)


def ext_hook(code: int, data: bytes) -> Any:
    """The value of one ext type (`ipc.typed.decode`'s hook): `engine.values.ext_value`,
    record ids cached (links repeat)."""
    if code == EXT_RECORD_ID:
        rid = _RID_CACHE.get(data)
        if rid is None:
            if len(_RID_CACHE) >= _RID_CACHE_MAX:
                _RID_CACHE.clear()
            rid = _RID_CACHE[data] = ext_value(code, data)
        return rid
    return ext_value(code, data)


def check_record(table: str, rid: str, record: dict[str, Any]) -> dict[str, Any]:
    """A decoded record as it came, with its `id` a record id of `table` (the event's `id`
    text when the record has none). ValueError when the id is not one of `table`."""
    ident = record.get("id")
    if not isinstance(ident, RecordID):
        try:
            ident = parse_record_id(rid) if ":" in rid else RecordID(table, rid)
        except ValueError:
            raise ValueError(f"id {rid[:80]!r} is not a record id") from None
        record["id"] = ident
    if ident.table_name != table:
        raise ValueError(f"id {record_id_text(ident)[:80]!r} is not in table {table}")
    return record
