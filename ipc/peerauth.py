"""Credentials derived from `SVC_AUTH_SECRET` for the hops between our own processes.

The shared secret is the master credential: it opens every SSP route and, through the keys
derived from it, admin sessions and impersonation. It therefore never travels to an address
that someone merely *told* a process about. Each hop carries a credential of its own instead,
an HMAC under the secret that names its purpose and, where there is one, its peer:

| credential | sent by -> to | opens |
|---|---|---|
| `ssp_credential(secret, id)` | SSP `id` -> its scheduler | register and heartbeat as `id`, `/proxy/*`, bootstrap progress, job routes |
| `scheduler_credential(secret, id)` | scheduler -> SSP `id` | SSP `id`'s routes, except `/impersonate/*` |
| `ingest_credential(secret)` | database events (transport http) -> SSP | `/ingest`, `/view/unregister` |

An SSP proves it holds the secret by presenting its credential on `/ssp/register`; only then
does the scheduler talk to the URL it gave, and only with the credential for that one SSP. So a
URL registered by anyone else gets nothing, and what a registered SSP receives opens that SSP
alone. The ingest credential may sit in the database (the events need it); whoever reads it can
post row events, nothing more.

Format: `svc1.<kind>.<peer>.<mac>` (peer: base64url of the SSP id, empty for ingest; mac:
base64url of HMAC-SHA256 under a key derived per kind), so the verifier reads the peer from the
token and recomputes the MAC; comparisons are constant time. Without the secret there is
nothing to derive: callers fall back to the development rule of `ipc.bearer` (any bearer).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

__all__ = [
    "INGEST",
    "SCHEDULER",
    "SSP",
    "PeerKeys",
    "ingest_credential",
    "scheduler_credential",
    "ssp_credential",
]

SSP = "ssp"
SCHEDULER = "sch"
INGEST = "ing"
_VERSION = "svc1"
_KINDS = (SSP, SCHEDULER, INGEST)
_LABEL = b"surreal-views peer credential v1 "
# An SSP id is free text (SVC_SSP_ID); a bound keeps a forged token cheap to refuse.
_MAX_PEER_BYTES = 512


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


class PeerKeys:
    """The per-kind keys of one secret: issues and checks every derived credential."""

    def __init__(self, secret: str) -> None:
        master = secret.encode("utf-8")
        # One key per kind, so a MAC of one kind never verifies as another even for the same
        # peer text (an SSP's own credential is not the scheduler's credential for it).
        self._keys = {k: hmac.new(master, _LABEL + k.encode(), hashlib.sha256).digest()
                      for k in _KINDS}

    def _mac(self, kind: str, peer: bytes) -> str:
        return _b64(hmac.new(self._keys[kind], peer, hashlib.sha256).digest())

    def issue(self, kind: str, peer: str = "") -> str:
        """The credential of `kind` for `peer` (an SSP id; empty for ingest)."""
        raw = peer.encode("utf-8")
        return f"{_VERSION}.{kind}.{_b64(raw)}.{self._mac(kind, raw)}"

    def peer_of(self, token: str, kind: str) -> str | None:
        """The peer a valid credential of `kind` names, None for anything else."""
        parts = token.split(".")
        if len(parts) != 4 or parts[0] != _VERSION or parts[1] != kind:
            return None
        raw = _unb64(parts[2])
        if raw is None or len(raw) > _MAX_PEER_BYTES:
            return None
        if not hmac.compare_digest(parts[3].encode("ascii", "replace"),
                                   self._mac(kind, raw).encode("ascii")):
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None


def ssp_credential(secret: str, ssp_id: str) -> str:
    """What SSP `ssp_id` sends its scheduler."""
    return PeerKeys(secret).issue(SSP, ssp_id)


def scheduler_credential(secret: str, ssp_id: str) -> str:
    """What the scheduler sends SSP `ssp_id`."""
    return PeerKeys(secret).issue(SCHEDULER, ssp_id)


def ingest_credential(secret: str) -> str:
    """What the database's events send on `/ingest` and `/view/unregister` (transport http)."""
    return PeerKeys(secret).issue(INGEST)
