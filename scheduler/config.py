"""Scheduler configuration: the YAML file plus the environment overrides, read once.

The entry point calls ``SchedulerConfig.load(path, os.environ)`` and passes the frozen result
down; nothing else reads the environment. The YAML keys and the environment variables are the
ones the specification lists ("Scheduler configuration", "Admin configuration", "Limits"):

* YAML only: ``db`` {url, namespace, database, username, password}, ``load_balance``,
  ``heartbeat_interval_ms``, ``heartbeat_timeout_ms``, ``bootstrap_chunk_size``,
  ``bootstrap_timeout_secs``, ``replica_db_path``, ``wal_path``, ``ingest_host``,
  ``ingest_port``, ``ssp_poll_interval_ms``, ``max_buffer_per_ssp``,
  ``snapshot_update_interval_secs``, ``job_tables``.
* ``SVC_PROJECT_FILE`` (the root ``project.yml``): its ``job_tables`` and every backend app's
  outbox table are added to ``job_tables`` (``project.jobwiring``); its ``sync.transport`` is
  the default of ``SVC_INGEST_TRANSPORT`` (``project.service``: the variable wins when set).
* Environment overrides win over the YAML (``SVC_DB_*``, ``SVC_SNAPSHOT_UPDATE_INTERVAL_SECS``);
  the rest of the ``SVC_*`` settings exist only in the environment.

Unknown YAML keys and values of the wrong type are rejected with :class:`ConfigError` naming
the key's path (``db.usernme``). Relative ``replica_db_path``/``wal_path`` are resolved against
the YAML file's directory (the working directory without a file), so a config file moves with
its data. Secrets (database password, auth secret, admin password, object-store secret key,
backend environments) never appear in ``repr`` or in error messages.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from backup.config import ObjectStoreConfig, objstore_from_env, pause_from_env
from dbclient.config import SERVICE_LANE, DbConfig
from ipc import otel
from ipc.envvars import env_bool, env_int
from ipc.http import SERVER_KEEPALIVE_SECS
from ipc.routebodies import INGEST_BATCH_MAX
from ipc.transport import TransportError, ingest_transport
from maintenance.backends import BackendListError, parse_backends
from maintenance.impersonation import FlagError, parse_flag
from scheduler.workflows.config import WorkflowConfig

if TYPE_CHECKING:
    # imported where used: the project models (pydantic) load only when a project file is set
    from project.rootconfig import Project

#: the dashboard shipped in this source tree (``dashboard/`` at the top of the repository): the
#: default of ``SVC_ADMIN_DIR`` (an explicitly empty value means no bundle: the placeholder page)
DEFAULT_ADMIN_DIR = Path(__file__).resolve().parent.parent / "dashboard"

__all__ = [
    "AdminConfig",
    "BackendSpec",
    "ConfigError",
    "DriftConfig",
    "IngestTransport",
    "LoadBalance",
    "ObjectStoreConfig",
    "SchedulerConfig",
]


class ConfigError(ValueError):
    """The configuration file or an environment variable is invalid (message says which)."""


class LoadBalance(str, Enum):
    """How a new view is assigned to an SSP."""

    ROUND_ROBIN = "round_robin"
    LEAST_QUERIES = "least_queries"
    LEAST_LOAD = "least_load"


class IngestTransport(str, Enum):
    """How row changes reach the scheduler: database events over http, or the changefeed tail."""

    HTTP = "http"
    CHANGEFEED = "changefeed"


@dataclass(frozen=True)
class DriftConfig:
    """Drift detection and repair (the ``SVC_DRIFT_*`` variables)."""

    check: bool = True
    auto_reclone: bool = True  # False: report drift only
    confirm_ticks: int = 2
    reclone_cooldown_secs: int = 3600
    repair_max_rows: int = 2000
    repair_timeout_secs: int = 300
    check_timeout_secs: int = 120


@dataclass(frozen=True)
class AdminConfig:
    """The admin listener (``SVC_ADMIN_*``, ``SVC_CLOUD_*``, ``SVC_PROJECT_SLUG``)."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = 9668
    dir: Path | None = None
    password: str | None = field(default=None, repr=False)  # break-glass; None = disabled
    access: str | None = None
    session_ttl_secs: int = 28800
    presence_interval_secs: int = 15
    slow_view_ms: int = 250
    large_view_rows: int = 1000
    presence_max_rows: int = 20000
    job_interval_secs: int = 15  # 0: job sampler off
    job_live_interval_secs: int = 2  # clamped to no slower than job_interval_secs
    cloud_api_url: str | None = None
    cloud_project: str | None = None
    project_slug: str = "default"
    objstore: ObjectStoreConfig = field(default_factory=ObjectStoreConfig)
    backup_pause_at: str | None = None  # ours, SVC_BACKUP_PAUSE_AT: a crash-test failpoint
    # ours, SVC_SUPERVISED=1: a supervisor (ops/run) relaunches the scheduler when it exits, so
    # `POST /admin/api/scheduler/restart {mode: restart}` may exit the process.
    supervised: bool = False
    # ours, SVC_ADMIN_TRUSTED_PROXIES: addresses whose X-Forwarded-For / X-Forwarded-Proto the
    # admin listener believes (a reverse proxy in front of it); empty: none, the TCP peer is
    # the client (a forged header must not pick the address the login limit counts)
    trusted_proxies: tuple[str, ...] = ()
    # ours, SVC_ADMIN_LOG_LINES: how many of its newest log lines the scheduler keeps for
    # `/admin/api/logs` (memory against history; a viewer that falls further behind sees a gap)
    log_lines: int = 5000


@dataclass(frozen=True)
class BackendSpec:
    """One element of ``SVC_BACKENDS``: a name, an environment (masked), an optional pool."""

    name: str
    environment: Mapping[str, str] = field(default_factory=dict, repr=False)
    run_on_pool: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class SchedulerConfig:
    """Everything the scheduler process is configured with (see the module docstring)."""

    scheduler_id: str
    db: DbConfig
    load_balance: LoadBalance = LoadBalance.LEAST_QUERIES
    heartbeat_interval_ms: int = 5000
    heartbeat_timeout_ms: int = 15000
    bootstrap_chunk_size: int = 1000
    bootstrap_timeout_secs: int = 120
    replica_db_path: Path = Path("scheduler-data/replica.sqlite3")
    wal_path: Path = Path("scheduler-data/wal")
    ingest_host: str = "0.0.0.0"
    ingest_port: int = 9667
    ssp_poll_interval_ms: int = 3000
    max_buffer_per_ssp: int = 10000
    snapshot_update_interval_secs: int = 300
    job_tables: tuple[str, ...] = ()
    impersonation: bool = False
    drift: DriftConfig = field(default_factory=DriftConfig)
    backends: tuple[BackendSpec, ...] = ()
    health_check_interval_secs: int = 15  # SVC_HEALTH_CHECK_INTERVAL_SECS
    job_sweep_secs: int = 30  # ours, SVC_JOB_SWEEP_SECS: the spec's 30 s job recovery sweep
    backend_down_after_secs: int = 60  # ours, SVC_BACKEND_DOWN_AFTER_SECS: "one minute"
    bootstrap_page_size: int = 500
    clear_views_on_start: bool = True
    # ours (SVC_SCHEMA_POLL_SECS, the SSP's variable): how often the schema watch looks for
    # tables hooked upstream since its last look (0: only when a view registers)
    schema_watch_secs: int = 5
    auth_secret: str | None = field(default=None, repr=False)
    ingest_transport: IngestTransport = IngestTransport.HTTP
    # ours (SVC_ROW_VIEWS_PER_USER, as the SSP's): views one identity may hold by
    # `_00_query` rows it created (scheduler.delivery)
    row_views_per_user: int = 100
    pool_port: int = 9669
    admin: AdminConfig = field(default_factory=AdminConfig)
    workflows: WorkflowConfig = field(default_factory=WorkflowConfig)  # scheduler.workflows
    # OpenTelemetry request metrics of both listeners (`ipc.otel`, standard OTEL_* names)
    metrics_exporters: tuple[str, ...] = ()
    metrics_export_interval_ms: int = 60_000
    # ours, SVC_HTTP_READ_TIMEOUT_SECS: a connection of any listener that waits for or reads a
    # request this long is closed (scheduler.serving); the default is the keep-alive time
    http_read_timeout_secs: int = SERVER_KEEPALIVE_SECS
    # ours, SVC_WAL_RETAIN_EVENTS: events the WAL keeps after the replica absorbed them (whole
    # segments go once every event in them is older), so a restarted SSP can start warm from
    # its snapshot's position and be sent only what it missed (`scheduler.ssppool`)
    wal_retain_events: int = 100_000
    # ours, SVC_COMMIT_CHECK: database events' changes read back against what committed
    # (dbclient.commitcheck). Off only to measure what it costs: a transaction that fails
    # after its events posted then leaves its changes in the views.
    commit_check: bool = True

    @property
    def data_dir(self) -> Path:
        """Where the scheduler keeps its files (the replica's directory): incidents, admin
        operations and token revocations live beside the replica."""
        return self.replica_db_path.parent

    @property
    def cloud_linked(self) -> bool:
        """Spec, Authentication 7: linked when the cloud URL, project and auth secret are set."""
        return bool(self.admin.cloud_api_url and self.admin.cloud_project and self.auth_secret)

    @classmethod
    def load(cls, path: Path | None, env: Mapping[str, str]) -> SchedulerConfig:
        """Read the YAML at ``path`` (None: no file, defaults only), then apply ``env``.

        Raises :class:`ConfigError` naming the key path or the variable on any unknown key,
        wrong type, out-of-range value or unreadable file.
        """
        doc: Mapping[str, Any] = {}
        base = Path.cwd()
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(f"cannot read config file {str(path)!r}: {e.strerror}") from None
            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f" at line {mark.line + 1}" if mark is not None else ""
                raise ConfigError(f"config file {str(path)!r} is not valid YAML{where}") from None
            if loaded is None:
                loaded = {}
            if not isinstance(loaded, Mapping):
                raise ConfigError(
                    f"config file {str(path)!r} must be a mapping of keys, got "
                    f"{_kind(loaded)}"
                )
            doc = loaded
            base = Path(path).resolve().parent
        return _build(doc, base, env)


# ----------------------------------------------------------------------------- YAML reading

_TOP_KEYS = frozenset({
    "db", "load_balance", "heartbeat_interval_ms", "heartbeat_timeout_ms",
    "bootstrap_chunk_size", "bootstrap_timeout_secs", "replica_db_path", "wal_path",
    "ingest_host", "ingest_port", "ssp_poll_interval_ms", "max_buffer_per_ssp",
    "snapshot_update_interval_secs", "job_tables",
})
_DB_KEYS = frozenset({"url", "namespace", "database", "username", "password"})
_SECRET_PATHS = frozenset({"db.password"})


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, Mapping):
        return "a mapping"
    return type(v).__name__


def _check_keys(doc: Mapping[Any, Any], allowed: frozenset[str], prefix: str) -> None:
    for key in doc:
        if not isinstance(key, str) or key not in allowed:
            path = f"{prefix}{key}"
            known = ", ".join(sorted(allowed))
            raise ConfigError(f"unknown config key {path!r} (known keys here: {known})")


def _yaml_str(doc: Mapping[str, Any], key: str, prefix: str = "") -> str | None:
    if key not in doc:
        return None
    v = doc[key]
    if not isinstance(v, str):
        path = prefix + key
        shown = "" if path in _SECRET_PATHS else f" ({v!r:.40})"
        raise ConfigError(f"config key {path!r} must be a string, got {_kind(v)}{shown}")
    return v


def _yaml_int(doc: Mapping[str, Any], key: str, default: int, *, minimum: int = 1,
              maximum: int | None = None) -> int:
    if key not in doc:
        return default
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"config key {key!r} must be an integer, got {_kind(v)} ({v!r:.40})")
    _range(v, f"config key {key!r}", minimum, maximum)
    return v


def _range(v: int, what: str, minimum: int, maximum: int | None) -> None:
    if v < minimum or (maximum is not None and v > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise ConfigError(f"{what} must be {bound}, got {v}")


def _chunk_size(doc: Mapping[str, Any]) -> int:
    """`bootstrap_chunk_size`: events per POST /ingest to an SSP (the replay of the events
    buffered during its bootstrap, and every later broadcast batch). The spec's value, 1000,
    is the default and the most: the SSP's batched /ingest takes 1 to INGEST_BATCH_MAX events
    (ipc.routebodies), so a larger value could never be sent and is refused at start."""
    if isinstance(doc.get("bootstrap_chunk_size"), int) and not isinstance(
            doc["bootstrap_chunk_size"], bool) and doc["bootstrap_chunk_size"] > INGEST_BATCH_MAX:
        raise ConfigError(
            f"config key 'bootstrap_chunk_size' must be between 1 and {INGEST_BATCH_MAX}, got "
            f"{doc['bootstrap_chunk_size']}: it is the number of events per POST /ingest to an "
            f"SSP, and an SSP takes at most {INGEST_BATCH_MAX} per batch (table pages of a "
            "bootstrap are SVC_BOOTSTRAP_PAGE_SIZE)")
    return _yaml_int(doc, "bootstrap_chunk_size", INGEST_BATCH_MAX)


def _yaml_path(doc: Mapping[str, Any], key: str, default: Path, base: Path) -> Path:
    text = _yaml_str(doc, key)
    if text is None:
        p = default
    else:
        if not text.strip():
            raise ConfigError(f"config key {key!r} must not be empty")
        p = Path(text).expanduser()
    return p if p.is_absolute() else base / p


# ----------------------------------------------------------------------------- env reading



def _impersonation(env: Mapping[str, str]) -> bool:
    try:
        return parse_flag(env.get("SVC_IMPERSONATION"))  # the SSP reads it the same way
    except FlagError as e:
        raise ConfigError(str(e)) from None


def _env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    return env_bool(env, name, default, error=ConfigError)


def _env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1,
             maximum: int | None = None) -> int:
    return env_int(env, name, default, minimum=minimum, maximum=maximum, error=ConfigError)


def _env_str(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    return raw.strip()


def _env_secret(env: Mapping[str, str], name: str) -> str | None:
    # Secrets are taken verbatim (a password may start or end with a space); empty means unset.
    raw = env.get(name)
    return raw if raw else None


def _parse_backends(raw: str, name: str) -> tuple[BackendSpec, ...]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        # The value may carry credentials in its environment maps: never echo it.
        raise ConfigError(f"{name} is not valid JSON (line {e.lineno}, column {e.colno})") from None
    if not isinstance(doc, list):
        raise ConfigError(f"{name} must be a JSON array of backends, got {_kind(doc)}")
    # The same shape as `PUT /backends` and the SSP's SVC_BACKENDS: one validator for all.
    try:
        parsed = parse_backends(doc)
    except BackendListError as e:
        raise ConfigError(f"{name}: {str(e).replace('backends[', '[')}") from None
    return tuple(BackendSpec(name=b.name, environment=dict(b.env),
                             run_on_pool=b.run_on["pool"] if b.run_on else None, raw=item)
                 for b, item in zip(parsed, doc))


def _db_config(yaml_db: Mapping[str, Any], env: Mapping[str, str]) -> DbConfig:
    merged: dict[str, str] = {}
    pairs = (("url", "SVC_DB_URL"), ("namespace", "SVC_DB_NS"), ("database", "SVC_DB_NAME"),
             ("username", "SVC_DB_USER"), ("password", "SVC_DB_PASS"))
    for key, var in pairs:
        v = _yaml_str(yaml_db, key, "db.")
        if v is not None:
            merged[var] = v
    # The environment wins; SVC_DB_WS is the legacy spelling of SVC_DB_URL.
    if env.get("SVC_DB_URL", "").strip():
        merged["SVC_DB_URL"] = env["SVC_DB_URL"]
    elif env.get("SVC_DB_WS", "").strip():
        merged["SVC_DB_URL"] = env["SVC_DB_WS"]
    for var in ("SVC_DB_NS", "SVC_DB_NAME", "SVC_DB_USER", "SVC_SSP_DB_TIMEOUT_SECS"):
        if env.get(var, "").strip():
            merged[var] = env[var]
    if env.get("SVC_DB_PASS"):
        merged["SVC_DB_PASS"] = env["SVC_DB_PASS"]
    if not merged.get("SVC_DB_URL", "").strip():
        raise ConfigError("the database URL is not set: give db.url in the YAML or SVC_DB_URL")
    try:
        # the scheduler's connections are the service's lane (`dbhost.admission`)
        return dataclasses.replace(DbConfig.from_env(merged), lane=SERVICE_LANE)
    except ValueError as e:
        # DbConfig's messages name the problem without the password.
        raise ConfigError(f"database settings: {e}") from None


def _pause_at(env: Mapping[str, str]) -> str | None:
    try:
        return pause_from_env(env)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _admin_config(env: Mapping[str, str]) -> AdminConfig:
    job_interval = _env_int(env, "SVC_ADMIN_JOB_INTERVAL_SECS", 15, minimum=0)
    live = _env_int(env, "SVC_ADMIN_JOB_LIVE_INTERVAL_SECS", 2)
    if job_interval > 0:
        live = min(live, job_interval)  # the live interval is never slower than the idle one
    admin_dir: Path | None = DEFAULT_ADMIN_DIR
    if "SVC_ADMIN_DIR" in env:  # set, even to nothing: the operator's choice
        raw_dir = _env_str(env, "SVC_ADMIN_DIR")
        admin_dir = Path(raw_dir) if raw_dir else None
    return AdminConfig(
        enabled=_env_bool(env, "SVC_ADMIN_ENABLED", True),
        host=_env_str(env, "SVC_ADMIN_HOST") or "0.0.0.0",
        port=_env_int(env, "SVC_ADMIN_PORT", 9668, maximum=65535),
        dir=admin_dir,
        password=_env_secret(env, "SVC_ADMIN_PASSWORD"),
        access=_env_str(env, "SVC_ADMIN_ACCESS"),
        session_ttl_secs=_env_int(env, "SVC_ADMIN_SESSION_TTL_SECS", 28800),
        presence_interval_secs=_env_int(env, "SVC_ADMIN_PRESENCE_INTERVAL_SECS", 15),
        slow_view_ms=_env_int(env, "SVC_ADMIN_SLOW_VIEW_MS", 250),
        large_view_rows=_env_int(env, "SVC_ADMIN_LARGE_VIEW_ROWS", 1000),
        presence_max_rows=_env_int(env, "SVC_ADMIN_PRESENCE_MAX_ROWS", 20000),
        job_interval_secs=job_interval,
        job_live_interval_secs=live,
        cloud_api_url=_env_str(env, "SVC_CLOUD_API_URL"),
        cloud_project=_env_str(env, "SVC_CLOUD_PROJECT"),
        project_slug=_env_str(env, "SVC_PROJECT_SLUG") or "default",
        objstore=objstore_from_env(env),  # one parser, shared with the SSP
        backup_pause_at=_pause_at(env),
        supervised=_env_bool(env, "SVC_SUPERVISED", False),
        trusted_proxies=tuple(a.strip() for a in
                              (_env_str(env, "SVC_ADMIN_TRUSTED_PROXIES") or "").split(",")
                              if a.strip()),
        log_lines=_env_int(env, "SVC_ADMIN_LOG_LINES", 5000, minimum=100),
    )


def _service_project(env: Mapping[str, str]) -> Project | None:
    """The project file named by ``SVC_PROJECT_FILE`` (None without the variable)."""
    if not (env.get("SVC_PROJECT_FILE") or "").strip():
        return None
    from project.rootconfig import ProjectInvalid
    from project.service import load_service_project

    try:
        return load_service_project(env)
    except ProjectInvalid as e:
        raise ConfigError(f"SVC_PROJECT_FILE: {e}") from None


def _build(doc: Mapping[str, Any], base: Path, env: Mapping[str, str]) -> SchedulerConfig:
    _check_keys(doc, _TOP_KEYS, "")
    project = _service_project(env)
    # the root file's sync.transport is the default of SVC_INGEST_TRANSPORT (project.service)
    if project is not None:
        from project.service import with_project_defaults

        env = with_project_defaults(env, project)
    yaml_db = doc.get("db", {})
    if yaml_db is None:
        yaml_db = {}
    if not isinstance(yaml_db, Mapping):
        raise ConfigError(f"config key 'db' must be a mapping, got {_kind(yaml_db)}")
    _check_keys(yaml_db, _DB_KEYS, "db.")

    lb_text = _yaml_str(doc, "load_balance")
    if lb_text is None:
        lb = LoadBalance.LEAST_QUERIES
    else:
        try:
            lb = LoadBalance(lb_text)
        except ValueError:
            choices = ", ".join(m.value for m in LoadBalance)
            raise ConfigError(
                f"config key 'load_balance' must be one of {choices}, got {lb_text!r}"
            ) from None

    job_tables_raw = doc.get("job_tables", [])
    if job_tables_raw is None:
        job_tables_raw = []
    if not isinstance(job_tables_raw, list):
        raise ConfigError(f"config key 'job_tables' must be a list of strings, got "
                          f"{_kind(job_tables_raw)}")
    for i, t in enumerate(job_tables_raw):
        if not isinstance(t, str) or not t:
            raise ConfigError(f"config key 'job_tables[{i}]' must be a non-empty string, got "
                              f"{_kind(t)}")

    if project is not None:
        from project.jobwiring import scheduler_job_tables

        job_tables_raw = [*job_tables_raw, *scheduler_job_tables(project)]
    job_tables_raw = list(dict.fromkeys(job_tables_raw))

    ingest_host = _yaml_str(doc, "ingest_host")
    if ingest_host is not None and not ingest_host.strip():
        raise ConfigError("config key 'ingest_host' must not be empty")

    snapshot_interval = _yaml_int(doc, "snapshot_update_interval_secs", 300)
    snapshot_interval = _env_int(env, "SVC_SNAPSHOT_UPDATE_INTERVAL_SECS", snapshot_interval)

    backends_raw = env.get("SVC_BACKENDS") or env.get("SVC_SCHEDULER_BACKENDS")
    backends_var = "SVC_BACKENDS" if env.get("SVC_BACKENDS") else "SVC_SCHEDULER_BACKENDS"
    backends = _parse_backends(backends_raw, backends_var) if backends_raw else ()

    try:
        metrics_exporters = otel.metrics_exporters(env)
        export_interval = otel.export_interval_ms(env)
    except otel.OtelConfigError as e:
        raise ConfigError(str(e)) from None

    try:  # the one rule of ipc.transport (spec default `http`), shared with the SSP and CLI
        transport = IngestTransport(ingest_transport(env))
    except TransportError as e:
        raise ConfigError(str(e)) from None

    heartbeat_interval = _yaml_int(doc, "heartbeat_interval_ms", 5000)
    heartbeat_timeout = _yaml_int(doc, "heartbeat_timeout_ms", 15000)
    if heartbeat_timeout <= heartbeat_interval:
        # An SSP would be declared dead between two of its own heartbeats.
        raise ConfigError(
            f"config key 'heartbeat_timeout_ms' ({heartbeat_timeout}) must be greater than "
            f"'heartbeat_interval_ms' ({heartbeat_interval})"
        )

    return SchedulerConfig(
        scheduler_id=_env_str(env, "SVC_SCHEDULER_ID") or f"scheduler-{uuid.uuid4()}",
        db=_db_config(yaml_db, env),
        load_balance=lb,
        heartbeat_interval_ms=heartbeat_interval,
        heartbeat_timeout_ms=heartbeat_timeout,
        bootstrap_chunk_size=_chunk_size(doc),
        bootstrap_timeout_secs=_yaml_int(doc, "bootstrap_timeout_secs", 120),
        replica_db_path=_yaml_path(doc, "replica_db_path",
                                   Path("scheduler-data/replica.sqlite3"), base),
        wal_path=_yaml_path(doc, "wal_path", Path("scheduler-data/wal"), base),
        ingest_host=ingest_host.strip() if ingest_host is not None else "0.0.0.0",
        ingest_port=_yaml_int(doc, "ingest_port", 9667, maximum=65535),
        ssp_poll_interval_ms=_yaml_int(doc, "ssp_poll_interval_ms", 3000),
        max_buffer_per_ssp=_yaml_int(doc, "max_buffer_per_ssp", 10000),
        snapshot_update_interval_secs=snapshot_interval,
        job_tables=tuple(job_tables_raw),
        impersonation=_impersonation(env),
        drift=DriftConfig(
            check=_env_bool(env, "SVC_DRIFT_CHECK", True),
            auto_reclone=_env_bool(env, "SVC_DRIFT_AUTO_RECLONE", True),
            confirm_ticks=_env_int(env, "SVC_DRIFT_CONFIRM_TICKS", 2),
            reclone_cooldown_secs=_env_int(env, "SVC_DRIFT_RECLONE_COOLDOWN_SECS", 3600,
                                           minimum=0),
            repair_max_rows=_env_int(env, "SVC_DRIFT_REPAIR_MAX_ROWS", 2000, minimum=0),
            repair_timeout_secs=_env_int(env, "SVC_DRIFT_REPAIR_TIMEOUT_SECS", 300),
            check_timeout_secs=_env_int(env, "SVC_DRIFT_CHECK_TIMEOUT_SECS", 120),
        ),
        backends=backends,
        health_check_interval_secs=_env_int(env, "SVC_HEALTH_CHECK_INTERVAL_SECS", 15),
        job_sweep_secs=_env_int(env, "SVC_JOB_SWEEP_SECS", 30),
        backend_down_after_secs=_env_int(env, "SVC_BACKEND_DOWN_AFTER_SECS", 60),
        bootstrap_page_size=_env_int(env, "SVC_BOOTSTRAP_PAGE_SIZE", 500),
        clear_views_on_start=_env_bool(env, "SVC_CLEAR_VIEWS_ON_START", True),
        schema_watch_secs=_env_int(env, "SVC_SCHEMA_POLL_SECS", 5, minimum=0),
        auth_secret=_env_secret(env, "SVC_AUTH_SECRET"),
        ingest_transport=transport,
        row_views_per_user=_env_int(env, "SVC_ROW_VIEWS_PER_USER", 100),
        pool_port=_env_int(env, "SVC_POOL_PORT", 9669, maximum=65535),
        admin=_admin_config(env),
        workflows=WorkflowConfig(
            enabled=_env_bool(env, "SVC_WORKFLOWS_ENABLED", True),
            poll_ms=_env_int(env, "SVC_WORKFLOW_POLL_MS", 1000, minimum=10),
            definitions_poll_secs=_env_int(env, "SVC_WORKFLOW_DEFINITIONS_POLL_SECS", 5),
            dispatch_timeout_secs=_env_int(env, "SVC_WORKFLOW_DISPATCH_TIMEOUT_SECS", 3600,
                                           minimum=0),
            retention_days=_env_int(env, "SVC_WORKFLOW_RETENTION_DAYS", 30),
        ),
        metrics_exporters=metrics_exporters,
        metrics_export_interval_ms=export_interval,
        http_read_timeout_secs=_env_int(env, "SVC_HTTP_READ_TIMEOUT_SECS", SERVER_KEEPALIVE_SECS),
        wal_retain_events=_env_int(env, "SVC_WAL_RETAIN_EVENTS", 100_000, minimum=0),
        commit_check=_env_bool(env, "SVC_COMMIT_CHECK", True),
    )
