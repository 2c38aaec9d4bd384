"""The spec's OpenTelemetry instruments of edge publication ("Events" item 10): exact names,
kinds, values after a publish, and export only when the standard OTEL_* environment asks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.metrics import Meter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Histogram,
    InMemoryMetricReader,
    MetricsData,
    Sum,
)
from surrealdb import RecordID

from dbclient import DbQueryError
from ssp import publisher as publisher_mod
from ssp.config import ConfigError, SspConfig
from ssp.publisher import Publisher, PubView
from ssp.telemetry import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    INSTRUMENTS,
    NO_TELEMETRY,
    attach,
    setup_meter,
)
from tests.support.fakedb import FakeDb
from tests.support.procs import free_port

OP_BYTES = publisher_mod._OP_BYTES

SPEC_NAMES = {
    "ssp_edge_lock_wait_milliseconds", "ssp_edge_lock_hold_milliseconds",
    "ssp_edge_publish_milliseconds", "ssp_edge_transaction_milliseconds",
    "ssp_edge_publish_failures_total", "ssp_edge_pending_batches",
    "ssp_edge_pending_operations", "ssp_edge_pending_bytes", "ssp_edge_oldest_age_milliseconds",
    "ssp_edge_parked_batches", "ssp_edge_overload_rejections",
    "ssp_edge_last_success_epoch_milliseconds", "ssp_edge_connection_generation",
}
BASE_ENV = {"SVC_DB_URL": "ws://127.0.0.1:1/rpc", "SVC_DB_USER": "u", "SVC_DB_PASS": "p",
            "SVC_DB_NS": "n", "SVC_DB_NAME": "d"}


def points(data: MetricsData | None) -> dict[str, Any]:
    """name -> the metric (one scope, one resource)."""
    assert data is not None
    out = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = m
    return out


def value(metric: Any) -> Any:
    [p] = metric.data.data_points
    return p.value


def pub_with(meter: Meter) -> tuple[Publisher, FakeDb]:
    db = FakeDb(delay=0.002)
    db.reconnects = 2
    v = PubView("query:v", RecordID("_00_query", "v"), "_00_list_ref_user_alice",
                RecordID("user", "alice"), {"post:1", "post:2"})
    pub = Publisher(db, ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup={"query:v": v}.get, rv_lookup=lambda rid: 7)
    attach(pub, meter)
    return pub, db


def test_the_instrument_list_is_exactly_the_specs() -> None:
    assert set(INSTRUMENTS) == SPEC_NAMES and len(INSTRUMENTS) == len(SPEC_NAMES)
    pub = Publisher(FakeDb(), ref_mode="dedicated", throttle_ms=0,  # type: ignore[arg-type]
                    view_lookup=dict[str, PubView]().get, rv_lookup=lambda rid: 7)
    assert pub.telemetry is NO_TELEMETRY  # no instruments until ssp.telemetry.attach


async def test_instruments_exist_with_the_spec_names_and_get_values_after_a_publish() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    pub, db = pub_with(provider.get_meter("ssp.publisher"))

    pub.mark("query:v", ["post:1", "post:2", "post:3"])
    pending = points(reader.get_metrics_data())
    assert set(pending) == set(COUNTERS + GAUGES)  # histograms appear once recorded
    assert value(pending["ssp_edge_pending_batches"]) == 1
    assert value(pending["ssp_edge_pending_operations"]) == 3
    assert value(pending["ssp_edge_pending_bytes"]) == 3 * OP_BYTES
    assert value(pending["ssp_edge_oldest_age_milliseconds"]) >= 0
    assert value(pending["ssp_edge_last_success_epoch_milliseconds"]) == 0

    db.fail = 1
    with pytest.raises(DbQueryError):
        await pub.flush()
    pub.stats.failures += 1  # what the flush loop counts for a failed flush
    async with pub.hold("query:v"):
        pass
    await pub.flush()
    pub.overload_rejections = 4

    got = points(reader.get_metrics_data())
    assert set(got) == SPEC_NAMES
    for name in HISTOGRAMS:
        assert isinstance(got[name].data, Histogram), name
        assert got[name].unit == "ms"
    for name in COUNTERS:
        assert isinstance(got[name].data, Sum) and got[name].data.is_monotonic, name
    tx = {dict(p.attributes)["outcome"]: p for p in got["ssp_edge_transaction_milliseconds"]
          .data.data_points}
    assert tx["ok"].count == 1 and tx["error"].count == 1 and tx["ok"].sum >= 1
    [publish] = got["ssp_edge_publish_milliseconds"].data.data_points
    assert publish.count == 1 and publish.sum > 0  # one view committed
    [hold] = got["ssp_edge_lock_hold_milliseconds"].data.data_points
    assert hold.count == 3  # two flushes and one hold
    [wait] = got["ssp_edge_lock_wait_milliseconds"].data.data_points
    assert wait.count == 1
    assert value(got["ssp_edge_publish_failures_total"]) == 1
    assert value(got["ssp_edge_overload_rejections"]) == 4
    assert value(got["ssp_edge_pending_operations"]) == 0
    assert value(got["ssp_edge_pending_batches"]) == 0
    assert value(got["ssp_edge_parked_batches"]) == 0
    assert value(got["ssp_edge_last_success_epoch_milliseconds"]) == pub.stats.last_success_ms > 0
    assert value(got["ssp_edge_connection_generation"]) == 2
    provider.shutdown()


def cfg(**env: str) -> SspConfig:
    return SspConfig.from_env({**BASE_ENV, **env})


def test_export_only_when_the_standard_environment_asks() -> None:
    assert cfg().metrics_exporters == ()
    assert cfg(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318").metrics_exporters == ("otlp",)
    assert cfg(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="http://c:4318/v1/metrics"
               ).metrics_exporters == ("otlp",)
    assert cfg(OTEL_METRICS_EXPORTER="console").metrics_exporters == ("console",)
    assert cfg(OTEL_METRICS_EXPORTER="otlp, console").metrics_exporters == ("otlp", "console")
    assert cfg(OTEL_METRICS_EXPORTER="none",
               OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318").metrics_exporters == ()
    assert cfg(OTEL_SDK_DISABLED="true", OTEL_METRICS_EXPORTER="console").metrics_exporters == ()
    assert cfg(OTEL_METRIC_EXPORT_INTERVAL="500").metrics_export_interval_ms == 500
    with pytest.raises(ConfigError, match="OTEL_METRICS_EXPORTER: prometheus"):
        cfg(OTEL_METRICS_EXPORTER="prometheus")
    with pytest.raises(ConfigError, match="http/protobuf"):
        cfg(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4317", OTEL_EXPORTER_OTLP_PROTOCOL="grpc")


def test_without_an_exporter_the_instruments_are_no_ops() -> None:
    meter, provider = setup_meter((), interval_ms=1000, service_name="svc-ssp", instance_id="s")
    assert provider is None
    pub, _ = pub_with(meter)
    assert pub.telemetry is not NO_TELEMETRY


async def test_console_exporter_prints_the_instruments(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    meter, provider = setup_meter(("console",), interval_ms=60_000, service_name="svc-ssp",
                                  instance_id="ssp-t")
    assert provider is not None
    pub, _ = pub_with(meter)
    pub.mark("query:v", ["post:1"])
    await pub.flush()
    provider.shutdown(5_000)
    out = capsys.readouterr().out
    assert "ssp_edge_publish_milliseconds" in out and "ssp_edge_pending_operations" in out
    assert '"service.instance.id": "ssp-t"' in out


async def test_otlp_exporter_posts_protobuf_to_the_configured_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[ExportMetricsServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        req = ExportMetricsServiceRequest()
        req.ParseFromString(await request.read())
        got.append(req)
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/metrics", collect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    try:
        meter, provider = setup_meter(("otlp",), interval_ms=60_000, service_name="svc-ssp",
                                      instance_id="ssp-o")
        assert provider is not None
        pub, _ = pub_with(meter)
        pub.mark("query:v", ["post:1"])
        async with pub.hold("query:v"):
            pass
        await pub.flush()
        # The exporter is synchronous (requests): flush from a thread, the server runs here.
        assert await asyncio.to_thread(provider.force_flush, 10_000)
        await asyncio.to_thread(provider.shutdown, 5_000)
    finally:
        await runner.cleanup()
    names = {m.name for r in got for rm in r.resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    assert names == SPEC_NAMES
    attrs = {kv.key: kv.value.string_value for kv in got[0].resource_metrics[0].resource.attributes}
    assert attrs["service.name"] == "svc-ssp" and attrs["service.instance.id"] == "ssp-o"
