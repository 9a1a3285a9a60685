"""Fixtures for the output-store tests: the service in-process on real NATS and
PostgreSQL under a subject prefix of its own, once per storage backend (chunk bytes in
PostgreSQL, or in the JetStream object store), a bus client, the backend's object bucket,
and a raw database connection for what a test must reach around the API (ageing outputs,
counting chunks)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.bus import Bus
from tether_common.settings import CommonSettings
from tether_common.subjects import Subjects
from tether_output_store.app import create_app
from tether_output_store.objects import BlobBucket
from tether_output_store.retention import Collector
from tether_output_store.settings import OutputSettings

TOKEN = "outputs-operator-token"


def plain_url(database_url: str) -> str:
    return database_url.replace("postgresql+asyncpg://", "postgresql://", 1)


BACKENDS = ["postgres", "jetstream"]


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Where the store under test keeps chunk bytes; every API test runs under both."""
    return str(request.param)


@pytest.fixture(scope="module")
def outputs_prefix(backend: str) -> str:
    return f"o{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
async def output_app(
    nats_url: str, database_url: str, outputs_prefix: str, backend: str
) -> AsyncIterator[FastAPI]:
    common = CommonSettings(
        nats_url=nats_url,
        database_url=database_url,
        subject_prefix=outputs_prefix,
        operator_token=TOKEN,
        db_pool_size=5,
    )
    settings = OutputSettings(http_port=0, grep_budget_s=2.0, gc_interval_s=3600, backend=backend)
    app = create_app(common, settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture(scope="module")
async def obus(output_app: FastAPI, nats_url: str, outputs_prefix: str) -> AsyncIterator[Bus]:
    client = await Bus.connect(nats_url, service="test", subjects=Subjects(outputs_prefix))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def objects(obus: Bus, backend: str) -> BlobBucket | None:
    """The store's object bucket (seen through the test's own connection) when chunk
    bytes go there; None under the PostgreSQL backend."""
    if backend != "jetstream":
        return None
    return BlobBucket(obus, obus.subjects.output_bucket)


@pytest.fixture
async def pg(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(plain_url(database_url))
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def owner() -> str:
    """A fresh run id that owns the outputs a test stores."""
    return f"run_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def gc(engine: AsyncEngine, obus: Bus) -> Collector:
    """A collector beside the service's, with no grace: whatever nobody uses goes at once.
    Like the service's, it always has the bucket at hand: the test database is shared, so
    it also meets chunks other modules left in the object store."""
    bucket = BlobBucket(obus, obus.subjects.output_bucket)
    return Collector(engine, grace=timedelta(0), keep_tombstones=timedelta(days=30), objects=bucket)
