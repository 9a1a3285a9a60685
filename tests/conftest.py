"""Real servers for the suite: one nats-server (JetStream) and one PostgreSQL per session,
on free ports in temporary folders, or the ones named by `TETHER_TEST_NATS_URL` /
`TETHER_TEST_DATABASE_URL`; and the five services as real processes for e2e tests."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.bus import Bus
from tether_common.db import make_engine
from tether_common.decisions import new_key
from tether_common.embedded import EmbeddedPostgres, NatsServer
from tether_common.settings import async_database_url
from tether_common.subjects import Subjects
from tether_common.supervisor import Supervisor

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
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
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


def stack_env(nats_url: str, database_url: str, prefix: str, scripts: Path) -> dict[str, str]:
    return {
        "TETHER_NATS_URL": nats_url,
        "TETHER_DATABASE_URL": database_url,
        "TETHER_SUBJECT_PREFIX": prefix,
        "TETHER_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "TETHER_LOG_LEVEL": "INFO",
        "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts),
        "TETHER_DB_POOL_SIZE": "10",
    }


@pytest.fixture
async def stack_bus(stack: Supervisor, nats_url: str) -> AsyncIterator[Bus]:
    """A bus client on this module's stack (its subject prefix)."""
    bus = await Bus.connect(
        nats_url, service="test", subjects=Subjects(stack.env["TETHER_SUBJECT_PREFIX"])
    )
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
    nats_url: str,
    database_url: str,
    scripts_dir: Path,
    stack_extra_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Supervisor]:
    """The five services as real processes, sharing this module's subject prefix."""
    prefix = f"s{uuid.uuid4().hex[:10]}"
    logs = tmp_path_factory.mktemp("logs")
    env = stack_env(nats_url, database_url, prefix, scripts_dir) | stack_extra_env
    supervisor = Supervisor(env, restart=False, log_dir=logs)
    await supervisor.start()
    try:
        await supervisor.wait_ready(timeout=180)  # minutes on a loaded two-core machine
        yield supervisor
    except BaseException:
        for log_file in sorted(logs.glob("*.log")):
            print(f"--- {log_file.name}\n{log_file.read_text()[-4000:]}")  # noqa: T201
        raise
    finally:
        await supervisor.stop()
