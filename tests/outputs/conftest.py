"""Fixtures for the output-store tests: the service in-process on real NATS and
PostgreSQL under a subject prefix of its own, a bus client, and a raw database connection
for what a test must reach around the API (ageing outputs, counting chunks)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from fastapi import FastAPI

from tether_common.bus import Bus
from tether_common.settings import CommonSettings
from tether_common.subjects import Subjects
from tether_output_store.app import create_app
from tether_output_store.settings import OutputSettings

TOKEN = "outputs-operator-token"


def plain_url(database_url: str) -> str:
    return database_url.replace("postgresql+asyncpg://", "postgresql://", 1)


@pytest.fixture(scope="module")
def outputs_prefix() -> str:
    return f"o{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
async def output_app(
    nats_url: str, database_url: str, outputs_prefix: str
) -> AsyncIterator[FastAPI]:
    common = CommonSettings(
        nats_url=nats_url,
        database_url=database_url,
        subject_prefix=outputs_prefix,
        operator_token=TOKEN,
        db_pool_size=5,
    )
    settings = OutputSettings(http_port=0, grep_budget_s=2.0, gc_interval_s=3600)
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
