"""The typed copy of the row a database event posts (transport http): `record_cbor`.

JSON has no record id, datetime, decimal, duration or uuid, and a SCHEMALESS field has no
definition to type its text again (`dbclient.fieldtypes`): a link posted as JSON reaches the
service as a string, and a view comparing it with a record id answers wrongly. So the events
`svc schema apply` writes post, beside the spec's `record` (JSON), the same row as the
database's own CBOR, base64 text (`encoding::base64::encode(encoding::cbor::encode($after))`),
and the ingest takes that copy when it is there: the row arrives with the values the
changefeed path reads, decoded by the same codec. A body without it (another client) is typed
from the field definitions as before.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from dbclient.cbor import decode

FIELD = "record_cbor"


def typed_record(body: Any) -> dict[str, Any] | None:
    """The event's typed row, None when the body has no `record_cbor`; ValueError saying
    what is wrong when it has one that is not base64 CBOR of an object."""
    if not isinstance(body, dict) or FIELD not in body:
        return None
    raw = body[FIELD]
    if not isinstance(raw, str):
        raise ValueError(f"{FIELD}: must be base64 text")
    try:
        # SurrealDB's base64 has no padding
        value = decode(base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True))
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"{FIELD}: not base64 CBOR ({e})") from None
    except Exception:  # noqa: BLE001 - the CBOR decoder raises many types on garbage
        raise ValueError(f"{FIELD}: not CBOR of a row") from None
    if not isinstance(value, dict):
        raise ValueError(f"{FIELD}: must hold an object")
    return value
