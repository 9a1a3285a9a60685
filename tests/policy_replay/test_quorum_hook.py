"""Two keys from an agent's policy (issue 21, item 4, the brain's side): a quorum set for a
tool or a category makes the call ask, the verdict carries the quorum, and the brain's
approval request carries it with the requester; through the real services one approval
does not run the call, the requester's own does not count, a second person's runs it
once, and a deny ends it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from replay_desk import Desk, results
from tether_brain.agents.config import AgentConfig
from tether_brain.gates import AgentPolicy, decide, parse_grants
from tether_common.messages.approvals import QuorumRule
from tether_common.messages.tools import ToolDescriptor
from tether_common.testing import call, say

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}


def tool(name: str, *aliases: str, **fields: Any) -> ToolDescriptor:
    base: dict[str, Any] = {"description": name, "parameters": SCHEMA, "scope": "create"}
    base |= {"reach": "self", "effect": "write"}
    return ToolDescriptor(name=name, aliases=list(aliases), **(base | fields))


WORKSPACE = Path(tempfile.mkdtemp(prefix="quorum-ws-"))  # the path guard needs a real folder


def policy(grants: list[str], quorums: dict[str, QuorumRule]) -> AgentPolicy:
    return AgentPolicy("a", parse_grants(grants), WORKSPACE, quorums=quorums)


TWO = QuorumRule(needed=2)
THREE_OPS = QuorumRule(needed=3, group="ops")


@pytest.mark.parametrize(
    ("quorums", "expected"),
    [
        ({}, None),
        ({"file_write": TWO}, TWO),
        ({"FILE_*": TWO}, TWO),  # a glob, case-insensitive, as guardrails are
        ({"write": TWO}, TWO),  # an alias names the tool too
        ({"category:write_files": THREE_OPS}, THREE_OPS),
        ({"category:shell": TWO}, None),
        ({"file_write": TWO, "category:write_files": THREE_OPS}, THREE_OPS),  # strictest
        ({"category:write_files": THREE_OPS, "file_write": TWO}, THREE_OPS),
    ],
)
def test_the_verdict_carries_the_strictest_quorum(
    quorums: dict[str, QuorumRule], expected: QuorumRule | None
) -> None:
    verdict = decide(
        tool("file_write", "write"), {"path": "a.txt"}, policy(["file_write"], quorums)
    )
    if expected is None:
        assert (verdict.decision, verdict.quorum) == ("allow", None)
    else:
        assert (verdict.decision, verdict.code, verdict.quorum) == (
            "ask",
            "quorum_required",
            expected,
        )


def test_a_waiver_never_removes_a_key() -> None:
    found = decide(
        tool("file_write"),
        {"path": "a.txt"},
        policy(["file_write#noapproval"], {"file_write": TWO}),
    )
    assert (found.decision, found.quorum) == ("ask", TWO)


def test_a_denial_still_denies() -> None:
    found = decide(
        tool("file_write"), {"path": "../outside"}, policy(["file_write"], {"file_write": TWO})
    )
    assert found.decision == "deny"


def test_a_quorum_key_names_a_real_category() -> None:
    with pytest.raises(ValueError, match="categories are"):
        AgentConfig.model_validate({"quorum": {"category:everything": {"needed": 2}}})


async def code_of(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


@pytest.mark.e2e
@pytest.mark.timeout(300)  # the package's stack may start in this test's setup
async def test_two_people_of_the_group_run_the_call_once(desk: Desk) -> None:
    requester, requester_token = await desk.person("operator", ["ops"])
    _, first = await desk.person("approver", ["ops"])
    _, second = await desk.person("approver", ["ops"])
    _, outsider = await desk.person("approver", ["dev"])
    turns = [[call("file_write", path="two-keys.txt", content="both keys")], say("written")]
    run_id = await desk.start(turns, "guarded", token=requester_token)
    card = await desk.asked(run_id)
    assert card is not None
    assert card["code"] == "quorum_required"
    approval_id = card["approval_id"]
    view = await desk.approval(approval_id)
    assert (view["needed"], view["group"], view["requested_by"]) == (2, "ops", requester)

    own = await desk.decide(approval_id, "allow_once", requester_token)
    assert (own.status_code, await code_of(own)) == (403, "requester_cannot_approve")
    stranger = await desk.decide(approval_id, "allow_once", outsider)
    assert (stranger.status_code, await code_of(stranger)) == (403, "not_in_group")
    one = await desk.decide(approval_id, "allow_once", first)
    assert one.status_code == 200, one.text
    view = await desk.approval(approval_id)
    assert (view["status"], len(view["approvals"])) == ("pending", 1)
    async with httpx.AsyncClient(timeout=30) as http:
        run = (await http.get(f"{desk.brain}/v1/runs/{run_id}", headers=desk.admin)).json()
    assert run["status"] == "awaiting_approval"  # one key runs nothing

    two = await desk.decide(approval_id, "allow_once", second)
    assert two.status_code == 200, two.text
    status, events = await desk.finish(run_id)
    assert status == "completed"
    assert [r["ok"] for r in results(events, "file_write")] == [True]
    assert [e["kind"] for e in events].count("tool.approved") == 1


@pytest.mark.e2e
@pytest.mark.timeout(300)
async def test_one_deny_ends_it(desk: Desk) -> None:
    _, requester_token = await desk.person("operator", ["ops"])
    _, first = await desk.person("approver", ["ops"])
    _, second = await desk.person("approver", ["ops"])
    turns = [[call("file_write", path="denied.txt", content="no")], say("understood")]
    run_id = await desk.start(turns, "guarded", token=requester_token)
    card = await desk.asked(run_id)
    assert card is not None
    assert (await desk.decide(card["approval_id"], "allow_once", first)).status_code == 200
    assert (await desk.decide(card["approval_id"], "deny", second)).status_code == 200
    status, events = await desk.finish(run_id)
    assert status == "completed"
    written = results(events, "file_write")
    assert [(r["ok"], r["error_code"]) for r in written] == [(False, "approval_denied")]
