"""The system as shipped: the bus, the environment and the services as `tether up`
starts them. The suite's stacks are made by these same functions (tests/conftest.py), so
what a test proves is what a person starts: a nats-server locked by the generated
configuration, each service connecting as its own user and handed only the secrets it
uses (`tether_common.topology.SECRET_ENV`), the workspace and home of one installation.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from tether_client.server.embedded import NatsServer, free_port
from tether_client.server.natsauth import (
    CLIENT_USER,
    TlsFiles,
    generate_passwords,
    render_config,
    service_env,
    write_config,
)
from tether_client.server.supervisor import SERVICES, ServiceSpec, Supervisor
from tether_common.settings import CommonSettings
from tether_common.subjects import Subjects

NATS_CONFIG_FILE = "nats/nats-server.conf"
NATS_CLIENT_PASSWORD_FILE = "nats/client-password"


@dataclass
class LockedBus:
    """A running nats-server locked by the generated configuration."""

    url: str
    passwords: dict[str, str]
    server: NatsServer = field(repr=False)
    observers: dict[str, str] = field(default_factory=dict, repr=False)


def tls_files(settings: CommonSettings) -> TlsFiles | None:
    if settings.nats_tls_cert is None or settings.nats_tls_key is None:
        return None
    return TlsFiles(settings.nats_tls_cert, settings.nats_tls_key, settings.nats_tls_ca)


def start_locked_nats(
    base: Path,
    stack: AsyncExitStack,
    *,
    prefix: str | None = None,
    port: int | None = None,
    monitor_port: int | None = None,
    observers: Mapping[str, str] | None = None,
) -> LockedBus:
    """A nats-server under `base` with one user per service and fresh passwords; the
    client user's password is kept in `base` for NATS clients of the API. With
    `monitor_port`, its monitoring endpoint listens there, on loopback only. `observers`
    are the suite's own all-rights users (`natsauth.server_config`); `tether up` has none."""
    settings = CommonSettings()
    subjects = Subjects(prefix if prefix is not None else settings.subject_prefix)
    passwords = generate_passwords()
    tls = tls_files(settings)
    config = render_config(subjects, passwords, tls=tls, observers=observers)
    if monitor_port is not None:
        config += f"http: 127.0.0.1:{monitor_port}\n"
    config_file = write_config(base / NATS_CONFIG_FILE, config)
    write_config(base / NATS_CLIENT_PASSWORD_FILE, passwords[CLIENT_USER])
    nats = NatsServer(base / "nats", port=port or free_port(), config_file=config_file).start()
    stack.callback(nats.stop)
    url = nats.url.replace("nats://", "tls://") if tls is not None else nats.url
    return LockedBus(url, passwords, nats, dict(observers or {}))


def new_credentials_key() -> str:
    """A key for the runner's sealed tool-server credentials: 32 bytes, base64url."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def system_env(
    base: Path,
    *,
    nats_url: str,
    database_url: str,
    operator_token: str,
    decision_key: str,
    workspace: Path | None = None,
    credentials_key: str | None = None,
) -> dict[str, str]:
    """The environment every service starts from; the supervisor hands each only the
    secrets it uses."""
    workspace = workspace or base / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    return {
        "TETHER_HOME": str(base),
        "TETHER_NATS_URL": nats_url,
        "TETHER_DATABASE_URL": database_url,
        "TETHER_OPERATOR_TOKEN": operator_token,
        "TETHER_DECISION_KEY": decision_key,
        # Seals tool servers' credentials (only the runner gets it); a fresh one when the
        # caller keeps none (a test's stack: its rows die with it).
        "TETHER_RUNNER_CREDENTIALS_KEY": credentials_key or new_credentials_key(),
        "TETHER_RUNNER_WORKSPACE": str(workspace),
    }


def system_supervisor(
    env: Mapping[str, str],
    passwords: Mapping[str, str],
    *,
    restart: bool,
    log_dir: Path | None = None,
    specs: tuple[ServiceSpec, ...] = SERVICES,
) -> Supervisor:
    """The five services (or `specs` of them), each connecting to the bus as its own user
    (with an outside NATS and no passwords, credentials come from the environment)."""

    def own_credentials(spec: ServiceSpec) -> dict[str, str]:
        return service_env(spec.name, passwords[spec.name]) if passwords else {}

    return Supervisor(env, specs=specs, restart=restart, log_dir=log_dir, env_for=own_credentials)
