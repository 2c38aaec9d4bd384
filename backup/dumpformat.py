"""The dump: what one backup object holds, written and read as a stream.

A dump is gzip over a CBOR sequence (RFC 8742: values one after another) in SurrealDB's CBOR
dialect as the SDK speaks it (:mod:`dbclient.cbor`: record ids, datetimes, decimals,
durations, uuids, geometries... as the database returned them). Records, in this order:

1. ``{"t": "header", "format": "svc-backup", "version": 1, "created_at_ms", "namespace",
   "database", "backup_id"}``;
2. ``{"t": "schema", "db": <INFO FOR DB>, "tables": {name: <INFO FOR TABLE name>}}``: the
   ``DEFINE`` texts the engine prints (``backup.schema`` replays them);
3. ``{"t": "rows", "table": name, "edge": bool, "rows": [...]}``: one keyset page (at most
   1,000 rows); ``edge`` pages hold graph edges (``INSERT RELATION`` on import);
4. ``{"t": "end", "tables": {name: rows}, "rows": total}``: written only after every table
   was read completely. A dump without it is truncated and never imported.

Why not SurrealQL text: the embedded engine has no export RPC, values would have to be
printed and parsed again (losing what the printer cannot express), and a typed binary page
costs a fraction of the text to write and read.

Known loss, inherited from the SDK's decoder: datetimes keep microseconds (not nanoseconds),
and NONE inside an array reads back as NULL. NULL in a field stays NULL (the importer sends
``dbclient.SQL_NULL``; a plain ``None`` would be NONE, an absent field).
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2

from dbclient import cbor as dbcbor

__all__ = ["FORMAT", "VERSION", "DumpError", "DumpWriter", "read_dump", "verify_dump"]

FORMAT = "svc-backup"
VERSION = 1


class DumpError(ValueError):
    """The dump is not one we wrote, is damaged, or ends before its ``end`` record."""


class DumpWriter:
    """Encodes records, gzips them and hands the compressed bytes to ``sink`` as they come.

    ``raw_bytes`` (uncompressed), ``bytes`` (compressed) and ``sha256`` (of the compressed
    stream) describe what was written once :meth:`close` returned."""

    def __init__(self, sink: Callable[[bytes], None], level: int = 6) -> None:
        self.sink = sink
        self._z = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 31: a gzip member
        self._hash = hashlib.sha256()
        self.raw_bytes = 0
        self.bytes = 0

    def _out(self, data: bytes) -> None:
        if data:
            self._hash.update(data)
            self.bytes += len(data)
            self.sink(data)

    def add(self, record: dict[str, Any]) -> int:
        """Append one record; returns its encoded (uncompressed) size."""
        data = dbcbor.encode(record)
        self.raw_bytes += len(data)
        self._out(self._z.compress(data))
        return len(data)

    def close(self) -> None:
        self._out(self._z.flush())

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


def read_dump(path: Path) -> Iterator[dict[str, Any]]:
    """The records of the dump at ``path``, in order; DumpError when it is not a dump of ours,
    is damaged or stops before its ``end`` record (raised when the reader gets there)."""
    try:
        with gzip.open(path, "rb") as f:
            dec = dbcbor.decoder(f)
            first = True
            while True:
                try:
                    rec = dec.decode()
                except cbor2.CBORDecodeEOF:
                    raise DumpError("the dump ends before its end record (truncated)") from None
                if not isinstance(rec, dict) or not isinstance(rec.get("t"), str):
                    raise DumpError("the dump holds something that is not a record")
                if first:
                    if rec.get("t") != "header" or rec.get("format") != FORMAT:
                        raise DumpError("not a backup dump of this service")
                    if rec.get("version") != VERSION:
                        raise DumpError(f"dump format version {rec.get('version')!r} is not "
                                        f"supported (this build reads {VERSION})")
                    first = False
                yield rec
                if rec["t"] == "end":
                    return
    except (OSError, EOFError, zlib.error, cbor2.CBORDecodeError) as e:
        raise DumpError(f"the dump is damaged: {type(e).__name__}: {e}") from None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def verify_dump(path: Path, sha256: str | None = None,
                expect: dict[str, int] | None = None) -> dict[str, Any]:
    """Check a dump before anything is wiped; ``{header, tables, rows}`` or DumpError.

    With the catalog's ``sha256`` (and its row counts in ``expect``), the file must hash to
    it: the catalog entry is written only after the whole dump (``end`` record included) was
    uploaded, so equal bytes are a whole dump, and only its header is decoded. Without them
    (a restore by ``storage_path``) the whole dump is read once: every record decodable, the
    schema present, the row counts equal to the end record's."""
    if sha256 is not None:
        if sha256_of(path) != sha256:
            raise DumpError("the dump's checksum differs from its catalog entry")
        if expect is not None:
            first = next(iter(read_dump(path)))
            return {"header": first, "tables": dict(expect), "rows": sum(expect.values())}
    header: dict[str, Any] = {}
    counts: dict[str, int] = {}
    schema = False
    end: dict[str, Any] | None = None
    for rec in read_dump(path):
        kind = rec["t"]
        if kind == "header":
            header = rec
        elif kind == "schema":
            schema = True
        elif kind == "rows":
            rows = rec.get("rows")
            if not isinstance(rec.get("table"), str) or not isinstance(rows, list):
                raise DumpError("a rows record without its table or rows")
            counts[rec["table"]] = counts.get(rec["table"], 0) + len(rows)
        elif kind == "end":
            end = rec
    if not schema:
        raise DumpError("the dump has no schema record")
    assert end is not None  # read_dump raises before returning without it
    want = {str(k): int(v) for k, v in (end.get("tables") or {}).items() if v}
    if {k: v for k, v in counts.items() if v} != want:
        raise DumpError("the dump's row counts differ from its end record")
    return {"header": header, "tables": counts, "rows": sum(counts.values())}
