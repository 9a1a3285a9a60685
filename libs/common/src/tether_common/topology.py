"""The one table of Tether's processes: each service's name, import name, settings
prefix and HTTP port, and the ports of the servers it uses (NATS, PostgreSQL, the
bundled model's llama.cpp server). Settings defaults, the supervisor (`tether up`, the
e2e tests), the client's default URLs, `docker-compose.yml` and `deploy/k8s` take these
values or are checked against them (tests/contract/test_service_table.py)."""

from __future__ import annotations

from dataclasses import dataclass

NATS_PORT = 4222
NATS_MONITOR_PORT = 8222  # nats-server's HTTP monitoring (`-m`)
POSTGRES_PORT = 5432
LOCAL_MODEL_PORT = 8705  # `tether up`'s llama.cpp server for the `local` provider
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    module: str
    env_prefix: str
    default_port: int

    @property
    def port_env(self) -> str:
        return f"{self.env_prefix}HTTP_PORT"

    @property
    def local_url(self) -> str:
        """Where the service answers on this machine at its usual port."""
        return f"http://{LOOPBACK}:{self.default_port}"


# In start order: the supervisor starts what others call before them.
SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec("output-store", "tether_output_store", "TETHER_OUTPUTS_", 8702),
    ServiceSpec("approvals", "tether_approvals", "TETHER_APPROVALS_", 8701),
    ServiceSpec("tools-runner", "tether_tools_runner", "TETHER_RUNNER_", 8704),
    ServiceSpec("gateway", "tether_gateway", "TETHER_GATEWAY_", 8703),
    ServiceSpec("brain", "tether_brain", "TETHER_BRAIN_", 8700),
)
BY_NAME: dict[str, ServiceSpec] = {spec.name: spec for spec in SERVICES}


def port_of(name: str) -> int:
    """The usual HTTP port of service `name` (a KeyError names a service that is not)."""
    return BY_NAME[name].default_port


__all__ = [
    "BY_NAME",
    "LOCAL_MODEL_PORT",
    "LOOPBACK",
    "NATS_MONITOR_PORT",
    "NATS_PORT",
    "POSTGRES_PORT",
    "SERVICES",
    "ServiceSpec",
    "port_of",
]
