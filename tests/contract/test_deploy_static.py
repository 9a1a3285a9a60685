"""docker-compose.yml and the one Dockerfile, checked without a Docker engine: the compose
file against the Compose Specification's JSON Schema, and images, ports and environment
variables against the supervisor's service table and the settings classes."""

from __future__ import annotations

import json
import os
import re
import secrets
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic_settings import BaseSettings

from tether_approvals.settings import ApprovalSettings
from tether_brain.settings import BrainSettings
from tether_client.server.supervisor import SERVICES, ServiceSpec
from tether_common.placeholders import placeholder_secrets
from tether_common.settings import CommonSettings
from tether_common.topology import SECRET_ENV
from tether_gateway.settings import GatewaySettings
from tether_output_store.settings import OutputSettings
from tether_tools_runner.settings import RunnerSettings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"  # every service's image
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
    assert dockerfile == DOCKERFILE
    assert entry["build"]["args"]["SERVICE"] == spec.name
    text = dockerfile.read_text()
    # The image installs the distribution named after SERVICE, and its sources.
    assert '--package "tether-${SERVICE}"' in text
    assert "COPY services/${SERVICE} services/${SERVICE}" in text
    package = spec.module.replace("_", "-")
    assert package == f"tether-{spec.name}"
    assert (ROOT / "services" / spec.name / "pyproject.toml").read_text().count(
        f'name = "{package}"'
    ) == 1
    assert 'CMD ["tether-service"]' in text  # written from the topology (test_service_table)
    settings_cls = SETTINGS[spec.name]
    assert settings_cls.model_config.get("env_prefix") == spec.env_prefix
    assert settings_cls.model_fields["http_port"].default == spec.default_port
    assert "USER tether" in text
    for name in re.findall(r"\b(TETHER_[A-Z_]+)=", text):
        assert name in KNOWN_ENV, f"{dockerfile.name} sets unknown {name}"


def test_compose_environment_names_real_settings(compose: dict[str, Any]) -> None:
    for name, entry in compose["services"].items():
        for var in entry.get("environment", {}):
            if var.startswith("TETHER_"):
                assert var in KNOWN_ENV, f"{name}: {var} is read by no settings class"


def test_the_dockerfile_copies_every_workspace_member() -> None:
    members = [p.parent for p in ROOT.glob("*/*/pyproject.toml")]
    text = DOCKERFILE.read_text()
    for member in members:
        rel = member.relative_to(ROOT)
        assert f"COPY {rel}/pyproject.toml {rel}/" in text, rel


def test_there_is_one_dockerfile() -> None:
    found = [*ROOT.glob("services/*/Dockerfile*"), *ROOT.glob("deploy/**/Dockerfile*")]
    assert found == [DOCKERFILE]


# Compose's variable forms: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}.
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
TETHER_SERVICES = [s.name for s in SERVICES]
SECRET_VAR = re.compile(r"(PASSWORD|TOKEN|KEY|SECRET)$")


class MissingVariableError(Exception):
    """Compose would stop: a `${VAR:?}` has no value."""


def interpolate(text: str, env: dict[str, str]) -> str:
    """A compose value as compose would read it with `env` as its `.env`."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"] or ""
        value = env.get(name)
        unset = value is None or (op.startswith(":") and value == "")
        if op.endswith("?") and unset:
            raise MissingVariableError(name)
        return arg if unset and op.endswith("-") else (value or "")

    return INTERPOLATION.sub(one, text)


def variables(node: Any) -> list[tuple[str, str, str]]:
    """Every `${…}` in the compose file's values (comments are not read): name, op, arg."""
    if isinstance(node, dict):
        return [v for child in node.values() for v in variables(child)]
    if isinstance(node, list):
        return [v for child in node for v in variables(child)]
    return INTERPOLATION.findall(node) if isinstance(node, str) else []


def env_example() -> dict[str, str]:
    pairs = [line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines()]
    return {p[0]: p[1] for p in pairs if len(p) == 2 and not p[0].startswith("#")}


def service_env(compose: dict[str, Any], name: str, env: dict[str, str]) -> dict[str, str]:
    raw = compose["services"][name].get("environment", {})
    return {k: interpolate(str(v), env) for k, v in raw.items()}


def test_env_example_gives_every_variable_compose_reads(compose: dict[str, Any]) -> None:
    names = {name for name, _, _ in variables(compose)}
    assert names == set(env_example()), names ^ set(env_example())


def test_every_secret_comes_from_env_without_a_default(compose: dict[str, Any]) -> None:
    """A secret is `${VAR:?…}`: compose stops without `.env`, never uses a known value."""
    used = variables(compose)
    for name, op, arg in used:
        if SECRET_VAR.search(name) and not name.startswith("TETHER_GATEWAY_"):
            assert op == ":?", f"{name} has a default ({op}{arg})"
    # Provider keys are optional: empty is "not configured", never a shared value.
    for name, op, arg in used:
        if name.startswith("TETHER_GATEWAY_") and name.endswith("_KEY"):
            assert (op, arg) == (":-", ""), name
    with pytest.raises(MissingVariableError):
        service_env(compose, "brain", {})


@pytest.mark.parametrize("name", TETHER_SERVICES)
def test_each_service_refuses_the_env_example_and_accepts_real_secrets(
    compose: dict[str, Any], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`.env.example` copied as is: the service's own start check names what to change;
    with every change-me replaced it passes."""
    example = env_example()
    for var in [v for v in os.environ if v.startswith("TETHER_")]:
        monkeypatch.delenv(var)
    for var, value in service_env(compose, name, example).items():
        monkeypatch.setenv(var, value)
    refused = {p.setting for p in placeholder_secrets(CommonSettings(), SETTINGS[name]())}
    assert {"TETHER_NATS_PASSWORD", "TETHER_DATABASE_URL", "TETHER_OPERATOR_TOKEN"} <= refused
    filled = {k: secrets.token_hex(20) if v == "change-me" else v for k, v in example.items()}
    for var, value in service_env(compose, name, filled).items():
        monkeypatch.setenv(var, value)
    assert placeholder_secrets(CommonSettings(), SETTINGS[name]()) == []


# The keys the supervisor hands only to the services that use them (`tether up`'s).
SERVICE_KEYS = {name: who for name, who in SECRET_ENV.items() if name.endswith("_KEY") and who}


@pytest.mark.parametrize("variable", sorted(SERVICE_KEYS))
def test_each_services_own_key_reaches_exactly_its_holders(
    compose: dict[str, Any], variable: str
) -> None:
    """A key `tether up` gives some services (topology.SECRET_ENV) compose gives them
    too, from `.env` (a missing one stops compose), and no other service."""
    given = {
        name
        for name, entry in compose["services"].items()
        if variable in entry.get("environment", {})
    }
    assert given == set(SERVICE_KEYS[variable]), variable
    assert variable in env_example()
    assert variables(compose).count((variable, ":?", "set it in .env")) == len(given)


def test_provider_keys_reach_the_gateway_only(compose: dict[str, Any]) -> None:
    for name, entry in compose["services"].items():
        if name != "gateway":
            assert not [v for v in entry.get("environment", {}) if v.endswith("_API_KEY")], name
    assert {"TETHER_GATEWAY_OPENAI_API_KEY", "TETHER_GATEWAY_ANTHROPIC_API_KEY"} <= set(
        compose["services"]["gateway"]["environment"]
    )


def test_published_ports_listen_on_loopback_by_default(compose: dict[str, Any]) -> None:
    published = 0
    for name, entry in compose["services"].items():
        for port in entry.get("ports", []):
            assert isinstance(port, str), (name, port)  # the short form names the address
            host_ip, host_port, container_port = interpolate(port, {}).rsplit(":", 2)
            assert host_ip == "127.0.0.1", (name, port)
            assert host_port == container_port
            published += 1
    assert published >= 4
    assert "0.0.0.0" not in (ROOT / "docker-compose.yml").read_text()


def test_the_runner_container_lets_bubblewrap_build_its_sandbox(compose: dict[str, Any]) -> None:
    runner = compose["services"]["tools-runner"]
    options = runner["security_opt"]
    (seccomp,) = [o.split("=", 1)[1] for o in options if o.startswith("seccomp=")]
    assert ROOT / seccomp == ROOT / "deploy" / "seccomp" / "tether-bwrap.json"
    assert (ROOT / seccomp).is_file()
    assert {"apparmor=unconfined", "systempaths=unconfined"} <= set(options)
    assert "no-new-privileges:true" in options
    assert runner["cap_drop"] == ["ALL"]
    assert "cap_add" not in runner
    assert "privileged" not in runner
    # Only the runner is loosened.
    for name, entry in compose["services"].items():
        if name != "tools-runner":
            assert "security_opt" not in entry, name


def final_stage(dockerfile: Path) -> str:
    return dockerfile.read_text().rsplit("\nFROM ", 1)[1]


def test_the_runner_image_gives_the_service_user_its_workspace(compose: dict[str, Any]) -> None:
    stage = final_stage(DOCKERFILE)
    assert 'if [ "$SERVICE" = tools-runner ]' in stage
    assert "install -d -o tether -g tether -m 0750 /workspace" in stage
    install = stage.index("install -d -o tether")
    assert stage.index("useradd") < install < stage.index("USER tether")
    runner = compose["services"]["tools-runner"]
    assert runner["environment"]["TETHER_RUNNER_WORKSPACE"] == "/workspace"
    assert "workspace:/workspace" in runner["volumes"]


def test_the_brain_image_ships_the_project_skills() -> None:
    stage = final_stage(DOCKERFILE)
    assert "WORKDIR /app" in stage
    assert "COPY skills /app/skills" in stage
    # The brain reads `skills/` relative to its working directory, after $TETHER_HOME's.
    defaults = BrainSettings.model_fields["skill_folders"].get_default(call_default_factory=True)
    assert Path("skills") in defaults
    assert list((ROOT / "skills").glob("*/SKILL.md"))


def test_an_empty_provider_key_leaves_the_provider_unconfigured(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`.env.example` leaves the keys empty: the gateway must read "no key", not a key ""."""
    for var, value in service_env(compose, "gateway", env_example()).items():
        monkeypatch.setenv(var, value)
    settings = GatewaySettings()
    assert settings.openai_api_key is None
    assert settings.anthropic_api_key is None
    assert settings.anthropic_missing() == "TETHER_GATEWAY_ANTHROPIC_API_KEY"


def test_images_are_named_from_one_prefix_and_tag(compose: dict[str, Any]) -> None:
    for spec in SERVICES:
        image = compose["services"][spec.name]["image"]
        assert interpolate(image, {}) == f"tether/{spec.name}:dev"
        named = {"TETHER_IMAGE_PREFIX": "registry.example:5000/t", "TETHER_IMAGE_TAG": "1.2"}
        assert interpolate(image, named) == f"registry.example:5000/t/{spec.name}:1.2"
    assert "ghcr.io/example" not in (ROOT / "docker-compose.yml").read_text()


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_each_dockerfile_takes_its_base_images_as_build_arguments(
    compose: dict[str, Any], spec: ServiceSpec
) -> None:
    """No stage names a registry itself: a build without one passes local base images."""
    text = DOCKERFILE.read_text()
    froms = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert froms == ["${UV_IMAGE}", "${PYTHON_IMAGE}", "${PYTHON_IMAGE}"], froms
    assert "COPY --from=uv " in text
    assert "COPY --from=ghcr.io" not in text
    args = compose["services"][spec.name]["build"]["args"]
    assert set(args) == {"PYTHON_IMAGE", "UV_IMAGE", "SERVICE"}
    local = env_file(ROOT / "deploy" / "docker" / "local.env")
    assert interpolate(args["PYTHON_IMAGE"], local) == local["TETHER_PYTHON_IMAGE"]
    assert interpolate(args["UV_IMAGE"], local) == local["TETHER_UV_IMAGE"]


def env_file(path: Path) -> dict[str, str]:
    pairs = (line.partition("=") for line in path.read_text().splitlines())
    return {name: value for name, sep, value in pairs if sep and not name.startswith("#")}


def test_every_container_has_cpu_and_memory_limits(compose: dict[str, Any]) -> None:
    for name, entry in compose["services"].items():
        assert float(entry["cpus"]) > 0, name
        assert re.fullmatch(r"\d+[mg]", entry["mem_limit"]), name


def test_observability_is_opt_in_and_grafana_has_no_default_login(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name in ("jaeger", "otel-collector", "prometheus", "grafana"):
        assert services[name]["profiles"] == ["observability"], name
    core = {n for n, s in services.items() if "profiles" not in s}
    assert core == {"nats", "postgres", *TETHER_SERVICES}
    grafana = services["grafana"]["environment"]
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert "GF_AUTH_ANONYMOUS_ORG_ROLE" not in grafana
    with pytest.raises(MissingVariableError):
        interpolate(grafana["GF_SECURITY_ADMIN_PASSWORD"], {})
    assert env_example()["GRAFANA_ADMIN_PASSWORD"] == "change-me"
    assert "change-me" in " ".join(services["grafana"]["entrypoint"])  # refused at start


def test_the_build_context_leaves_out_environments_and_secrets() -> None:
    """.dockerignore allows only what the Dockerfiles copy."""
    rules = [
        line for line in (ROOT / ".dockerignore").read_text().splitlines() if line[:1] not in "#"
    ]
    assert rules[0] == "**"  # everything out, then the few things the images need back
    allowed = [r[1:] for r in rules if r.startswith("!")]
    for needed in ("pyproject.toml", "uv.lock", "skills/"):
        assert needed in allowed
    for secret_or_bulk in (".venv", ".env", ".git", ".tools", "tests", "bench"):
        assert not [a for a in allowed if a.startswith(secret_or_bulk)], secret_or_bulk
