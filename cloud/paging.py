"""Bounded lists: ``limit`` (default 20, at most 100) and an opaque cursor that round-trips.

A cursor is ``base64url(json [list, position]) + "." + tag``, the tag an HMAC of the payload
with the server key: a cursor is only accepted by the list that made it (the same tool or
route, tenant, project and filters) and cannot be forged or edited into another position. A
cursor from another list or a damaged one is a 400 that says so, never a 500 or a silent
restart from the first page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any

from cloud.errors import BadRequest

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Cursors"]

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


class Cursors:
    def __init__(self, key: bytes) -> None:
        self._key = hashlib.sha256(b"svc-cloud cursors|" + key).digest()

    def _tag(self, payload: bytes) -> str:
        return base64.urlsafe_b64encode(
            hmac.new(self._key, payload, hashlib.sha256).digest()[:12]).decode().rstrip("=")

    def encode(self, list_id: str, position: Any) -> str:
        payload = json.dumps([list_id, position], separators=(",", ":")).encode()
        body = base64.urlsafe_b64encode(payload).decode().rstrip("=")
        return body + "." + self._tag(payload)

    def decode(self, list_id: str, cursor: Any) -> Any:
        bad = BadRequest("cursor: not a cursor of this list (pass next_cursor from the "
                         "previous page of the same list, unchanged)", code="bad_cursor")
        if not isinstance(cursor, str) or len(cursor) > 1000 or "." not in cursor:
            raise bad
        body, _, tag = cursor.partition(".")
        try:
            payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise bad from None
        if not hmac.compare_digest(self._tag(payload), tag):
            raise bad
        try:
            found, position = json.loads(payload)
        except (ValueError, TypeError):
            raise bad from None
        if found != list_id:
            raise bad
        return position
