"""Claiming a parked run hands back the run loaded (`RunLeases.claim_parked`): the claim's
answer is the run row and its journal is read after it, on one connection. Exactly one
claim wins, and a claim that waited for another commit loads what that commit wrote."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

import tether_brain
from tether_brain.persistence.store import RunStore
from tether_brain.state.run import Limits, RunState
from tether_common import identity
from tether_common.db import migrate
from tether_common.messages.gateway import ChatMessage

MIGRATIONS = Path(tether_brain.__file__).parent / "migrations"


@pytest.fixture
async def store(engine: AsyncEngine) -> RunStore:
    await identity.migrate(engine)
    await migrate(engine, MIGRATIONS, "alembic_brain")
    return RunStore(engine)


async def running(store: RunStore) -> RunState:
    """A run leased to replica-a with one message committed."""
    now = datetime.now(UTC)
    state = RunState(
        run_id=f"run_{uuid.uuid4().hex}",
        prompt="p",
        provider="scripted",
        model=None,
        limits=Limits(max_steps=3),
        created_at=now,
        updated_at=now,
        fence=1,
    )
    await store.create(state, owner="replica-a", lease_s=60.0)
    state.status = "running"
    state.add_message(ChatMessage(role="user", content="first"))
    await store.commit(state)
    return state


async def test_a_claim_of_a_parked_run_returns_it_loaded_and_only_once(store: RunStore) -> None:
    state = await running(store)
    state.add_message(ChatMessage(role="assistant", content="asks"))
    state.status = "awaiting_approval"  # parking gives the lease up in the same commit
    await store.commit(state)

    claimed = await store.leases.claim_parked(state.run_id, "replica-b", 60.0)

    assert claimed is not None
    assert (claimed.status, claimed.fence) == ("running", state.fence + 1)
    assert [m.content for m in claimed.messages] == ["first", "asks"]
    assert await store.leases.claim_parked(state.run_id, "replica-c", 60.0) is None


async def blocked_on_a_lock(engine: AsyncEngine) -> None:
    """Until some session's claim waits for a lock (behind the other commit)."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE 'UPDATE runs%'"
    )
    while True:
        async with engine.connect() as conn:
            if (await conn.execute(query)).scalar_one() > 0:
                return
        await asyncio.sleep(0.01)


async def test_a_claim_that_waited_for_a_commit_loads_what_it_wrote(
    store: RunStore, engine: AsyncEngine
) -> None:
    # The claim's answer is the row as the claim left it, after any commit it had to wait
    # for; the journal must then be read as of after that commit too (a read in the
    # claim's own statement would see the journal from before it).
    state = await running(store)
    state.add_message(ChatMessage(role="assistant", content="asks"))
    state.status = "awaiting_approval"
    await store.commit(state)
    later = ChatMessage(role="assistant", content="written meanwhile").model_dump_json()
    async with engine.connect() as writer:
        await writer.execute(
            text("UPDATE runs SET journal_seq = journal_seq + 1 WHERE run_id = :r"),
            {"r": state.run_id},
        )
        await writer.execute(
            text(
                "INSERT INTO run_journal (run_id, seq, kind, data, created_at) "
                "VALUES (:r, 1000, 'message', CAST(:d AS jsonb), now())"
            ),
            {"r": state.run_id, "d": later},
        )
        claim = asyncio.create_task(store.leases.claim_parked(state.run_id, "replica-b", 60.0))
        await blocked_on_a_lock(engine)
        await writer.commit()
        claimed = await claim

    assert claimed is not None
    assert [m.content for m in claimed.messages] == ["first", "asks", "written meanwhile"]
