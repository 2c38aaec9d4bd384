"""Wiring the workflow engine into the scheduler process (called once by `scheduler.app`).

`attach_workflows(app, scheduler)`: builds the :class:`~.engine.WorkflowEngine` over the
scheduler's database client, job plane and incident store, sets `scheduler.workflows` (the
admin plane reaches it there, through its cluster adapter), subscribes it to the job plane's
`/job/result` posts, and starts and stops it with the ingest listener's lifespan. The engine
itself waits until the scheduler is ready before reading anything.
"""

from __future__ import annotations

from typing import Any

import falcon.asgi

from scheduler.workflows.engine import WorkflowEngine

__all__ = ["attach_workflows"]


class _Lifespan:
    def __init__(self, engine: WorkflowEngine) -> None:
        self.engine = engine

    async def process_startup(self, scope: Any, event: Any) -> None:
        await self.engine.start()

    async def process_shutdown(self, scope: Any, event: Any) -> None:
        await self.engine.stop()


def attach_workflows(app: falcon.asgi.App, s: Any) -> WorkflowEngine:
    engine = WorkflowEngine(s.db, s.cfg.workflows, job_plane=lambda: s.job_plane,
                            ready=lambda: s.state == "ready",
                            ssps_ready=lambda: bool(s.ready_ids()),
                            incidents=getattr(s, "incidents", None))
    s.workflows = engine
    plane = getattr(s, "job_plane", None)
    if plane is not None and hasattr(plane, "result_hooks"):
        plane.result_hooks.append(engine.job_result)
    app.add_middleware(_Lifespan(engine))
    return engine
