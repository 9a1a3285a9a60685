"""The five services on a bus locked down by the generated NATS configuration, each
service connecting as its own NATS user: what a deployment runs, for the tests of
permissions (tests/deploy, tests/live)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from tether_common.embedded import NatsServer
from tether_common.natsauth import render_config, service_env, write_config
from tether_common.subjects import Subjects
from tether_common.supervisor import ServiceSpec, Supervisor

READY_S = 180.0  # services import slowly on a loaded two-core machine


@asynccontextmanager
async def locked_stack(
    database_url: str,
    base: Path,
    passwords: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
) -> AsyncIterator[Supervisor]:
    """Its own nats-server (the configuration of `passwords`) and subject prefix under
    `base`; the services' logs are printed when it fails to start."""
    prefix = f"l{uuid.uuid4().hex[:10]}"
    config = write_config(base / "nats.conf", render_config(Subjects(prefix), passwords))
    server = NatsServer(base / "nats", config_file=config).start()
    (base / "workspace").mkdir()
    env = {
        "TETHER_NATS_URL": server.url,
        "TETHER_DATABASE_URL": database_url,
        "TETHER_SUBJECT_PREFIX": prefix,
        "TETHER_OPERATOR_TOKEN": f"locked-operator-{uuid.uuid4().hex[:8]}",
        "TETHER_RUNNER_WORKSPACE": str(base / "workspace"),
        "TETHER_DB_POOL_SIZE": "10",
        **(extra_env or {}),
    }

    def own_credentials(spec: ServiceSpec) -> dict[str, str]:
        return service_env(spec.name, passwords[spec.name])

    logs = base / "logs"
    supervisor = Supervisor(env, restart=False, log_dir=logs, env_for=own_credentials)
    try:
        await supervisor.start()
        await supervisor.wait_ready(timeout=READY_S)
        yield supervisor
    except BaseException:
        print_logs(logs)
        raise
    finally:
        await supervisor.stop()
        server.stop()


def print_logs(logs: Path) -> None:
    for log_file in sorted(logs.glob("*.log")):
        print(f"--- {log_file.name}\n{log_file.read_text()[-4000:]}")  # noqa: T201
