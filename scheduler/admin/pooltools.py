"""The machine pools' MCP tools (spec "Scheduler admin MCP tools", Pools), each over one
route of ``scheduler.admin.pools``. Imported by ``mcptools`` only (after its types exist)."""

from __future__ import annotations

from scheduler.admin.mcptools import AdminTool, ApiCall, _seg

__all__ = ["POOLS_TOOLS"]

_NAME = {"type": "string", "minLength": 1, "maxLength": 300}

POOLS_TOOLS: tuple[AdminTool, ...] = (
    AdminTool("pools_list", "Machine pools",
              "Every machine pool: status (idle, starting, healthy, unhealthy), sizing, pause "
              "and breaker state, machines by state, busy slots, jobs waiting.", "read",
              lambda a: ApiCall("GET", "/pools")),
    AdminTool("pool_machines", "Machines of a pool",
              "The machines of one pool, newest first, terminal ones included: state, slots "
              "in use, last contact, removal reason.", "read",
              lambda a: ApiCall("GET", f"/pools/{_seg(a['name'])}/machines"),
              {"name": _NAME}, ("name",)),
    AdminTool("pool_pause", "Pause a pool",
              "No new job assignments and no new machines; running jobs finish. Kept across "
              "scheduler restarts.", "write",
              lambda a: ApiCall("POST", f"/pools/{_seg(a['name'])}/pause"),
              {"name": _NAME}, ("name",)),
    AdminTool("pool_resume", "Resume a pool", "Undo pool_pause.", "write",
              lambda a: ApiCall("POST", f"/pools/{_seg(a['name'])}/resume"),
              {"name": _NAME}, ("name",)),
    AdminTool("machine_drain", "Drain a machine",
              "The machine takes no new job, finishes its current ones, then is destroyed.",
              "destructive",
              lambda a: ApiCall("POST", f"/machines/{_seg(a['machine_id'])}/drain"),
              {"machine_id": _NAME}, ("machine_id",)),
)
