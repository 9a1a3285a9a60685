"""Fixtures for the gateway adapter tests: a scripted upstream on a free port, an HTTP
client, and settings pointing every provider at that upstream with short timeouts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import SecretStr

from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, RecordingSleep

OPENAI_KEY = "sk-test-0123456789abcdefSECRET"
ANTHROPIC_KEY = "sk-ant-test-0123456789SECRET"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def settings(upstream: FakeUpstream) -> GatewaySettings:
    return GatewaySettings(
        openai_base_url=f"{upstream.url}/v1",
        openai_api_key=SecretStr(OPENAI_KEY),
        anthropic_base_url=upstream.url,
        anthropic_api_key=SecretStr(ANTHROPIC_KEY),
        ollama_url=upstream.url,
        connect_timeout_s=2.0,
        inactivity_timeout_s=2.0,
        retry_attempts=2,
        retry_base_delay_s=0.01,
        retry_max_delay_s=5.0,
    )
