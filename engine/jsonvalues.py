"""SurrealDB values as JSON: the one conversion every JSON answer of ours uses.

Record ids become their SurrealDB text (`user:alice`), datetimes ISO 8601 with `Z`, decimals
and uuids their text, durations their SurrealQL text (`1h30m`), bytes base64, NONE null, sets
and tuples arrays, a NaN or infinite float null; anything else its `str`. Lossy on purpose: JSON has no such types (the typed
encoding of `ipc.typed` keeps them).
"""

from __future__ import annotations

import base64
import math
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from surrealdb import RecordID
from surrealdb.data.types.duration import Duration

from engine.store import rid_text
from engine.values import NONE, format_value

__all__ = ["json_default", "to_json"]


def to_json(v: Any) -> Any:
    """`v` with every SurrealDB-typed value inside replaced by its JSON form (see above)."""
    # Exact types first: a registration answers with every row of its view (5,000 rows of a
    # large view: 68 -> 57 ms); subclasses and the rest take the general path below.
    t = type(v)
    if t is str or t is int or t is bool or v is None:
        return v
    if t is dict:
        return {k if type(k) is str else str(k): to_json(x) for k, x in v.items()}
    if t is list:
        return [to_json(x) for x in v]
    if t is RecordID:
        return rid_text(v)  # cached for int and string keys
    return _to_json(v)


def _to_json(v: Any) -> Any:
    # what to_json's exact-type checks did not take: subclasses (an IntEnum, a str
    # subclass) and the other types
    if isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None  # JSON has no NaN or infinity
    if isinstance(v, dict):
        return {str(k): to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [to_json(x) for x in v]
    return json_default(v)


def json_default(v: Any) -> Any:
    """The JSON form of one non-JSON value (a `json.dumps(default=...)` hook)."""
    if isinstance(v, RecordID):
        return rid_text(v)
    if isinstance(v, datetime):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, (Decimal, UUID)):
        return str(v)
    if isinstance(v, Duration):
        return format_value(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    if v is NONE:
        return None
    if isinstance(v, (set, frozenset, tuple)):
        return [to_json(x) for x in v]
    if isinstance(v, dict):
        return to_json(v)
    return str(v)
