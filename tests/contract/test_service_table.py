"""Service names and ports are declared once (`tether_common.topology`): every settings
default, the supervisor behind `tether up`, the client's default URLs, the images,
`docker-compose.yml` and `deploy/k8s` agree with that table. Static: nothing runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from service_settings import SETTINGS
from tether_client import client, endpoints, local_model, up
from tether_client.server import supervisor
from tether_common import settings as common_settings
from tether_common.topology import (
    BY_NAME,
    LOCAL_MODEL_PORT,
    NATS_MONITOR_PORT,
    NATS_PORT,
    POSTGRES_PORT,
    SERVICES,
    ServiceSpec,
)
from tether_gateway.settings import GatewaySettings

ROOT = Path(__file__).resolve().parents[2]
PORTS = {spec.default_port for spec in SERVICES}
BY_ID = [spec.name for spec in SERVICES]


def test_the_table_names_each_service_and_port_once() -> None:
    assert set(BY_NAME) == set(SETTINGS) == {p.name for p in (ROOT / "services").iterdir()}
    assert len(PORTS) == len(SERVICES)
    assert LOCAL_MODEL_PORT not in PORTS
    assert supervisor.SERVICES is SERVICES  # the supervisor runs exactly the table


@pytest.mark.parametrize("spec", SERVICES, ids=BY_ID)
def test_settings_defaults_are_the_table(spec: ServiceSpec) -> None:
    cls = SETTINGS[spec.name]
    assert cls.model_config.get("env_prefix") == spec.env_prefix
    assert cls.model_fields["http_port"].default == spec.default_port


def test_shared_server_ports_are_the_table() -> None:
    assert common_settings.DEFAULT_NATS_URL.endswith(f":{NATS_PORT}")
    assert (
        f":{POSTGRES_PORT}/" in common_settings.CommonSettings.model_fields["database_url"].default
    )
    assert local_model.LocalModelSettings.model_fields["port"].default == LOCAL_MODEL_PORT
    gateway_local = GatewaySettings.model_fields["local_base_url"].default
    assert f":{LOCAL_MODEL_PORT}/" in gateway_local


def test_the_client_defaults_are_the_table() -> None:
    table = {spec.name: spec.local_url for spec in SERVICES}
    assert table == endpoints.DEFAULT_URLS
    assert BY_NAME["brain"].local_url == client.DEFAULT_API_URL


def test_up_spells_no_port_of_its_own() -> None:
    text = Path(up.__file__).read_text(encoding="utf-8")
    spelled = {int(p) for p in re.findall(r"\b(8[0-9]{3}|4222|5432)\b", text)}
    assert spelled <= PORTS | {LOCAL_MODEL_PORT, NATS_PORT, NATS_MONITOR_PORT, POSTGRES_PORT}
    # Its docstring names the usual range of the services' ports.
    low, high = min(PORTS), max(PORTS)
    assert f"{low}–{high}" in text or not {low, high} & spelled


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


@pytest.mark.parametrize("spec", SERVICES, ids=BY_ID)
def test_compose_publishes_each_service_on_its_port(
    compose: dict[str, Any], spec: ServiceSpec
) -> None:
    entry = compose["services"][spec.name]
    for mapping in entry.get("ports", []):
        assert str(mapping).rsplit(":", 1)[-1] == str(spec.default_port), mapping
        assert str(mapping).rsplit(":", 2)[-2] == str(spec.default_port), mapping
    for name, value in entry.get("environment", {}).items():
        if name == spec.port_env:
            assert str(value) == str(spec.default_port)


def image_commands(tmp: Path, service: str) -> tuple[str, str]:
    """The `tether-service` and `tether-healthcheck` scripts the one Dockerfile writes for
    `service`: its RUN step, run here by sh with this interpreter in the image's place."""
    text = (ROOT / "deploy" / "docker" / "Dockerfile").read_text()
    (step,) = [s for s in re.split(r"\n(?=[A-Z]+ |# )", text) if s.startswith("RUN set -eu")]
    script = step.removeprefix("RUN ").replace("\\\n", "")
    script = script.replace("/app/.venv/bin/python", sys.executable)
    script = script.replace("/app/.venv/bin/", f"{tmp}/")
    subprocess.run(["sh", "-c", script], check=True, env={**os.environ, "SERVICE": service})
    return (tmp / "tether-service").read_text(), (tmp / "tether-healthcheck").read_text()


@pytest.mark.parametrize("spec", SERVICES, ids=BY_ID)
def test_each_image_listens_and_checks_health_on_its_port(
    spec: ServiceSpec, tmp_path: Path
) -> None:
    service, health = image_commands(tmp_path, spec.name)
    assert f'exec python -m {spec.module} "$@"' in service
    # All interfaces unless set: the container's loopback is its own.
    assert f': "${{{spec.env_prefix}HTTP_HOST:=0.0.0.0}}"' in service
    assert f"export {spec.env_prefix}HTTP_HOST" in service
    assert re.findall(r"http://127\.0\.0\.1:(\d+)/healthz", health) == [str(spec.default_port)]


def k8s_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((ROOT / "deploy" / "k8s").rglob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return docs


@pytest.mark.parametrize("spec", SERVICES, ids=BY_ID)
def test_k8s_serves_each_service_on_its_port(spec: ServiceSpec) -> None:
    docs = k8s_documents()
    named = [d for d in docs if d.get("metadata", {}).get("name") == f"tether-{spec.name}"]
    (deployment,) = [d for d in named if d["kind"] == "Deployment"]
    (service,) = [d for d in named if d["kind"] == "Service"]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == spec.name]
    assert [p["containerPort"] for p in container["ports"]] == [spec.default_port]
    assert [p["port"] for p in service["spec"]["ports"]] == [spec.default_port]
    for env in container.get("env", []):
        if env["name"] == spec.port_env:
            assert env["value"] == str(spec.default_port)


def test_k8s_policies_open_only_table_ports_to_the_services() -> None:
    opened = set()
    for doc in k8s_documents():
        if doc.get("kind") != "NetworkPolicy":
            continue
        for rule in doc["spec"].get("ingress", []):
            opened |= {p["port"] for p in rule.get("ports", []) if 8000 <= p["port"] < 9000}
    assert opened
    assert opened <= PORTS, opened - PORTS
