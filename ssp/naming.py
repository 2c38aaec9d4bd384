"""Names the SSP writes into the database: view records, edge tables, edge ids.

- A view `query:<key>` is the record `_00_query:<key>` (its `_00_query` row and the `in` of
  its edges).
- Mode `dedicated`: the edges of a user's views live in `_00_list_ref_user_<suffix>`. For an
  auth id `user:<key>` whose canonical text is `user:` followed by letters and digits only
  (`user:alice`, `user:42`), the suffix is that key. Any other auth id (another table, a key
  with `-`, `_`, spaces, a string key that looks like a number, which SurrealDB writes quoted)
  gets `_` + the hex of its canonical text's UTF-8 bytes. Plain suffixes never start with `_`
  and the hex form is injective, so two identities never share a table.
- Mode `single`: every edge lives in `_00_list_ref` and carries `auth_id`.
- An edge's id is the array `[view record, member record]`, so adding twice is an upsert and
  removing needs no lookup.
"""

from __future__ import annotations

import re

from surrealdb import RecordID

from engine.values import parse_record_id, record_id_text

EDGE_PREFIX = "_00_list_ref_user_"
SINGLE_TABLE = "_00_list_ref"
QUERY_TABLE = "_00_query"
_PLAIN = re.compile(r"user:([A-Za-z0-9]+)")


def view_record(view_id: str) -> RecordID:
    """`query:abc` (or a bare `abc`) -> the record `_00_query:abc`."""
    key = view_id.removeprefix("query:")
    return RecordID(QUERY_TABLE, key)


def view_id_of(record: RecordID) -> str:
    """The view id of a `_00_query` record."""
    return f"query:{record.id!s}"


def auth_record(text: str) -> RecordID:
    """Parse an auth id text (`user:alice`, `user:⟨a-b⟩`, `user:`a-b``) into a RecordID.

    ValueError when it is not a record id.
    """
    return parse_record_id(text.strip())


def auth_text(rid: RecordID) -> str:
    """Canonical text of an auth record id (the registry's identity key)."""
    return record_id_text(rid)


def edge_table(auth: RecordID | None, ref_mode: str) -> str:
    """The edge table for views of `auth` (None: anonymous views share `_00_list_ref`)."""
    if ref_mode == "single" or auth is None:
        return SINGLE_TABLE
    return EDGE_PREFIX + edge_suffix(auth)


def edge_suffix(auth: RecordID) -> str:
    """The collision-free table-name suffix of an auth id (see the module docstring)."""
    text = record_id_text(auth)
    m = _PLAIN.fullmatch(text)
    if m:
        return m.group(1)
    return "_" + text.encode().hex()


def edge_id(table: str, view: RecordID, member: RecordID) -> RecordID:
    """The deterministic id of the edge from `view` to `member` in `table`."""
    return RecordID(table, [view, member])
