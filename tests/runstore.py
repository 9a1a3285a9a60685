"""The brain's run store on a test database, and a run started in it: what the tests of
commits, leases and claims build on (`persistence.store`, `persistence.leases`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

import tether_brain
from tether_brain.persistence.store import RunStore
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Limits, RunState
from tether_common import identity
from tether_common.db import migrate
from tether_common.messages.gateway import ChatMessage
from tether_common.messages.identity import DEFAULT_TENANT

MIGRATIONS = Path(tether_brain.__file__).parent / "migrations"


async def migrated_store(engine: AsyncEngine) -> RunStore:
    """A `RunStore` with the brain's schema (and the version table its service uses)."""
    await identity.migrate(engine)
    await migrate(engine, MIGRATIONS, "alembic_brain")
    return RunStore(engine)


def new_run(
    tenant: str = DEFAULT_TENANT, owner: str | None = None, options: RunOptions | None = None
) -> RunState:
    """A new scripted run's state (fence 1, three steps), stored nowhere yet."""
    now = datetime.now(UTC)
    return RunState(
        run_id=f"run_{uuid.uuid4().hex}",
        prompt="p",
        provider="scripted",
        model=None,
        limits=Limits(max_steps=3),
        created_at=now,
        updated_at=now,
        options=options or RunOptions(),
        fence=1,
        tenant=tenant,
        owner=owner,
    )


async def started(store: RunStore, first: str | None = "first") -> RunState:
    """A run leased to replica-a (fence 1, running); with `first`, a user message
    committed."""
    state = new_run()
    await store.create(state, owner="replica-a", lease_s=60.0)
    state.status = "running"
    if first is not None:
        state.add_message(ChatMessage(role="user", content=first))
        await store.commit(state)
    return state
