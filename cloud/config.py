"""The control plane's settings, read once per process from the environment
(:meth:`CloudConfig.from_env`); nothing else in ``cloud`` reads ``os.environ``.

| variable | default | meaning |
|---|---|---|
| ``SVC_CLOUD_BIND`` | ``127.0.0.1:9680`` | listen address (``{cloud_api_url}``) |
| ``SVC_CLOUD_WORKERS`` | 1 | gunicorn workers (state lives in the database) |
| ``SVC_CLOUD_DB_URL`` | ``SVC_DB_URL`` | any SurrealDB URL (the embedded host in development) |
| ``SVC_CLOUD_DB_USER`` / ``_PASS`` | ``SVC_DB_USER`` / ``SVC_DB_PASS`` | its credentials |
| ``SVC_CLOUD_DB_NS`` / ``SVC_CLOUD_DB_NAME`` | ``svc_cloud`` / ``control`` | where the state lives |
| ``SVC_CLOUD_KEYRING`` | required | ``id:base64key[,...]``, first primary (``cloud.crypto``) |
| ``SVC_CLOUD_FINGERPRINT_KEY`` | required | base64, >= 32 bytes: fingerprints and cursors |
| ``SVC_CLOUD_SIGNUP`` | ``open`` | ``closed``: only existing users sign in |
| ``SVC_CLOUD_SESSION_TTL_SECS`` | 2592000 | CLI session lifetime (30 days) |
| ``SVC_CLOUD_DNS_RESOLVER`` | the system's | ``host[:port][,host[:port]]`` used to verify domains |
| ``SVC_CLOUD_REPO_POLL_SECS`` | 30 | repo link poll interval; 0 turns polling off |
| ``SVC_CLOUD_LOCAL_REPOS`` | false | allow ``file://`` and absolute-path repositories |
| ``SVC_CLOUD_USAGE_SAMPLE_SECS`` | 3600 | storage samples and rollups; 0 turns them off |
| ``SVC_CLOUD_USAGE_FLUSH_SECS`` | 10 | how often request counts reach the ledger |
| ``SVC_CLOUD_PROJECT_RETENTION_DAYS`` | 7 | a deleted project can be restored this long |
| ``SVC_CLOUD_LIMITS`` | built-in | JSON object overriding the default per-tenant limits |
| ``SVC_CLOUD_PRICES`` | none | JSON ``{currency, <metric>: unit price}``: amounts in usage |
| ``SVC_CLOUD_PUBLIC_URL`` | ``http://<bind>`` | the URL deployed schedulers reach the platform at |
| ``SVC_CLOUD_RUN_DIR`` | ``$TMPDIR/svc-cloud-<port>-deployments`` | deployments' working directories |
| ``SVC_CLOUD_DEPLOY_TICK_SECS`` | 0.5 | how often the reconcile worker looks for work |
| ``SVC_CLOUD_BACKUP_TICK_SECS`` | 30 | how often the worker looks for projects whose scheduled backup is due (``cloud.backupsched``); 0 turns scheduled backups off |
| ``SVC_CLOUD_RELAUNCH_BACKOFF_SECS`` | 1 | the first wait before an exited instance is relaunched (then doubled: 1, 2, 4 s) |
| ``SVC_CLOUD_EXECUTOR`` | ``local`` | ``local`` processes; ``docker``: containers (``cloud.docker_executor``); ``none``: no reconcile worker (a control plane only: deployments stay queued, repo commits ``new``) |
| ``SVC_CLOUD_DOCKER_HOST`` | ``DOCKER_HOST`` | the Docker daemon of ``docker`` (else the SDK's default socket) |
| ``SVC_CLOUD_DOCKER_IMAGE`` | ``svc-hostroot:1`` | the containers' image (the default is imported from a tarball with no file, made in memory) |
| ``SVC_CLOUD_DOCKER_MEMORY_MB`` / ``_CPUS`` | 2048 / 1 | a container's limits unless its role sets its own |
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cloud.crypto import KeyRing, KeyRingError
from cloud.docker_executor import DockerSettings
from dbclient import DbConfig
from dbclient.config import normalise_db_url
from ipc.envvars import env_bool, env_int, env_json, host_port

__all__ = ["DEFAULT_LIMITS", "METRICS", "CloudConfig", "ConfigError", "PriceList"]

DEFAULT_BIND = "127.0.0.1:9680"

#: per-tenant limits (``SVC_CLOUD_LIMITS`` overrides any of them, ``limits_set`` per tenant)
DEFAULT_LIMITS: dict[str, int] = {
    "projects": 20,
    "members": 50,
    "env_vars_per_project": 1000,
    "vault_secrets_per_project": 500,
    "domains_per_project": 20,
    "links_per_project": 5,
    "tokens_per_user": 50,
}

#: usage metrics: unit and whether this release measures them
METRICS: dict[str, str] = {
    "machine_seconds": "s",
    "storage_gb_hours": "GB-h",
    "egress_bytes": "B",
    "api_requests": "requests",
}


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable, never its value
    when it is a secret."""


@dataclass(frozen=True)
class PriceList:
    currency: str
    unit_prices: dict[str, float]


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    return env_int(env, name, default, minimum=minimum, error=ConfigError)


def _secs(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {text[:40]!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ConfigError(f"{name} must be >= 0, got {text[:40]!r}")
    return v


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    return env_bool(env, name, default, error=ConfigError)


def _json_object(env: Mapping[str, str], name: str) -> dict[str, Any] | None:
    doc = env_json(env, name, None, error=ConfigError)
    if doc is not None and not isinstance(doc, dict):
        raise ConfigError(f"{name} must be a JSON object")
    return doc


def _limits(env: Mapping[str, str]) -> dict[str, int]:
    out = dict(DEFAULT_LIMITS)
    for k, v in (_json_object(env, "SVC_CLOUD_LIMITS") or {}).items():
        if k not in DEFAULT_LIMITS:
            raise ConfigError(f"SVC_CLOUD_LIMITS: unknown limit {k[:40]!r} (known: "
                              f"{', '.join(DEFAULT_LIMITS)})")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"SVC_CLOUD_LIMITS.{k} must be an integer >= 0")
        out[k] = v
    return out


def _prices(env: Mapping[str, str]) -> PriceList | None:
    doc = _json_object(env, "SVC_CLOUD_PRICES")
    if doc is None:
        return None
    currency = doc.pop("currency", None)
    if not isinstance(currency, str) or not currency.strip():
        raise ConfigError("SVC_CLOUD_PRICES.currency is required (e.g. \"USD\")")
    prices: dict[str, float] = {}
    for k, v in doc.items():
        if k not in METRICS:
            raise ConfigError(f"SVC_CLOUD_PRICES: unknown metric {k[:40]!r} (known: "
                              f"{', '.join(METRICS)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v < 0:
            raise ConfigError(f"SVC_CLOUD_PRICES.{k} must be a number >= 0")
        prices[k] = float(v)
    return PriceList(currency.strip(), prices)


def _docker(env: Mapping[str, str]) -> DockerSettings:
    try:
        return DockerSettings.from_env(env)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _executor(env: Mapping[str, str]) -> str:
    name = env.get("SVC_CLOUD_EXECUTOR", "").strip().lower() or "local"
    if name not in ("local", "docker", "none"):
        raise ConfigError(f"SVC_CLOUD_EXECUTOR must be local, docker or none, got "
                          f"{name[:20]!r}")
    return name


@dataclass(frozen=True)
class CloudConfig:
    host: str
    port: int
    workers: int
    db: DbConfig
    keyring: KeyRing = field(repr=False)
    server_key: bytes = field(repr=False)
    signup_open: bool = True
    session_ttl_secs: int = 30 * 86400
    dns_resolvers: tuple[tuple[str, int], ...] = ()
    repo_poll_secs: float = 30.0
    local_repos: bool = False
    usage_sample_secs: float = 3600.0
    usage_flush_secs: float = 10.0
    project_retention_days: int = 7
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    prices: PriceList | None = None
    public_url: str = ""
    run_dir: str = ""
    deploy_tick_secs: float = 0.5
    relaunch_backoff_secs: float = 1.0
    backup_tick_secs: float = 30.0
    executor: str = "local"
    docker: DockerSettings = field(default_factory=DockerSettings)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def link_url(self) -> str:
        """Where a deployed scheduler reaches the platform (``SVC_CLOUD_API_URL``)."""
        return self.public_url or self.url

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> CloudConfig:
        host, port = host_port(env.get("SVC_CLOUD_BIND", "") or DEFAULT_BIND,
                               "SVC_CLOUD_BIND", default_port=9680, error=ConfigError)
        raw_url = env.get("SVC_CLOUD_DB_URL") or env.get("SVC_DB_URL") or ""
        if not raw_url.strip():
            raise ConfigError("SVC_CLOUD_DB_URL (or SVC_DB_URL) is not set: the control plane "
                              "keeps its state in SurrealDB")
        try:
            url = normalise_db_url(raw_url)
        except ValueError as e:
            raise ConfigError(f"SVC_CLOUD_DB_URL: {e}") from None
        db = DbConfig(
            url=url,
            user=(env.get("SVC_CLOUD_DB_USER") or env.get("SVC_DB_USER") or "root").strip(),
            password=env.get("SVC_CLOUD_DB_PASS") or env.get("SVC_DB_PASS") or "",
            namespace=env.get("SVC_CLOUD_DB_NS", "").strip() or "svc_cloud",
            database=env.get("SVC_CLOUD_DB_NAME", "").strip() or "control",
        )
        ring_text = env.get("SVC_CLOUD_KEYRING", "")
        if not ring_text.strip():
            raise ConfigError("SVC_CLOUD_KEYRING is not set: the vault's key ring, "
                              "id:base64key[,...] (`svc cloud keyring new` makes one); it is "
                              "never derived from SVC_AUTH_SECRET")
        try:
            ring = KeyRing.parse(ring_text)
        except KeyRingError as e:
            raise ConfigError(f"SVC_CLOUD_KEYRING: {e}") from None
        fp_text = env.get("SVC_CLOUD_FINGERPRINT_KEY", "").strip()
        if not fp_text:
            raise ConfigError("SVC_CLOUD_FINGERPRINT_KEY is not set (base64, at least 32 "
                              "bytes): the key of secret fingerprints and list cursors")
        try:
            server_key = base64.b64decode(fp_text, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError("SVC_CLOUD_FINGERPRINT_KEY is not base64") from None
        if len(server_key) < 32:
            raise ConfigError("SVC_CLOUD_FINGERPRINT_KEY must be at least 32 bytes")
        signup = env.get("SVC_CLOUD_SIGNUP", "").strip().lower() or "open"
        if signup not in ("open", "closed"):
            raise ConfigError(f"SVC_CLOUD_SIGNUP must be open or closed, got {signup[:20]!r}")
        resolvers = tuple(host_port(p, "SVC_CLOUD_DNS_RESOLVER", default_port=53,
                                    error=ConfigError)
                          for p in env.get("SVC_CLOUD_DNS_RESOLVER", "").split(",")
                          if p.strip())
        return cls(
            host=host, port=port,
            workers=_int(env, "SVC_CLOUD_WORKERS", 1, minimum=1),
            db=db, keyring=ring, server_key=server_key,
            signup_open=signup == "open",
            session_ttl_secs=_int(env, "SVC_CLOUD_SESSION_TTL_SECS", 30 * 86400, minimum=60),
            dns_resolvers=resolvers,
            repo_poll_secs=_secs(env, "SVC_CLOUD_REPO_POLL_SECS", 30.0),
            local_repos=_flag(env, "SVC_CLOUD_LOCAL_REPOS", False),
            usage_sample_secs=_secs(env, "SVC_CLOUD_USAGE_SAMPLE_SECS", 3600.0),
            usage_flush_secs=_secs(env, "SVC_CLOUD_USAGE_FLUSH_SECS", 10.0) or 10.0,
            project_retention_days=_int(env, "SVC_CLOUD_PROJECT_RETENTION_DAYS", 7),
            limits=_limits(env), prices=_prices(env),
            public_url=env.get("SVC_CLOUD_PUBLIC_URL", "").strip().rstrip("/"),
            run_dir=env.get("SVC_CLOUD_RUN_DIR", "").strip(),
            deploy_tick_secs=_secs(env, "SVC_CLOUD_DEPLOY_TICK_SECS", 0.5) or 0.5,
            relaunch_backoff_secs=_secs(env, "SVC_CLOUD_RELAUNCH_BACKOFF_SECS", 1.0),
            backup_tick_secs=_secs(env, "SVC_CLOUD_BACKUP_TICK_SECS", 30.0),
            executor=_executor(env),
            docker=_docker(env),
        )
