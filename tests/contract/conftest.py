"""The five services as real processes, once for the contract tests that speak HTTP to
all of them (edge cases and schemathesis), on a subject prefix of their own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tether_common.supervisor import Supervisor

OPERATOR_TOKEN = "edge-operator-token"


@pytest.fixture(scope="package")
async def edge_database_url(database_url: str) -> str:
    """A database of their own on the session's server: schemathesis stores what it
    generates (global guardrails, agents, allow-lists), which must not become the policy
    of the stacks that later modules start (their settings only seed missing rows)."""
    url = make_url(database_url)
    name = f"edge_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(url.set(drivername="postgresql").render_as_string(False))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return url.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="package")
async def edge_stack(
    nats_url: str, edge_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Supervisor]:
    scripts = tmp_path_factory.mktemp("edge-scripts")
    logs = tmp_path_factory.mktemp("edge-logs")
    env = {
        "TETHER_NATS_URL": nats_url,
        "TETHER_DATABASE_URL": edge_database_url,
        "TETHER_SUBJECT_PREFIX": f"e{uuid.uuid4().hex[:10]}",
        "TETHER_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "TETHER_LOG_LEVEL": "INFO",
        "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts),
        "TETHER_DB_POOL_SIZE": "10",
        "TETHER_RUNNER_WORKSPACE": str(tmp_path_factory.mktemp("edge-ws")),
        "TETHER_RUNNER_MIN_SANDBOX": '{"shell": "rlimits"}',
    }
    supervisor = Supervisor(env, restart=False, log_dir=logs)
    await supervisor.start()
    try:
        await supervisor.wait_ready(timeout=180)
        yield supervisor
    except BaseException:
        for log_file in sorted(logs.glob("*.log")):
            print(f"--- {log_file.name}\n{log_file.read_text()[-4000:]}")  # noqa: T201
        raise
    finally:
        await supervisor.stop()


@pytest.fixture(scope="package")
def operator_auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
