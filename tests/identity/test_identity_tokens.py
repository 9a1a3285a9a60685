"""The token store on real PostgreSQL: create, list, revoke, expiry, hashing at rest,
the audit trail of every change, and the bound the cache puts on revocation."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common import audit
from tether_common.errors import AuthError, NotFoundError
from tether_common.identity import TOKENS_TRAIL, Principal, TokenCache, TokenStore, tokens_head
from tether_common.identity.tables import identity_tokens
from tether_common.messages.identity import CreateToken, Role

ADMIN = Principal("operator", "admin")


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def test_a_token_names_its_principal(store: TokenStore) -> None:
    body = CreateToken(
        name=unique("alice"), role="client", tenant="team-a", agents=["helper"], models=["m1"]
    )
    created = await store.create(ADMIN, body)
    assert created.token.startswith("tth_")
    assert len(created.token) >= 4 + 43
    who = await store.authenticate(created.token)
    assert (who.name, who.role, who.tenant) == (body.name, "client", "team-a")
    assert who.token_id == created.info.token_id
    assert (who.agents, who.models) == (frozenset({"helper"}), frozenset({"m1"}))
    assert (who.providers, who.modes) == (None, None)
    assert created.info.created_by == "operator"


async def test_the_bootstrap_token_is_the_default_admin(store: TokenStore, bootstrap: str) -> None:
    who = await store.authenticate(bootstrap)
    assert (who.name, who.role, who.tenant, who.token_id) == ("operator", "admin", "default", None)


@pytest.mark.parametrize(
    "presented",
    [None, "", "tth_" + "A" * 43, "{b}x", "{b}-", " ", "Bearer {b}", "tth_", "{b} "],
)
async def test_anything_else_is_unauthenticated(
    store: TokenStore, bootstrap: str, presented: str | None
) -> None:
    given = None if presented is None else presented.format(b=bootstrap)
    given = bootstrap[:-1] if given == bootstrap + "-" else given
    with pytest.raises(AuthError) as refused:
        await store.authenticate(given)
    assert refused.value.code == "unauthenticated"


async def test_tokens_are_only_hashes_at_rest(
    store: TokenStore, identity_engine: AsyncEngine, jsonl: Path
) -> None:
    created = await store.create(ADMIN, CreateToken(name=unique("hashed"), role="operator"))
    plain = created.token
    async with identity_engine.connect() as conn:
        tables = ["identity_tokens", "identity_heads", "audit_records"]
        dumps = [
            str((await conn.execute(text(f"SELECT * FROM {table}"))).all()) for table in tables
        ]
        row = (
            await conn.execute(
                text("SELECT token_hash FROM identity_tokens WHERE token_id = :t"),
                {"t": created.info.token_id},
            )
        ).one()
    assert row.token_hash == hashlib.sha256(plain.encode()).hexdigest()
    for dump in dumps:
        assert plain not in dump
        assert plain[4:24] not in dump
    assert plain[4:24] not in jsonl.read_text()
    assert plain not in created.info.model_dump_json()


async def test_only_admins_manage_tokens(store: TokenStore) -> None:
    roles: list[Role] = ["operator", "approver", "owner", "client", "viewer"]
    victim = await store.create(ADMIN, CreateToken(name=unique("victim"), role="client"))
    for role in roles:
        who = Principal("mallory", role, token_id="tok_m")
        for attempt in (
            store.create(who, CreateToken(name="x", role="admin")),
            store.all(who),
            store.revoke(who, victim.info.token_id),
        ):
            with pytest.raises(AuthError) as refused:
                await attempt
            assert refused.value.code == "forbidden"
    assert (await store.authenticate(victim.token)).name == victim.info.name


async def test_list_and_revoke(store: TokenStore) -> None:
    created = await store.create(ADMIN, CreateToken(name=unique("bob"), role="approver"))
    listed = {t.token_id: t for t in (await store.all(ADMIN)).tokens}
    assert listed[created.info.token_id].revoked_at is None
    assert "tth_" not in (await store.all(ADMIN)).model_dump_json()
    revoked = await store.revoke(ADMIN, created.info.token_id)
    assert revoked.revoked_at is not None
    with pytest.raises(AuthError) as refused:
        await store.authenticate(created.token)
    assert refused.value.code == "unauthenticated"
    with pytest.raises(NotFoundError):
        await store.revoke(ADMIN, created.info.token_id)  # already revoked
    with pytest.raises(NotFoundError):
        await store.revoke(ADMIN, "tok_does_not_exist")


async def test_an_expired_token_says_so(store: TokenStore, identity_engine: AsyncEngine) -> None:
    created = await store.create(
        ADMIN, CreateToken(name=unique("brief"), role="client", expires_in_s=3600)
    )
    assert created.info.expires_at is not None
    assert (await store.authenticate(created.token)).expires_at == created.info.expires_at
    # Age it in the database rather than wait: the clock is PostgreSQL's, not a sleep.
    async with identity_engine.begin() as conn:
        await conn.execute(
            update(identity_tokens)
            .where(identity_tokens.c.token_id == created.info.token_id)
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    with pytest.raises(AuthError) as refused:
        await store.authenticate(created.token)
    assert refused.value.code == "token_expired"


async def test_an_expiry_is_checked_on_cached_entries_too(identity_engine: AsyncEngine) -> None:
    now = [0.0]
    store = TokenStore(identity_engine, cache=TokenCache(ttl_s=1000, clock=lambda: now[0]))
    created = await store.create(
        ADMIN, CreateToken(name=unique("cached"), role="client", expires_in_s=3600)
    )
    await store.authenticate(created.token)  # cached now, for "1000 s"
    async with identity_engine.begin() as conn:
        await conn.execute(
            update(identity_tokens)
            .where(identity_tokens.c.token_id == created.info.token_id)
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    # The cache still holds the old expiry; the date check runs on every use anyway.
    assert (await store.authenticate(created.token)).expires_at is not None
    store.cache.clear()
    with pytest.raises(AuthError) as refused:
        await store.authenticate(created.token)
    assert refused.value.code == "token_expired"


async def test_revocation_reaches_other_replicas_within_the_cache_ttl(
    identity_engine: AsyncEngine,
) -> None:
    """Two stores are two replicas. The one that revokes forgets at once; the other keeps
    its entry for at most `ttl_s` (the documented bound), then asks the database."""
    now = [100.0]
    here = TokenStore(identity_engine, cache=TokenCache(ttl_s=2.0, clock=lambda: now[0]))
    there = TokenStore(identity_engine, cache=TokenCache(ttl_s=2.0, clock=lambda: now[0]))
    created = await here.create(ADMIN, CreateToken(name=unique("rev"), role="client"))
    await here.authenticate(created.token)
    await there.authenticate(created.token)
    await here.revoke(ADMIN, created.info.token_id)
    with pytest.raises(AuthError):
        await here.authenticate(created.token)
    now[0] += 1.99
    assert (await there.authenticate(created.token)).name == created.info.name
    now[0] += 0.01
    with pytest.raises(AuthError) as refused:
        await there.authenticate(created.token)
    assert refused.value.code == "unauthenticated"


def test_the_cache_is_bounded() -> None:
    cache = TokenCache(ttl_s=60, max_entries=100)
    for n in range(1000):
        cache.put(f"digest-{n}", Principal(f"p{n}", "client", token_id=f"tok_{n}"))
    assert cache.get("digest-0") is None
    assert cache.get("digest-999") is not None
    assert len(cache._entries) == 100


async def test_every_change_is_an_audit_record(
    store: TokenStore, identity_engine: AsyncEngine, jsonl: Path
) -> None:
    created = await store.create(
        ADMIN, CreateToken(name=unique("audited"), role="owner", tenant="team-z")
    )
    await store.revoke(ADMIN, created.info.token_id)
    async with identity_engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT event, data FROM audit_records WHERE run_id = :t ORDER BY seq"),
                {"t": TOKENS_TRAIL},
            )
        ).all()
    mine = [(r.event, json.loads(r.data)) for r in rows if created.info.token_id in r.data]
    assert [event for event, _ in mine] == ["token.created", "token.revoked"]
    for _event, data in mine:
        assert data["token_id"] == created.info.token_id
        assert (data["role"], data["tenant"], data["by"]) == ("owner", "team-z", "operator")
        assert created.token not in json.dumps(data)
    assert (
        await audit.verify(identity_engine, TOKENS_TRAIL, await tokens_head(identity_engine)) == []
    )
    assert created.info.token_id in jsonl.read_text()
