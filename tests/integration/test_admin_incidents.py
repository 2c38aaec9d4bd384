"""Incidents and tokens across a scheduler crash, with real processes: a backend that goes
down opens a `backend_down` incident after the (shortened) minute and recovers; one open when
the scheduler is killed with -9 is `interrupted` after the restart; a revoked minted token
stays revoked across the restart while live tokens keep working (SVC_AUTH_SECRET set)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.support.admin_stack import ACCESS_SCHEMA, BREAKGLASS, start_scheduler
from tests.support.procs import DbHost
from tests.support.ssp_stack import apply_schema, root_db, wait_for


class Backend:
    """A health-check target whose answer the test switches."""

    def __init__(self) -> None:
        self.healthy = True
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> Backend:
        app = web.Application()
        app.router.add_get("/health", self._health)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def _health(self, req: web.Request) -> web.Response:
        return web.json_response({"ok": self.healthy}, status=200 if self.healthy else 500)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def jreq(http: aiohttp.ClientSession, method: str, url: str, token: str | None = None,
               body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.request(method, url, json=body, headers=headers) as r:
        text = await r.text()
        return r.status, json.loads(text) if text else None


async def test_backend_down_opens_recovers_and_a_kill_9_leaves_it_interrupted(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    host = shared_db_host
    ns = "inc_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await root.query(ACCESS_SCHEMA)
    await root.close()
    apply_schema(host, ns, ns)
    backend = await Backend().start()
    backends = json.dumps([{"name": "pay", "url": f"http://127.0.0.1:{backend.port}/health",
                            "env": {"PAY_KEY": "very-secret-value"}}])
    sched = start_scheduler(tmp_path, host, ns, env={
        "SVC_BACKENDS": backends, "SVC_HEALTH_CHECK_INTERVAL_SECS": "1",
        "SVC_BACKEND_DOWN_AFTER_SECS": "2",
        "SVC_ADMIN_JOB_INTERVAL_SECS": "0"})  # the job sampler off (checked at the end)
    admin = sched.admin
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            _, s = await jreq(http, "POST", admin + "/admin/api/session",
                              body={"password": BREAKGLASS})
            tok = s["token"]

            async def backend_status(want: str) -> dict[str, Any] | None:
                _, b = await jreq(http, "GET", admin + "/admin/api/backends/pay", tok)
                return b if b["status"] == want else None

            healthy = await wait_for(lambda: backend_status("healthy"), 30, "pay healthy")
            assert healthy["env"] == {"PAY_KEY": "***"} and healthy["history"]
            assert healthy["health_check_url"].endswith("/health")
            assert "very-secret-value" not in json.dumps(healthy)

            async def incident(state: str) -> dict[str, Any] | None:
                _, b = await jreq(http, "GET", admin + f"/admin/api/incidents?component=pay"
                                  f"&state={state}", tok)
                return b["incidents"][0] if b["incidents"] else None

            backend.healthy = False
            opened = await wait_for(lambda: incident("open"), 60, "backend_down opened")
            assert opened["kind"] == "backend_down" and opened["severity"] == "warning"
            assert opened["ended_at"] is None
            down = await backend_status("unhealthy")
            assert down is not None and any(not h["ok"] for h in down["history"])
            backend.healthy = True
            rec = await wait_for(lambda: incident("recovered"), 60, "backend_down recovered")
            assert rec["id"] == opened["id"] and rec["ended_at"] >= rec["started_at"]
            assert [e["state"] for e in rec["events"]] == ["open", "recovered"]
            status, one = await jreq(http, "GET", admin + f"/admin/api/incidents/{rec['id']}",
                                     tok)
            assert status == 200 and one["incident"]["id"] == rec["id"]

            # tokens: one revoked, one kept, before the crash
            _, kept = await jreq(http, "POST", admin + "/admin/api/tokens", tok,
                                 {"label": "kept", "scope": "read", "ttl_days": 30})
            _, revoked = await jreq(http, "POST", admin + "/admin/api/tokens", tok,
                                    {"label": "gone", "scope": "full", "ttl_days": 30})
            async with http.delete(admin + "/admin/api/tokens", json={"token": revoked["token"]},
                                   headers={"Authorization": f"Bearer {tok}"}) as r:
                assert r.status == 204

            backend.healthy = False
            second = await wait_for(lambda: incident("open"), 60, "backend_down opened again")
            assert second["id"] != opened["id"]
            history = sched.data / "incidents.json"

            def persisted() -> bool:  # flushed at most once per second
                try:
                    doc = json.loads(history.read_text())
                except (OSError, ValueError):
                    return False
                return any(i["id"] == second["id"] and i["state"] == "open"
                           for i in doc["incidents"])

            async def on_disk() -> bool:
                return persisted()

            await wait_for(on_disk, 30, "the open incident written to incidents.json")

            async def charted() -> list[int]:  # the chart history, written after each sample
                _, h = await jreq(http, "GET", admin + "/admin/api/history", tok)
                try:
                    saved = json.loads((sched.data / "admin-history.json").read_text())
                except (OSError, ValueError):
                    return []
                t = [x["t"] for x in saved["rings"]["hour"]]
                return t if t and t == [x["t"] for x in h["samples"]][:len(t)] else []

            sampled = await wait_for(charted, 30, "a chart sample written to admin-history.json")
        sched.process.kill9()
        sched.restart()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            _, hist = await jreq(http, "GET", admin + "/admin/api/history", tok)
            # the charts' past came back with the scheduler
            assert [x["t"] for x in hist["samples"]][:len(sampled)] == sampled
            status, body = await jreq(http, "GET", admin + f"/admin/api/incidents/{second['id']}",
                                      tok)  # the session token survived the restart
            assert status == 200, body
            inc = body["incident"]
            assert inc["state"] == "interrupted" and inc["ended_at"] is not None
            assert inc["events"][-1]["state"] == "interrupted"
            status, _ = await jreq(http, "GET", admin + "/admin/api/overview", kept["token"])
            assert status == 200
            status, _ = await jreq(http, "GET", admin + "/admin/api/overview", revoked["token"])
            assert status == 401
            _, body = await jreq(http, "GET", admin + "/admin/api/incidents?state=recorded", tok)
            started = [i for i in body["incidents"] if i["kind"] == "scheduler_started"]
            assert len(started) == 2 and started[0]["events"][0]["version"]
            # the backend is still down: the new process opens a new incident after a minute
            backend.healthy = False

            async def reopened() -> bool:
                _, b = await jreq(http, "GET", admin + "/admin/api/incidents?component=pay"
                                  "&state=open", tok)
                return bool(b["incidents"]) and b["incidents"][0]["id"] != second["id"]

            await wait_for(reopened, 60, "a new backend_down incident after the restart")
            _, page = await jreq(http, "GET", admin + "/admin/api/incidents?limit=1&offset=1",
                                 tok)
            assert page["limit"] == 1 and page["offset"] == 1 and len(page["incidents"]) == 1
            assert page["total"] >= 5 and page["storage_error"] is None
            _, clamp = await jreq(http, "GET", admin + "/admin/api/incidents?limit=5000", tok)
            assert clamp["limit"] == 200
            # the time range filters on when an incident started: `since` keeps it from its
            # start on, `before` keeps what started earlier; severity filters as well
            at = second["started_at"]
            _, newer = await jreq(http, "GET", admin + f"/admin/api/incidents?since={at}", tok)
            _, older = await jreq(http, "GET", admin + f"/admin/api/incidents?before={at}", tok)
            assert second["id"] in {i["id"] for i in newer["incidents"]}
            assert second["id"] not in {i["id"] for i in older["incidents"]}
            assert all(i["started_at"] >= at for i in newer["incidents"])
            assert all(i["started_at"] < at for i in older["incidents"]) and older["incidents"]
            assert newer["total"] + older["total"] == page["total"]
            _, none = await jreq(http, "GET", admin + f"/admin/api/incidents?since={at}"
                                 f"&before={at}", tok)
            assert none["incidents"] == [] and none["total"] == 0
            status, bad = await jreq(http, "GET", admin + "/admin/api/incidents?since=soon", tok)
            assert status == 400 and "since" in bad["message"], bad
            _, warn = await jreq(http, "GET", admin + "/admin/api/incidents?severity=warning",
                                 tok)
            assert warn["incidents"] and all(i["severity"] == "warning"
                                             for i in warn["incidents"])
            # SVC_ADMIN_JOB_INTERVAL_SECS=0 switches the job sampler off: totals are not
            # measured and the jobs stream answers 501
            status, jobs = await jreq(http, "GET", admin + "/admin/api/jobs", tok)
            assert status == 200 and jobs["measured"] is False
            assert jobs["totals"] == "not measured", jobs
            status, off = await jreq(http, "GET", admin + "/admin/api/jobs/stream", tok)
            assert status == 501 and off["code"] == "sampler_off", off
    finally:
        code = sched.process.stop()
        await backend.stop()
    assert code == 0, sched.process.log_text()[-3000:]
    assert "very-secret-value" not in sched.process.log_text()
