"""Authentication, roles and team isolation over HTTP and NATS; tokens stored hashed."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.testing import ApprovalsHarness, auth
from tether_common.errors import AuthError, NotFoundError
from tether_common.messages.approvals import DecideApproval, Decision, ListApprovals


async def decide_over_bus(
    approvals: ApprovalsHarness, approval_id: str, token: str, decision: Decision = "allow_once"
) -> str:
    body = DecideApproval(approval_id=approval_id, decision=decision, token=token)
    view = await approvals.bus.request(approvals.bus.subjects.approval_decide, body)
    return view.status


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/approvals"),
        ("GET", "/v1/approvals/apr_x"),
        ("POST", "/v1/approvals/apr_x/decision"),
        ("GET", "/v1/approvals/events"),
        ("GET", "/v1/tokens"),
        ("POST", "/v1/tokens"),
    ],
)
async def test_every_operator_route_needs_a_token(
    approvals: ApprovalsHarness, method: str, path: str
) -> None:
    for headers in ({}, auth("not-a-token")):
        response = await approvals.http.request(method, path, headers=headers, json={})
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "unauthenticated"


async def test_health_and_console_are_open(approvals: ApprovalsHarness) -> None:
    assert (await approvals.http.get("/healthz")).status_code == 200
    assert (await approvals.http.get("/readyz")).status_code == 200
    # Alone (no console address configured), the one console with its Approvals view.
    page = await approvals.http.get("/")
    assert page.status_code == 200
    assert '<body data-views="approvals">' in page.text
    assert (await approvals.http.get("/console")).text == page.text
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    assert "'sha256-" in policy
    assert "unsafe-inline" not in policy


async def test_a_viewer_sees_but_cannot_decide(approvals: ApprovalsHarness) -> None:
    viewer = await approvals.token("viewer")
    created = await approvals.create()
    seen = await approvals.http.get(f"/v1/approvals/{created.approval_id}", headers=auth(viewer))
    assert seen.status_code == 200
    refused = await approvals.decide(created.approval_id, "allow_once", token=viewer)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    with pytest.raises(AuthError) as caught:
        await decide_over_bus(approvals, created.approval_id, viewer)
    assert caught.value.code == "forbidden"
    still = await approvals.http.get(f"/v1/approvals/{created.approval_id}", headers=auth(viewer))
    assert still.json()["status"] == "pending"


async def test_teams_are_isolated_over_http(approvals: ApprovalsHarness) -> None:
    team_a = await approvals.token("approver", owners=["team-a"])
    mine = await approvals.create(owner="team-a", agent="bot-a")
    theirs = await approvals.create(owner="team-b", agent="bot-b")

    hidden = await approvals.http.get(f"/v1/approvals/{theirs.approval_id}", headers=auth(team_a))
    assert hidden.status_code == 404
    assert hidden.json()["error"]["code"] == "not_found"
    refused = await approvals.decide(theirs.approval_id, "allow_once", token=team_a)
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "not_found"
    assert "team-b" not in refused.text

    listed = await approvals.http.get(
        "/v1/approvals", params={"status": "all"}, headers=auth(team_a)
    )
    ids = {a["approval_id"] for a in listed.json()["approvals"]}
    assert mine.approval_id in ids
    assert theirs.approval_id not in ids
    assert (await approvals.decide(mine.approval_id, "allow_once", token=team_a)).status_code == 200


async def test_teams_are_isolated_over_nats(approvals: ApprovalsHarness) -> None:
    team_a = await approvals.token("approver", agents=["bot-a"])
    mine = await approvals.create(agent="bot-a")
    theirs = await approvals.create(agent="bot-b")
    with pytest.raises(NotFoundError):
        await decide_over_bus(approvals, theirs.approval_id, team_a)
    assert await decide_over_bus(approvals, mine.approval_id, team_a, "deny") == "denied"
    with pytest.raises(AuthError) as caught:
        await decide_over_bus(approvals, mine.approval_id, "wrong-token")
    assert caught.value.code == "unauthenticated"
    listed = await approvals.bus.request(
        approvals.bus.subjects.approval_list, ListApprovals(status=None, token=team_a)
    )
    assert {a.agent for a in listed.approvals} == {"bot-a"}


async def test_only_admins_manage_tokens(approvals: ApprovalsHarness) -> None:
    approver = await approvals.token("approver")
    response = await approvals.http.post(
        "/v1/tokens", json={"name": "x", "role": "admin"}, headers=auth(approver)
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


async def test_tokens_are_stored_hashed_and_can_be_revoked(
    approvals: ApprovalsHarness, engine: AsyncEngine
) -> None:
    plain = await approvals.token("viewer")
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT * FROM identity_tokens"))).mappings().all()
    row = next(r for r in rows if r["token_hash"] == hashlib.sha256(plain.encode()).hexdigest())
    assert all(plain not in str(value) for r in rows for value in r.values())

    assert (await approvals.http.get("/v1/approvals", headers=auth(plain))).status_code == 200
    revoked = await approvals.http.delete(
        f"/v1/tokens/{row['token_id']}", headers=auth(approvals.admin_token)
    )
    assert revoked.json()["revoked_at"] is not None
    assert (await approvals.http.get("/v1/approvals", headers=auth(plain))).status_code == 401
