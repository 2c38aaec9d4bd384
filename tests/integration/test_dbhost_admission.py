"""The database host's admission (`dbhost.admission`) through real sockets: with one ordinary
slot, an application's slow request holds it, a second ordinary request waits for it, and the
view service's connection (`DbConfig.lane`) is answered meanwhile. The scheduler and the SSP
declare the lane on every connection."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dbclient import Database, DbConfig
from dbclient.config import SERVICE_LANE
from scheduler.config import SchedulerConfig
from ssp.config import SspConfig
from tests.support.procs import DbHost, start_db_host


@pytest.fixture(scope="module")
def one_slot_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DbHost]:
    host = start_db_host(tmp_path_factory.mktemp("dbhost"), memory=True,
                         extra_args=["--max-inflight", "1"])
    try:
        yield host
    finally:
        host.process.stop()


def config_for(host: DbHost, lane: str | None = None) -> DbConfig:
    cfg = DbConfig.from_env({"SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user,
                             "SVC_DB_PASS": host.password, "SVC_DB_NS": "adm",
                             "SVC_DB_NAME": "adm", "SVC_SSP_DB_TIMEOUT_SECS": "30"})
    return dataclasses.replace(cfg, lane=lane)


def admission(host: DbHost) -> dict[str, Any]:
    req = urllib.request.Request(f"{host.http_url}/debug/memory")
    token = base64.b64encode(f"{host.user}:{host.password}".encode()).decode()
    req.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        body: dict[str, Any] = json.loads(r.read())
    return dict(body["admission"])


async def test_the_service_lane_is_answered_while_an_application_request_holds_the_slot(
        one_slot_host: DbHost) -> None:
    app = Database(config_for(one_slot_host))
    other = Database(config_for(one_slot_host))
    service = Database(config_for(one_slot_host, SERVICE_LANE))
    try:
        for db in (app, other, service):  # connected (and the lane declared) before the race
            await db.query("RETURN 1")
        assert admission(one_slot_host)["limit"] == 1
        slow = asyncio.create_task(app.query("SLEEP 1500ms; RETURN 'slow'"))
        while admission(one_slot_host)["inside"] < 1:
            await asyncio.sleep(0.01)
        queued = asyncio.create_task(other.query("RETURN 'queued'"))
        while admission(one_slot_host)["waiting"] < 1:
            await asyncio.sleep(0.01)
        # the ordinary request waits behind the slow one; the service's goes in at once
        assert await service.query("RETURN 'service'") == ["service"]
        assert not slow.done() and not queued.done()
        assert await slow == [None, "slow"]
        assert await queued == ["queued"]
        st = admission(one_slot_host)
        assert st["queued"] >= 1 and st["inside"] == 0 and st["waiting"] == 0
    finally:
        for db in (app, other, service):
            await db.close()


def test_the_scheduler_and_the_ssp_connect_in_the_service_lane(tmp_path: Path) -> None:
    env = {"SVC_DB_URL": "ws://127.0.0.1:1/rpc", "SVC_DB_USER": "root", "SVC_DB_PASS": "p",
           "SVC_SSP_LISTEN_ADDR": "127.0.0.1:8667", "SVC_SCHEDULER_URL": "http://127.0.0.1:1",
           "SVC_AUTH_SECRET": "s" * 32}
    assert SspConfig.from_env(env).db.lane == SERVICE_LANE
    yml = tmp_path / "scheduler.yml"
    yml.write_text("db: {url: 'ws://127.0.0.1:1/rpc', username: root, password: p}\n")
    cfg = SchedulerConfig.load(yml, env)
    assert cfg.db.lane == SERVICE_LANE
    assert DbConfig.from_env(env).lane is None  # everyone else: no lane
