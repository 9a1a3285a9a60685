"""Fixtures for the model tests (issue 20): a fake OpenAI-compatible server on a free
port, an HTTP client, and gateway settings pointing at that server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


@pytest.fixture
def settings(upstream: FakeUpstream) -> GatewaySettings:
    return GatewaySettings(
        openai_base_url=f"{upstream.url}/v1",
        local_base_url=f"{upstream.url}/v1",
        connect_timeout_s=5.0,
        inactivity_timeout_s=30.0,
        retry_attempts=0,
    )
