"""Machine pool configuration, read once from the environment at start.

* ``SVC_BACKENDS``: a backend with ``run_on: {pool: <name>}`` has its jobs run on that pool. Its
  job table is the ``SVC_JOB_CONFIG`` entry keyed by the backend's name (the SSPs leave that
  table alone: ``ssp.config``; both read it through ``jobs.tables``).
* ``SVC_POOLS`` (ours; the spec names no sizing keys): a JSON object ``{<pool>: {provider,
  slots, min_machines, max_machines, boot_timeout_secs, idle_secs, breaker_failures,
  breaker_cooldown_secs, command}}``, every key optional. A pool named by a backend but absent
  here gets the defaults of :class:`PoolSpec`.
* ``SVC_POOL_HOST`` (0.0.0.0), ``SVC_POOL_PORT`` (9669): the pool listener;
  ``SVC_POOL_HEARTBEAT_MS`` (1000) how often agents heartbeat; ``SVC_POOL_MACHINE_TIMEOUT_MS``
  (10000) silence after which a machine is ``lost``; ``SVC_POOL_TICK_MS`` (500) the reconcile
  cadence; ``SVC_POOL_URL`` the address agents are given (default
  ``http://127.0.0.1:<port>``, right for the local provider).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ipc.envvars import env_int, env_json
from jobs.tables import JobConfigError, JobTable, parse_job_tables
from maintenance.backends import BackendListError, parse_backends
from scheduler.config import ConfigError

PROVIDERS = ("local",)
_INT_KEYS = {"slots": 1, "min_machines": 0, "max_machines": 1, "boot_timeout_secs": 1,
             "idle_secs": 1, "breaker_failures": 1, "breaker_cooldown_secs": 1}


@dataclass(frozen=True)
class PoolSpec:
    """One pool's sizing and provider."""

    name: str
    provider: str = "local"
    slots: int = 2  # jobs one machine runs at once
    min_machines: int = 0
    max_machines: int = 2
    boot_timeout_secs: int = 30  # booting -> registered, else a boot failure
    idle_secs: int = 60  # a ready machine without jobs this long is drained (above min)
    breaker_failures: int = 3  # consecutive boot failures that open the breaker
    breaker_cooldown_secs: int = 60  # open breaker: no boot for this long, then one trial
    # local provider: the agent command (default: this interpreter, -m scheduler.pools.agent)
    command: tuple[str, ...] | None = None
    tables: tuple[JobTable, ...] = field(default=(), repr=False)

    def public(self) -> dict[str, Any]:
        return {"provider": self.provider, "slots": self.slots,
                "min_machines": self.min_machines, "max_machines": self.max_machines,
                "boot_timeout_secs": self.boot_timeout_secs, "idle_secs": self.idle_secs,
                "breaker_failures": self.breaker_failures,
                "breaker_cooldown_secs": self.breaker_cooldown_secs,
                "tables": [t.name for t in self.tables]}


@dataclass(frozen=True)
class PoolsConfig:
    """Every pool, the listener and the timings."""

    pools: tuple[PoolSpec, ...] = ()
    host: str = "0.0.0.0"
    port: int = 9669
    public_url: str | None = None
    heartbeat_ms: int = 1000
    machine_timeout_ms: int = 10000
    tick_ms: int = 500

    @property
    def agent_url(self) -> str:
        return self.public_url or f"http://127.0.0.1:{self.port}"

    def pool(self, name: str) -> PoolSpec | None:
        return next((p for p in self.pools if p.name == name), None)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PoolsConfig:
        """ConfigError names the variable and key at fault (never a secret value)."""
        try:
            jobs = {j.key: j for j in parse_job_tables(env)}
        except JobConfigError as e:
            raise ConfigError(str(e)) from None
        raw_backends = env_json(env, "SVC_BACKENDS", [], error=ConfigError)
        try:
            backends = parse_backends(raw_backends)
        except BackendListError as e:
            raise ConfigError(f"SVC_BACKENDS: {e}") from None
        raw_pools = env_json(env, "SVC_POOLS", {}, error=ConfigError)
        if not isinstance(raw_pools, dict):
            raise ConfigError("SVC_POOLS must be a JSON object {<pool>: {...}}")
        tables: dict[str, list[JobTable]] = {}
        for b in backends:
            if not b.run_on:
                continue
            pool = b.run_on["pool"]
            tables.setdefault(pool, [])
            if b.name in jobs:
                tables[pool].append(jobs[b.name])
        names = sorted(set(tables) | set(raw_pools))
        pools = tuple(_pool(n, raw_pools.get(n) or {}, tuple(tables.get(n, ()))) for n in names)
        return cls(pools=pools, host=env.get("SVC_POOL_HOST", "").strip() or "0.0.0.0",
                   port=_int(env, "SVC_POOL_PORT", 9669, 1, 65535),
                   public_url=env.get("SVC_POOL_URL", "").strip() or None,
                   heartbeat_ms=_int(env, "SVC_POOL_HEARTBEAT_MS", 1000, 50, 600_000),
                   machine_timeout_ms=_int(env, "SVC_POOL_MACHINE_TIMEOUT_MS", 10000, 100,
                                           3_600_000),
                   tick_ms=_int(env, "SVC_POOL_TICK_MS", 500, 20, 60_000))


def _pool(name: str, raw: Any, tables: tuple[JobTable, ...]) -> PoolSpec:
    where = f"SVC_POOLS.{name[:80]}"
    if not name or len(name) > 64 or not all(c.isalnum() or c in "-_" for c in name):
        raise ConfigError(f"{where}: a pool name is 1-64 letters, digits, '-' or '_'")
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be an object")
    unknown = sorted(set(raw) - set(_INT_KEYS) - {"provider", "command"})
    if unknown:
        raise ConfigError(f"{where} has unknown keys: {', '.join(unknown)[:200]}")
    kw: dict[str, Any] = {}
    for key, minimum in _INT_KEYS.items():
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ConfigError(f"{where}.{key} must be an integer >= {minimum}")
            kw[key] = v
    provider = raw.get("provider", "local")
    if provider not in PROVIDERS:
        raise ConfigError(f"{where}.provider must be one of {', '.join(PROVIDERS)}")
    command = raw.get("command")
    if command is not None:
        if not isinstance(command, list) or not command or not all(
                isinstance(c, str) and c for c in command):
            raise ConfigError(f"{where}.command must be a non-empty array of strings")
        kw["command"] = tuple(command)
    spec = PoolSpec(name=name, provider=provider, tables=tables, **kw)
    if spec.max_machines < spec.min_machines:
        raise ConfigError(f"{where}: max_machines is below min_machines")
    return spec


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    return env_int(env, name, default, minimum=lo, maximum=hi, error=ConfigError)
