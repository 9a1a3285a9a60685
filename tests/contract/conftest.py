"""The five services as real processes, once for the contract tests that speak HTTP to
all of them (edge cases and schemathesis), on a subject prefix of their own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from shipped import shipped_stack
from tether_client.server.supervisor import Supervisor

OPERATOR_TOKEN = "edge-operator-token"


@pytest.fixture(scope="package")
async def edge_database_url(pg_server_url: str) -> str:
    """A database of their own on the session's server: schemathesis stores what it
    generates (global guardrails, agents, allow-lists), which must not become the policy
    of the stacks that later modules start (their settings only seed missing rows)."""
    url = make_url(pg_server_url)
    name = f"edge_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(url.set(drivername="postgresql").render_as_string(False))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return url.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="package")
async def edge_stack(
    edge_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Supervisor]:
    """As `tether up` starts it (a locked bus of its own), on a database of its own."""
    env = {
        "TETHER_GATEWAY_SCRIPTS_DIR": str(tmp_path_factory.mktemp("edge-scripts")),
        "TETHER_DB_POOL_SIZE": "10",
        "TETHER_RUNNER_MIN_SANDBOX": '{"shell": "rlimits"}',
    }
    async with shipped_stack(
        None, edge_database_url, operator_token=OPERATOR_TOKEN, extra_env=env
    ) as supervisor:
        yield supervisor


@pytest.fixture(scope="package")
def operator_auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
