"""Envelope encryption of environment and vault values (AES-256-GCM, ``cryptography``).

Three layers:

* **The key ring** (``SVC_CLOUD_KEYRING``, a variable of its own, never the auth secret):
  ``id:base64key[,id:base64key...]``, each key 32 bytes, the first one primary. A
  key-encryption key (KEK) is derived from each ring key with HKDF-SHA256.
* **Data keys**, one per tenant: 32 random bytes, stored only wrapped (AES-GCM under the
  primary KEK, associated data ``dek|<tenant>``, so a wrapped key copied to another tenant
  does not unwrap) together with the id of the ring key that wrapped it.
* **Values**: AES-GCM under the tenant's data key with a random 96-bit nonce and associated
  data binding tenant, project, kind (env or vault), environment, app, key and version
  (:func:`value_aad`), so a ciphertext moved to another row, project or version fails to
  decrypt instead of yielding a value in the wrong place.

Rotation without downtime: put a new key first in the ring and restart (or roll) the service.
Data keys wrapped under an older ring key still unwrap as long as that key stays in the ring;
the service re-wraps them under the primary in the background (``cloud.keys``), values are
never re-encrypted (their data keys do not change). Once no data key is wrapped under an old
ring key (``GET /v1/health`` counts them per ring key), that key can leave the ring.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["DecryptError", "KeyRing", "KeyRingError", "WrappedKey", "decrypt", "encrypt",
           "value_aad"]

NONCE_BYTES = 12
KEY_BYTES = 32
_KEK_INFO = b"svc-cloud key-encryption key v1"


class KeyRingError(ValueError):
    """The key ring variable is malformed (the message never contains key material)."""


class DecryptError(Exception):
    """A ciphertext did not authenticate: wrong key, wrong place, or tampered with."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


@dataclass(frozen=True)
class WrappedKey:
    """A tenant's data key as stored: the ring key id and ``base64(nonce || ciphertext)``."""

    kid: str
    blob: str


@dataclass(frozen=True)
class KeyRing:
    """The ring keys by id (first: primary); KEKs derived once."""

    order: tuple[str, ...]
    _keks: dict[str, AESGCM] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        order: list[str] = []
        keks: dict[str, AESGCM] = {}
        for n, item in enumerate(p.strip() for p in text.split(",")):
            if not item:
                continue
            kid, sep, material = item.partition(":")
            kid = kid.strip()
            if not sep or not kid or not kid.replace("-", "").replace("_", "").isalnum() \
                    or len(kid) > 32:
                raise KeyRingError(f"key ring entry {n + 1}: want id:base64key, the id made "
                                   "of letters, digits, - or _ (at most 32)")
            try:
                raw = _unb64(material.strip())
            except (binascii.Error, ValueError):
                raise KeyRingError(f"key ring entry {n + 1} ({kid}): the key is not "
                                   "base64") from None
            if len(raw) != KEY_BYTES:
                raise KeyRingError(f"key ring entry {n + 1} ({kid}): the key must be "
                                   f"{KEY_BYTES} bytes, got {len(raw)}")
            if kid in keks:
                raise KeyRingError(f"key ring entry {n + 1}: id {kid} appears twice")
            hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None,
                        info=_KEK_INFO + b"|" + kid.encode())
            keks[kid] = AESGCM(hkdf.derive(raw))
            order.append(kid)
        if not order:
            raise KeyRingError("the key ring is empty (want id:base64key[,id:base64key...])")
        return cls(tuple(order), keks)

    @staticmethod
    def generate_entry(kid: str) -> str:
        """A fresh ``id:base64key`` entry (``svc cloud keyring new``, ``ops/run``)."""
        return f"{kid}:{_b64(os.urandom(KEY_BYTES))}"

    @property
    def primary(self) -> str:
        return self.order[0]

    def wrap(self, tenant_id: str, data_key: bytes) -> WrappedKey:
        nonce = os.urandom(NONCE_BYTES)
        ct = self._keks[self.primary].encrypt(nonce, data_key, b"dek|" + tenant_id.encode())
        return WrappedKey(self.primary, _b64(nonce + ct))

    def unwrap(self, tenant_id: str, wrapped: WrappedKey) -> bytes:
        kek = self._keks.get(wrapped.kid)
        if kek is None:
            raise DecryptError(f"tenant data key is wrapped under ring key {wrapped.kid!r}, "
                               "which is not in SVC_CLOUD_KEYRING")
        try:
            raw = _unb64(wrapped.blob)
            return kek.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:],
                               b"dek|" + tenant_id.encode())
        except (InvalidTag, binascii.Error, ValueError):
            raise DecryptError("tenant data key does not authenticate") from None

    def new_data_key(self, tenant_id: str) -> tuple[bytes, WrappedKey]:
        key = AESGCM.generate_key(bit_length=256)
        return key, self.wrap(tenant_id, key)


def value_aad(tenant: str, project: str, kind: str, environment: str, app: str, key: str,
              version: int) -> bytes:
    """The associated data a value is bound to (unambiguous: length-prefixed parts)."""
    parts = ("v1", tenant, project, kind, environment, app, key, str(version))
    return b"".join(len(p.encode()).to_bytes(2, "big") + p.encode() for p in parts)


def encrypt(data_key: bytes, aad: bytes, plaintext: str) -> str:
    nonce = os.urandom(NONCE_BYTES)
    return _b64(nonce + AESGCM(data_key).encrypt(nonce, plaintext.encode(), aad))


def decrypt(data_key: bytes, aad: bytes, blob: str) -> str:
    try:
        raw = _unb64(blob)
        return AESGCM(data_key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad).decode()
    except (InvalidTag, binascii.Error, ValueError, UnicodeDecodeError):
        raise DecryptError("a stored value does not authenticate in its place") from None
