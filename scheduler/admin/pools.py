"""Admin routes of the machine pools (their MCP tools: ``pooltools.py``) (``scheduler.pools``).

| route | answer |
|---|---|
| ``GET /admin/api/pools`` | ``{pools: [{name, status, sizing, paused, paused_at, breaker, machines (count by state), busy_slots, total_slots, jobs_waiting, last_sweep_error}], server_time_ms}`` |
| ``GET /admin/api/pools/{name}/machines`` | ``{pool, machines}`` newest first, terminal ones included (``state, slots, slots_in_use, jobs, last_contact_at, removal_reason`` ...) |
| ``POST /admin/api/pools/{name}/pause``, ``/resume`` | ``{pool}``: paused, no machine boots and no job is handed out; running jobs finish; kept across restarts |
| ``POST /admin/api/machines/{id}/drain`` | ``{machine}``: takes no new job, finishes its jobs, then is destroyed; 409 when already terminal |

Without any pool configured there is no pool: the list is empty, and every pool or machine
named is unknown (404), as it is with pools configured.
"""

from __future__ import annotations

from typing import Any

import falcon.asgi

from dbclient.clock import now_ms
from scheduler.admin.errors import Conflict, Invalid, NotFound
from scheduler.pools.service import PoolError, PoolService

__all__ = ["pool_routes"]

PATH_MAX = 300


def _service(plane: Any, what: str) -> PoolService:
    """The pool service; without one, ``what`` (the pool or machine named) is unknown."""
    s = getattr(plane, "pools", None)
    if s is None:
        raise NotFound(f"{what}: unknown (no machine pool is configured: SVC_POOLS, or a "
                       "backend with run_on)")
    return s


def _param(value: str, what: str) -> str:
    if not value or len(value) > PATH_MAX or "\x00" in value:
        raise Invalid(f"{what}: 1 to {PATH_MAX} characters")
    return value


def _relay(e: PoolError) -> Exception:
    if e.status == 404:
        return NotFound(e.message)
    if e.status == 409:
        return Conflict(e.message, code=e.code)
    return Invalid(e.message)


class _Base:
    def __init__(self, plane: Any) -> None:
        self.plane = plane


class PoolsList(_Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        pools = getattr(self.plane, "pools", None)
        resp.media = {"pools": pools.list_pools() if pools is not None else [],
                      "server_time_ms": now_ms()}


class PoolMachines(_Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str) -> None:
        try:
            machines = _service(self.plane, f"pool {name!r}").list_machines(
                _param(name, "pool name"))
        except PoolError as e:
            raise _relay(e) from None
        resp.media = {"pool": name, "machines": machines,
                      "server_time_ms": now_ms()}


class PoolPause(_Base):
    def __init__(self, plane: Any, paused: bool) -> None:
        super().__init__(plane)
        self.paused = paused

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        try:
            resp.media = {"pool": _service(self.plane, f"pool {name!r}").pause(
                _param(name, "pool name"), self.paused)}
        except PoolError as e:
            raise _relay(e) from None


class MachineDrain(_Base):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      machine_id: str) -> None:
        try:
            resp.media = {"machine": _service(self.plane, f"machine {machine_id!r}").drain(
                _param(machine_id, "machine id"))}
        except PoolError as e:
            raise _relay(e) from None


def pool_routes(plane: Any) -> list[tuple[str, Any]]:
    """The routes above, relative to ``/admin/api``."""
    return [("/pools", PoolsList(plane)), ("/pools/{name}/machines", PoolMachines(plane)),
            ("/pools/{name}/pause", PoolPause(plane, True)),
            ("/pools/{name}/resume", PoolPause(plane, False)),
            ("/machines/{machine_id}/drain", MachineDrain(plane))]
