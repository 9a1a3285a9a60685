"""The HTTP face, in-process over real PostgreSQL: the `principal` dependency's answers
to every shape of `Authorization`, the structured 401/403 bodies, the `/v1/tokens`
router, and the security scheme each protected route declares in OpenAPI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from sqlalchemy import update

from tether_common.http import health_router, install_error_handlers
from tether_common.identity import Principal, TokenStore, principal_dependency, tokens_router
from tether_common.identity.tables import identity_tokens
from tether_common.messages.identity import CreateToken

ADMIN = Principal("operator", "admin")


async def ready() -> dict[str, bool]:
    return {"ok": True}


def build(store: TokenStore) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app, "test")
    app.include_router(health_router(ready))
    app.include_router(tokens_router(store))
    router = APIRouter()
    who_dep = principal_dependency(store)

    @router.post("/v1/runs/{run_id}/stop")
    async def stop(run_id: str, who: Principal = who_dep) -> dict[str, str]:
        who.require("runs.stop", "t-a", "alice")
        return {"stopped": run_id, "by": who.name}

    app.include_router(router)
    return app


@pytest.fixture
async def http(store: TokenStore) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(build(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://identity") as client:
        yield client


def error(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


async def test_every_shape_of_authorization(http: httpx.AsyncClient, store: TokenStore) -> None:
    alice = await store.create(ADMIN, CreateToken(name="alice", role="client", tenant="t-a"))
    good = alice.token
    for header, status in [
        (f"Bearer {good}", 200),
        (f"bearer {good}", 200),
        (f"BEARER {good}", 200),
        (f"Bearer  {good} ", 200),
        (None, 401),
        ("", 401),
        ("Bearer", 401),
        ("Bearer ", 401),
        (good, 401),
        (f"Basic {good}", 401),
        (f"Token {good}", 401),
        (f"Bearer{good}", 401),
        (f"Bearer {good}x", 401),
        (f"Bearer {good[:-1]}", 401),
        (f"Bearer {good.upper()}", 401),
        (f"Bearer {good},{good}", 401),
        ("Bearer tth_" + "A" * 43, 401),
    ]:
        headers = {} if header is None else {"Authorization": header}
        response = await http.post("/v1/runs/run_1/stop", headers=headers)
        assert response.status_code == status, (header, response.text)
        if status == 401:
            assert error(response) == "unauthenticated"
            assert response.headers["WWW-Authenticate"] == "Bearer"
            assert good not in response.text


async def test_forbidden_not_found_and_expired_bodies(
    http: httpx.AsyncClient, store: TokenStore
) -> None:
    viewer = await store.create(ADMIN, CreateToken(name="v", role="viewer", tenant="t-a"))
    other = await store.create(ADMIN, CreateToken(name="bob", role="client", tenant="t-a"))
    elsewhere = await store.create(ADMIN, CreateToken(name="alice", role="client", tenant="t-b"))
    brief = await store.create(
        ADMIN, CreateToken(name="alice", role="client", tenant="t-a", expires_in_s=60)
    )

    def auth(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    refused = await http.post("/v1/runs/run_1/stop", headers=auth(viewer.token))
    assert (refused.status_code, error(refused)) == (403, "forbidden")
    for hidden_from in (other.token, elsewhere.token):
        hidden = await http.post("/v1/runs/run_1/stop", headers=auth(hidden_from))
        assert (hidden.status_code, error(hidden)) == (404, "not_found")
        assert "t-a" not in hidden.text
        assert "alice" not in hidden.text
    assert (await http.post("/v1/runs/run_1/stop", headers=auth(brief.token))).status_code == 200
    async with store.engine.begin() as conn:
        await conn.execute(
            update(identity_tokens)
            .where(identity_tokens.c.token_id == brief.info.token_id)
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    expired = await http.post("/v1/runs/run_1/stop", headers=auth(brief.token))
    assert (expired.status_code, error(expired)) == (401, "token_expired")


async def test_the_tokens_router(
    http: httpx.AsyncClient, store: TokenStore, bootstrap: str
) -> None:
    admin = {"Authorization": f"Bearer {bootstrap}"}
    body = {"name": "carol", "role": "owner", "tenant": "t-c", "expires_in_s": 3600}
    created = await http.post("/v1/tokens", json=body, headers=admin)
    assert created.status_code == 201, created.text
    token, info = created.json()["token"], created.json()["info"]
    assert info["expires_at"] is not None
    listed = await http.get("/v1/tokens", headers=admin)
    assert info["token_id"] in listed.text
    assert token not in listed.text
    for bad in (
        {"name": "x", "role": "root"},
        {"name": "x", "role": "client", "tenant": "a b"},
        {"name": "", "role": "client"},
        {"name": "x", "role": "client", "expires_in_s": -1},
        {"name": "x", "role": "client", "expires_in_s": 1e12},
        {"name": "x", "role": "client", "token_hash": "0" * 64},
        {"name": "x", "role": "client", "created_by": "someone"},
    ):
        refused = await http.post("/v1/tokens", json=bad, headers=admin)
        assert refused.status_code == 422, bad
    revoked = await http.delete(f"/v1/tokens/{info['token_id']}", headers=admin)
    assert revoked.json()["revoked_at"] is not None
    again = await http.delete(f"/v1/tokens/{info['token_id']}", headers=admin)
    assert again.status_code == 404
    gone = await http.get("/v1/tokens", headers={"Authorization": f"Bearer {token}"})
    assert (gone.status_code, error(gone)) == (401, "unauthenticated")


def test_protected_routes_declare_the_bearer_scheme(store: TokenStore) -> None:
    """What the route-walking test relies on: a route that takes a principal says so in
    OpenAPI; health does not."""
    document = build(store).openapi()
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            secured = operation.get("security") == [{"bearer": []}]
            assert secured is (path not in ("/healthz", "/readyz")), (method, path)
