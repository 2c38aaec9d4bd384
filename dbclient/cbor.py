"""SurrealDB's CBOR dialect, encoded and decoded by the `cbor2` C extension.

The official SDK (2.0.0) ships a pure-Python copy of cbor2 for its wire format. Every call
pays for it on both sides of the socket: encoding the parameters of one 1,000-edge
transaction took ~60 ms and decoding it in the database host ~50 ms, more than the engine
spent executing it (measured on the 2-core VM, `loadtests/bench_ssp.py` profile). This module
produces the same bytes with the C codec (a test compares them byte for byte over generated
values) and `install()` points the SDK's own call sites at it, so the SDK keeps doing the
protocol and only the codec changes.

What the dialect adds to plain CBOR, and how it is kept:
- Python `None` is NONE: tag 6 wrapping null (`\\xc6\\xf6`), as the SDK writes it.
- `Decimal` is tag 10 with its text (the SDK's form), not CBOR's tag 4.
- `RecordID` is tag 8 `[table, id]`; `Duration` is tag 14 `[seconds, nanoseconds]` (the
  SDK's own tag 13 around that list is refused by the engine, so the SDK cannot send a
  duration at all); the other SDK types (Table, Range, geometry, Datetime) go through the
  SDK's own `default_encoder`.
- Decoding: the SDK's `tag_decoder` builds the SDK types. cbor2 hands a tag's content over
  frozen (tuples, frozendict) so it could be a map key; it is thawed back into lists and dicts,
  which is what the SDK's decoder returns. CBOR undefined, which SurrealDB never sends, decodes
  to cbor2's `undefined` marker rather than the SDK's.
"""

from __future__ import annotations

import decimal
import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC
from typing import Any

import cbor2
from surrealdb.cbor import CBORTag as SdkTag
from surrealdb.cbor._types import CBORSimpleValue as SdkSimple
from surrealdb.cbor._types import FrozenDict as SdkFrozenDict
from surrealdb.cbor._types import UndefinedType as SdkUndefined
from surrealdb.data import cbor as sdk_cbor
from surrealdb.data.types.duration import Duration
from surrealdb.data.types.record_id import RecordID

from dbclient.sql import SqlNull

_CBORTag = cbor2.CBORTag
# cbor2 hands maps inside a tag over as its frozen-dict type, which it does not export.
_FrozenDict = type(cbor2.loads(cbor2.dumps(_CBORTag(99, {"k": 1})), tag_hook=lambda t, _: t.value))

# The SDK's own codec, kept for the equivalence tests (install() replaces the module attributes).
sdk_encode = sdk_cbor.encode
sdk_decode = sdk_cbor.decode

TAG_DECIMAL_STRING = 10
TAG_RECORD_ID = 8
TAG_DURATION_COMPACT = 14


def _encode_none(enc: Any, value: None) -> None:
    enc.write(b"\xc6\xf6")


def _encode_null(enc: Any, value: SqlNull) -> None:
    enc.write(b"\xf6")  # plain CBOR null: SurrealDB's NULL (a Python None is NONE)


def _encode_decimal(enc: Any, value: decimal.Decimal) -> None:
    enc.encode(_CBORTag(TAG_DECIMAL_STRING, str(value)))


def _cbor_text(text: str) -> bytes:
    """`text` as a CBOR text string (major type 3, shortest length form), as cbor2 writes it."""
    data = text.encode()
    n = len(data)
    if n < 24:
        return bytes((0x60 | n,)) + data
    if n < 0x100:
        return bytes((0x78, n)) + data
    if n < 0x10000:
        return b"\x79" + n.to_bytes(2, "big") + data
    if n < 0x100000000:
        return b"\x7a" + n.to_bytes(4, "big") + data
    return b"\x7b" + n.to_bytes(8, "big") + data


# tag 8 (one byte: 0xc0 | 8), then an array of two
_RECORD_ID_HEAD = bytes((0xC0 | TAG_RECORD_ID, 0x82))


def _encode_record_id(enc: Any, value: RecordID) -> None:
    key = value.id
    table = value.table_name
    if type(key) is str and type(table) is str:
        # The common case (every edge a flush writes has two) written as bytes: building a
        # CBORTag and a list for cbor2 to walk cost ~12 us per id, a fifth of the encoding
        # of a 1,000-edge flush.
        enc.write(_RECORD_ID_HEAD + _cbor_text(table) + _cbor_text(key))
        return
    enc.encode(_CBORTag(TAG_RECORD_ID, [table, key]))


def _encode_duration(enc: Any, value: Duration) -> None:
    # The SDK writes tag 13 (duration as text) around a [seconds, nanoseconds] list, which the
    # engine refuses ("Expected a CBOR text data type"); tag 14 is the compact form it takes.
    secs, nanos = divmod(int(value.elapsed), 1_000_000_000)
    enc.encode(_CBORTag(TAG_DURATION_COMPACT, [secs, nanos]))


def _encode_sdk_tag(enc: Any, value: Any) -> None:
    enc.encode(_CBORTag(value.tag, value.value))


def _encode_undefined(enc: Any, value: Any) -> None:
    enc.write(b"\xf7")  # CBOR undefined: SurrealDB reads it as NULL


def _encode_simple(enc: Any, value: Any) -> None:
    enc.encode(cbor2.CBORSimpleValue(value.value))


def _encode_frozen(enc: Any, value: Any) -> None:
    enc.encode(dict(value))


# The SDK's own marker types (its `undefined`, simple values, frozen maps) next to SurrealDB's.
_ENCODERS = {
    SdkTag: _encode_sdk_tag,
    SdkUndefined: _encode_undefined,
    SdkSimple: _encode_simple,
    SdkFrozenDict: _encode_frozen,
    type(None): _encode_none,
    SqlNull: _encode_null,
    decimal.Decimal: _encode_decimal,
    RecordID: _encode_record_id,
    Duration: _encode_duration,
}


# The SDK's hook without its value-sharing wrapper (cbor2's C encoder has no encode_shared;
# value sharing is off in the SDK's own calls anyway).
_sdk_default = getattr(sdk_cbor.default_encoder, "__wrapped__", sdk_cbor.default_encoder)


def encode(obj: Any) -> bytes:
    """`obj` in SurrealDB's CBOR dialect (the same bytes as the SDK's encoder)."""
    # The SDK's hook is typed against its own encoder class; cbor2's C encoder has the same
    # interface, which is what makes the swap work.
    return cbor2.dumps(
        obj, default=_sdk_default, timezone=UTC, encoders=_ENCODERS  # type: ignore[arg-type]
    )


def encode_with(obj: Any, encoders: Mapping[type, Callable[[Any, Any], None]]) -> bytes:
    """:func:`encode` with some types written otherwise (``encoders``: type -> writer, as
    cbor2 takes them): the differential tests' judge sends ``None`` as NULL, for one."""
    return cbor2.dumps(
        obj, default=_sdk_default, timezone=UTC,  # type: ignore[arg-type]
        encoders={**_ENCODERS, **encoders})


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, _FrozenDict):
        return {k: _thaw(v) for k, v in value.items()}
    return value


def _tag_hook(tag: Any, immutable: bool) -> Any:
    if isinstance(tag.value, (tuple, _FrozenDict)):
        tag = _CBORTag(tag.tag, _thaw(tag.value))
    return sdk_cbor.tag_decoder(None, tag)  # type: ignore[arg-type]  # the decoder is unused


def decode(data: bytes) -> Any:
    """One value in SurrealDB's CBOR dialect (what the SDK's decoder returns).

    A query reply holding `SHOW CHANGES` sets comes back with each set's `changes` as a
    :class:`LazyChanges` (see there); every other value is decoded whole."""
    if _FEED_KEY in data:
        reply = _decode_feed_reply(data)
        if reply is not None:
            return reply
    return cbor2.loads(data, tag_hook=_tag_hook)


# The text key every `SHOW CHANGES` set carries, as CBOR writes it (a 12-byte text string):
# a reply without these bytes holds no change set. A reply with them that is not one (the
# word in application data) is decoded whole, after one wasted shallow decode.
_FEED_KEY = b"\x6cversionstamp"
_SET_KEYS = frozenset(("versionstamp", "changes"))
# What a change holds (core 3.2.4: a CREATE `update`, an UPDATE `current` + `update` patches
# with INCLUDE ORIGINAL, a DELETE `delete`, a table definition `define_table`). A kind this
# list does not know makes the reply decode whole: slower, never wrong.
_CHANGE_KINDS = frozenset(("update", "current", "delete", "define_table"))


class LazyChanges(Sequence[Any]):
    """One `SHOW CHANGES` set's changes, decoded shallowly (:func:`decode_shallow`) and built
    into SDK values only when read.

    Why: a database-wide feed read returns every table's changes, and a reader keeps a few
    tables' (the scheduler's tail: the synced tables, not the edge tables the SSPs write, which
    are most of the feed under load). Building every change's record ids and values was ~70%
    of the scheduler's time in issue 31's soak. A reader that knows this class splits `raw` by
    table (`dbclient.feed.split_by_table(..., shallow=True)`) and builds only what it keeps
    (:func:`materialize`); any other reader sees the plain list :func:`decode` would return."""

    __slots__ = ("raw", "_built")

    def __init__(self, raw: Sequence[Any]) -> None:
        self.raw = raw
        self._built: list[Any] | None = None

    def built(self) -> list[Any]:
        """Every change as :func:`decode` returns it (built once)."""
        if self._built is None:
            self._built = [materialize(c) for c in self.raw]
        return self._built

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, index: Any) -> Any:
        return self.built()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.built())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyChanges):
            other = other.built()
        return self.built() == other

    __hash__ = None  # type: ignore[assignment]  # a list-like value: unhashable, as a list is

    def __repr__(self) -> str:
        return repr(self.built())


def _is_change_set(value: Any) -> bool:
    """Whether a shallowly decoded value has the shape of a change set and nothing else (an
    application's row that only looks like one would be a surprise to its reader)."""
    if type(value) is not dict or value.keys() != _SET_KEYS:
        return False
    changes = value["changes"]
    return (type(value["versionstamp"]) is int and type(changes) is list
            and all(type(c) is dict and c and c.keys() <= _CHANGE_KINDS for c in changes))


def _decode_feed_reply(data: bytes) -> dict[str, Any] | None:
    """A query reply whose statements include `SHOW CHANGES` sets, with each set's changes
    left lazy; None when `data` is not such a reply."""
    raw = cbor2.loads(data)
    if type(raw) is not dict or type(raw.get("result")) is not list:
        return None
    statements: list[Any] = []
    found = False
    for st in raw["result"]:
        sets = st.get("result") if type(st) is dict else None
        if type(sets) is list and sets and all(_is_change_set(s) for s in sets):
            found = True
            out = {k: materialize(v) for k, v in st.items() if k != "result"}
            out["result"] = [{"versionstamp": materialize(s["versionstamp"]),
                              "changes": LazyChanges(s["changes"])} for s in sets]
            statements.append(out)
        else:
            statements.append(materialize(st))
    if not found:
        return None
    reply = {k: materialize(v) for k, v in raw.items() if k != "result"}
    reply["result"] = statements
    return reply


def decoder(fp: Any) -> Any:
    """A decoder of consecutive values from the binary file ``fp`` (a CBOR sequence, as a
    backup dump holds): ``.decode()`` per value, ``cbor2.CBORDecodeEOF`` at the end."""
    return cbor2.CBORDecoder(fp, tag_hook=_tag_hook)


def decode_whole(data: bytes) -> tuple[Any, int]:
    """Decode the first item of `data`; returns it and how many bytes it took."""
    stream = io.BytesIO(data)
    value = cbor2.CBORDecoder(stream, tag_hook=_tag_hook).decode()
    return value, stream.tell()


def decode_whole_shallow(data: bytes) -> tuple[Any, int]:
    """Like :func:`decode_whole`, but SurrealDB's own tags stay ``cbor2.CBORTag`` objects
    (the structure is checked, no SDK value is built): for a reader that needs a request's
    method and id, not its parameters (the database host). No tag hook at all: cbor2 then
    keeps an unknown tag as a ``CBORTag`` in C, where a Python hook cost a call per tag (an
    edge row has two or more)."""
    stream = io.BytesIO(data)
    value = cbor2.CBORDecoder(stream).decode()
    return value, stream.tell()


def decode_shallow(data: bytes) -> Any:
    """One value with SurrealDB's tags left as ``cbor2.CBORTag`` (their contents frozen:
    tuples and cbor2's frozendict), decoded in C alone. :func:`materialize` turns any part of
    it into what :func:`decode` returns, so a reader can build only the parts it keeps."""
    return cbor2.loads(data)


def materialize(value: Any) -> Any:
    """A part of a :func:`decode_shallow` value as :func:`decode` returns it: every tag
    built into its SDK value, bottom-up like the decoder's hook, with its contents thawed."""
    kind = type(value)
    if kind is dict or kind is _FrozenDict:
        # keys stay as decoded (a tag as a key is built, as the hook builds it)
        return {materialize(k) if type(k) is _CBORTag else k: materialize(v)
                for k, v in value.items()}
    if kind is list or kind is tuple:
        return [materialize(v) for v in value]
    if kind is _CBORTag:
        # the decoder's hook sees a tag's contents with the inner tags already built
        return _tag_hook(_CBORTag(value.tag, materialize(value.value)), False)
    return value


_installed = False


def install() -> None:
    """Point the SDK's encode/decode call sites at this codec (idempotent)."""
    global _installed
    if _installed:
        return
    import importlib

    sdk_cbor.encode = encode
    sdk_cbor.decode = decode
    for name, attrs in (
        ("surrealdb.request_message.descriptors.cbor_ws", ("encode",)),
        ("surrealdb.connections.async_ws", ("decode",)),
        ("surrealdb.connections.async_embedded", ("decode",)),
        ("surrealdb.connections.async_http", ("decode",)),
        ("surrealdb.connections.blocking_ws", ("decode",)),
        ("surrealdb.connections.blocking_embedded", ("decode",)),
        ("surrealdb.connections.blocking_http", ("decode",)),
    ):
        try:
            mod = importlib.import_module(name)
        except ImportError:  # an SDK release without this transport
            continue
        for attr in attrs:
            if hasattr(mod, attr):
                setattr(mod, attr, encode if attr == "encode" else decode)
    _installed = True
