"""Secret values and the one place they are turned into output.

Every environment value and vault value leaves the stores as a :class:`Secret`, never as a
``str``. A ``Secret`` prints as ``<redacted>`` (``repr``, ``str``, f-strings, logging), cannot
be pickled, and is not JSON-serialisable by anything but :func:`render`: an answer that reaches
``json.dumps`` another way fails loudly instead of leaking. :func:`render` is the single
serialization point of REST answers and MCP tool results: it walks the result and turns each
``Secret`` into ``{"redacted": true, "fingerprint": ...}``, or into ``{"value": ...,
"fingerprint": ...}`` when the caller holds ``secrets:reveal`` (and the caller's role allows
it). Redaction follows the type, whatever the field is called, so a new field that holds a
secret is redacted without anyone adding it to a list.

Fingerprints are keyed (HMAC-SHA256 with a server key, per tenant), so two values can be
compared across environments without being shown, and a fingerprint cannot be checked against
guessed values without the server key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn

__all__ = ["Fingerprinter", "Secret", "dumps", "render", "revealed_keys"]


class Secret:
    """A value that is shown only to a caller allowed to see it."""

    __slots__ = ("_value", "fingerprint")

    def __init__(self, value: str, fingerprint: str) -> None:
        self._value = value
        self.fingerprint = fingerprint

    def reveal(self) -> str:
        """The plain value: call only where it is meant to leave (render, a deployment)."""
        return self._value

    def __repr__(self) -> str:
        return f"<redacted {self.fingerprint}>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self.fingerprint,
                                                                 other.fingerprint)

    def __hash__(self) -> int:
        return hash(self.fingerprint)


class Fingerprinter:
    """``fp_`` + 24 hex digits of HMAC-SHA256(server key, tenant || value)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def of(self, tenant_id: str, value: str) -> str:
        mac = hmac.new(self._key, tenant_id.encode() + b"\x00" + value.encode(), hashlib.sha256)
        return "fp_" + mac.hexdigest()[:24]

    def secret(self, tenant_id: str, value: str) -> Secret:
        return Secret(value, self.of(tenant_id, value))


def render(obj: Any, reveal: bool) -> Any:
    """``obj`` with every :class:`Secret` turned into its output form (see module doc)."""
    if isinstance(obj, Secret):
        if reveal:
            return {"value": obj.reveal(), "fingerprint": obj.fingerprint}
        return {"redacted": True, "fingerprint": obj.fingerprint}
    if isinstance(obj, Mapping):
        return {k: render(v, reveal) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [render(v, reveal) for v in obj]
    if isinstance(obj, datetime):
        return obj.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return obj


def _refuse(o: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(obj: Any, reveal: bool) -> str:
    """JSON text of ``render(obj, reveal)``."""
    return json.dumps(render(obj, reveal), default=_refuse, separators=(",", ":"))


def revealed_keys(obj: Any) -> list[str] | None:
    """The ``key`` of every entry holding a :class:`Secret` (None when there is no Secret):
    what an audit entry of a reveal names."""
    found: list[str] = []
    seen = False

    def walk(o: Any) -> None:
        nonlocal seen
        if isinstance(o, Secret):
            seen = True
        elif isinstance(o, Mapping):
            if any(isinstance(v, Secret) for v in o.values()) and isinstance(o.get("key"), str):
                found.append(o["key"])
            for v in o.values():
                walk(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v)

    walk(obj)
    return found if seen else None
