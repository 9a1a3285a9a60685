"""The OpenTelemetry instruments every service shares, declared once, and the names they
take in Prometheus.

Each instrument is declared by an `InstrumentSpec`, so the dashboard test can check every
PromQL query against this table. The collector's Prometheus exporter turns `.` into `_`,
adds the unit (`s` → `_seconds`, `By` → `_bytes`; units in braces such as `{run}` add
nothing) and `_total` for counters; histograms become `_bucket`, `_sum` and `_count`.
An up-down counter becomes a plain gauge.

Each spec names the attributes its instrument keeps (`attributes`; a view drops any
other, `telemetry.attribute_views`); keep their values few (status, code, tool, provider,
model), never ids, tenants or arguments: every service serves them at `/metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from opentelemetry import metrics

Kind = Literal["counter", "updown", "histogram"]

# Seconds, from a fast tool call to a long model generation or approval wait.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
DECISION_BUCKETS_S = (1, 5, 10, 30, 60, 120, 180, 300, 600, 1800, 3600)

PROMETHEUS_UNITS = {"s": "seconds", "By": "bytes", "ms": "milliseconds"}


@dataclass(frozen=True, slots=True)
class InstrumentSpec:
    name: str
    kind: Kind
    unit: str
    description: str
    buckets: tuple[float, ...] = ()
    attributes: tuple[str, ...] = ()

    @property
    def prometheus_name(self) -> str:
        base = self.name.replace(".", "_")
        suffix = PROMETHEUS_UNITS.get(self.unit, "")
        if suffix and not base.endswith(suffix):
            base = f"{base}_{suffix}"
        return f"{base}_total" if self.kind == "counter" else base

    @property
    def prometheus_series(self) -> tuple[str, ...]:
        """Every series name a query may use for this instrument."""
        name = self.prometheus_name
        if self.kind == "histogram":
            return (f"{name}_bucket", f"{name}_sum", f"{name}_count")
        return (name,)


SPECS: tuple[InstrumentSpec, ...] = (
    InstrumentSpec(
        "tether.runs.started",
        "counter",
        "{run}",
        "Runs started, by provider (and depth, for sub-agents)",
        attributes=("provider", "depth"),
    ),
    InstrumentSpec(
        "tether.runs.ended", "counter", "{run}", "Runs ended, by status", attributes=("status",)
    ),
    InstrumentSpec(
        "tether.runs.fenced",
        "counter",
        "{run}",
        "Runs a replica stopped acting on (lease unproven)",
    ),
    InstrumentSpec(
        "tether.steps",
        "counter",
        "{step}",
        "Loop steps taken, by kind (tool: its model called tools; model: it did not)",
        attributes=("kind",),
    ),
    InstrumentSpec(
        "tether.step.duration",
        "histogram",
        "s",
        "Step wall time, by kind",
        LATENCY_BUCKETS_S,
        attributes=("kind",),
    ),
    InstrumentSpec(
        "tether.tool.calls",
        "counter",
        "{call}",
        "Tool calls, by tool and outcome",
        attributes=("tool", "outcome"),
    ),
    InstrumentSpec(
        "tether.tool.duration",
        "histogram",
        "s",
        "Tool run time, by tool",
        LATENCY_BUCKETS_S,
        attributes=("tool",),
    ),
    InstrumentSpec(
        "tether.denials",
        "counter",
        "{denial}",
        "Gate refusals, by gate (validation, permissions, budget, approval) and code",
        attributes=("gate", "code"),
    ),
    InstrumentSpec(
        "tether.hooks.failures",
        "counter",
        "{failure}",
        "Hooks that did not answer usably (timeout, unreachable, malformed, too large, "
        "refused), by point, transport, reason and failure mode",
        attributes=("point", "transport", "reason", "mode"),
    ),
    InstrumentSpec("tether.approvals.pending", "updown", "{approval}", "Approvals now pending"),
    InstrumentSpec(
        "tether.approval.decision.duration",
        "histogram",
        "s",
        "Request to decision, by decision",
        DECISION_BUCKETS_S,
        attributes=("decision",),
    ),
    InstrumentSpec(
        "tether.model.tokens",
        "counter",
        "{token}",
        "Tokens, by provider, model and direction",
        attributes=("provider", "model", "direction"),
    ),
    InstrumentSpec(
        "tether.model.cost",
        "counter",
        "{USD}",
        "Cost in US dollars, by provider, model",
        attributes=("provider", "model"),
    ),
    InstrumentSpec(
        "tether.model.duration",
        "histogram",
        "s",
        "Model generation time, by provider and model",
        LATENCY_BUCKETS_S,
        attributes=("provider", "model"),
    ),
    InstrumentSpec(
        "tether.bus.errors",
        "counter",
        "{error}",
        "Bus messages refused or failed, by service and code",
        attributes=("service", "code"),
    ),
    InstrumentSpec(
        "tether.bus.cancelled",
        "counter",
        "{handler}",
        "Handlers cancelled because their caller went away (Route.cancellable), by service",
        attributes=("service",),
    ),
    InstrumentSpec(
        "tether.http.errors",
        "counter",
        "{error}",
        "HTTP error answers, by service and code",
        attributes=("service", "code"),
    ),
    InstrumentSpec(
        "tether.outputs.offloaded", "counter", "By", "Bytes offloaded to the output-store"
    ),
    InstrumentSpec(
        "tether.loop.lag",
        "histogram",
        "s",
        "How late the event loop woke a timer (each tick of tether_common.looplag), by service",
        LATENCY_BUCKETS_S,
        attributes=("service",),
    ),
)

METER_NAME = "tether"
meter = metrics.get_meter(METER_NAME)


_SPECS = {spec.name: spec for spec in SPECS}


def _counter(name: str) -> metrics.Counter:
    spec = _SPECS[name]
    return meter.create_counter(name, unit=spec.unit, description=spec.description)


def _updown(name: str) -> metrics.UpDownCounter:
    spec = _SPECS[name]
    return meter.create_up_down_counter(name, unit=spec.unit, description=spec.description)


def _histogram(name: str) -> metrics.Histogram:
    spec = _SPECS[name]
    return meter.create_histogram(
        name,
        unit=spec.unit,
        description=spec.description,
        explicit_bucket_boundaries_advisory=spec.buckets,
    )


runs_started = _counter("tether.runs.started")
runs_ended = _counter("tether.runs.ended")
runs_fenced = _counter("tether.runs.fenced")
steps = _counter("tether.steps")
step_duration = _histogram("tether.step.duration")
tool_calls = _counter("tether.tool.calls")
tool_duration = _histogram("tether.tool.duration")
denials = _counter("tether.denials")
hook_failures = _counter("tether.hooks.failures")
approvals_pending = _updown("tether.approvals.pending")
approval_decision_duration = _histogram("tether.approval.decision.duration")
model_tokens = _counter("tether.model.tokens")
model_cost = _counter("tether.model.cost")
model_duration = _histogram("tether.model.duration")
bus_errors = _counter("tether.bus.errors")
bus_cancelled = _counter("tether.bus.cancelled")
http_errors = _counter("tether.http.errors")
outputs_offloaded = _counter("tether.outputs.offloaded")
loop_lag = _histogram("tether.loop.lag")
