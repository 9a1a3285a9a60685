"""The OpenTelemetry instruments every service shares, declared once."""

from __future__ import annotations

from opentelemetry import metrics

meter = metrics.get_meter("tether")

bus_errors = meter.create_counter(
    "tether.bus.errors", description="Bus messages refused or failed, by service and code"
)
http_errors = meter.create_counter(
    "tether.http.errors", description="HTTP requests answered with an error, by service and code"
)
runs_started = meter.create_counter("tether.runs.started", description="Runs started")
runs_ended = meter.create_counter("tether.runs.ended", description="Runs ended, by status")
steps = meter.create_counter("tether.steps", description="Loop steps taken")
tool_calls = meter.create_counter("tether.tool.calls", description="Tool calls by tool and outcome")
