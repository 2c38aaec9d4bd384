"""Settings of `svc schema apply`, resolved once from flags, environment and project file.

The root project file is `--project FILE`, else `SVC_PROJECT_FILE`, else `./project.yml` when
present; it must validate. Precedence for the ingest transport: `--transport` flag, then
`SVC_INGEST_TRANSPORT`, then `sync.transport` in the root project file, then the
specification's default `http`. The environment overrides the file because the file is checked
in and shared, while the environment describes this deployment (`project.service`: the rule
the SSP and the scheduler apply too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from dbclient import DbConfig
from ipc.transport import DEFAULT_TRANSPORT, TransportError, parse_transport
from maintenance.impersonation import FlagError, parse_flag
from project.service import PROJECT_FILE_VAR, setting_source, with_project_defaults
from timetext.durations import parse_duration_ns as duration_ns

if TYPE_CHECKING:  # the project file's models load only when there is a project file
    from project.rootconfig import Project

DEFAULT_RETENTION = "1h"
#: SVC_IMPERSONATION_SESSION's default (see `svccli.schema.impersonation_access_sql`)
DEFAULT_IMPERSONATION_SESSION_MS = 10_000


class ConfigError(ValueError):
    """Bad configuration: the command exits 2 with this message."""


def parse_duration_ns(text: str) -> int:
    """A changefeed retention such as `1h`, `90m` or `1h30m` in nanoseconds
    (`timetext.durations.parse_duration_ns`); ConfigError when it is not one."""
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
    transport_source: str  # "flag --transport", the variable, "project file <path> (...)", "default"
    retention: str = DEFAULT_RETENTION
    ingest_url: str | None = None  # full URL of the SSP's or scheduler's /ingest
    auth_secret: str = field(default="", repr=False)  # never shown
    #: the root project file, when there is one: its backends' outbox schemas are applied
    project: Project | None = field(default=None, repr=False)
    impersonation: bool = False  # SVC_IMPERSONATION: define the `_00_impersonate` access
    #: SVC_IMPERSONATION_SESSION: the access method's session length in milliseconds (how
    #: long a connection signed in with an impersonation token stays signed in)
    impersonation_session_ms: int = DEFAULT_IMPERSONATION_SESSION_MS

    @property
    def service_base_url(self) -> str | None:
        """The ingest URL without its trailing `/ingest` (for `/view/unregister`)."""
        if self.ingest_url is None:
            return None
        url = self.ingest_url.rstrip("/")
        return url.removesuffix("/ingest")


def find_project(env: Mapping[str, str], project_flag: str | None, cwd: Path) -> Project | None:
    """The validated root project file: `--project`, else `SVC_PROJECT_FILE` (either must
    exist), else `./project.yml` when there is one; None without any. ConfigError lists the
    file's problems."""
    named = project_flag or env.get(PROJECT_FILE_VAR, "").strip()
    path = Path(named) if named else cwd / "project.yml"
    if not path.is_file():
        if named:
            raise ConfigError(f"project file {path} does not exist")
        return None
    from project.rootconfig import ProjectInvalid, load_project

    try:
        return load_project(path)
    except ProjectInvalid as e:
        raise ConfigError("; ".join(str(i) for i in e.issues[:10])
                          + (f" (and {len(e.issues) - 10} more)" if len(e.issues) > 10 else "")
                          + " (svc project validate lists every problem)") from None


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

    project = find_project(env, project_flag, cwd)
    # the environment with the project file's settings as defaults (project.service: the one
    # rule the SSP and the scheduler apply too)
    effective = with_project_defaults(env, project)
    if transport_flag:
        transport, source = transport_flag, "flag --transport"
    else:
        transport = effective.get("SVC_INGEST_TRANSPORT", "").strip() or DEFAULT_TRANSPORT
        source = setting_source(env, project, "SVC_INGEST_TRANSPORT")
    try:  # the one rule of ipc.transport, shared with the SSP and the scheduler
        transport = parse_transport(transport, source)
    except TransportError as e:
        raise ConfigError(str(e)) from None

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
    session_text = env.get("SVC_IMPERSONATION_SESSION", "").strip()
    try:
        session_ms = (duration_ns(session_text) // 1_000_000 if session_text
                      else DEFAULT_IMPERSONATION_SESSION_MS)
    except ValueError as e:
        raise ConfigError(f"SVC_IMPERSONATION_SESSION {session_text!r} is not a duration like "
                          f"10s or 1m ({e})") from None
    if session_ms < 1000:
        raise ConfigError(f"SVC_IMPERSONATION_SESSION {session_text!r} is under 1s")
    return SchemaSettings(
        db=db,
        impersonation=impersonation,
        impersonation_session_ms=session_ms,
        transport=transport,
        transport_source=source,
        retention=retention,
        ingest_url=ingest_url,
        auth_secret=env.get("SVC_AUTH_SECRET", ""),
        project=project,
    )
