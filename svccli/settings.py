"""Settings of `svc schema apply`, resolved once from flags, environment and project file.

Precedence for the ingest transport: `--transport` flag, then `SVC_INGEST_TRANSPORT`, then
`sync.transport` in the root project file, then the specification's default `http`. The
environment overrides the file because the file is checked in and shared, while the
environment describes this deployment (the same rule the scheduler applies to
`SVC_INGEST_TRANSPORT`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from dbclient import DbConfig
from ipc.messages import parse_duration_ns as duration_ns
from maintenance.impersonation import FlagError, parse_flag

TRANSPORTS = ("http", "changefeed")
DEFAULT_TRANSPORT = "http"
DEFAULT_RETENTION = "1h"

class ConfigError(ValueError):
    """Bad configuration: the command exits 2 with this message."""


def parse_duration_ns(text: str) -> int:
    """A changefeed retention such as `1h`, `90m` or `1h30m` in nanoseconds
    (`ipc.messages.parse_duration_ns`); ConfigError when it is not one."""
    try:
        return duration_ns(text)
    except ValueError as e:
        raise ConfigError(f"changefeed retention {text!r} is not a duration like 1h, 30m, 7d "
                          f"({e})") from None


@dataclass(frozen=True)
class SchemaSettings:
    """Everything `schema apply` needs, validated."""

    db: DbConfig
    transport: str
    transport_source: str  # "flag", "env", "project file <path>", "default"
    retention: str = DEFAULT_RETENTION
    ingest_url: str | None = None  # full URL of the SSP's or scheduler's /ingest
    auth_secret: str = field(default="", repr=False)  # never shown
    impersonation: bool = False  # SVC_IMPERSONATION: define the `_00_impersonate` access

    @property
    def service_base_url(self) -> str | None:
        """The ingest URL without its trailing `/ingest` (for `/view/unregister`)."""
        if self.ingest_url is None:
            return None
        url = self.ingest_url.rstrip("/")
        return url.removesuffix("/ingest")


def read_project_transport(path: Path) -> str | None:
    """`sync.transport` from a YAML project file (None when the key is absent)."""
    try:
        data: Any = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read project file {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"project file {path} is not valid YAML: {e}") from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"project file {path} must be a mapping at the top level")
    sync = data.get("sync")
    if sync is None:
        return None
    if not isinstance(sync, dict):
        raise ConfigError(f"project file {path}: `sync` must be a mapping")
    transport = sync.get("transport")
    if transport is None:
        return None
    if not isinstance(transport, str):
        raise ConfigError(f"project file {path}: `sync.transport` must be a string")
    return transport


def resolve_settings(
    env: Mapping[str, str],
    *,
    transport_flag: str | None,
    project_flag: str | None,
    ingest_url_flag: str | None,
    retention_flag: str | None,
    cwd: Path,
) -> SchemaSettings:
    """Build SchemaSettings from flags, env and the project file. Raises ConfigError."""
    try:
        db = DbConfig.from_env(env)
    except ValueError as e:
        raise ConfigError(str(e)) from None

    project_path = Path(project_flag) if project_flag else cwd / "project.yml"
    if project_flag and not project_path.is_file():
        raise ConfigError(f"project file {project_path} does not exist")
    file_transport = read_project_transport(project_path) if project_path.is_file() else None

    env_transport = env.get("SVC_INGEST_TRANSPORT", "").strip() or None
    if transport_flag:
        transport, source = transport_flag, "flag --transport"
    elif env_transport:
        transport, source = env_transport, "SVC_INGEST_TRANSPORT"
    elif file_transport:
        transport, source = file_transport, f"project file {project_path}"
    else:
        transport, source = DEFAULT_TRANSPORT, "default"
    transport = transport.strip().lower()
    if transport not in TRANSPORTS:
        raise ConfigError(f"ingest transport {transport!r} (from {source}) must be one of "
                          + ", ".join(TRANSPORTS))

    retention = (retention_flag or env.get("SVC_CHANGEFEED_RETENTION", "").strip()
                 or DEFAULT_RETENTION)
    parse_duration_ns(retention)

    ingest_url = (ingest_url_flag or env.get("SVC_INGEST_URL", "")).strip() or None
    if ingest_url is not None:
        parts = urlsplit(ingest_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"ingest URL {ingest_url!r} must be an http(s) URL with a host")
        if parts.username or parts.password:
            raise ConfigError("ingest URL must not contain credentials; use SVC_AUTH_SECRET")
    if transport == "http" and ingest_url is None:
        raise ConfigError("transport http needs the ingest URL: --ingest-url or SVC_INGEST_URL "
                          "(the SSP's or scheduler's /ingest)")
    try:
        impersonation = parse_flag(env.get("SVC_IMPERSONATION"))
    except FlagError as e:
        raise ConfigError(str(e)) from None
    if impersonation and not env.get("SVC_AUTH_SECRET", ""):
        raise ConfigError("SVC_IMPERSONATION=on needs SVC_AUTH_SECRET: the impersonation "
                          "tokens are signed with a key derived from it")
    return SchemaSettings(
        db=db,
        impersonation=impersonation,
        transport=transport,
        transport_source=source,
        retention=retention,
        ingest_url=ingest_url,
        auth_secret=env.get("SVC_AUTH_SECRET", ""),
    )
