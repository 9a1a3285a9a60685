"""The approvals service's tokens move into the identity tables (its migration 0004), on
a database of their own: the old plain tokens still work, with the same role and team
scope, the `_tokens` trail stays verifiable, and the old table of hashes is gone."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, make_url, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

import tether_approvals
from tether_common import audit, identity
from tether_common.db import make_engine, migrate
from tether_common.errors import AuthError
from tether_common.identity import TOKENS_TRAIL, TokenStore, tokens_head

APPROVALS = Path(tether_approvals.__file__).parent / "migrations"
VERSIONS = "alembic_approvals"


def upgrade_to(conn: Connection, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(APPROVALS))
    cfg.attributes["connection"] = conn
    cfg.attributes["version_table"] = VERSIONS
    command.upgrade(cfg, revision)


@pytest.fixture
async def fresh(engine: AsyncEngine, database_url: str) -> AsyncIterator[AsyncEngine]:
    name = f"mig_{uuid.uuid4().hex[:10]}"
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    db = make_engine(make_url(database_url).set(database=name).render_as_string(False), pool_size=2)
    try:
        yield db
    finally:
        await db.dispose()
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f'DROP DATABASE "{name}"'))


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def test_old_tokens_keep_working_after_the_move(fresh: AsyncEngine) -> None:
    async with fresh.begin() as conn:
        await conn.run_sync(upgrade_to, "0003")
    old = {"admin": "old-admin-plain", "viewer": "old-viewer-plain", "approver": "old-appr"}
    now = datetime.now(UTC)
    async with fresh.begin() as conn:
        for role, plain in old.items():
            await conn.execute(
                text(
                    "INSERT INTO tokens (token_id, name, token_hash, role, agents, owners,"
                    " created_at, revoked_at) VALUES (:i, :n, :h, :r, :a, NULL, :c, NULL)"
                ),
                {"i": f"tok_{role}", "n": role, "h": sha(plain), "r": role}
                | {"a": '["bot-a"]' if role == "approver" else None, "c": now},
            )
        await conn.execute(
            text(
                "INSERT INTO tokens (token_id, name, token_hash, role, created_at, revoked_at)"
                " VALUES ('tok_gone', 'gone', :h, 'admin', :c, :c)"
            ),
            {"h": sha("old-revoked"), "c": now},
        )
        head = await audit.append(conn, TOKENS_TRAIL, "token.created", {"token_id": "tok_admin"})
        await conn.execute(
            text("INSERT INTO audit_heads (trail, head, updated_at) VALUES (:t, :h, :c)"),
            {"t": TOKENS_TRAIL, "h": head, "c": now},
        )

    # What a service does at start: identity first, then its own chain to head.
    await identity.migrate(fresh)
    await migrate(fresh, APPROVALS, VERSIONS)

    store = TokenStore(fresh)
    for role, plain in old.items():
        who = await store.authenticate(plain)
        assert (who.name, who.role, who.tenant) == (role, role, "default")
    scoped = await store.authenticate(old["approver"])
    assert scoped.agents == frozenset({"bot-a"})
    assert scoped.covers("bot-a", None)
    assert not scoped.covers("bot-b", None)
    with pytest.raises(AuthError):
        await store.authenticate("old-revoked")
    assert await tokens_head(fresh) == head
    assert await audit.verify(fresh, TOKENS_TRAIL, head) == []
    async with fresh.connect() as conn:
        tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
        trail_heads = (await conn.execute(text("SELECT trail FROM audit_heads"))).all()
    assert "tokens" not in tables
    assert "identity_tokens" in tables
    assert (TOKENS_TRAIL,) not in trail_heads
    # Migrating again (another replica, a restart) changes nothing.
    await identity.migrate(fresh)
    await migrate(fresh, APPROVALS, VERSIONS)
    assert (await store.authenticate(old["admin"])).role == "admin"
