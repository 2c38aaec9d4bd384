"""A real SSP exports the spec's `ssp_edge_*` instruments over OTLP/HTTP when
`OTEL_EXPORTER_OTLP_ENDPOINT` is set: the collector here is an aiohttp server the test runs on
a loopback port, decoding the protobuf requests ("Events" item 10, `ssp.telemetry`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import open_stack, view_body, wait_for

INSTRUMENTS = {
    "ssp_edge_lock_wait_milliseconds", "ssp_edge_lock_hold_milliseconds",
    "ssp_edge_publish_milliseconds", "ssp_edge_transaction_milliseconds",
    "ssp_edge_publish_failures_total", "ssp_edge_pending_batches",
    "ssp_edge_pending_operations", "ssp_edge_pending_bytes", "ssp_edge_oldest_age_milliseconds",
    "ssp_edge_parked_batches", "ssp_edge_overload_rejections",
    "ssp_edge_last_success_epoch_milliseconds", "ssp_edge_connection_generation",
}


class Collector:
    """Receives `POST /v1/metrics` and keeps the decoded requests."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests: list[ExportMetricsServiceRequest] = []
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        req = ExportMetricsServiceRequest()
        req.ParseFromString(await request.read())
        self.requests.append(req)
        return web.Response(status=200)

    def metrics(self) -> dict[str, Any]:
        """name -> the latest metric seen."""
        out = {}
        for r in self.requests:
            for rm in r.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        out[m.name] = m
        return out


async def test_ssp_exports_the_edge_instruments_over_otlp(host: DbHost, tmp_path: Path) -> None:
    col = Collector()
    await col.start()
    try:
        async with open_stack(host, tmp_path, SVC_SSP_ID="ssp-otel",
                              OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{col.port}",
                              OTEL_METRIC_EXPORT_INTERVAL="300") as st:
            await st.root.query("CREATE user:alice SET name = 'alice', pass = 'x'; "
                                "CREATE post:1 SET owner = user:alice, title = 'a'")
            r = await st.ssp.call("POST /view/register",
                                  view_body("t1", "SELECT * FROM post WHERE owner = $auth.id"))
            assert r["status"] == 200, r

            async def published() -> Any:
                m = col.metrics()
                tx = m.get("ssp_edge_transaction_milliseconds")
                return m if tx is not None and tx.histogram.data_points else None
            got = await wait_for(published, 30.0, "a transaction measured and exported")
            assert set(got) >= INSTRUMENTS - {"ssp_edge_lock_wait_milliseconds"}
            [tx] = got["ssp_edge_transaction_milliseconds"].histogram.data_points
            assert tx.count >= 1 and tx.sum > 0
            success = got["ssp_edge_last_success_epoch_milliseconds"].gauge.data_points[0]
            assert success.as_int > 1_700_000_000_000
            assert got["ssp_edge_publish_failures_total"].sum.is_monotonic
            attrs = {kv.key: kv.value.string_value
                     for kv in col.requests[-1].resource_metrics[0].resource.attributes}
            assert attrs["service.name"] == "svc-ssp"
            assert attrs["service.instance.id"] == "ssp-otel"
    finally:
        await col.stop()
