"""The identity tables migrated on the session's PostgreSQL, and a store over them."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common import audit, identity
from tether_common.identity import TokenCache, TokenStore

BOOTSTRAP = "identity-test-bootstrap-token"


@pytest.fixture
def bootstrap() -> str:
    """The store's `TETHER_OPERATOR_TOKEN`."""
    return BOOTSTRAP


@pytest.fixture
async def identity_engine(engine: AsyncEngine) -> AsyncEngine:
    await identity.migrate(engine)
    return engine


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


@pytest.fixture
async def store(identity_engine: AsyncEngine, jsonl: Path) -> TokenStore:
    return TokenStore(
        identity_engine,
        operator_token=BOOTSTRAP,
        sink=audit.JsonlSink(jsonl),
        cache=TokenCache(ttl_s=0),
    )
