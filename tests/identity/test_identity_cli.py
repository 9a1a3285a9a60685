"""`tether tokens create|list|revoke` against a real brain, and the same tokens honoured by
the approvals service and verified over NATS by both (one identity for every service)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from shipped import observe, shipped_stack
from tether_client.cli import main
from tether_client.server.supervisor import SERVICES, Supervisor
from tether_common.errors import AuthError
from tether_common.identity import RemoteVerifier, TokenCache
from tether_common.identity.tables import identity_tokens
from tether_common.testing import until

pytestmark = pytest.mark.e2e

BOOTSTRAP = "identity-cli-operator-token"


@pytest.fixture(scope="module")
async def services(database_url: str) -> AsyncIterator[Supervisor]:
    """A brain and an approvals service, as `tether up` starts them, on a bus of their own."""
    specs = tuple(s for s in SERVICES if s.name in ("brain", "approvals"))
    env = {"TETHER_DB_POOL_SIZE": "6"}
    async with shipped_stack(
        None, database_url, operator_token=BOOTSTRAP, extra_env=env, specs=specs, ready_s=60
    ) as supervisor:
        yield supervisor


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, services: Supervisor, tmp_path: Path) -> None:
    monkeypatch.setenv("TETHER_API_URL", services.child("brain").url)
    monkeypatch.setenv("TETHER_OPERATOR_TOKEN", BOOTSTRAP)
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    monkeypatch.delenv("TETHER_TOKEN", raising=False)


async def tether(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI (its own event loop, in a thread): exit code, stdout, stderr."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.usefixtures("cli_env")
async def test_create_list_revoke_through_the_cli(
    capsys: pytest.CaptureFixture[str], services: Supervisor
) -> None:
    name = f"alice-{uuid.uuid4().hex[:6]}"
    code, out, err = await tether(
        capsys, "tokens", "create", "--name", name, "--role", "client", "--tenant", "t-a",
        "--expires", "30d", "--agents", "helper,writer", "--models", "m1",
    )  # fmt: skip
    assert code == 0, err
    info, token = out.strip().splitlines()
    assert token.startswith("tth_")
    token_id = info.split()[0]
    assert name in info
    assert "agents=helper,writer" in info
    assert "expires" in info

    code, out, _ = await tether(capsys, "tokens", "list")
    assert code == 0
    assert token_id in out
    assert token not in out
    assert token[4:20] not in out

    brain = services.child("brain").url
    approvals = services.child("approvals").url
    async with httpx.AsyncClient(timeout=15) as http:
        # The same token, one identity, both services: a client may not manage tokens…
        for url in (brain, approvals):
            refused = await http.get(f"{url}/v1/tokens", headers=bearer(token))
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == "forbidden"
        # …nor read approvals (it is not an approver).
        listed = await http.get(f"{approvals}/v1/approvals", headers=bearer(token))
        assert listed.status_code == 403

        code, out, _ = await tether(capsys, "tokens", "revoke", token_id)
        assert code == 0
        assert "revoked" in out
        # The brain revoked it and forgot it at once.
        gone = await http.get(f"{brain}/v1/tokens", headers=bearer(token))
        assert gone.status_code == 401
        assert gone.json()["error"]["code"] == "unauthenticated"
        # The approvals replica verified it above and may use its cached entry until the
        # cache's TTL (2 s) runs out: the documented bound. Wait for that, generously.
        await until(
            lambda: http.get(f"{approvals}/v1/tokens", headers=bearer(token)),
            done=lambda response: response.status_code == 401,
            timeout=20,
            every=0.1,
            what="the approvals replica to refuse the revoked token",
        )


@pytest.mark.usefixtures("cli_env")
async def test_only_an_admin_creates_tokens(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = await tether(
        capsys, "tokens", "create", "--name", "op", "--role", "operator", "--tenant", "t-a"
    )
    operator = out.strip().splitlines()[-1]
    monkeypatch.setenv("TETHER_TOKEN", operator)
    for argv in (
        ("tokens", "create", "--name", "x", "--role", "admin"),
        ("tokens", "list"),
        ("tokens", "revoke", "tok_anything"),
    ):
        code, out, err = await tether(capsys, *argv)
        assert code == 4  # auth
        assert "forbidden" in err
    monkeypatch.setenv("TETHER_TOKEN", "tth_not_a_token")
    code, _, err = await tether(capsys, "tokens", "list")
    assert code == 4
    assert "unauthenticated" in err


@pytest.mark.usefixtures("cli_env")
@pytest.mark.parametrize("expires", ["soon", "-1d", "30x", "d", ""])
async def test_a_bad_expiry_is_refused_before_anything_is_sent(
    capsys: pytest.CaptureFixture[str], expires: str
) -> None:
    code, _, err = await tether(
        capsys, "tokens", "create", "--name", "n", "--role", "client", f"--expires={expires}"
    )
    assert code == 2
    assert "invalid_request" in err


@pytest.mark.usefixtures("cli_env")
async def test_an_expired_token_is_refused_everywhere(
    capsys: pytest.CaptureFixture[str],
    services: Supervisor,
    engine: AsyncEngine,
) -> None:
    _, out, _ = await tether(
        capsys, "tokens", "create", "--name", "brief", "--role", "approver", "--expires", "1h"
    )
    token_id, token = out.split()[0], out.strip().splitlines()[-1]
    async with engine.begin() as conn:
        await conn.execute(
            update(identity_tokens)
            .where(identity_tokens.c.token_id == token_id)
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    async with (
        httpx.AsyncClient(timeout=15) as http,
        await observe(services) as bus,  # as a service without the identity tables asks
    ):
        for url in (services.child("brain").url, services.child("approvals").url):
            # Either replica may hold the token in its cache for up to its TTL; the
            # expiry date is checked on every use, cached or not.
            refused = await http.get(f"{url}/v1/approvals", headers=bearer(token))
            if refused.status_code != 404:  # the brain has no /v1/approvals
                assert refused.status_code == 401
                assert refused.json()["error"]["code"] == "token_expired"
        with pytest.raises(AuthError) as caught:
            await RemoteVerifier(bus, cache=TokenCache(ttl_s=0)).authenticate(token)
        assert caught.value.code == "token_expired"
