"""Typed row-change events between our own processes: the scheduler's `POST /ingest` to an SSP.

This module is the framing and decoding every hop shares with no value type of its own
(`CONTENT_TYPE`, `encode_batch`, `is_array`, `decode(data, ext_hook)`, `decode_shape`: ext
values left opaque), so `ipc` imports nothing of ours; the values themselves are
`engine.wire`'s (`encode_event`, `ext_hook`, `check_record`), next to the engine's ext types.

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

from collections.abc import Callable, Sequence
from typing import Any, Final

import msgpack

__all__ = ["CONTENT_TYPE", "decode", "decode_shape", "encode_batch", "is_array"]

CONTENT_TYPE: Final = "application/vnd.svc.values+msgpack"

_ARRAY_HEADER = msgpack.Packer(autoreset=True).pack_array_header


def encode_batch(events: Sequence[bytes]) -> bytes:
    """Events packed by `engine.wire.encode_event` as one array body."""
    return _ARRAY_HEADER(len(events)) + b"".join(events)


def is_array(data: bytes) -> bool:
    """True when typed bytes start with an array (the batched form)."""
    return bool(data) and (0x90 <= data[0] <= 0x9F or data[0] in (0xDC, 0xDD))


def decode(data: bytes, ext_hook: Callable[[int, bytes], Any]) -> Any:
    """Typed bytes back to values, each ext value built by `ext_hook` (`engine.wire.ext_hook`:
    RecordID, datetime, Decimal, Duration, UUID, NONE).

    ValueError naming the problem: not MessagePack, trailing bytes, a map key that is not a
    string, an unknown ext type or a malformed ext payload (the hook's ValueError)."""
    try:
        return msgpack.unpackb(data, raw=False, ext_hook=ext_hook, strict_map_key=True)
    except (msgpack.StackError, RecursionError):
        raise ValueError("nested too deeply") from None
    except msgpack.FormatError:
        raise ValueError("not MessagePack (a byte that starts no value)") from None
    except (ValueError, TypeError, OverflowError,
            msgpack.UnpackException) as e:  # every failure of bad input, one type out
        raise ValueError(str(e) or type(e).__name__) from None


def decode_shape(data: bytes) -> Any:
    """Typed bytes with every ext value left opaque (a `slice`, built in C: the cheapest
    stand-in): enough to check the shape of a body without building its values. ValueError
    as `decode` for broken MessagePack; ext payloads are checked by `decode`."""
    return decode(data, slice)
