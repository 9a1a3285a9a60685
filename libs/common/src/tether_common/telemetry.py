"""OpenTelemetry set-up and structured JSON logs carrying run and trace ids.

Traces go to OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, to the console when
`TETHER_TRACE_CONSOLE` is true, and nowhere otherwise (spans still carry context across
the bus so ids appear in logs); requests that only read start none (`traces.QuietReads`).
Metrics (the instruments in `metrics.py`, and FastAPI's `http.server.*`) are served in
Prometheus' text format at every service's `/metrics` (`PROMETHEUS`, read on each
scrape), and also go to OTLP when that endpoint is set.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.metrics.view import View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, Sampler, _get_from_env_or_default
from prometheus_client import CollectorRegistry

from tether_common.metrics import METER_NAME, SPECS
from tether_common.settings import CommonSettings
from tether_common.traces import QuietReads

# What this process's `/metrics` serves (`http.metrics_router`): filled on each scrape by
# the reader `setup_metrics` installs; empty where it was never called.
PROMETHEUS = CollectorRegistry()

current_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tether_run_id", default=None
)

_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's copy of the message with terminal colours, for its own output
}
# Loggers that tell their routine at INFO (alembic each migration step, uvicorn its start-up
# banner and shutdown steps; the service says "ready" and "stopped" itself): heard from at
# WARNING unless the level asked for is DEBUG.
ROUTINE_LOGGERS = ("alembic", "uvicorn.error")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, service, logger, message, run and trace ids."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        run_id = current_run_id.get()
        if run_id:
            entry["run_id"] = run_id
        span_ctx = trace.get_current_span().get_span_context()
        if span_ctx.is_valid:
            entry["trace_id"] = format(span_ctx.trace_id, "032x")
            entry["span_id"] = format(span_ctx.span_id, "016x")
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """One line for a person (`TETHER_LOG_FORMAT=text`, which `tether up` sets on a
    terminal): time, level, logger, message, then run id, short trace id and the record's
    extra fields as `key=value`."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")  # noqa: DTZ006 - local time for people
        line = f"{when} {record.levelname:<7} {record.name}: {record.getMessage()}"
        context = []
        if run_id := current_run_id.get():
            context.append(f"run={run_id}")
        span_ctx = trace.get_current_span().get_span_context()
        if span_ctx.is_valid:
            context.append(f"trace={format(span_ctx.trace_id, '032x')[:12]}")
        context += [
            f"{key}={value}"
            for key, value in vars(record).items()
            if key not in _STANDARD_ATTRS and not key.startswith("_")
        ]
        if context:
            line += "  " + " ".join(context)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(service: str, settings: CommonSettings) -> None:
    handler = logging.StreamHandler(sys.stdout)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter(service))
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level)
    for noisy in ("uvicorn.access", "httpx", "nats"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for routine in ROUTINE_LOGGERS:
        logging.getLogger(routine).setLevel(
            logging.NOTSET if settings.log_level == "DEBUG" else logging.WARNING
        )


def setup_tracing(
    service: str, settings: CommonSettings, *, extra: SpanProcessor | None = None
) -> TracerProvider:
    """Install the global tracer provider for `service` (once per process). With nothing
    to export to, spans are not recorded (`ALWAYS_OFF`): each still gets its ids and
    carries the trace across the bus and into the logs, but costs no attributes, events
    or processing (about 3% of the brain's CPU per step when every span was recorded)."""
    processors: list[SpanProcessor] = []
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processors.append(BatchSpanProcessor(OTLPSpanExporter()))
    if settings.trace_console:
        processors.append(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    if extra is not None:
        processors.append(extra)
    resource = Resource.create({"service.name": f"tether-{service}"})
    provider = TracerProvider(resource=resource, sampler=sampler() if processors else ALWAYS_OFF)
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return provider


def sampler() -> Sampler:
    """The SDK's default sampler (`OTEL_TRACES_SAMPLER`, else parent-based always-on),
    with the roots of requests that only read dropped. The default is read by the SDK's
    own (private) function: a copy of its parsing here would be a second one to drift."""
    return QuietReads(_get_from_env_or_default())


def setup_metrics(
    service: str, settings: CommonSettings, *, extra: MetricReader | None = None
) -> MeterProvider:
    """Install the global meter provider for `service`: read by `/metrics` on each scrape
    (`PROMETHEUS`), pushed to OTLP when its endpoint is set, and to `extra` (tests)."""
    del settings  # the OTLP exporter reads the standard OTEL_* variables itself
    readers: list[MetricReader] = [PrometheusMetricReader(registry=PROMETHEUS)]
    if extra is not None:
        readers.append(extra)
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    resource = Resource.create({"service.name": f"tether-{service}"})
    provider = MeterProvider(resource=resource, metric_readers=readers, views=attribute_views())
    metrics.set_meter_provider(provider)
    return provider


def attribute_views() -> list[View]:
    """Each instrument of ours keeps only the attributes its spec names, whatever a caller
    records: no id, tenant or argument can reach a metric (`/metrics` is not behind a
    token; see docs/operations/observability.md)."""
    return [
        View(instrument_name=spec.name, meter_name=METER_NAME, attribute_keys=set(spec.attributes))
        for spec in SPECS
    ]


def setup_telemetry(service: str, settings: CommonSettings) -> TracerProvider:
    setup_logging(service, settings)
    setup_metrics(service, settings)
    return setup_tracing(service, settings)
