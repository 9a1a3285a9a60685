"""Each approval path through the real service: once, run, chat, deny, expire, stale,
double decision, replay, deletes, automated approvers, filters."""

from __future__ import annotations

import pytest

from tether_approvals.testing import ApprovalsHarness, auth
from tether_common.messages.approvals import ConsumeApproval, ConsumeResult, ListApprovals


async def consume(approvals: ApprovalsHarness, approval_id: str, digest: str) -> ConsumeResult:
    route = approvals.bus.subjects.approval_consume
    return await approvals.bus.request(
        route, ConsumeApproval(approval_id=approval_id, action_digest=digest)
    )


async def test_allow_once_is_published_sealed_and_runs_once(
    approvals: ApprovalsHarness,
) -> None:
    created = await approvals.create()
    assert created.status == "pending"
    response = await approvals.decide(created.approval_id, "allow_once", note="looks fine")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "granted"

    decided = await approvals.decided(created.approval_id)
    assert (decided.decision, decided.action_digest) == ("allow_once", created.action_digest)
    assert (decided.run_id, decided.step, decided.note) == (created.run_id, 1, "looks fine")
    assert decided.decided_by == "operator"

    first = await consume(approvals, created.approval_id, created.action_digest)
    assert first.outcome == "consumed"
    assert first.approval.status == "consumed"
    replay = await consume(approvals, created.approval_id, created.action_digest)
    assert replay.outcome == "already_consumed"


@pytest.mark.parametrize("decision", ["allow_run", "allow_chat"])
async def test_remembered_decisions_are_granted(approvals: ApprovalsHarness, decision: str) -> None:
    created = await approvals.create()
    response = await approvals.decide(created.approval_id, decision)
    assert response.json()["decision"] == decision
    assert (await approvals.decided(created.approval_id)).decision == decision


async def test_deny_cannot_be_consumed(approvals: ApprovalsHarness) -> None:
    created = await approvals.create()
    assert (await approvals.decide(created.approval_id, "deny")).json()["status"] == "denied"
    assert (await approvals.decided(created.approval_id)).decision == "deny"
    result = await consume(approvals, created.approval_id, created.action_digest)
    assert result.outcome == "approval_denied"


async def test_pending_cannot_be_consumed(approvals: ApprovalsHarness) -> None:
    created = await approvals.create()
    result = await consume(approvals, created.approval_id, created.action_digest)
    assert result.outcome == "approval_pending"


async def test_deciding_twice_is_a_conflict(approvals: ApprovalsHarness) -> None:
    created = await approvals.create()
    assert (await approvals.decide(created.approval_id, "allow_once")).status_code == 200
    again = await approvals.decide(created.approval_id, "deny")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "already_decided"


async def test_a_changed_action_is_stale(approvals: ApprovalsHarness) -> None:
    created = await approvals.create()
    await approvals.decide(created.approval_id, "allow_once")
    stale = await consume(approvals, created.approval_id, "0" * 64)
    assert stale.outcome == "approval_stale"
    assert stale.approval.status == "granted"
    fresh = await consume(approvals, created.approval_id, created.action_digest)
    assert fresh.outcome == "consumed"


async def test_deletes_are_never_remembered(approvals: ApprovalsHarness) -> None:
    created = await approvals.create(tool="file_delete", scope="delete", args={"path": "a.txt"})
    for decision in ("allow_run", "allow_chat"):
        refused = await approvals.decide(created.approval_id, decision)
        assert refused.status_code == 422
        assert refused.json()["error"]["code"] == "delete_not_remembered"
    assert (await approvals.decide(created.approval_id, "allow_once")).status_code == 200


async def test_expiry_is_applied_by_the_sweeper(approvals: ApprovalsHarness) -> None:
    created = await approvals.create(expires_in_s=0.3)
    decided = await approvals.decided(created.approval_id)
    assert (decided.decision, decided.decided_by) == ("expired", "expiry")
    assert decided.action_digest == created.action_digest
    late = await approvals.decide(created.approval_id, "allow_once")
    assert late.status_code == 410  # Gone: tether_common.errors.CODES
    assert late.json()["error"]["code"] == "expired"
    result = await consume(approvals, created.approval_id, created.action_digest)
    assert result.outcome == "approval_expired"


async def test_default_expiry_and_a_longer_one(approvals: ApprovalsHarness) -> None:
    default = await approvals.create(expires_in_s=None)
    assert (default.expires_at - default.created_at).total_seconds() == pytest.approx(180)
    unattended = await approvals.create(expires_in_s=3600)
    assert (unattended.expires_at - unattended.created_at).total_seconds() == pytest.approx(3600)


async def test_automated_approvers(approvals: ApprovalsHarness) -> None:
    allowed = await approvals.create(tool="auto_ok_read")
    assert (allowed.status, allowed.decided_by) == ("granted", "rule:auto-ok")
    assert (await approvals.decided(allowed.approval_id)).decided_by == "rule:auto-ok"

    denied = await approvals.create(tool="shell", danger="destructive")
    assert (denied.status, denied.decision, denied.decided_by) == ("denied", "deny", "rule:no-rm")

    parked = await approvals.create(tool="auto_other")
    assert (parked.status, parked.decided_by) == ("pending", None)


async def test_a_registered_approver_answers_after_the_rules(
    approvals: ApprovalsHarness,
) -> None:
    denied = await approvals.create(tool="forbidden_upload")
    assert (denied.status, denied.decided_by) == ("denied", "approver:deny-forbidden")
    assert (await approvals.decided(denied.approval_id)).decision == "deny"
    parked = await approvals.create(tool="ask_me")
    assert parked.status == "pending"
    ruled = await approvals.create(tool="forbidden_x", danger="destructive")
    assert ruled.decided_by == "rule:no-rm"


async def test_list_filters(approvals: ApprovalsHarness) -> None:
    mine = await approvals.create(agent="filter-agent", owner="filter-team")
    other = await approvals.create(agent="filter-agent")
    await approvals.decide(other.approval_id, "deny")
    response = await approvals.http.get(
        "/v1/approvals",
        params={"status": "pending", "agent": "filter-agent"},
        headers=auth(approvals.admin_token),
    )
    assert [a["approval_id"] for a in response.json()["approvals"]] == [mine.approval_id]
    by_run = await approvals.http.get(
        "/v1/approvals",
        params={"status": "all", "run_id": other.run_id},
        headers=auth(approvals.admin_token),
    )
    assert [a["status"] for a in by_run.json()["approvals"]] == ["denied"]
    over_bus = await approvals.bus.request(
        approvals.bus.subjects.approval_list, ListApprovals(owner="filter-team")
    )
    assert [a.approval_id for a in over_bus.approvals] == [mine.approval_id]


async def test_openapi_is_published(approvals: ApprovalsHarness) -> None:
    document = await approvals.http.get("/openapi.json", headers=auth(approvals.admin_token))
    paths = document.json()["paths"]
    for path in ("/v1/approvals", "/v1/approvals/{approval_id}/decision", "/v1/approvals/events"):
        assert path in paths
