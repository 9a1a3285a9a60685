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

# The secrets each service is handed, by environment variable: the supervisor (`tether
# up`, the suite's stacks) passes a secret only to the services named here, whatever its
# own environment holds. The operator token itself reaches no service; the ones holding
# the identity tables get its hash (`OPERATOR_TOKEN_HASH_ENV`), which lets them accept the
# bootstrap admin without holding a credential.
OPERATOR_TOKEN_ENV = "TETHER_OPERATOR_TOKEN"
OPERATOR_TOKEN_HASH_ENV = "TETHER_OPERATOR_TOKEN_SHA256"
_IDENTITY_HOLDERS = frozenset({"brain", "approvals", "output-store"})
SECRET_ENV: dict[str, frozenset[str]] = {
    "TETHER_DECISION_KEY": frozenset({"brain", "approvals"}),
    # Seals tool servers' credentials at rest; only the runner, which sends them, opens them.
    "TETHER_RUNNER_CREDENTIALS_KEY": frozenset({"tools-runner"}),
    OPERATOR_TOKEN_ENV: frozenset(),
    OPERATOR_TOKEN_HASH_ENV: _IDENTITY_HOLDERS,
    "TETHER_DATABASE_URL": frozenset({"brain", "approvals", "output-store", "tools-runner"}),
    "TETHER_TOKEN": frozenset(),  # the command line's own bearer token
    "TETHER_NATS_PASSWORD": frozenset(),  # each service's own comes from its credentials
}
# Environment variables of every service's NATS user, in a server's environment
# (`natsauth --env-passwords`): never a service's.
NATS_SERVER_PASSWORDS_PREFIX = "NATS_PASSWORD_"
# A variable under a service's prefix with one of these endings is a credential of that
# service's (a provider's API key, a search key): no other service gets it.
CREDENTIAL_SUFFIXES = ("_API_KEY", "_TOKEN", "_PASSWORD", "_SECRET", "_KEY")


def may_see(service: str, variable: str) -> bool:
    """Whether `service` may be handed environment variable `variable` (a secret of
    another's, or a credential under another service's prefix, it may not)."""
    if variable in SECRET_ENV:
        return service in SECRET_ENV[variable]
    if variable.startswith(NATS_SERVER_PASSWORDS_PREFIX):
        return False
    owner = next((s for s in SERVICES if variable.startswith(s.env_prefix)), None)
    return owner is None or owner.name == service or not variable.endswith(CREDENTIAL_SUFFIXES)


def port_of(name: str) -> int:
    """The usual HTTP port of service `name` (a KeyError names a service that is not)."""
    return BY_NAME[name].default_port


__all__ = [
    "BY_NAME",
    "CREDENTIAL_SUFFIXES",
    "LOCAL_MODEL_PORT",
    "LOOPBACK",
    "NATS_MONITOR_PORT",
    "NATS_PORT",
    "OPERATOR_TOKEN_ENV",
    "OPERATOR_TOKEN_HASH_ENV",
    "POSTGRES_PORT",
    "SECRET_ENV",
    "SERVICES",
    "ServiceSpec",
    "may_see",
    "port_of",
]
