"""Tenant data keys (``tenant_key`` rows): created on first use, unwrapped with the key ring,
kept unwrapped in this process's memory, and re-wrapped under the ring's primary key by
:meth:`DataKeys.rewrap_all` (the background worker runs it at start and every sample tick) so
an old ring key can be retired (``cloud.crypto``)."""

from __future__ import annotations

import logging
from typing import Any

from cloud.crypto import DecryptError, KeyRing, WrappedKey
from cloud.errors import Unavailable
from cloud.store import Store, rid, row_id

log = logging.getLogger("cloud.keys")

__all__ = ["DataKeys"]


class DataKeys:
    def __init__(self, store: Store, ring: KeyRing) -> None:
        self.store = store
        self.ring = ring
        self._cache: dict[tuple[str, str], bytes] = {}  # (tenant, blob) -> key
        # A tenant's data key never changes (re-wrapping changes only its wrapping, and
        # tenant ids are never reused): once unwrapped it is served without a read.
        self._by_tenant: dict[str, bytes] = {}

    def _unwrap(self, tenant: str, row: dict[str, Any]) -> bytes:
        wrapped = WrappedKey(row["kid"], row["blob"])
        hit = self._cache.get((tenant, wrapped.blob))
        if hit is not None:
            return hit
        try:
            key = self.ring.unwrap(tenant, wrapped)
        except DecryptError as e:
            log.error("tenant %s: %s", tenant, e)
            raise Unavailable("this tenant's values cannot be decrypted with the configured "
                              "key ring (logged)", code="keyring") from None
        self._cache[(tenant, wrapped.blob)] = key
        return key

    async def get(self, tenant: str) -> bytes:
        """The tenant's data key, created (and stored wrapped) the first time."""
        hit = self._by_tenant.get(tenant)
        if hit is not None:
            return hit
        key = await self._load(tenant)
        self._by_tenant[tenant] = key
        return key

    async def _load(self, tenant: str) -> bytes:
        row = await self.store.get("tenant_key", tenant)
        if row is not None:
            return self._unwrap(tenant, row)
        _, wrapped = self.ring.new_data_key(tenant)
        # Atomic create-or-keep: of two racing creators, the first one's key stays.
        out = await self.store.one(
            "UPSERT $id SET kid = kid ?? $k, blob = blob ?? $b, "
            "created_at = created_at ?? time::now() RETURN AFTER",
            {"id": rid("tenant_key", tenant), "k": wrapped.kid, "b": wrapped.blob})
        return self._unwrap(tenant, out[0] if isinstance(out, list) else out)

    async def rewrap_all(self) -> dict[str, int]:
        """Re-wrap every data key not under the primary ring key; returns the count of data
        keys per ring key id afterwards."""
        rows = await self.store.one("SELECT id, kid, blob FROM tenant_key", read=True) or []
        for row in rows:
            if row["kid"] == self.ring.primary:
                continue
            tenant = row_id(row)
            key = self._unwrap(tenant, row)
            fresh = self.ring.wrap(tenant, key)
            await self.store.run(
                "UPDATE $id SET kid = $k, blob = $b, rewrapped_at = time::now() "
                "WHERE blob = $old RETURN NONE",
                {"id": rid("tenant_key", tenant), "k": fresh.kid, "b": fresh.blob,
                 "old": row["blob"]})
            log.info("tenant %s: data key re-wrapped from ring key %s to %s", tenant,
                     row["kid"], fresh.kid)
        return await self.counts()

    async def counts(self) -> dict[str, int]:
        rows = await self.store.one("SELECT kid, count() AS n FROM tenant_key GROUP BY kid",
                                    read=True) or []
        return {r["kid"]: int(r["n"]) for r in rows}
