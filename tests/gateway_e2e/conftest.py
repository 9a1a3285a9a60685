"""A fake OpenAI-compatible model server per module, for the stack's gateway to call."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether_gateway.testing import FakeUpstream


@pytest.fixture(scope="module")
async def fake_model() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as server:
        yield server
