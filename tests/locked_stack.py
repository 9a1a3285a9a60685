"""The five services on a bus locked down by the generated NATS configuration, each
service connecting as its own NATS user: what a deployment runs, for the tests of
permissions (tests/deploy, tests/live). Made by `shipped_stack` (tether up's own code);
`passwords` is filled with the generated ones, for a test that connects as a user."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from shipped import locked_bus, shipped_stack
from tether_client.server.supervisor import Supervisor


@asynccontextmanager
async def locked_stack(
    database_url: str,
    base: Path,
    passwords: dict[str, str],
    extra_env: Mapping[str, str] | None = None,
) -> AsyncIterator[Supervisor]:
    """Its own nats-server and subject prefix under `base` (the workspace is
    `base/workspace`)."""
    async with shipped_stack(
        base,
        database_url,
        operator_token=f"locked-operator-{uuid.uuid4().hex[:8]}",
        extra_env={"TETHER_DB_POOL_SIZE": "10", **(extra_env or {})},
    ) as supervisor:
        passwords.clear()
        passwords.update(locked_bus(supervisor).passwords)
        yield supervisor
