"""Approvals never cross tenants: an approver, operator or viewer of one tenant does not
list, read, follow or decide another tenant's requests (they look like missing ones),
while an admin reaches every tenant. Through the real approvals service."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tether_approvals.testing import ApprovalsHarness, auth
from tether_common.identity import Role

SECRET = "rm -rf ./tenant-a-only-secret"


@pytest.fixture(scope="module")
async def requests(approvals: ApprovalsHarness) -> dict[str, str]:
    """One pending request in each of two fresh tenants."""
    suffix = uuid.uuid4().hex[:6]
    found = {}
    for tenant in (f"ta{suffix}", f"tb{suffix}"):
        created = await approvals.create(tenant=tenant, args={"command": f"{SECRET} {tenant}"})
        found[tenant] = created.approval_id
    return found


def _tenants(requests: dict[str, str]) -> tuple[str, str]:
    a, b = sorted(requests)
    return a, b


@pytest.mark.parametrize("role", ["approver", "operator", "viewer"])
async def test_another_tenants_request_looks_missing(
    approvals: ApprovalsHarness, requests: dict[str, str], role: Role
) -> None:
    a, b = _tenants(requests)
    token = await approvals.token(role, tenant=b)
    http = approvals.http
    own = await http.get(f"/v1/approvals/{requests[b]}", headers=auth(token))
    assert own.status_code == 200, own.text
    foreign = await http.get(f"/v1/approvals/{requests[a]}", headers=auth(token))
    missing = await http.get("/v1/approvals/apr_doesnotexist0", headers=auth(token))
    assert foreign.status_code == missing.status_code == 404
    assert SECRET not in foreign.text
    listed = await http.get("/v1/approvals?status=pending&limit=1000", headers=auth(token))
    assert listed.status_code == 200, listed.text
    ids = {item["approval_id"] for item in listed.json()["approvals"]}
    assert requests[b] in ids
    assert requests[a] not in ids
    assert f"{SECRET} {a}" not in listed.text


@pytest.mark.parametrize("role", ["approver", "operator"])
async def test_another_tenants_request_cannot_be_decided(
    approvals: ApprovalsHarness, requests: dict[str, str], role: Role
) -> None:
    a, b = _tenants(requests)
    token = await approvals.token(role, tenant=b)
    for decision in ("allow_once", "allow_run", "deny"):
        answer = await approvals.decide(requests[a], decision, token=token)
        assert answer.status_code == 404, answer.text
        assert SECRET not in answer.text
    still = await approvals.http.get(
        f"/v1/approvals/{requests[a]}", headers=auth(approvals.admin_token)
    )
    assert still.json()["status"] == "pending"


async def test_an_admin_reaches_every_tenant(
    approvals: ApprovalsHarness, requests: dict[str, str]
) -> None:
    listed = await approvals.http.get(
        "/v1/approvals?status=pending&limit=1000", headers=auth(approvals.admin_token)
    )
    ids = {item["approval_id"] for item in listed.json()["approvals"]}
    assert set(requests.values()) <= ids


async def test_the_event_stream_carries_only_the_own_tenant(
    approvals: ApprovalsHarness, requests: dict[str, str]
) -> None:
    """The operator event stream replays from the start: only the own tenant's cards."""
    a, b = _tenants(requests)
    token = await approvals.token("approver", tenant=b)
    seen = ""
    async with (
        httpx.AsyncClient(base_url=approvals.url, timeout=10) as http,
        http.stream(
            "GET", "/v1/approvals/events", headers=auth(token) | {"Last-Event-ID": "0"}
        ) as stream,
    ):
        assert stream.status_code == 200
        async for chunk in stream.aiter_text():
            seen += chunk
            if requests[b] in seen:
                break
    assert requests[a] not in seen
    assert f"{SECRET} {a}" not in seen
