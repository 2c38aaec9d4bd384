"""Machine pool configuration (`scheduler.pools.config`), the SSP leaving pooled job tables
alone (`ssp.config`), the pool MCP tools' requests and the breaker/sizing rules of
`PoolService` on its own (no database call is made by the parts tested here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.admin.mcptools import tool_named
from scheduler.config import ConfigError
from scheduler.incidents import IncidentStore
from scheduler.pools.config import PoolsConfig
from scheduler.pools.provider import BootError
from scheduler.pools.service import PoolService
from ssp.config import SspConfig

TOKEN = "pool-unit-token-1f2e3d"
JOBS = json.dumps({"job_tables": {
    "worker": {"name": "pjob", "base_url": "http://127.0.0.1:1", "auth_token": TOKEN},
    "other": {"name": "ojob", "base_url": "http://127.0.0.1:1", "auth_token": TOKEN}}})
BACKENDS = json.dumps([{"name": "worker", "run_on": {"pool": "gpu"}}, {"name": "other"}])


def test_pools_come_from_run_on_backends_with_defaults_and_overrides() -> None:
    cfg = PoolsConfig.from_env({"SVC_JOB_CONFIG": JOBS, "SVC_BACKENDS": BACKENDS,
                                "SVC_POOLS": json.dumps({"cpu": {"slots": 4}}),
                                "SVC_POOL_PORT": "9700"})
    assert [p.name for p in cfg.pools] == ["cpu", "gpu"]
    gpu = cfg.pool("gpu")
    assert gpu is not None and [t.name for t in gpu.tables] == ["pjob"]
    assert (gpu.slots, gpu.max_machines, gpu.provider) == (2, 2, "local")
    cpu = cfg.pool("cpu")
    assert cpu is not None and cpu.slots == 4 and cpu.tables == ()
    assert cfg.agent_url == "http://127.0.0.1:9700"
    assert PoolsConfig.from_env({}).pools == ()


@pytest.mark.parametrize("env, needle", [
    ({"SVC_POOLS": "[1]"}, "SVC_POOLS must be a JSON object"),
    ({"SVC_POOLS": "{"}, "SVC_POOLS is not valid JSON"),
    ({"SVC_POOLS": json.dumps({"p": {"slots": 0}})}, "SVC_POOLS.p.slots must be an integer >= 1"),
    ({"SVC_POOLS": json.dumps({"p": {"slots": True}})}, "SVC_POOLS.p.slots"),
    ({"SVC_POOLS": json.dumps({"p": {"sizes": 1}})}, "unknown keys: sizes"),
    ({"SVC_POOLS": json.dumps({"p": {"provider": "aws"}})}, "provider must be one of local"),
    ({"SVC_POOLS": json.dumps({"p": {"command": []}})}, "command must be a non-empty array"),
    ({"SVC_POOLS": json.dumps({"p q": {}})}, "a pool name is"),
    ({"SVC_POOLS": json.dumps({"p": {"min_machines": 3, "max_machines": 1}})},
     "max_machines is below min_machines"),
    ({"SVC_POOL_PORT": "0"}, "SVC_POOL_PORT must be between"),
    ({"SVC_POOL_HEARTBEAT_MS": "x"}, "SVC_POOL_HEARTBEAT_MS must be an integer"),
    ({"SVC_JOB_CONFIG": json.dumps({"job_tables": {"w": {"name": "a b", "base_url": "x"}}})},
     "must be a table name"),
    ({"SVC_BACKENDS": json.dumps([{"name": "w", "run_on": {"pool": 1}}])}, "run_on must be"),
])
def test_bad_pool_settings_are_refused_by_name(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        PoolsConfig.from_env(env)
    assert needle in str(e.value)
    assert TOKEN not in str(e.value)


def test_the_ssp_leaves_pooled_job_tables_to_the_pool() -> None:
    env = {"SVC_DB_URL": "ws://127.0.0.1:1/rpc", "SVC_DB_USER": "u", "SVC_DB_PASS": "p",
           "SVC_DB_NS": "n", "SVC_DB_NAME": "d", "SVC_JOB_CONFIG": JOBS}
    assert [t.name for t in SspConfig.from_env(env).job_tables] == ["pjob", "ojob"]
    pooled = SspConfig.from_env({**env, "SVC_BACKENDS": BACKENDS})
    assert [t.name for t in pooled.job_tables] == ["ojob"]


def test_pool_tools_call_their_routes() -> None:
    calls = {n: tool_named(n) for n in ("pools_list", "pool_machines", "pool_pause",
                                         "pool_resume", "machine_drain")}
    assert all(t is not None for t in calls.values())
    got = {n: (t.kind, t.request({"name": "g/1", "machine_id": "m 1"}).method,  # type: ignore
               t.request({"name": "g/1", "machine_id": "m 1"}).path)  # type: ignore
           for n, t in calls.items()}
    assert got == {"pools_list": ("read", "GET", "/pools"),
                   "pool_machines": ("read", "GET", "/pools/g%2F1/machines"),
                   "pool_pause": ("write", "POST", "/pools/g%2F1/pause"),
                   "pool_resume": ("write", "POST", "/pools/g%2F1/resume"),
                   "machine_drain": ("destructive", "POST", "/machines/m%201/drain")}
    assert calls["machine_drain"].input_schema()["required"] == ["machine_id"]  # type: ignore


class _FailingProvider:
    """Every boot fails at once (as a provider that cannot start a machine)."""

    def __init__(self) -> None:
        self.boots = 0

    def boot(self, *a: Any, **kw: Any) -> dict[str, Any]:
        self.boots += 1
        raise BootError("no capacity")

    def alive(self, ref: dict[str, Any]) -> bool | None:
        return None

    def exit_code(self, ref: dict[str, Any]) -> int | None:
        return None

    def destroy(self, ref: dict[str, Any], *, force: bool = False) -> None:
        pass

    async def stop_all(self, timeout: float = 10.0) -> None:
        pass


def test_breaker_opens_after_the_configured_failures_and_holds_boots(tmp_path: Path) -> None:
    cfg = PoolsConfig.from_env({"SVC_POOLS": json.dumps({"p": {
        "breaker_failures": 2, "breaker_cooldown_secs": 3600, "max_machines": 1}})})
    incidents = IncidentStore(tmp_path)
    provider = _FailingProvider()
    svc = PoolService(cfg, None, tmp_path, incidents,  # type: ignore[arg-type]
                      providers={"local": provider})
    # start() without its database connect and loop: the sizing rules alone
    from scheduler.pools.fleet import Pool
    from scheduler.pools.store import PoolState
    svc.pools["p"] = Pool(cfg.pools[0], PoolState("p"), provider)  # type: ignore[arg-type]
    pool = svc.pools["p"]
    pool.waiting = 1
    svc.sizer.size(pool)
    assert pool.state.breaker["state"] == "closed" and provider.boots == 1
    svc.sizer.size(pool)
    b = pool.state.breaker
    assert b["state"] == "open" and provider.boots == 2 and b["last_error"] == "no capacity"
    for _ in range(3):
        svc.sizer.size(pool)  # open: no further boot during the cooldown
    assert provider.boots == 2
    assert svc.status_of(pool) == "unhealthy"
    inc = incidents.get(b["incident_id"])
    assert inc is not None and inc["kind"] == "pool_breaker_open" and inc["state"] == "open"
    assert inc["component"] == "pool:p"
    assert [m["state"] for m in svc.list_machines("p")] == ["failed", "failed"]
    # persisted: a new service over the same directory sees the open breaker
    again = PoolService(cfg, None, tmp_path, incidents)  # type: ignore[arg-type]
    assert again.store.pools()["p"].breaker["state"] == "open"
    svc.store.close()
    again.store.close()
    incidents.shutdown()
