"""Claiming a parked run hands back the run loaded (`RunLeases.claim_parked`): the claim's
answer is the run row and its journal is read after it, on one connection. Exactly one
claim wins, and a claim that waited for another commit loads what that commit wrote."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from runstore import started
from tether_brain.persistence.store import RunStore
from tether_common.messages.gateway import ChatMessage
from tether_common.testing import until


async def test_a_claim_of_a_parked_run_returns_it_loaded_and_only_once(store: RunStore) -> None:
    state = await started(store)
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

    async def waiting() -> Any:
        async with engine.connect() as conn:
            return (await conn.execute(query)).scalar_one()

    # No bound before: 60 s, far past the moment the other commit holds its lock.
    await until(waiting, timeout=60, every=0.01, what="a claim waiting for a lock")


async def test_a_claim_that_waited_for_a_commit_loads_what_it_wrote(
    store: RunStore, engine: AsyncEngine
) -> None:
    # The claim's answer is the row as the claim left it, after any commit it had to wait
    # for; the journal must then be read as of after that commit too (a read in the
    # claim's own statement would see the journal from before it).
    state = await started(store)
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
