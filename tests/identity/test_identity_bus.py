"""Identity over NATS (real server): `identity.verify` answered from the tables, the
`RemoteVerifier` of services without them, and `bus_principal` reading a request's
`Authorization` header inside a handler."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.bus import Bus
from tether_common.errors import AuthError, NotFoundError
from tether_common.identity import (
    Principal,
    RemoteVerifier,
    TokenCache,
    TokenStore,
    bearer_headers,
    bus_principal,
    serve_verify,
)
from tether_common.messages.identity import CreateToken, PrincipalView, VerifyToken
from tether_common.messages.runs import GetRun
from tether_common.subjects import Route

ADMIN = Principal("operator", "admin")


def lookup(bus: Bus) -> Route[GetRun, PrincipalView]:
    """A run lookup as the brain will serve one; it answers with who asked."""
    return Route(f"{bus.subjects.prefix}.test.lookup", GetRun, PrincipalView, "test")


async def test_a_token_is_verified_over_the_bus(
    bus: Bus, store: TokenStore, bootstrap: str
) -> None:
    await serve_verify(bus, store)
    remote = RemoteVerifier(bus, cache=TokenCache(ttl_s=0))
    created = await store.create(
        ADMIN, CreateToken(name=f"c-{uuid.uuid4().hex[:6]}", role="client", tenant="t1")
    )
    who = await remote.authenticate(created.token)
    assert who == await store.authenticate(created.token)
    assert (await remote.authenticate(bootstrap)).role == "admin"
    for bad in (None, "", "tth_nope", created.token + "x"):
        with pytest.raises(AuthError) as refused:
            await remote.authenticate(bad)
        assert refused.value.code == "unauthenticated"
    await store.revoke(ADMIN, created.info.token_id)
    with pytest.raises(AuthError):
        await remote.authenticate(created.token)


async def test_the_reply_never_echoes_the_token(bus: Bus, store: TokenStore) -> None:
    await serve_verify(bus, store)
    created = await store.create(ADMIN, CreateToken(name="echo", role="operator"))
    raw = await bus.request_raw(
        bus.subjects.identity_verify.subject,
        VerifyToken(token=created.token).model_dump_json().encode(),
    )
    assert created.token.encode() not in raw
    assert created.token[4:20].encode() not in raw


async def test_a_handler_reads_its_callers_token_from_the_header(
    bus: Bus, store: TokenStore
) -> None:
    """A run lookup as the brain will serve it: the caller is the header's principal, the
    run is looked up within its reach; no header, a bad one, another tenant: refused."""
    runs = {"run_a": ("t-a", "alice"), "run_b": ("t-b", "bob")}

    async def get_run(req: GetRun) -> PrincipalView:
        who = await bus_principal(store)
        tenant, owner = runs.get(req.run_id, ("", ""))
        who.require("runs.read", tenant, owner)
        return who.view()

    await bus.serve(lookup(bus), get_run)
    alice = await store.create(ADMIN, CreateToken(name="alice", role="client", tenant="t-a"))
    op_b = await store.create(ADMIN, CreateToken(name="op", role="operator", tenant="t-b"))
    viewer = await store.create(ADMIN, CreateToken(name="v", role="owner", tenant="t-a"))

    async def ask(run_id: str, headers: dict[str, str] | None) -> str:
        reply = await bus.request_raw(
            lookup(bus).subject,
            GetRun(run_id=run_id).model_dump_json().encode(),
            headers=headers,
        )
        return reply.decode()

    assert '"name":"alice"' in await ask("run_a", bearer_headers(alice.token))
    assert '"name":"op"' in await ask("run_b", bearer_headers(op_b.token))
    for run_id, headers, code in [
        ("run_a", None, "unauthenticated"),
        ("run_a", {"Authorization": alice.token}, "unauthenticated"),  # not "Bearer …"
        ("run_a", {"Authorization": "Basic " + alice.token}, "unauthenticated"),
        ("run_a", bearer_headers("tth_forged"), "unauthenticated"),
        ("run_b", bearer_headers(alice.token), "not_found"),
        ("run_a", bearer_headers(op_b.token), "not_found"),
        ("run_a", bearer_headers(viewer.token), "not_found"),  # an owner, not this run's
    ]:
        reply = await ask(run_id, headers)
        assert f'"code":"{code}"' in reply.replace(" ", ""), (run_id, headers, reply)
        assert "t-b" not in reply
        assert "bob" not in reply


async def test_headers_do_not_leak_between_requests(bus: Bus, store: TokenStore) -> None:
    """Each message runs in its own task: a request without a header never sees the
    previous caller's, even on the same subscription."""
    seen: list[str | None] = []

    async def get_run(req: GetRun) -> PrincipalView:
        try:
            seen.append((await bus_principal(store)).name)
        except AuthError:
            seen.append(None)
        return ADMIN.view()

    await bus.serve(lookup(bus), get_run)
    alice = await store.create(ADMIN, CreateToken(name="alice", role="client"))
    for n in range(20):
        headers = bearer_headers(alice.token) if n % 2 == 0 else None
        await bus.request_raw(
            lookup(bus).subject,
            GetRun(run_id=f"r{n}").model_dump_json().encode(),
            headers=headers,
        )
    assert seen == ["alice", None] * 10


async def test_out_of_reach_is_not_found_over_the_wire(
    bus: Bus, store: TokenStore, identity_engine: AsyncEngine
) -> None:
    async def get_run(req: GetRun) -> PrincipalView:
        who = await bus_principal(store)
        who.require("runs.read", "elsewhere", "someone")
        return ADMIN.view()

    await bus.serve(lookup(bus), get_run)
    alice = await store.create(ADMIN, CreateToken(name="alice", role="operator"))
    with pytest.raises(NotFoundError):
        await bus.request(lookup(bus), GetRun(run_id="r1"), headers=bearer_headers(alice.token))
