"""Compose observability and bus configuration, checked without a Docker engine: the
collector, Prometheus and Grafana files parse and agree with each other, every PromQL
series the dashboard reads is an instrument declared in `tether_common.metrics` that
keeps the attributes the panel groups by (and no other), and the NATS configuration
compose mounts is the one generated from `subjects.py`. That each panel has data after a
workload is `tests/e2e/test_one_trace.py`'s."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tether_client.server.embedded import nats_server_binary
from tether_client.server.natsauth import USERS, EnvRef, password_env, render_config
from tether_client.server.supervisor import SERVICES
from tether_common.metrics import METER_NAME, SPECS, InstrumentSpec
from tether_common.subjects import Subjects
from tether_common.telemetry import attribute_views

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SERIES = {series: spec for spec in SPECS for series in spec.prometheus_series}


def load_yaml(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(ROOT / "docker-compose.yml")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DEPLOY / "grafana/dashboards/tether.json").read_text())
    return loaded


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_every_dashboard_series_is_a_declared_instrument(dashboard: dict[str, Any]) -> None:
    used = {m for expr in expressions(dashboard) for m in re.findall(r"\btether_\w+", expr)}
    assert used, "the dashboard queries nothing"
    unknown = used - SERIES.keys()
    assert not unknown, f"not declared in tether_common.metrics: {sorted(unknown)}"
    unused = {spec.name for spec in SPECS} - {SERIES[m].name for m in used}
    assert not unused, f"instruments with no panel: {sorted(unused)}"


def test_the_dashboard_has_the_panels_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    titles = " | ".join(p["title"].lower() for p in dashboard["panels"])
    for needed in ("runs per second", "p50 / p99", "approvals pending", "denials by code"):
        assert needed in titles
    for needed in ("tokens", "cost", "errors by service"):
        assert needed in titles
    histograms = " ".join(expressions(dashboard))
    assert "histogram_quantile(0.99" in histograms
    assert "histogram_quantile(0.5" in histograms


def test_panels_read_the_provisioned_datasource(dashboard: dict[str, Any]) -> None:
    datasources = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")
    (source,) = datasources["datasources"]
    assert source["url"] == "http://prometheus:9090"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]


@pytest.mark.parametrize(
    ("spec_name", "series"),
    [
        ("tether.runs.started", "tether_runs_started_total"),
        ("tether.step.duration", "tether_step_duration_seconds_bucket"),
        ("tether.approvals.pending", "tether_approvals_pending"),
        ("tether.outputs.offloaded", "tether_outputs_offloaded_bytes_total"),
        ("tether.model.cost", "tether_model_cost_total"),
    ],
)
def test_prometheus_names_follow_the_collector(spec_name: str, series: str) -> None:
    assert SERIES[series].name == spec_name


def test_the_collector_pipelines_are_whole_and_feed_prometheus() -> None:
    config = load_yaml(DEPLOY / "otel-collector.yaml")
    for pipeline in config["service"]["pipelines"].values():
        for section in ("receivers", "processors", "exporters"):
            for name in pipeline[section]:
                assert name in config[section], (section, name)
    assert config["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    port = config["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    scrape = load_yaml(DEPLOY / "prometheus.yml")["scrape_configs"]
    targets = [t for job in scrape for c in job["static_configs"] for t in c["targets"]]
    assert f"otel-collector:{port}" in targets
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")


def test_compose_sends_telemetry_to_the_collector(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for needed in ("otel-collector", "prometheus", "grafana", "jaeger"):
        assert needed in services
    for spec in SERVICES:
        env = services[spec.name]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    for name in ("otel-collector", "prometheus", "grafana", "nats"):
        for volume in services[name].get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), (name, source)


def test_compose_mounts_the_generated_nats_config(compose: dict[str, Any]) -> None:
    committed = (DEPLOY / "nats/nats-server.conf").read_text()
    generated = render_config(Subjects(), {u: EnvRef(password_env(u)) for u in USERS})
    assert committed == generated, "regenerate: make nats-config"
    nats = compose["services"]["nats"]
    assert "/etc/nats/nats-server.conf" in nats["command"]
    for user in USERS:
        assert password_env(user) in nats["environment"]


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_each_compose_service_connects_as_itself(compose: dict[str, Any], spec: Any) -> None:
    env = compose["services"][spec.name]["environment"]
    assert env["TETHER_NATS_USER"] == spec.name
    # From .env, with no default: compose stops without it (issue 15, item 9).
    assert f"${{{password_env(spec.name)}:?" in env["TETHER_NATS_PASSWORD"]


def test_nats_server_accepts_the_committed_config() -> None:
    env = os.environ | {password_env(u): f"pw-{u}" for u in USERS}
    done = subprocess.run(
        [str(nats_server_binary()), "-t", "-c", str(DEPLOY / "nats/nats-server.conf")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout


METRICS_SCRIPT = """
import json
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from tether_common import metrics
from tether_common.settings import CommonSettings
from tether_common.telemetry import setup_metrics

reader = InMemoryMetricReader()
setup_metrics("probe", CommonSettings(), extra=reader)
metrics.runs_started.add(1, {"provider": "rules"})
metrics.step_duration.record(0.2, {"kind": "model"})
metrics.approvals_pending.add(1)
metrics.outputs_offloaded.add(9000)
data = reader.get_metrics_data()
found = {m.name: m.unit for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
print(json.dumps(found))
"""


def test_setup_metrics_exports_the_declared_instruments() -> None:
    # A child process: the global meter provider can be installed once per process.
    done = subprocess.run(
        [sys.executable, "-c", METRICS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    specs: dict[str, InstrumentSpec] = {s.name: s for s in SPECS}
    for name in ("tether.runs.started", "tether.step.duration", "tether.approvals.pending"):
        assert found[name] == specs[name].unit
    assert found["tether.outputs.offloaded"] == "By"


def test_each_panel_groups_by_attributes_its_instruments_keep(dashboard: dict[str, Any]) -> None:
    """A panel grouping by an attribute its instrument drops would show one flat line."""
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            grouped = {
                label.strip()
                for labels in re.findall(r"\bby \(([^)]*)\)", expr)
                for label in labels.split(",")
            } - {"le"}
            for series in re.findall(r"\btether_\w+", expr):
                kept = set(SERIES[series].attributes)
                assert grouped <= kept, (panel["title"], series, sorted(grouped - kept))


def _instrument(meter: Meter, spec: InstrumentSpec) -> Callable[[dict[str, str]], None]:
    if spec.kind == "counter":
        return partial(meter.create_counter(spec.name).add, 1)
    if spec.kind == "updown":
        return partial(meter.create_up_down_counter(spec.name).add, 1)
    return partial(meter.create_histogram(spec.name).record, 0.5)


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
@pytest.mark.parametrize("extra", ["run_id", "tenant", "owner", "principal", "arguments"])
def test_an_instrument_keeps_only_the_attributes_its_spec_names(
    spec: InstrumentSpec, extra: str
) -> None:
    """`/metrics` is served without a token: whatever a caller records with a measurement,
    no attribute but those its spec names reaches a reader."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader], views=attribute_views()).get_meter(METER_NAME)
    _instrument(meter, spec)(dict.fromkeys(spec.attributes, "x") | {extra: "acme/run_1"})
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    ]
    assert points
    assert all(set(point.attributes or {}) == set(spec.attributes) for point in points)
