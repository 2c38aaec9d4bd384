"""A restore starts only while the scheduler is Ready (spec, Endpoints: `POST
/admin/api/backups/:id/restore` "503 unless scheduler Ready"), on both listeners that take
one, with the one stated exception: a scheduler held in Restoring by a failed restore takes a
new restore, its way out (SPEC-DEVIATIONS.md). The held case through real processes is
tests/integration/test_backup_crash.py; here the refusals, which need a scheduler caught
mid-clone, with a fake scheduler and backup service at the plane's seam."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import falcon
import falcon.asgi
import falcon.testing
import pytest

from scheduler.admin.backups import BackupRoutes
from scheduler.admin.errors import Unavailable
from scheduler.backups import BackupPlane, _Restore


class FakeService:
    enabled = True

    def __init__(self, held: dict[str, Any] | None = None, running: Any = None) -> None:
        self.held = held
        self.running = running
        self.started: list[str] = []
        self.watchers: list[Any] = []

    def restore_running(self) -> Any:
        return self.running

    async def start_restore(self, backup_id: str, **_: Any) -> dict[str, Any]:
        self.started.append(backup_id)
        return {"restore_id": "r1", "backup_id": backup_id, "stage": "queued"}


def plane(state: str, service: FakeService, releasing: bool = False) -> BackupPlane:
    # The constructor opens a real backup service (object storage, registry on disk); the
    # readiness rule reads only the scheduler's state and the service's hold.
    p = object.__new__(BackupPlane)
    p.s = SimpleNamespace(state=state)
    p.service = service  # type: ignore[assignment]
    p.releasing = releasing
    p.incident = None
    return p


@pytest.mark.parametrize("state", ["cloning", "restoring"])
def test_the_ingest_listener_refuses_a_restore_with_503_unless_ready(state: str) -> None:
    svc = FakeService()
    app = falcon.asgi.App()
    app.add_route("/backup/restore", _Restore(plane(state, svc)))
    r = falcon.testing.TestClient(app).simulate_post("/backup/restore",
                                                     json={"backup_id": "b1"})
    assert r.status_code == 503, r.text
    assert state in r.json["description"] and "ready" in r.json["description"]
    assert svc.started == []  # nothing began


def test_the_ingest_listener_takes_a_restore_when_ready() -> None:
    svc = FakeService()
    app = falcon.asgi.App()
    app.add_route("/backup/restore", _Restore(plane("ready", svc)))
    r = falcon.testing.TestClient(app).simulate_post("/backup/restore",
                                                     json={"backup_id": "b1"})
    assert r.status_code == 202, r.text
    assert svc.started == ["b1"]


def admin_routes(p: BackupPlane, state: str) -> BackupRoutes:
    cluster = SimpleNamespace(backup_plane=lambda: p, state=lambda: state, ssps=lambda: [],
                              scheduler_id="s")
    return BackupRoutes(SimpleNamespace(cluster=cluster))


@pytest.mark.parametrize("state", ["cloning", "restoring"])
def test_the_admin_route_refuses_a_restore_with_503_naming_the_state(state: str) -> None:
    svc = FakeService()
    routes = admin_routes(plane(state, svc), state)
    with pytest.raises(Unavailable) as e:
        asyncio.run(routes.restore("b1", {"subject": "op"}))
    assert e.value.status == 503 and e.value.error_code == state
    assert svc.started == []


def test_a_hold_by_a_failed_restore_is_the_one_exception() -> None:
    held = {"restore_id": "r0", "backup_id": "b0", "failed_stage": "main_db"}
    assert plane("restoring", FakeService(held=held)).restore_allowed() is None
    # ... but not while the hold is being released, nor while a restore already runs
    assert plane("restoring", FakeService(held=held), releasing=True).restore_allowed()
    assert plane("restoring", FakeService(held=held, running={"restore_id": "r1"})) \
        .restore_allowed()
    # Cloning is never an exception, held record or not.
    assert plane("cloning", FakeService(held=held)).restore_allowed()
    assert plane("ready", FakeService()).restore_allowed() is None
