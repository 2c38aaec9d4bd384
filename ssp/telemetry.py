"""OpenTelemetry instruments of edge publication (spec "Events" item 10).

Thirteen instruments on the meter `ssp.publisher`, names exactly as the spec lists them:

| instrument | kind | what it measures |
|---|---|---|
| `ssp_edge_lock_wait_milliseconds` | histogram | how long the hub waited for a flush holding a view before writing that view's `_00_query` row itself (`Publisher.hold`) |
| `ssp_edge_lock_hold_milliseconds` | histogram | how long views were held: one flush from taking its views to releasing them, or one `Publisher.hold` |
| `ssp_edge_publish_milliseconds` | histogram | per view in a committed flush: from its oldest pending change to the commit (ingest-to-edge latency) |
| `ssp_edge_transaction_milliseconds` | histogram | one flush's database transaction, attribute `outcome` = `ok` or `error` |
| `ssp_edge_publish_failures_total` | counter | flushes that failed (their work is put back and retried) |
| `ssp_edge_overload_rejections` | counter | ingests answered 503 because publication slots or the pending-work thresholds were full |
| `ssp_edge_pending_batches` | gauge | views with pending work (marks, (re)materialisations, teardowns) |
| `ssp_edge_pending_operations` | gauge | edge operations waiting to be written |
| `ssp_edge_pending_bytes` | gauge | their estimated size |
| `ssp_edge_oldest_age_milliseconds` | gauge | age of the oldest pending change (0 when idle) |
| `ssp_edge_parked_batches` | gauge | always 0: a failed flush puts its work back, nothing is parked |
| `ssp_edge_last_success_epoch_milliseconds` | gauge | when the last flush committed (epoch ms, 0 before the first) |
| `ssp_edge_connection_generation` | gauge | reconnects of the publication connection since start |

The gauges and the two counters are observed from the same figures the heartbeat's
`publication` object carries, so they cost nothing between exports. The histograms are fed by
one-line hooks in `ssp.publisher` (`EdgeHooks`); a publisher without telemetry keeps the no-op
`NO_TELEMETRY`.

Export (`setup_meter`): only when the standard environment asks for it (read by
`ssp.config`): `OTEL_METRICS_EXPORTER` = `otlp` and/or `console` (`none` or unset: no export),
or, with that unset, `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
set. `otlp` is OTLP over HTTP/protobuf (`opentelemetry-exporter-otlp-proto-http`, installed
with the project; its endpoint, headers, timeout and TLS settings are the standard
`OTEL_EXPORTER_OTLP_*` variables, read by the exporter). `console` prints each export as JSON
on stdout. Interval: `OTEL_METRIC_EXPORT_INTERVAL` (ms, default 60000). Without an exporter
the instruments are the API's no-op ones.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ssp.publisher import NO_TELEMETRY, EdgeHooks, PublicationFigures, Publisher

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

log = logging.getLogger("ssp.telemetry")

METER_NAME = "ssp.publisher"

HISTOGRAMS = ("ssp_edge_lock_wait_milliseconds", "ssp_edge_lock_hold_milliseconds",
              "ssp_edge_publish_milliseconds", "ssp_edge_transaction_milliseconds")
COUNTERS = ("ssp_edge_publish_failures_total", "ssp_edge_overload_rejections")
GAUGES = ("ssp_edge_pending_batches", "ssp_edge_pending_operations", "ssp_edge_pending_bytes",
          "ssp_edge_oldest_age_milliseconds", "ssp_edge_parked_batches",
          "ssp_edge_last_success_epoch_milliseconds", "ssp_edge_connection_generation")
INSTRUMENTS = HISTOGRAMS + COUNTERS + GAUGES


def _ms(since: float, now: float | None = None) -> float:
    return max(0.0, ((time.monotonic() if now is None else now) - since) * 1000)


class EdgeTelemetry(EdgeHooks):
    """The spec's `ssp_edge_*` instruments for one publisher: the gauges and counters
    observe its one figures snapshot (`Publisher.figures`, what heartbeats and
    `/debug/memory` report too); the histograms are fed by its hooks."""

    def __init__(self, meter: Meter, publisher: Publisher) -> None:
        self.pub = publisher
        h = {name: meter.create_histogram(name, unit="ms", description=desc)
             for name, desc in (
                 (HISTOGRAMS[0], "wait for a view held by a flush in flight"),
                 (HISTOGRAMS[1], "time views were held by a flush or by the hub"),
                 (HISTOGRAMS[2], "oldest pending change of a view to the commit of its edges"),
                 (HISTOGRAMS[3], "one edge-publication database transaction"))}
        self._wait, self._hold, self._publish, self._tx = (h[n] for n in HISTOGRAMS)
        meter.create_observable_counter(
            COUNTERS[0], [self._failures], unit="1",
            description="edge publication flushes that failed and were put back")
        meter.create_observable_counter(
            COUNTERS[1], [self._rejections], unit="1",
            description="ingests refused with 503 by the publication admission limits")
        for name, unit, fn, desc in (
                (GAUGES[0], "1", self._batches, "views with pending edge work"),
                (GAUGES[1], "1", self._operations, "edge operations waiting to be written"),
                (GAUGES[2], "By", self._bytes, "estimated size of the pending operations"),
                (GAUGES[3], "ms", self._oldest, "age of the oldest pending change"),
                (GAUGES[4], "1", self._parked, "batches parked after failures (always 0)"),
                (GAUGES[5], "ms", self._last_success, "epoch ms of the last committed flush"),
                (GAUGES[6], "1", self._conn_generation,
                 "reconnects of the publication connection")):
            meter.create_observable_gauge(name, [fn], unit=unit, description=desc)

    # ------------------------------------------------------------------ hooks (event loop)

    def lock_wait(self, since: float) -> float:
        now = time.monotonic()
        self._wait.record(_ms(since, now))
        return now

    def lock_hold(self, since: float) -> None:
        self._hold.record(_ms(since))

    def transaction(self, since: float, ok: bool = True) -> None:
        self._tx.record(_ms(since), {"outcome": "ok" if ok else "error"})

    def published(self, started: Iterable[float], now: float) -> None:
        for s in started:
            self._publish.record(_ms(s, now))

    # ------------------------------------------------------------------ observations
    # Called on the exporter's thread while the event loop mutates the publisher: one
    # snapshot per observation, retried when a concurrent resize interrupts it.

    def _figures(self) -> PublicationFigures | None:
        for _attempt in range(3):
            try:
                return self.pub.figures()
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
        return None

    def _observe(self, name: str) -> list[Observation]:
        f = self._figures()
        return [] if f is None else [Observation(getattr(f, name))]

    def _failures(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("failures")

    def _rejections(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("overload_rejections")

    def _batches(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("pending_batches")

    def _operations(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("pending_operations")

    def _bytes(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("pending_bytes")

    def _oldest(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("oldest_age_ms")

    def _parked(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("parked_batches")

    def _last_success(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("last_success_epoch_ms")

    def _conn_generation(self, _: CallbackOptions) -> list[Observation]:
        return self._observe("connection_generation")


def setup_meter(exporters: tuple[str, ...], *, interval_ms: int, service_name: str,
                instance_id: str) -> tuple[Meter, MeterProvider | None]:
    """The meter for `EdgeTelemetry` and the SDK provider to shut down (None: no export).

    `exporters` come from `SspConfig.metrics_exporters` (`otlp`, `console`); the OTLP
    exporter is imported only when asked for."""
    if not exporters:
        return metrics.NoOpMeter(METER_NAME), None
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
    log.info("OpenTelemetry metrics: exporting to %s every %d ms", ", ".join(exporters),
             interval_ms)
    return provider.get_meter(METER_NAME), provider


def attach(publisher: Publisher, meter: Meter) -> EdgeTelemetry:
    """Instruments on `publisher`; installs its hooks."""
    t = EdgeTelemetry(meter, publisher)
    publisher.telemetry = t
    return t


__all__ = ["COUNTERS", "GAUGES", "HISTOGRAMS", "INSTRUMENTS", "NO_TELEMETRY", "EdgeHooks",
           "EdgeTelemetry", "attach", "setup_meter"]
