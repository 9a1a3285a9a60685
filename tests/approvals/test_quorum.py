"""Two keys, through the real approvals service: a quorum of people (never the requester,
of the required group) before anything reaches the brain's decisions subject; any deny
ends it; expiry still denies; escalation to a second group; votes from two replicas at
once counted once each."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.decisions import quorum
from tether_approvals.decisions.quorum import DECIDED_BY_CHARS, decided_by, required
from tether_approvals.settings import QuorumRuleSetting
from tether_approvals.testing import ApprovalsHarness, auth
from tether_client.server.supervisor import Supervisor
from tether_common import audit
from tether_common.messages.approvals import (
    ApprovalDecided,
    ApprovalNotice,
    ApprovalView,
    ConsumeApproval,
    CreateApproval,
    QuorumRule,
    Vote,
)
from tether_common.messages.base import decode

TWO_OF_ANYONE = {"needed": 2}


async def person(
    approvals: ApprovalsHarness, groups: list[str] | None = None, name: str | None = None
) -> tuple[str, str]:
    """A new approver (its name and token), member of `groups`."""
    name = name or f"p-{uuid.uuid4().hex[:8]}"
    body: dict[str, Any] = {"name": name, "role": "approver"}
    if groups is not None:
        body["groups"] = groups
    response = await approvals.http.post(
        "/v1/tokens", json=body, headers=auth(approvals.admin_token)
    )
    assert response.status_code == 201, response.text
    return name, str(response.json()["token"])


async def announced(approvals: ApprovalsHarness, approval_id: str) -> ApprovalDecided | None:
    """This request's decision if the brain-facing subject holds one: every stored message
    is read until the stream goes quiet. A decision is published before the deciding
    HTTP call answers, so one made earlier would be there."""
    async with asyncio.timeout(60):
        async for data in approvals.bus.replay(approvals.bus.subjects.approval_decided, idle_s=2.0):
            if data is None:
                return None
            message = decode(ApprovalDecided, data)
            if message.approval_id == approval_id:
                return message
    raise AssertionError("unreachable")


def refused_with(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def trail_events(engine: AsyncEngine, run_id: str) -> list[str]:
    trail = f"approvals:{run_id}"
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(audit.records.c.event)
            .where(audit.records.c.run_id == trail)
            .order_by(audit.records.c.seq)
        )
        return [r.event for r in rows]


def test_the_strictest_requirement_wins() -> None:
    rules = [
        QuorumRuleSetting(name="any-two", tool="deploy_*", quorum=QuorumRule(needed=2)),
        QuorumRuleSetting(
            name="sre-two", tool="*", effect=["delete"], quorum=QuorumRule(group="sre")
        ),
        QuorumRuleSetting(name="other", tool="x", quorum=QuorumRule(needed=5)),
    ]
    base = {"run_id": "r", "step": 1, "tool": "deploy_prod", "args": {}, "reason": "r"}
    req = CreateApproval(**base, action_digest="d", effect="delete")
    assert required(req, rules) == (QuorumRule(needed=2, group="sre"), "rule:sre-two")
    own = CreateApproval(**base, action_digest="d", quorum=QuorumRule(needed=3))
    assert required(own, rules) == (QuorumRule(needed=3), "request")
    assert required(CreateApproval(**base | {"tool": "read"}, action_digest="d"), rules) is None
    with pytest.raises(ValueError, match="go together"):
        QuorumRule(needed=2, escalate_after_s=5)


def test_decided_by_fits_its_column() -> None:
    at = datetime.now(UTC)
    votes = [Vote(by="token:" + c * 190, decision="allow_once", at=at) for c in "ab"]
    assert len(decided_by(votes)) == DECIDED_BY_CHARS
    denied = [*votes, Vote(by="token:c", decision="deny", at=at)]
    assert decided_by(denied) == "token:c"


async def test_two_people_of_the_group_and_never_the_requester(
    approvals: ApprovalsHarness, engine: AsyncEngine
) -> None:
    owner, owner_token = await person(approvals, ["sre"])
    starter, starter_token = await person(approvals, ["sre"])
    _, outsider = await person(approvals, ["dev"])
    _, first = await person(approvals, ["sre", "dev"])
    _, second = await person(approvals, ["sre"])
    created = await approvals.create(tool="two_keys_deploy", owner=owner, requested_by=starter)
    assert (created.needed, created.group, created.status) == (2, "sre", "pending")

    for token in (owner_token, starter_token):
        refused_with(
            await approvals.decide(created.approval_id, "allow_once", token),
            403,
            "requester_cannot_approve",
        )
    refused_with(
        await approvals.decide(created.approval_id, "allow_once", outsider), 403, "not_in_group"
    )

    one = await approvals.decide(created.approval_id, "allow_run", first, note="looks right")
    assert one.status_code == 200, one.text
    progress = one.json()
    assert progress["status"] == "pending"
    assert [v["decision"] for v in progress["approvals"]] == ["allow_run"]
    assert await announced(approvals, created.approval_id) is None
    refused_with(
        await approvals.decide(created.approval_id, "allow_once", first), 409, "already_voted"
    )

    two = await approvals.decide(created.approval_id, "allow_once", second)
    assert two.status_code == 200, two.text
    done = two.json()
    assert done["status"] == "granted"
    assert done["decision"] == "allow_once"  # the narrowest allow given
    decided = await approvals.decided(created.approval_id)
    assert decided.decision == "allow_once"
    assert len(decided.approvers) == 2
    assert decided.decided_by == ", ".join(decided.approvers)
    spent = await approvals.bus.request(
        approvals.bus.subjects.approval_consume,
        ConsumeApproval(approval_id=created.approval_id, action_digest=created.action_digest),
    )
    assert spent.outcome == "consumed"
    events = await trail_events(engine, created.run_id)
    refused = ["approval.vote_refused"] * 3
    voted = ["approval.voted", "approval.vote_refused", "approval.decided"]
    assert events == ["approval.quorum", *refused, *voted, "approval.consumed"]


async def test_an_automated_allow_does_not_stand_in_for_people(
    approvals: ApprovalsHarness,
) -> None:
    created = await approvals.create(tool="auto_ok_two_keys")
    assert created.status == "pending"
    assert created.needed == 2


async def test_any_deny_ends_it(approvals: ApprovalsHarness) -> None:
    _, first = await person(approvals)
    _, second = await person(approvals)
    created = await approvals.create(quorum=TWO_OF_ANYONE)
    assert (await approvals.decide(created.approval_id, "allow_once", first)).status_code == 200
    denied = await approvals.decide(created.approval_id, "deny", second, note="not today")
    assert denied.status_code == 200, denied.text
    assert denied.json()["status"] == "denied"
    decided = await approvals.decided(created.approval_id)
    assert decided.decision == "deny"
    assert len(decided.approvers) == 2
    third = await approvals.decide(created.approval_id, "allow_once")
    refused_with(third, 409, "already_decided")


async def test_expiry_still_denies_a_partial_quorum(
    approvals: ApprovalsHarness, engine: AsyncEngine
) -> None:
    _, first = await person(approvals)
    created = await approvals.create(quorum=TWO_OF_ANYONE, expires_in_s=3.0)
    assert (await approvals.decide(created.approval_id, "allow_once", first)).status_code == 200
    decided = await approvals.decided(created.approval_id, timeout=60)
    assert decided.decision == "expired"
    events = await trail_events(engine, created.run_id)
    assert events[-2:] == ["approval.voted", "approval.expired"]


async def test_the_completing_vote_after_expiry_is_refused(
    approvals: ApprovalsHarness, engine: AsyncEngine
) -> None:
    """Whether the sweeper or the late vote gets there first, the request expires once
    and the vote decides nothing."""
    _, first = await person(approvals)
    _, second = await person(approvals)
    created = await approvals.create(quorum=TWO_OF_ANYONE, expires_in_s=2.0)
    assert (await approvals.decide(created.approval_id, "allow_once", first)).status_code == 200
    # Past the expiry by the clock the service compares with (same host).
    await asyncio.sleep(max(0.0, (created.expires_at - datetime.now(UTC)).total_seconds()) + 0.2)
    refused_with(await approvals.decide(created.approval_id, "allow_once", second), 410, "expired")
    assert (await approvals.decided(created.approval_id)).decision == "expired"
    async with engine.connect() as conn:
        kinds = await conn.execute(
            text("SELECT kind FROM approval_events WHERE approval_id = :a ORDER BY event_id"),
            {"a": created.approval_id},
        )
        assert [k for (k,) in kinds] == ["created", "voted", "expired"]


async def test_an_unanswered_request_moves_to_the_second_group(
    approvals: ApprovalsHarness,
) -> None:
    _, sre = await person(approvals, ["sre"])
    _, lead = await person(approvals, ["leads"])
    notices = await approvals.bus.subscribe_raw(approvals.bus.subjects.approval_notices)
    try:
        rule = {"needed": 1, "group": "sre", "escalate_after_s": 4, "escalate_to": "leads"}
        created = await approvals.create(quorum=rule)
        ids = created.approval_id
        early = await approvals.decide(created.approval_id, "allow_once", lead)
        refused_with(early, 403, "not_in_group")
        async with asyncio.timeout(60):
            while True:
                told = decode(ApprovalNotice, (await notices.next_msg(timeout=60)).data)
                if (told.card.approval_id, told.kind) == (ids, "approval.escalated"):
                    break
        assert told.card.group == "leads"
    finally:
        await notices.unsubscribe()
    seen = await approvals.http.get(
        f"/v1/approvals/{created.approval_id}", headers=auth(approvals.admin_token)
    )
    assert seen.json()["group"] == "leads"
    assert seen.json()["escalated_at"] is not None
    refused_with(
        await approvals.decide(created.approval_id, "allow_once", sre), 403, "not_in_group"
    )
    granted = await approvals.decide(created.approval_id, "allow_once", lead)
    assert granted.status_code == 200, granted.text
    assert granted.json()["status"] == "granted"


async def test_votes_from_two_replicas_at_once_count_once_each(
    approvals: ApprovalsHarness, approvals_processes: Supervisor, engine: AsyncEngine
) -> None:
    replica = approvals_processes.add_replica("approvals")
    await approvals_processes.start_child(replica)
    try:
        await approvals_processes.wait_ready(timeout=60, children=[replica])
        _, first = await person(approvals)
        _, second = await person(approvals)
        created = await asyncio.gather(*(approvals.create(quorum=TWO_OF_ANYONE) for _ in range(6)))
        async with httpx.AsyncClient(base_url=replica.url, timeout=30) as other:

            async def both(approval_id: str, a: str, b: str) -> list[int]:
                path = f"/v1/approvals/{approval_id}/decision"
                body = {"decision": "allow_once"}
                answers = await asyncio.gather(
                    approvals.http.post(path, json=body, headers=auth(a)),
                    other.post(path, json=body, headers=auth(b)),
                )
                return sorted(r.status_code for r in answers)

            for item in created[:5]:
                assert await both(item.approval_id, first, second) == [200, 200]
            # The same person on both replicas at once: one vote, one 409.
            assert await both(created[5].approval_id, first, first) == [200, 409]
        ids = [item.approval_id for item in created]
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT approval_id, status, jsonb_array_length(votes) AS n,"
                    " (SELECT count(*) FROM approval_events e WHERE e.kind = 'decided'"
                    "  AND e.approval_id = a.approval_id) AS decided"
                    " FROM approvals a WHERE approval_id = ANY(:ids)"
                ),
                {"ids": ids},
            )
            found = {r.approval_id: (r.status, r.n, r.decided) for r in rows}
        assert [found[i] for i in ids[:5]] == [("granted", 2, 1)] * 5
        assert found[ids[5]] == ("pending", 1, 0)
        for item in created[:5]:
            assert len((await approvals.decided(item.approval_id)).approvers) == 2
    finally:
        await approvals_processes.stop_child(replica)


@pytest.mark.parametrize(
    ("first", "second"), [("Carol", "carol"), ("carol", "CAROL"), ("cArOl", "Carol")]
)
async def test_one_person_however_their_name_is_cased(
    approvals: ApprovalsHarness, first: str, second: str
) -> None:
    """Two tokens whose names differ only in case are one person: the second's allow is
    `already_voted`, and neither is a second to a requester spelt the third way."""
    suffix = uuid.uuid4().hex[:6]
    _, one = await person(approvals, name=f"{first}-{suffix}")
    _, other = await person(approvals, name=f"{second}-{suffix}")
    created = await approvals.create(quorum=TWO_OF_ANYONE)
    assert (await approvals.decide(created.approval_id, "allow_once", one)).status_code == 200
    refused_with(
        await approvals.decide(created.approval_id, "allow_once", other), 409, "already_voted"
    )
    assert await announced(approvals, created.approval_id) is None

    owned = await approvals.create(quorum=TWO_OF_ANYONE, owner=f"{second.swapcase()}-{suffix}")
    for token in (one, other):
        refused_with(
            await approvals.decide(owned.approval_id, "allow_once", token),
            403,
            "requester_cannot_approve",
        )


VIEW: dict[str, Any] = {
    "approval_id": "apr_x",
    "run_id": "run_x",
    "step": 1,
    "tool": "deploy",
    "args": {},
    "danger": "",
    "reason": "r",
    "reach": "external",
    "action_digest": "d",
    "status": "pending",
    "created_at": "2026-01-01T00:00:00Z",
    "expires_at": "2026-01-01T00:03:00Z",
}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("carol", "CAROL"),
        ("carol", "ＣＡＲＯＬ"),  # full-width letters
        ("straße", "STRASSE"),  # case folding, not lowering
        ("ﬁona", "FIONA"),  # a ligature
        ("token:carol@t1", "token:Carol@t1"),
        ("ǅemal", "Ǆemal"),  # a title-case digraph
    ],
)
def test_a_person_is_their_name_folded(a: str, b: str) -> None:
    assert quorum.person(a) == quorum.person(b)
    at = datetime.now(UTC)
    votes = [Vote(by=a, decision="allow_once", at=at), Vote(by=b, decision="allow_once", at=at)]
    view = ApprovalView.model_validate(
        {**VIEW, "needed": 2, "approvals": [v.model_dump(mode="json") for v in votes]}
    )
    assert not quorum.met(view)  # votes stored before the fold still count once


def test_different_people_stay_different() -> None:
    assert quorum.person("carol") != quorum.person("caro1")
    assert quorum.person("carol") != quorum.person("carol@t2")
