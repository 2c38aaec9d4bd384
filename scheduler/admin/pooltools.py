"""The machine pools' MCP tools (spec "Scheduler admin MCP tools", Pools), each over one
route of ``scheduler.admin.pools``. Plain data, turned into ``AdminTool`` entries by
``mcptools`` (which imports this module, so this one imports nothing of it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

__all__ = ["POOL_TOOL_SPECS"]

_NAME = {"type": "string", "minLength": 1, "maxLength": 300}


def _seg(value: Any) -> str:
    return quote(str(value), safe=":@")


def _pool_path(suffix: str) -> Callable[[dict[str, Any]], tuple[str, str]]:
    return lambda a: ("POST" if suffix in ("pause", "resume") else "GET",
                      f"/pools/{_seg(a['name'])}/{suffix}")


#: name, title, description, kind, request (arguments -> (method, path)), properties, required
POOL_TOOL_SPECS: tuple[dict[str, Any], ...] = (
    {"name": "pools_list", "title": "Machine pools",
     "description": "Every machine pool: status (idle, starting, healthy, unhealthy), sizing, "
                    "pause and breaker state, machines by state, busy slots, jobs waiting.",
     "kind": "read", "request": lambda a: ("GET", "/pools")},
    {"name": "pool_machines", "title": "Machines of a pool",
     "description": "The machines of one pool, newest first, terminal ones included: state, "
                    "slots in use, last contact, removal reason.",
     "kind": "read", "request": _pool_path("machines"), "properties": {"name": _NAME},
     "required": ("name",)},
    {"name": "pool_pause", "title": "Pause a pool",
     "description": "No new job assignments and no new machines; running jobs finish. Kept "
                    "across scheduler restarts.",
     "kind": "write", "request": _pool_path("pause"), "properties": {"name": _NAME},
     "required": ("name",)},
    {"name": "pool_resume", "title": "Resume a pool", "description": "Undo pool_pause.",
     "kind": "write", "request": _pool_path("resume"), "properties": {"name": _NAME},
     "required": ("name",)},
    {"name": "machine_drain", "title": "Drain a machine",
     "description": "The machine takes no new job, finishes its current ones, then is "
                    "destroyed.",
     "kind": "destructive",
     "request": lambda a: ("POST", f"/machines/{_seg(a['machine_id'])}/drain"),
     "properties": {"machine_id": _NAME}, "required": ("machine_id",)},
)
