"""Real servers for the suite: one nats-server (JetStream) and one PostgreSQL per session,
on free ports in temporary folders, or the ones named by `TETHER_TEST_NATS_URL` /
`TETHER_TEST_DATABASE_URL`, with a database of its own for every test module; and the
five services as real processes for e2e tests."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from dbkit import migrated_template, new_database
from shipped import observe, shipped_stack
from tether_client.server.embedded import EmbeddedPostgres, NatsServer
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.db import make_engine
from tether_common.decisions import new_key
from tether_common.settings import async_database_url
from tether_common.subjects import Subjects

# Pytest keeps each test module as it rewrote its asserts (tests/**/__pycache__) only when
# bytecode may be written; with PYTHONDONTWRITEBYTECODE set, as on these machines, every
# worker of every run rewrote all 570 modules again (6-9 s of each worker's start).
sys.dont_write_bytecode = False

OPERATOR_TOKEN = "test-operator-token"
# Every brain call of the tests' `TetherClient`s authenticates as the bootstrap admin
# unless a test gives a token of its own (`token=""`: anonymous).
os.environ.setdefault("TETHER_TOKEN", OPERATOR_TOKEN)
# The key with which the approvals service signs decisions and the brain verifies them:
# one per session, in the environment every service the suite starts inherits (the
# supervisor passes it on), as `tether up` keeps one per TETHER_HOME.
os.environ.setdefault("TETHER_DECISION_KEY", new_key())


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if url := os.environ.get("TETHER_TEST_NATS_URL"):
        yield url
        return
    server = NatsServer(tmp_path_factory.mktemp("nats")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's PostgreSQL server (its first database): for fixtures that make
    databases of their own; a test takes `database_url`."""
    if url := os.environ.get("TETHER_TEST_DATABASE_URL"):
        yield async_database_url(url)
        return
    # Not under pytest's basetemp: pytest keeps that folder private (0700), and PostgreSQL
    # runs as another user under root.
    base = Path(tempfile.mkdtemp(prefix="tether-test-pg-"))
    server = EmbeddedPostgres(base).start()
    try:
        yield async_database_url(server.url)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
async def database_template(pg_server_url: str) -> str:
    """Every service's schema at head, migrated once: what each module's database copies."""
    return await migrated_template(pg_server_url)


@pytest.fixture(scope="module")
async def own_database_url(pg_server_url: str, database_template: str) -> str:
    """This module's own database (a copy of the migrated template): its stacks never see
    another module's runs, cards or effects, nor adopt their lapsed leases."""
    return await new_database(pg_server_url, "module", template=database_template)


@pytest.fixture(scope="module")
async def database_url(own_database_url: str) -> str:
    """The database of this module's tests and stacks: its own (a folder may share one
    between its modules, as tests/approvals does for its one approvals process)."""
    return own_database_url


@pytest.fixture(scope="module")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A pool of the tests' own, for what runs beside the services (collectors, sweeps)."""
    db = make_engine(database_url, pool_size=5)
    try:
        yield db
    finally:
        await db.dispose()


@pytest.fixture
def prefix() -> str:
    """A subject prefix of its own, so tests never hear each other."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def bus(nats_url: str, prefix: str) -> AsyncIterator[Bus]:
    client = await Bus.connect(nats_url, service="test", subjects=Subjects(prefix))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def stack_bus(stack: Supervisor) -> AsyncIterator[Bus]:
    """An all-rights bus client on this module's stack (the test's own observer)."""
    bus = await observe(stack)
    try:
        yield bus
    finally:
        await bus.close()


@pytest.fixture(scope="module")
def scripts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scripts")


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    """Extra environment for this module's stack (override in a test module)."""
    return {}


@pytest.fixture(scope="module")
async def stack(
    database_url: str,
    scripts_dir: Path,
    stack_extra_env: dict[str, str],
) -> AsyncIterator[Supervisor]:
    """The five services as real processes, as `tether up` starts them (tests/shipped.py):
    a locked bus of their own, each service its own NATS user and secrets."""
    extra = {
        "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts_dir),
        "TETHER_DB_POOL_SIZE": "10",  # many stacks share the suite's one PostgreSQL
    }
    async with shipped_stack(
        None, database_url, operator_token=OPERATOR_TOKEN, extra_env=extra | stack_extra_env
    ) as supervisor:
        yield supervisor


# ---- the `stack` marker: what needs real processes -------------------------------------
# A test is marked `stack` when it starts or reaches real processes: it uses (directly or
# through another fixture) one of these fixtures, or is marked `e2e`/`compose`. So
# `pytest -m "not stack"` runs the in-process tier alone (tether_brain.testing and the
# unit tests), in seconds.
# `attestation`: the sandbox's own checks, which start bubblewrap; `locked`: a locked
# nats-server of the test's own; `hubs`: MCP server processes.
PROCESS_FIXTURES = frozenset(
    {"stack", "database_url", "nats_url", "shipped_stack", "attestation", "locked", "hubs"}
)
PROCESS_MARKERS = ("e2e", "compose")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        uses = PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if uses or any(item.get_closest_marker(m) is not None for m in PROCESS_MARKERS):
            item.add_marker(pytest.mark.stack)
