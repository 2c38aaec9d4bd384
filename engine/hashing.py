"""Row and table hashes used for drift checks between the SSP and the scheduler.

``row_hash(row) = xxh3_64(canonical_bytes(row))`` (seed 0, as an unsigned 64-bit int), where
:func:`engine.values.canonical_bytes` is MessagePack of the row with object keys sorted, NONE
keys dropped and ext types for RecordID, datetime, Decimal, Duration, UUID and NONE (the exact
byte format is documented there). A table's hash is the XOR of its rows' hashes: O(1) to
maintain per change (XOR the old row's hash out, the new one in), independent of write order,
and 0 for an empty table. The scheduler computes the same over its replica, so the figures are
directly comparable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import xxhash

from engine.values import canonical_bytes

__all__ = [
    "bytes_hash",
    "hash_text",
    "row_hash",
    "table_hash",
]

_xxh3 = xxhash.xxh3_64_intdigest


def bytes_hash(data: bytes) -> int:
    """xxh3_64 of already-canonical row bytes (what the row store keeps)."""
    return _xxh3(data)


def row_hash(row: Mapping[str, Any]) -> int:
    """xxh3_64 of the row's canonical bytes, an unsigned 64-bit int."""
    return _xxh3(canonical_bytes(row))


def hash_text(h: int) -> str:
    """A 64-bit hash as its wire text (``circuit_hashes``, ``/health/snapshot``): 16 lowercase
    hex digits, zero-padded, so the SSP and the scheduler print equal hashes identically."""
    return f"{h & 0xFFFFFFFFFFFFFFFF:016x}"


def table_hash(rows: Iterable[Mapping[str, Any]]) -> int:
    """XOR of :func:`row_hash` over the rows (0 when there are none)."""
    h = 0
    for row in rows:
        h ^= _xxh3(canonical_bytes(row))
    return h
