"""Every OpenTelemetry instrument of the SSP moves under real traffic, read by an in-memory
metric reader: the hub and the gateway app run in this process (the hub's shards are real
processes) against a real database host, requests go through the gateway's ASGI app into the
hub over ZeroMQ, and the host is stopped and restarted to make publication fail and reconnect.

`ssp_edge_parked_batches` is the one instrument that cannot move: a failed flush puts its work
back, nothing is ever parked (ssp/README.md, Telemetry); the test checks it is reported, as 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from gateway.ssp_app import GatewaySettings, build_app
from ipc.otel import ACTIVE_REQUESTS, REQUEST_DURATION
from ipc.rpc import RpcServer
from ssp import publisher as publisher_mod
from ssp.config import SspConfig
from ssp.hub import Hub
from ssp.telemetry import INSTRUMENTS, attach
from tests.support.procs import base_env, free_port, start_db_host
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
    db_env,
    edges,
    root_db,
    unique_db,
    view_body,
    wait_for,
)

AUTH = {"Authorization": "Bearer any-token"}  # no SVC_AUTH_SECRET: any bearer is accepted


class Metrics:
    """The reader's latest data, by instrument name -> list of data points."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.reader = reader

    def read(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out.setdefault(m.name, []).extend(m.data.data_points)
        return out

    def value(self, name: str) -> float:
        """A gauge's or counter's value (one data point)."""
        [p] = self.read()[name]
        return p.value

    def count(self, name: str, where: Callable[[dict[str, Any]], bool] = lambda a: True) -> int:
        """How many values a histogram recorded (data points matching `where`)."""
        return sum(p.count for p in self.read().get(name, []) if where(dict(p.attributes)))


async def test_every_instrument_moves_under_a_real_ingest(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "dbdata"
    host = start_db_host(tmp_path, memory=False, path=data, port=port)
    ns, dbname = unique_db()
    root = await root_db(host, ns, dbname)
    await root.query(APP_SCHEMA)
    apply_schema(host, ns, dbname)
    env = base_env(**db_env(host, ns, dbname), SVC_SSP_ID="ssp-otel-mem", SVC_SSP_SHARDS="1",
                   SVC_SSP_RUN_DIR=str(tmp_path / "run"), SVC_SSP_DB_TIMEOUT_SECS="3",
                   SVC_INGEST_TRANSPORT="changefeed", SVC_SCHEMA_POLL_SECS="0")
    cfg = SspConfig.from_env(env)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    m = Metrics(reader)
    hub = Hub(cfg)
    attach(hub.publisher, provider.get_meter("ssp.publisher"))
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    server = RpcServer(cfg.hub_endpoint, hub.handle)
    serving = asyncio.get_running_loop().create_task(server.serve())
    app = build_app(GatewaySettings(auth_secret=None, hub_endpoint=cfg.hub_endpoint),
                    meter=provider.get_meter("gateway"))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ssp")
    started = False
    try:
        await root.query("CREATE user:alice SET name = 'alice', pass = 'x'; "
                         "CREATE post:1 SET owner = user:alice, title = 'a'")
        await hub.start()
        started = True
        assert (await http.get("/health")).json()["status"] == "ready"

        # A registration: the hub holds the view while it writes its _00_query row (lock
        # wait and hold), the first publication commits (transaction, publish, last success).
        r = await http.post("/view/register", headers=AUTH, json=view_body(
            "tm", "SELECT * FROM post WHERE owner = $auth.id"))
        assert r.status_code == 200, r.text
        # A real ingest: a write in the database, read from its changefeed by the SSP.
        await root.query("CREATE post:2 SET owner = user:alice, title = 'b'")
        await wait_for(lambda: _true(edges(root, "_00_list_ref_user_alice", "tm"),
                                     {"post:1", "post:2"}), 60.0, "both edges published")
        # (the commit is visible to the database a moment before the publisher books it)
        await wait_for(lambda: _ready(m.value("ssp_edge_pending_operations") == 0), 60.0,
                       "nothing pending")
        for name in ("ssp_edge_lock_wait_milliseconds", "ssp_edge_lock_hold_milliseconds",
                     "ssp_edge_publish_milliseconds"):
            assert m.count(name) >= 1, name
        assert m.count("ssp_edge_transaction_milliseconds",
                       lambda a: a.get("outcome") == "ok") >= 1
        assert m.value("ssp_edge_last_success_epoch_milliseconds") > 1_700_000_000_000
        assert m.value("ssp_edge_parked_batches") == 0
        generation = m.value("ssp_edge_connection_generation")
        assert m.value("ssp_edge_publish_failures_total") == 0
        assert m.value("ssp_edge_overload_rejections") == 0
        # The gateway's request metrics: by route template and status.
        assert m.count(REQUEST_DURATION, lambda a: a["http.route"] == "/view/register"
                       and a["http.response.status_code"] == 200) == 1
        assert m.count(REQUEST_DURATION, lambda a: a["http.route"] == "/health") == 1
        assert ACTIVE_REQUESTS in m.read()

        # The database goes away: an ingested change cannot be published, so the work waits
        # (pending gauges), the flushes fail (failure counter, transactions with outcome
        # error), and an ingest over the pending-work threshold is refused (overload).
        host.process.stop()
        r = await http.post("/ingest", headers=AUTH, json={
            "table": "post", "op": "CREATE", "id": "post:3",
            "record": {"id": "post:3", "owner": "user:alice", "title": "c"}})
        assert r.status_code == 200, r.text
        await wait_for(lambda: _ready(m.value("ssp_edge_publish_failures_total") >= 1),
                       60.0, "a failed flush counted")
        assert m.value("ssp_edge_pending_operations") >= 1
        assert m.value("ssp_edge_pending_batches") >= 1
        assert m.value("ssp_edge_pending_bytes") > 0
        assert m.value("ssp_edge_oldest_age_milliseconds") > 0
        assert m.count("ssp_edge_transaction_milliseconds",
                       lambda a: a.get("outcome") == "error") >= 1
        limit = publisher_mod.MAX_PENDING_OPS
        publisher_mod.MAX_PENDING_OPS = 1  # the threshold, lowered to what is pending now
        try:
            r = await http.post("/ingest", headers=AUTH, json={
                "table": "post", "op": "UPDATE", "id": "post:3",
                "record": {"id": "post:3", "owner": "user:alice", "title": "d"}})
        finally:
            publisher_mod.MAX_PENDING_OPS = limit
        assert r.status_code == 503, r.text
        assert m.value("ssp_edge_overload_rejections") == 1
        assert m.count(REQUEST_DURATION, lambda a: a["http.route"] == "/ingest"
                       and a["http.response.status_code"] == 503) == 1

        # Back: the publication reconnects (a new connection generation) and catches up.
        host = start_db_host(tmp_path, memory=False, path=data, port=port)
        await wait_for(lambda: _ready(m.value("ssp_edge_pending_operations") == 0
                                      and m.value("ssp_edge_connection_generation")
                                      > generation), 60.0, "reconnected and caught up")
        assert m.value("ssp_edge_oldest_age_milliseconds") == 0
        await root.close()
        root = await root_db(host, ns, dbname)
        assert await edges(root, "_00_list_ref_user_alice", "tm") == {"post:1", "post:2",
                                                                      "post:3"}
        assert set(m.read()) >= set(INSTRUMENTS)
    finally:
        await http.aclose()
        if started:
            await hub.shutdown()
        app.hub.close()
        serving.cancel()
        server.close()
        await root.close()
        provider.shutdown()
        host.process.stop()


async def _true(coro: Any, expected: Any) -> bool:
    return (await coro) == expected


async def _ready(value: bool) -> bool:
    return value
