"""OpenTelemetry metrics shared by every process of ours: which exporters the standard OTEL_*
environment asks for, the SDK meter provider that runs them, and the HTTP request metrics of
our Falcon listeners (the SSP gateway, the scheduler's ingest and admin listeners).

Export only when asked (`metrics_exporters`): `OTEL_METRICS_EXPORTER` = `otlp` and/or
`console` (`none` or unset: no export), or, with that unset, `OTEL_EXPORTER_OTLP_ENDPOINT` /
`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` set; `OTEL_SDK_DISABLED=true` switches it off. `otlp` is
OTLP over HTTP/protobuf (its endpoint, headers, timeout and TLS are the standard
`OTEL_EXPORTER_OTLP_*` variables, read by the exporter); `console` prints JSON on stdout.
Without an exporter the meter is the API's no-op one: instruments cost nothing.

Request metrics (`RequestMetrics`, OpenTelemetry HTTP semantic conventions):
`http.server.request.duration` (histogram, seconds) with `http.request.method`, `http.route`
(the route template, never the raw path: a view id must not become a label) and
`http.response.status_code`, and `http.server.active_requests` (up-down counter, method and
route).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics
from opentelemetry.metrics import Meter

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

log = logging.getLogger("ipc.otel")

#: exporters installed with the project
METRICS_EXPORTERS = ("otlp", "console")
DEFAULT_EXPORT_INTERVAL_MS = 60_000
REQUEST_DURATION = "http.server.request.duration"
ACTIVE_REQUESTS = "http.server.active_requests"


class OtelConfigError(ValueError):
    """An OTEL_* variable asks for something that is not installed or not a number."""


def metrics_exporters(env: Mapping[str, str]) -> tuple[str, ...]:
    """The exporters the standard environment asks for (`()`: no export); OtelConfigError
    for an exporter or an OTLP protocol that is not installed."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    raw = env.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    if raw:
        names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
        if names == ("none",):
            return ()
        bad = [n for n in names if n not in METRICS_EXPORTERS]
        if bad:
            raise OtelConfigError(f"OTEL_METRICS_EXPORTER: {', '.join(bad)[:100]} is not "
                                  f"available (installed: {', '.join(METRICS_EXPORTERS)}, or none)")
    elif env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip() or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        names = ("otlp",)
    else:
        return ()
    protocol = (env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "").strip()
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip() or "http/protobuf")
    if "otlp" in names and protocol != "http/protobuf":
        raise OtelConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol[:40]!r} is not installed; "
                              "OTLP metrics are exported over http/protobuf only")
    return names


def export_interval_ms(env: Mapping[str, str]) -> int:
    """`OTEL_METRIC_EXPORT_INTERVAL` (ms, default 60000)."""
    raw = env.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    if not raw:
        return DEFAULT_EXPORT_INTERVAL_MS
    try:
        value = int(raw)
    except ValueError:
        raise OtelConfigError(f"OTEL_METRIC_EXPORT_INTERVAL must be an integer (ms), got "
                              f"{raw[:40]!r}") from None
    if value < 1:
        raise OtelConfigError(f"OTEL_METRIC_EXPORT_INTERVAL must be >= 1, got {value}")
    return value


def setup_meter(exporters: tuple[str, ...], *, interval_ms: int, service_name: str,
                instance_id: str, meter_name: str) -> tuple[Meter, MeterProvider | None]:
    """A meter named `meter_name` and the SDK provider to shut down (None: no export, the
    meter is the no-op one). The OTLP exporter is imported only when asked for."""
    if not exporters:
        return metrics.NoOpMeter(meter_name), None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricExporter,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import Resource

    readers = []
    for name in exporters:
        exporter: MetricExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporter = OTLPMetricExporter()  # endpoint, headers, TLS: OTEL_EXPORTER_OTLP_*
        else:
            exporter = ConsoleMetricExporter(out=sys.stdout)  # today's stdout, not import time
        readers.append(PeriodicExportingMetricReader(exporter, export_interval_millis=interval_ms))
    # Resource.create also merges OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES.
    resource = Resource.create({"service.name": service_name,
                                "service.instance.id": instance_id})
    provider = MeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False)
    log.info("OpenTelemetry metrics (%s): exporting to %s every %d ms", service_name,
             ", ".join(exporters), interval_ms)
    return provider.get_meter(meter_name), provider


class RequestMetrics:
    """Falcon ASGI middleware: duration and in-flight count of every request, by method,
    route template and status (see the module docstring)."""

    def __init__(self, meter: Meter) -> None:
        self._duration = meter.create_histogram(
            REQUEST_DURATION, unit="s", description="duration of HTTP server requests")
        self._active = meter.create_up_down_counter(
            ACTIVE_REQUESTS, unit="{request}", description="HTTP server requests in flight")

    @staticmethod
    def _route(req: Any) -> str:
        # The matched template (`/debug/view/{view_id}`); unmatched paths share one label.
        return getattr(req, "uri_template", None) or "unmatched"

    async def process_resource(self, req: Any, resp: Any, resource: Any, params: Any) -> None:
        """Counts the request as in flight once its route is known."""
        route = self._route(req)
        req.context.otel_route = route
        self._active.add(1, {"http.request.method": req.method, "http.route": route})

    async def process_request(self, req: Any, resp: Any) -> None:
        """Starts the clock."""
        req.context.otel_started = time.perf_counter()

    async def process_response(self, req: Any, resp: Any, resource: Any,
                               req_succeeded: bool) -> None:
        """Records the duration with the final status (errors included)."""
        started = getattr(req.context, "otel_started", None)
        if started is None:
            return
        route = getattr(req.context, "otel_route", None)
        if route is not None:
            self._active.add(-1, {"http.request.method": req.method, "http.route": route})
        status = resp.status_code if hasattr(resp, "status_code") else int(
            str(resp.status).split()[0])
        self._duration.record(time.perf_counter() - started, {
            "http.request.method": req.method, "http.route": route or self._route(req),
            "http.response.status_code": status})


__all__ = ["ACTIVE_REQUESTS", "METRICS_EXPORTERS", "REQUEST_DURATION", "OtelConfigError",
           "RequestMetrics", "export_interval_ms", "metrics_exporters", "setup_meter"]
