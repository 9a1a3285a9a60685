"""docker-compose.yml and the Dockerfiles, checked without a Docker engine: the compose
file against the Compose Specification's JSON Schema, and images, ports and environment
variables against the supervisor's service table and the settings classes."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic_settings import BaseSettings

from tether_approvals.settings import ApprovalSettings
from tether_brain.settings import BrainSettings
from tether_common.settings import CommonSettings
from tether_common.supervisor import SERVICES, ServiceSpec
from tether_gateway.settings import GatewaySettings
from tether_output_store.settings import OutputSettings
from tether_tools_runner.settings import RunnerSettings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS: dict[str, type[BaseSettings]] = {
    "brain": BrainSettings,
    "gateway": GatewaySettings,
    "tools-runner": RunnerSettings,
    "approvals": ApprovalSettings,
    "output-store": OutputSettings,
}


def env_names(cls: type[BaseSettings]) -> set[str]:
    """Every environment variable a settings class reads (field names and aliases)."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for name, field in cls.model_fields.items():
        names.add(f"{prefix}{name}".upper())
        choices = getattr(field.validation_alias, "choices", None) or []
        names.update(str(c).upper() for c in choices)
    return names


KNOWN_ENV = env_names(CommonSettings).union(*(env_names(c) for c in SETTINGS.values()))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def test_compose_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    schema_file = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    validator_cls = jsonschema.validators.validator_for(schema)
    errors = sorted(validator_cls(schema).iter_errors(compose), key=str)
    assert not errors, [e.message for e in errors[:5]]


def test_compose_runs_every_service_and_the_infrastructure(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for needed in ("nats", "postgres", "jaeger", *SETTINGS):
        assert needed in services, needed
    assert "-js" in services["nats"]["command"]


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_each_service_image_is_consistent(compose: dict[str, Any], spec: ServiceSpec) -> None:
    entry = compose["services"][spec.name]
    assert entry["build"]["context"] == "."
    dockerfile = ROOT / entry["build"]["dockerfile"]
    assert dockerfile == ROOT / "services" / spec.name / "Dockerfile"
    text = dockerfile.read_text()
    package = spec.module.replace("_", "-")
    assert f"--package {package}" in text
    assert (ROOT / "services" / spec.name / "pyproject.toml").read_text().count(
        f'name = "{package}"'
    ) == 1
    assert f'CMD ["python", "-m", "{spec.module}"]' in text
    settings_cls = SETTINGS[spec.name]
    assert settings_cls.model_config.get("env_prefix") == spec.env_prefix
    assert settings_cls.model_fields["http_port"].default == spec.default_port
    assert f"EXPOSE {spec.default_port}" in text
    assert f"{spec.port_env}={spec.default_port}" in text
    assert "USER tether" in text
    for name in re.findall(r"\b(TETHER_[A-Z_]+)=", text):
        assert name in KNOWN_ENV, f"{dockerfile.name} sets unknown {name}"


def test_compose_environment_names_real_settings(compose: dict[str, Any]) -> None:
    for name, entry in compose["services"].items():
        for var in entry.get("environment", {}):
            if var.startswith("TETHER_"):
                assert var in KNOWN_ENV, f"{name}: {var} is read by no settings class"


def test_every_dockerfile_copies_every_workspace_member() -> None:
    members = [p.parent for p in ROOT.glob("*/*/pyproject.toml")]
    for spec in SERVICES:
        text = (ROOT / "services" / spec.name / "Dockerfile").read_text()
        for member in members:
            rel = member.relative_to(ROOT)
            assert f"COPY {rel}/pyproject.toml {rel}/" in text, (spec.name, rel)
