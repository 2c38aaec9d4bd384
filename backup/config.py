"""Backup object storage settings (``OBJSTORE_*``, no ``SVC_`` prefix), parsed once.

One parser for the scheduler (``scheduler.config``) and the standalone SSP (``ssp.config``):
:func:`objstore_from_env`. The plane switches on when any of ``OBJSTORE_ENDPOINT``,
``OBJSTORE_ACCESS_KEY``, ``OBJSTORE_SECRET_KEY``, ``OBJSTORE_BUCKET`` is set (``REGION``
alone does not); each one left unset then falls back to a local default, the address and keys
``ops/run --objstore`` gives its local S3 server:

==================  =========================  ===========================================
variable            default                    why
==================  =========================  ===========================================
OBJSTORE_ENDPOINT   ``http://127.0.0.1:9670``  ``ops/run --objstore`` (9667-9669 are ours)
OBJSTORE_ACCESS_KEY ``svc-local``              the local server's key pair
OBJSTORE_SECRET_KEY ``svc-local-secret``
OBJSTORE_BUCKET     ``svc-backups``            created on first use when missing
OBJSTORE_REGION     ``us-east-1``              what S3-compatible servers accept by default
==================  =========================  ===========================================

The access and secret keys never appear in ``repr`` or in a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_ACCESS_KEY",
    "DEFAULT_BUCKET",
    "DEFAULT_ENDPOINT",
    "DEFAULT_REGION",
    "DEFAULT_SECRET_KEY",
    "PAUSE_POINTS",
    "ObjectStoreConfig",
    "objstore_from_env",
    "pause_from_env",
]

DEFAULT_ENDPOINT = "http://127.0.0.1:9670"
DEFAULT_ACCESS_KEY = "svc-local"
DEFAULT_SECRET_KEY = "svc-local-secret"  # the local server's, documented above
DEFAULT_BUCKET = "svc-backups"
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class ObjectStoreConfig:
    """Backup object storage as configured; ``None`` fields are unset (see the module
    docstring for the defaults the ``effective_*`` properties fall back to)."""

    endpoint: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    bucket: str | None = None
    region: str | None = None

    @property
    def enabled(self) -> bool:
        """The backup plane switches on when any of endpoint, keys or bucket is present."""
        return any(
            v is not None for v in (self.endpoint, self.access_key, self.secret_key, self.bucket)
        )

    @property
    def effective_endpoint(self) -> str:
        return (self.endpoint or DEFAULT_ENDPOINT).rstrip("/")

    @property
    def effective_access_key(self) -> str:
        return self.access_key or DEFAULT_ACCESS_KEY

    @property
    def effective_secret_key(self) -> str:
        return self.secret_key or DEFAULT_SECRET_KEY

    @property
    def effective_bucket(self) -> str:
        return self.bucket or DEFAULT_BUCKET

    @property
    def effective_region(self) -> str:
        return self.region or DEFAULT_REGION

    def public(self) -> dict[str, object]:
        """What the admin API shows: where, never the keys."""
        return {"configured": self.enabled, "endpoint": self.effective_endpoint,
                "bucket": self.effective_bucket, "region": self.effective_region}


def _str(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    return raw.strip()


def _secret(env: Mapping[str, str], name: str) -> str | None:
    # Taken verbatim (a key may start or end with a space); empty means unset.
    raw = env.get(name)
    return raw if raw else None


def objstore_from_env(env: Mapping[str, str]) -> ObjectStoreConfig:
    """The ``OBJSTORE_*`` variables of ``env`` (the one parser every process uses)."""
    return ObjectStoreConfig(
        endpoint=_str(env, "OBJSTORE_ENDPOINT"),
        access_key=_secret(env, "OBJSTORE_ACCESS_KEY"),
        secret_key=_secret(env, "OBJSTORE_SECRET_KEY"),
        bucket=_str(env, "OBJSTORE_BUCKET"),
        region=_str(env, "OBJSTORE_REGION"),
    )


#: where ``SVC_BACKUP_PAUSE_AT`` (ours) may stop a job: ``upload`` (a backup, before its
#: upload is completed), ``running`` (a restore, before the download), ``main_db`` (a restore,
#: with half of the rows imported), ``replica`` (a restore, before the rebuild)
PAUSE_POINTS = ("upload", "running", "main_db", "replica")


def pause_from_env(env: Mapping[str, str]) -> str | None:
    """``SVC_BACKUP_PAUSE_AT``: a failpoint for crash tests (``backup.service``); ValueError
    for a point that does not exist. Unset in production."""
    raw = (env.get("SVC_BACKUP_PAUSE_AT") or "").strip()
    if not raw:
        return None
    if raw not in PAUSE_POINTS:
        raise ValueError(f"SVC_BACKUP_PAUSE_AT must be one of {', '.join(PAUSE_POINTS)}, "
                         f"got {raw[:40]!r}")
    return raw
