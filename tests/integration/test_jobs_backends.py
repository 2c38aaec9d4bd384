"""Backend health list on a standalone SSP: SVC_BACKENDS, PUT /backends, GET /health
aggregate, `backend_down` incidents, and secrets never shown (spec "Backend health list")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.job_stack import SECRET, TOKEN, Backend, job_stack
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import wait_for

ENV_A = "env-value-api-key-5e6f7a"
ENV_B = "env-value-db-password-8b9c0d"


def incidents(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_health_aggregates_backends_masks_env_and_records_backend_down(
        host: DbHost, tmp_path: Path) -> None:
    late = Backend(port=free_port())  # down at first, started later
    snap = tmp_path / "snap"
    backends = [{"name": "api", "url": "http://127.0.0.1:{port}/health",
                 "env": {"API_KEY": ENV_A}},
                {"name": "late", "url": f"http://127.0.0.1:{late.port}/health",
                 "env": {"DB_PASSWORD": ENV_B}, "run_on": {"pool": "gpu"}}]
    env = {"SVC_HEALTH_CHECK_INTERVAL_SECS": "1", "SVC_BACKEND_DOWN_AFTER_SECS": "1",
           "SVC_SSP_SNAPSHOT_DIR": str(snap)}
    port = free_port()
    backends[0]["url"] = str(backends[0]["url"]).format(port=port)
    api = Backend(port=port)
    await api.start()
    try:
        async with job_stack(host, tmp_path, SVC_BACKENDS=json.dumps(backends), **env) as st:
            async def degraded() -> Any:
                _, body = await st.get("/health")
                b = body.get("backends") or {}
                return body if b.get("counts") == {"healthy": 1, "unhealthy": 1,
                                                   "unknown": 0, "unchecked": 0} else None
            body = await wait_for(degraded, 30.0, "one healthy, one failing backend")
            assert body["status"] == "ready" and body["backends"]["status"] == "degraded"
            listed = {b["name"]: b for b in body["backends"]["list"]}
            assert listed["api"]["env"] == {"API_KEY": "***"}
            assert listed["late"]["env"] == {"DB_PASSWORD": "***"}
            assert listed["late"]["run_on"] == {"pool": "gpu"}

            async def opened() -> Any:
                return [i for i in incidents(snap / "incidents.jsonl") if i["state"] == "open"]
            inc = (await wait_for(opened, 30.0, "a backend_down incident"))[0]
            assert inc["kind"] == "backend_down" and inc["component"] == "late"

            await late.start()

            async def recovered() -> Any:
                return [i for i in incidents(snap / "incidents.jsonl")
                        if i["state"] == "recovered" and i["id"] == inc["id"]]
            await wait_for(recovered, 30.0, "the incident recorded recovered")

            async def healthy() -> bool:
                _, body = await st.get("/health")
                return body["backends"]["status"] == "healthy"
            await wait_for(healthy, 30.0, "every backend healthy")

            for bad in ([{"url": "http://x/health"}], [{"name": "a", "url": "ftp://x"}],
                        [{"name": "a", "env": {"K": 1}}], [{"name": "a", "extra": 1}],
                        {"name": "a"}, [{"name": "a"}, {"name": "a"}]):
                status, reply = await st.request("PUT", "/backends", bad)
                assert status == 400 and reply["error"] == "invalid", (bad, reply)
            gone = [{"name": "gone", "url": f"http://127.0.0.1:{free_port()}/health",
                     "env": {"TOKEN": ENV_A}}]
            status, reply = await st.request("PUT", "/backends", gone)
            assert status == 200 and reply["backends"][0]["env"] == {"TOKEN": "***"}

            async def unavailable() -> bool:
                _, body = await st.get("/health")
                return body["backends"]["status"] == "unavailable"
            await wait_for(unavailable, 30.0, "the only backend failing")
            shown = "".join(st.bodies) + (snap / "incidents.jsonl").read_text() \
                + st.ssp.process.log_text()
            for secret in (ENV_A, ENV_B, TOKEN, SECRET):
                assert secret not in shown
    finally:
        await api.stop()
        await late.stop()


async def test_no_backend_list_means_no_backends_in_health(host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path) as st:
        status, body = await st.get("/health")
        assert status == 200 and "backends" not in body
