"""SSP settings: every variable of the spec's SSP environment table, read once, typed.

Only `SspConfig.from_env` reads the environment; every other module receives this object.
Variables the spec does not name but the process layout needs carry our own `SVC_SSP_` names
and are marked "ours" below.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backup.config import ObjectStoreConfig, objstore_from_env, pause_from_env
from dbclient.config import SERVICE_LANE, DbConfig
from ipc.envvars import env_bool, env_int, env_json, host_port
from ipc.http import SERVER_KEEPALIVE_SECS
from ipc.otel import OtelConfigError, metrics_exporters
from ipc.peerauth import ssp_credential
from ipc.transport import TransportError, ingest_transport
from jobs.tables import JobConfigError, JobTable, tables_from_specs
from maintenance.backends import BackendListError, parse_backends
from maintenance.impersonation import FlagError, parse_flag

if TYPE_CHECKING:
    # imported where used: the project models (pydantic) load only when a project file is set
    from project.rootconfig import Project

REF_MODES = ("dedicated", "single")
ALLOWLIST_MODES = ("off", "warn", "enforce")
VIEW_PERMISSION_MODES = ("enforce", "off")
# sun_path holds 108 bytes with the terminating NUL; keep a little margin.
UNIX_PATH_MAX = 100


class ConfigError(ValueError):
    """A setting has a value we cannot use; the message names the variable."""


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0,
         maximum: int | None = None) -> int:
    return env_int(env, name, default, minimum=minimum, maximum=maximum, error=ConfigError)


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    return env_bool(env, name, default, error=ConfigError)


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name, "").strip().lower() or default
    if raw not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_IDENT_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _impersonation(env: Mapping[str, str]) -> bool:
    try:
        return parse_flag(env.get("SVC_IMPERSONATION"))  # the scheduler reads it the same way
    except FlagError as e:
        raise ConfigError(str(e)) from None


def _transport(env: Mapping[str, str]) -> str:
    """`SVC_INGEST_TRANSPORT` by the one rule of `ipc.transport` (default `http`)."""
    try:
        return ingest_transport(env)
    except TransportError as e:
        raise ConfigError(str(e)) from None


def _pause_at(env: Mapping[str, str]) -> str | None:
    try:
        return pause_from_env(env)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _service_project(env: Mapping[str, str]) -> Project | None:
    """The project file named by `SVC_PROJECT_FILE` (None without the variable)."""
    if not env.get("SVC_PROJECT_FILE", "").strip():
        return None
    from project.rootconfig import ProjectInvalid
    from project.service import load_service_project

    try:
        return load_service_project(env)
    except ProjectInvalid as e:
        raise ConfigError(f"SVC_PROJECT_FILE: {e}") from None


def _merge_project_jobs(env: Mapping[str, str], project: Project | None,
                        from_env: dict[str, Any]) -> dict[str, Any]:
    """`SVC_JOB_CONFIG` entries plus one per backend with an outbox in the project file
    (keyed by app name). An `SVC_JOB_CONFIG` entry with an app's key replaces that app's
    entry: the environment describes this deployment, the file is shared.
    """
    if project is None:
        return from_env
    from project.jobwiring import job_config
    from project.rootconfig import ProjectInvalid

    try:
        from_project = job_config(project, env)["job_tables"]
    except ProjectInvalid as e:
        raise ConfigError(f"SVC_PROJECT_FILE: {e}") from None
    merged = {**from_project, **from_env}
    owners: dict[str, str] = {}
    for key, spec in merged.items():
        name = spec.get("name") if isinstance(spec, dict) else None
        if isinstance(name, str) and name in owners:
            raise ConfigError(f"job table {name} is configured twice (job_tables.{owners[name]} "
                              f"and job_tables.{key}, from SVC_JOB_CONFIG and SVC_PROJECT_FILE)")
        if isinstance(name, str):
            owners[name] = key
    return merged


def _metrics_exporters(env: Mapping[str, str]) -> tuple[str, ...]:
    """The OTEL_* exporters (`ipc.otel.metrics_exporters`), as a ConfigError when refused."""
    try:
        return metrics_exporters(env)
    except OtelConfigError as e:
        raise ConfigError(str(e)) from None


@dataclass(frozen=True)
class SspConfig:
    """Everything an SSP process needs to know, from the environment."""

    listen_host: str
    listen_port: int
    advertise_addr: str | None
    ssp_id: str
    auth_secret: str | None = field(repr=False)
    db: DbConfig
    ref_mode: str
    ingest_transport: str
    ttl_cleanup_interval_secs: int
    schema_poll_secs: int
    job_tables: tuple[JobTable, ...]
    snapshot_dir: Path | None
    arena_dir: Path | None
    checkpoint_interval_secs: int
    arena_segment_mb: int
    memory_limit_mb: int
    register_max_wait_secs: int
    #: SVC_SSP_REGISTER_RETRY_MAX_MS (ours): the longest wait between registration attempts
    #: (they start at 200 ms and double)
    register_retry_max_ms: int
    view_metrics_flush_ms: int
    anon_live_queries: bool
    query_allowlist: str
    query_update_throttle_ms: int
    bootstrap_page_size: int
    impersonation: bool
    scheduler_url: str | None
    heartbeat_interval_ms: int
    backends: tuple[dict[str, Any], ...] = field(repr=False)
    health_check_interval_secs: int
    job_sweep_secs: float  # ours (SVC_SSP_JOB_SWEEP_SECS): the spec's 30 s recovery sweep
    backend_down_after_secs: int  # ours (SVC_BACKEND_DOWN_AFTER_SECS): the spec's one minute
    crdt_cache_size: int
    crdt_fields: dict[str, list[str]]
    # ours: process layout
    shards: int
    # ours (SVC_SSP_PUBLISH_FLUSHERS): edge transactions in flight at once, on disjoint views
    publish_flushers: int
    gateway_workers: int
    #: SVC_SSP_GATEWAY_GRACEFUL_SECS (ours): how long the gateway's workers finish what they
    #: hold on SIGTERM (gunicorn's --graceful-timeout; see gateway/serve.py)
    gateway_graceful_secs: int
    run_dir: Path
    # Where the ipc sockets whose path in `run_dir` would be too long for a Unix socket
    # address live: a short private directory (never the abstract namespace: it has no file
    # permissions, so any local user could connect to the hub). None: they all fit.
    ipc_dir: Path | None = None
    # the run dir is ours (no SVC_SSP_RUN_DIR): made at start, removed at exit
    run_dir_owned: bool = False
    # ours, SVC_SSP_VIEW_PERMISSIONS: `enforce` (views honour their owner's select
    # permission, ssp.permissions) or `off` (computed as root, as before)
    view_permissions: str = "enforce"
    # ours, SVC_ROW_VIEWS_PER_USER: views one identity may hold by `_00_query` rows it
    # created (ssp.hub.rowrequests); a record user cannot flood the SSP with views
    row_views_per_user: int = 100
    # ours, SVC_HTTP_READ_TIMEOUT_SECS: the gateway closes a connection that waits this long
    # for a request (idle keep-alive, or a request head sent a byte at a time)
    http_read_timeout_secs: int = SERVER_KEEPALIVE_SECS
    # OpenTelemetry (standard OTEL_* names, `ssp.telemetry`): exporters to run, `()` = none
    metrics_exporters: tuple[str, ...] = ()
    metrics_export_interval_ms: int = 60_000
    # ours (SVC_SSP_SHARD_TIMEOUT_SECS): a shard that does not answer a registration or an
    # unregistration within this is restarted and rebuilt
    shard_call_timeout_secs: float = 120.0
    # ours (SVC_SSP_RECONCILE_MS): a slice of views' edges and rows read back and repaired
    # every this many ms (ssp.hub.reconcile); 0 = off
    reconcile_ms: int = 1000
    # ours (SVC_SSP_REAPER_MAX_QUEUED): retired edges the reaper keeps in memory (mode
    # `dedicated`); more wait in the database for its refill (ssp.reaper)
    reaper_max_queued: int = 20_000
    # the standalone maintenance plane (ssp.hub.backups): OBJSTORE_* (one parser, shared with the
    # scheduler), SVC_PROJECT_SLUG (the storage prefix), ours SVC_BACKUP_PAUSE_AT (crash tests)
    objstore: ObjectStoreConfig = field(default_factory=ObjectStoreConfig)
    project_slug: str = "default"
    backup_pause_at: str | None = None

    @property
    def standalone(self) -> bool:
        return self.scheduler_url is None

    @property
    def scheduler_bearer(self) -> str | None:
        """What this SSP sends its scheduler: its own credential derived from the secret
        (`ipc.peerauth`), never the secret itself; None without a secret."""
        return ssp_credential(self.auth_secret, self.ssp_id) if self.auth_secret else None

    @property
    def hub_endpoint(self) -> str:
        """ZeroMQ endpoint where the hub's ROUTER listens for gateway workers."""
        return self._ipc("hub.sock")

    def shard_endpoint(self, index: int) -> str:
        return self._ipc(f"shard-{index}.sock")

    @property
    def socket_dirs(self) -> set[Path]:
        """Every directory an ipc socket may live in (each made private at start)."""
        return {self.run_dir} | ({self.ipc_dir} if self.ipc_dir is not None else set())

    def _ipc(self, name: str) -> str:
        """A ZeroMQ ipc endpoint: in `run_dir` when its path fits a Unix socket address, else
        in `ipc_dir` (both private: `ssp.rundir.secure_dir`)."""
        path = f"{self.run_dir}/{name}"
        if len(path.encode()) <= UNIX_PATH_MAX or self.ipc_dir is None:
            return f"ipc://{path}"
        return f"ipc://{self.ipc_dir}/{name}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SspConfig:
        """Read the SSP environment table; ConfigError names the first bad variable."""
        host, port = host_port(env.get("SVC_SSP_LISTEN_ADDR", ""), "SVC_SSP_LISTEN_ADDR",
                               default_port=8667, default_host="0.0.0.0", error=ConfigError)
        try:
            # the SSP's connections are the service's lane (`dbhost.admission`)
            db = dataclasses.replace(DbConfig.from_env(env), lane=SERVICE_LANE)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        jobs_raw = env_json(env, "SVC_JOB_CONFIG", {"job_tables": {}}, error=ConfigError)
        if not isinstance(jobs_raw, dict) or not isinstance(jobs_raw.get("job_tables", {}), dict):
            raise ConfigError("SVC_JOB_CONFIG must be {\"job_tables\": {<key>: {name, base_url, auth_token}}}")
        project = _service_project(env)
        try:
            jobs = tables_from_specs(_merge_project_jobs(env, project,
                                                         jobs_raw.get("job_tables", {})))
        except JobConfigError as e:
            raise ConfigError(str(e)) from None
        # the root file's refMode and sync.transport are the defaults of SVC_SSP_REF_MODE and
        # SVC_INGEST_TRANSPORT; a variable set wins (project.service, shared with the others)
        if project is not None:
            from project.service import with_project_defaults

            env = with_project_defaults(env, project)
        backends = env_json(env, "SVC_BACKENDS", None, error=ConfigError)
        if backends is None:
            backends = env_json(env, "SVC_SCHEDULER_BACKENDS", [], error=ConfigError)
        if not isinstance(backends, list) or not all(isinstance(b, dict) for b in backends):
            raise ConfigError("SVC_BACKENDS must be a JSON array of objects")
        try:
            parsed_backends = parse_backends(backends)
        except BackendListError as e:
            raise ConfigError(f"SVC_BACKENDS: {e}") from None
        # A backend with `run_on: {pool}` has its jobs run by the scheduler's machine pool
        # (scheduler/pools): its job table (the SVC_JOB_CONFIG entry keyed by the backend's
        # name) is not claimed here, or SSPs and pool machines would race for its rows.
        pooled = {b.name for b in parsed_backends if b.run_on}
        jobs = [j for j in jobs if j.key not in pooled]
        crdt = env_json(env, "SVC_CRDT_FIELDS", {}, error=ConfigError)
        if not isinstance(crdt, dict) or not all(
                isinstance(fs, list) and all(isinstance(f, str) and _IDENT_RE.match(f)
                                             for f in fs) for fs in crdt.values()):
            raise ConfigError("SVC_CRDT_FIELDS must be a JSON object table -> [field, ...] "
                              "(field names plain identifiers)")
        snapshot_dir = env.get("SVC_SSP_SNAPSHOT_DIR", "").strip()
        arena_dir = env.get("SVC_SSP_ARENA_DIR", "").strip()
        ssp_id = env.get("SVC_SSP_ID", "").strip() or f"ssp-{uuid.uuid4()}"
        run_dir = env.get("SVC_SSP_RUN_DIR", "").strip()  # ours: where the ipc sockets live
        # Without SVC_SSP_RUN_DIR: a name nobody can guess (a predictable /tmp path could be
        # made first by another local user); ssp.rundir makes it private at start either way.
        run_path = Path(run_dir) if run_dir else Path(tempfile.gettempdir()) / (
            f"svc-ssp-{_IDENT_SAFE.sub('_', ssp_id)[:40]}-{secrets.token_hex(6)}")
        ipc_path = None
        if len(f"{run_path}/shard-9999.sock".encode()) > UNIX_PATH_MAX:
            ipc_path = Path(tempfile.gettempdir()) / f"svc-ipc-{secrets.token_hex(8)}"
            if len(f"{ipc_path}/shard-9999.sock".encode()) > UNIX_PATH_MAX:
                ipc_path = Path("/tmp") / f"svc-ipc-{secrets.token_hex(8)}"
        return cls(
            listen_host=host,
            listen_port=port,
            advertise_addr=env.get("SVC_SSP_ADVERTISE_ADDR", "").strip() or None,
            ssp_id=ssp_id,
            auth_secret=env.get("SVC_AUTH_SECRET") or None,
            db=db,
            ref_mode=_choice(env, "SVC_SSP_REF_MODE", "dedicated", REF_MODES),
            ingest_transport=_transport(env),
            ttl_cleanup_interval_secs=_int(env, "TTL_CLEANUP_INTERVAL_SECS", 60, minimum=1),
            schema_poll_secs=_int(env, "SVC_SCHEMA_POLL_SECS", 15),
            job_tables=tuple(jobs),
            snapshot_dir=Path(snapshot_dir) if snapshot_dir else None,
            arena_dir=Path(arena_dir) if arena_dir else None,
            checkpoint_interval_secs=_int(env, "SVC_SSP_CHECKPOINT_INTERVAL_SECS", 300, minimum=1),
            arena_segment_mb=_int(env, "SVC_SSP_ARENA_SEGMENT_MB", 64, minimum=1),
            memory_limit_mb=_int(env, "SVC_SSP_MEMORY_LIMIT_MB", 1024, minimum=1),
            register_max_wait_secs=_int(env, "SVC_SSP_REGISTER_MAX_WAIT_SECS", 180, minimum=1),
            register_retry_max_ms=_int(env, "SVC_SSP_REGISTER_RETRY_MAX_MS", 5000,
                                       minimum=200),  # ours
            view_metrics_flush_ms=_int(env, "SVC_SSP_VIEW_METRICS_FLUSH_MS", 2000, minimum=1),
            anon_live_queries=_bool(env, "SVC_SSP_ANON_LIVE_QUERIES", False),
            query_allowlist=_choice(env, "SVC_SSP_QUERY_ALLOWLIST", "off", ALLOWLIST_MODES),
            view_permissions=_choice(env, "SVC_SSP_VIEW_PERMISSIONS", "enforce",
                                     VIEW_PERMISSION_MODES),
            row_views_per_user=_int(env, "SVC_ROW_VIEWS_PER_USER", 100, minimum=1),
            query_update_throttle_ms=_int(env, "SVC_SSP_QUERY_UPDATE_THROTTLE_MS", 100),
            bootstrap_page_size=_int(env, "SVC_SSP_BOOTSTRAP_PAGE_SIZE", 500, minimum=1),
            impersonation=_impersonation(env),
            scheduler_url=(env.get("SVC_SCHEDULER_URL", "").strip().rstrip("/") or None),
            heartbeat_interval_ms=_int(env, "HEARTBEAT_INTERVAL_MS", 5000, minimum=1),
            backends=tuple(backends),
            health_check_interval_secs=_int(env, "SVC_HEALTH_CHECK_INTERVAL_SECS", 15, minimum=1),
            job_sweep_secs=_int(env, "SVC_SSP_JOB_SWEEP_SECS", 30, minimum=1),
            backend_down_after_secs=_int(env, "SVC_BACKEND_DOWN_AFTER_SECS", 60, minimum=1),
            crdt_cache_size=_int(env, "SVC_CRDT_CACHE_SIZE", 10000),
            crdt_fields={str(k): list(v) for k, v in crdt.items()},
            shards=_int(env, "SVC_SSP_SHARDS", os.cpu_count() or 1, minimum=1),  # ours
            publish_flushers=_int(env, "SVC_SSP_PUBLISH_FLUSHERS", 2, minimum=1,
                                  maximum=8),  # ours
            gateway_workers=_int(env, "SVC_SSP_GATEWAY_WORKERS", 1, minimum=1),  # ours
            gateway_graceful_secs=_int(env, "SVC_SSP_GATEWAY_GRACEFUL_SECS", 5,
                                       minimum=1),  # ours
            run_dir=run_path,
            ipc_dir=ipc_path,
            run_dir_owned=not run_dir,
            http_read_timeout_secs=_int(env, "SVC_HTTP_READ_TIMEOUT_SECS",
                                        SERVER_KEEPALIVE_SECS, minimum=1),
            metrics_exporters=_metrics_exporters(env),
            metrics_export_interval_ms=_int(env, "OTEL_METRIC_EXPORT_INTERVAL", 60_000,
                                            minimum=1),
            shard_call_timeout_secs=_int(env, "SVC_SSP_SHARD_TIMEOUT_SECS", 120,
                                         minimum=1),  # ours
            reconcile_ms=_int(env, "SVC_SSP_RECONCILE_MS", 1000),  # ours
            reaper_max_queued=_int(env, "SVC_SSP_REAPER_MAX_QUEUED", 20_000,
                                   minimum=1),  # ours
            objstore=objstore_from_env(env),
            project_slug=env.get("SVC_PROJECT_SLUG", "").strip() or "default",
            backup_pause_at=_pause_at(env),
        )
