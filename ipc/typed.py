"""Typed row-change events between our own processes: the scheduler's `POST /ingest` to an SSP.

JSON has no record id, datetime, decimal, duration, uuid or bytes, and a SCHEMALESS field has
no definition to type its text again (`dbclient.fieldtypes`), so a link sent as JSON reaches
the SSP as a string and a view comparing it with a record id answers wrongly. Between our
scheduler and our SSPs the events therefore travel as MessagePack with the engine's ext types
(`engine.values.canonical_bytes`: record id, datetime, decimal, duration, uuid, NONE; bytes
are msgpack bin), the encoding the scheduler's WAL and replica and the SSP's row arena already
use, so whatever the WAL holds can be delivered and arrives as it was stored. The body says so
with `Content-Type: application/vnd.svc.values+msgpack` (:data:`CONTENT_TYPE`); a JSON body
(transport `http`, the database's own event posts) is still accepted and typed as before.

Body: like a JSON `/ingest` body, one event map `{table, op, id, record, seq?}` or an array of
1 to 1000 of them. `id` is record id text (as in JSON, so the gateway checks both forms with
the same rules); `record` holds the typed values, its `id` a record id.

Why MessagePack and not CBOR as the SDK speaks it (`loadtests/bench_delivery.py --codec-only`,
µs per event in 1,000-event batches, 2-core VM): the scheduler encodes in ~3.2 (JSON ~7, CBOR
~12; and it packs each event once for every SSP, where JSON was dumped per SSP), the gateway
checks the shape in ~3.6 with ext values left opaque and forwards the bytes as they came (JSON
~4.4, CBOR ~6), the hub gets the values in ~7 with a cache of record ids, links repeat (JSON
~7.3, CBOR ~15-18: the SDK's tag decoder is Python). It is also the engine's own type set:
NONE stays apart from NULL, and what the WAL could store can always be sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgpack

from engine.values import (
    EXT_RECORD_ID,
    RecordID,
    ext_value,
    pack_wire,
    parse_record_id,
    record_id_text,
)

__all__ = ["CONTENT_TYPE", "check_record", "decode", "decode_shape", "encode_batch",
           "encode_event", "is_array"]

CONTENT_TYPE: Final = "application/vnd.svc.values+msgpack"

_RID_CACHE: dict[bytes, RecordID] = {}
_RID_CACHE_MAX = 100_000
_ARRAY_HEADER = msgpack.Packer(autoreset=True).pack_array_header


def encode_event(event: Mapping[str, Any], seq: int | None = None) -> bytes:
    """One event `{table, op, id, record}` (plus `seq`) as typed bytes.

    A scheduler packs each event once and joins the bytes into every SSP's batch
    (:func:`encode_batch`). `id` goes as text; a DELETE without a record gets `{id}`.
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


def encode_batch(events: Sequence[bytes]) -> bytes:
    """Events packed by :func:`encode_event` as one array body."""
    return _ARRAY_HEADER(len(events)) + b"".join(events)


def is_array(data: bytes) -> bool:
    """True when typed bytes start with an array (the batched form)."""
    return bool(data) and (0x90 <= data[0] <= 0x9F or data[0] in (0xDC, 0xDD))


def _typed_ext(code: int, data: bytes) -> Any:
    if code == EXT_RECORD_ID:
        rid = _RID_CACHE.get(data)
        if rid is None:
            if len(_RID_CACHE) >= _RID_CACHE_MAX:
                _RID_CACHE.clear()
            rid = _RID_CACHE[data] = ext_value(code, data)
        return rid
    return ext_value(code, data)


def _unpack(data: bytes, hook: Any) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, ext_hook=hook, strict_map_key=True)
    except (msgpack.StackError, RecursionError):
        raise ValueError("nested too deeply") from None
    except msgpack.FormatError:
        raise ValueError("not MessagePack (a byte that starts no value)") from None
    except (ValueError, TypeError, OverflowError,
            msgpack.UnpackException) as e:  # every failure of bad input, one type out
        raise ValueError(str(e) or type(e).__name__) from None


def decode(data: bytes) -> Any:
    """Typed bytes back to values (RecordID, datetime, Decimal, Duration, UUID, NONE).

    ValueError naming the problem: not MessagePack, trailing bytes, a map key that is not a
    string, an unknown ext type or a malformed ext payload."""
    return _unpack(data, _typed_ext)


def decode_shape(data: bytes) -> Any:
    """Typed bytes with every ext value left opaque (a `slice`, built in C: the cheapest
    stand-in): enough to check the shape of a body without building its values. ValueError
    as :func:`decode` for broken MessagePack; ext payloads are checked by :func:`decode`."""
    return _unpack(data, slice)


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
