"""The policy API over HTTP against real services: explanations for every decision kind, an
agent's tool catalogue, manual tool runs (allow, deny, ask → approve → run, stale and
replayed approvals) and grant changes whose waivers are audited in both directions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tether_client.server.supervisor import Supervisor
from tether_common.testing import until

pytestmark = pytest.mark.e2e

AuditRows = Callable[[str], Awaitable[list[dict[str, Any]]]]
CONFIRMED = "convert_time"  # confirmed by the organisation (conftest GUARDRAILS)
ORG_DENIED = "file_search"  # denied by the organisation
OWNER_TOKENS = {"alice": "alice-token", "bob": "bob-token"}
ADMIN = {"Authorization": "Bearer test-operator-token"}  # every route takes a principal
CONVERT = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}


async def explain(url: str, tool: str, args: dict[str, Any], **extra: Any) -> Any:
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as client:
        response = await client.post(
            "/v1/policy/explain", json={"tool": tool, "args": args} | extra
        )
    assert response.status_code == 200, response.text
    return response.json()


async def run_tool(url: str, body: dict[str, Any], token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await client.post("/v1/tools/run", json=body, headers=headers)


async def decide(stack: Supervisor, approval_id: str, decision: str, auth: dict[str, str]) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(
            f"{stack.child('approvals').url}/v1/approvals/{approval_id}/decision",
            json={"decision": decision},
            headers=auth,
        )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("tool", "args", "extra", "decision", "code"),
    [
        ("calculate", {"expression": "1+1"}, {}, "allow", None),
        (CONFIRMED, CONVERT, {}, "ask", "org_confirm"),
        ("file_write", {"path": "a.txt", "content": "x"}, {}, "ask", "not_granted"),
        (
            "shell",
            {"command": "ls"},
            {"agent": "writer", "tainted": True},
            "ask",
            "untrusted_content",
        ),
        ("shell", {"command": "rm -rf /"}, {}, "deny", "deny_listed"),
        ("file_read", {"path": ".env"}, {}, "deny", "path_denied"),
        # The default agent reads the workspace without asking (issue 27).
        ("file_read", {"path": "notes.txt"}, {}, "allow", None),
        ("file_list", {}, {}, "allow", None),
        (ORG_DENIED, {"pattern": "x"}, {}, "deny", "org_denied"),
        ("calculate", {"expression": "1"}, {"agent": "locked"}, "deny", "not_granted"),
        (
            "file_write",
            {"path": "notes.txt", "content": "x"},
            {"agent": "writer", "mode": "read-only"},
            "deny",
            "mode_read_only",
        ),
        ("no_such_tool", {}, {}, "invalid", "unknown_tool"),
        ("calculate", {"expr": "1"}, {}, "invalid", "schema_invalid"),
    ],
)
async def test_explain_says_what_the_gates_would_decide(
    policy_url: str,
    tool: str,
    args: dict[str, Any],
    extra: dict[str, Any],
    decision: str,
    code: str | None,
) -> None:
    found = await explain(policy_url, tool, args, **extra)
    assert (found["decision"], found["code"]) == (decision, code), found
    if decision in ("allow", "ask", "deny"):
        assert found["trail"], found


async def test_explain_names_the_grant_and_the_waiver(policy_url: str) -> None:
    found = await explain(
        policy_url, "file_write", {"path": "notes.txt", "content": "x"}, agent="writer"
    )
    assert found["decision"] == "allow"
    assert found["grant"] == "file_write?path=notes.txt#noapproval"
    assert found["waived"] is True
    assert "allowed by file_write?path=notes.txt#noapproval" in found["trail"]


async def test_explain_refuses_an_unknown_agent(policy_url: str) -> None:
    async with httpx.AsyncClient(base_url=policy_url, timeout=30, headers=ADMIN) as client:
        response = await client.post(
            "/v1/policy/explain", json={"tool": "calculate", "args": {}, "agent": "nobody"}
        )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_tool_catalog_shows_grants_rules_and_problems(policy_url: str) -> None:
    async with httpx.AsyncClient(base_url=policy_url, timeout=30, headers=ADMIN) as client:
        catalog = (await client.get("/v1/agents/writer/tool-catalog")).json()
        missing = await client.get("/v1/agents/nobody/tool-catalog")
    assert missing.status_code == 404
    assert catalog["owner"] == "alice"
    assert any("bad.*?x=1" in problem for problem in catalog["problems"])
    tools = {entry["name"]: entry for entry in catalog["tools"]}
    write = tools["file_write"]
    assert (write["granted"], write["granted_by"], write["needs_grant"]) == (True, "grant", True)
    assert write["grants"] == ["file_write?path=notes.txt#noapproval"]
    assert write["conditional"]
    assert write["waived"]
    assert (tools["shell"]["granted"], tools["shell"]["rule"]) == (True, "shell")
    assert tools["calculate"]["granted_by"] == "scope"
    assert not tools["calculate"]["needs_grant"]
    read = tools["file_read"]
    assert (read["granted"], read["granted_by"], read["needs_grant"]) == (True, "scope", False)
    assert tools[ORG_DENIED]["blocked"] == "org_denied"
    assert not tools[ORG_DENIED]["granted"]
    assert tools[CONFIRMED]["confirm"]


async def test_tool_catalog_of_a_tool_less_agent_grants_nothing(
    policy_url: str,
) -> None:
    async with httpx.AsyncClient(base_url=policy_url, timeout=30, headers=ADMIN) as client:
        catalog = (await client.get("/v1/agents/locked/tool-catalog")).json()
    assert catalog["tool_less"]
    assert not any(entry["granted"] for entry in catalog["tools"])


async def test_manual_run_needs_the_operator_token(policy_url: str) -> None:
    body = {"tool": "calculate", "args": {"expression": "1+1"}}
    assert (await run_tool(policy_url, body, None)).status_code == 401
    assert (await run_tool(policy_url, body, "wrong")).status_code == 401


async def test_manual_run_allowed_runs_and_is_audited(
    policy_url: str, auth: dict[str, str], audit_rows: AuditRows
) -> None:
    token = auth["Authorization"][7:]
    response = await run_tool(
        policy_url, {"tool": "calculate", "args": {"expression": "6*7"}}, token
    )
    assert response.status_code == 200, response.text
    assert response.json()["ok"]
    assert "42" in response.json()["content"]
    run_id = response.headers["X-Tether-Run-Id"]
    rows = await audit_rows(run_id)
    assert [r["event"] for r in rows] == ["gate.decision", "tool.call", "tool.result"]
    assert "6*7" not in str(rows)
    assert rows[1]["data"]["args"]["expression"]["sha256"]
    assert rows[2]["data"]["status"] == "ok"
    async with httpx.AsyncClient(base_url=policy_url, timeout=30, headers=ADMIN) as client:
        report = (await client.get(f"/v1/audit/{run_id}", headers=auth)).json()
    assert report["intact"], report


async def test_manual_run_denied_answers_403_with_the_gate_code(
    policy_url: str, auth: dict[str, str]
) -> None:
    token = auth["Authorization"][7:]
    response = await run_tool(policy_url, {"tool": "shell", "args": {"command": "rm -rf /"}}, token)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "deny_listed"
    invalid = await run_tool(policy_url, {"tool": "calculate", "args": {}}, token)
    assert (invalid.status_code, invalid.json()["error"]["code"]) == (422, "schema_invalid")


async def ask(url: str, token: str, args: dict[str, Any]) -> dict[str, Any]:
    response = await run_tool(url, {"tool": CONFIRMED, "args": args}, token)
    assert response.status_code == 403, response.text
    body: dict[str, Any] = response.json()
    assert body["decision"] == "ask"
    assert body["error"]["code"] == "org_confirm"
    return body


async def test_manual_run_ask_approve_run_once(
    policy_url: str, stack: Supervisor, auth: dict[str, str], audit_rows: AuditRows
) -> None:
    token = auth["Authorization"][7:]
    asked = await ask(policy_url, token, CONVERT)
    with_approval = {"tool": CONFIRMED, "args": CONVERT, "approval_id": asked["approval_id"]}
    pending = await run_tool(policy_url, with_approval, token)
    assert (pending.status_code, pending.json()["error"]["code"]) == (409, "approval_pending")
    await decide(stack, asked["approval_id"], "allow_once", auth)
    ran = await run_tool(policy_url, with_approval, token)
    assert ran.status_code == 200, ran.text
    assert ran.json()["ok"]
    assert ran.headers["X-Tether-Run-Id"] == asked["run_id"]
    replayed = await run_tool(policy_url, with_approval, token)
    assert (replayed.status_code, replayed.json()["error"]["code"]) == (409, "approval_stale")
    events = [r["event"] for r in await audit_rows(asked["run_id"])]
    assert events[:2] == ["gate.decision", "approval.requested"]
    assert "tool.result" in events
    assert events.count("tool.call") == 1


async def test_manual_run_with_a_changed_action_is_stale(
    policy_url: str, stack: Supervisor, auth: dict[str, str]
) -> None:
    token = auth["Authorization"][7:]
    asked = await ask(policy_url, token, CONVERT)
    await decide(stack, asked["approval_id"], "allow_once", auth)
    changed = CONVERT | {"to_timezone": "Europe/Paris"}
    stale = await run_tool(
        policy_url,
        {"tool": CONFIRMED, "args": changed, "approval_id": asked["approval_id"]},
        token,
    )
    assert (stale.status_code, stale.json()["error"]["code"]) == (409, "approval_stale")
    other_agent = await run_tool(
        policy_url,
        {"tool": CONFIRMED, "args": CONVERT, "agent": "bobs", "approval_id": asked["approval_id"]},
        token,
    )
    assert other_agent.status_code == 409
    original = {"tool": CONFIRMED, "args": CONVERT, "approval_id": asked["approval_id"]}
    assert (await run_tool(policy_url, original, token)).status_code == 200


async def test_manual_run_with_a_denied_approval_is_refused(
    policy_url: str, stack: Supervisor, auth: dict[str, str]
) -> None:
    token = auth["Authorization"][7:]
    asked = await ask(policy_url, token, CONVERT)
    await decide(stack, asked["approval_id"], "deny", auth)
    body = {"tool": CONFIRMED, "args": CONVERT, "approval_id": asked["approval_id"]}
    refused = await run_tool(policy_url, body, token)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "approval_denied")


async def put_grants(url: str, agent: str, grants: list[str], token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await client.put(
            f"/v1/agents/{agent}/grants", json={"grants": grants}, headers=headers
        )


async def test_waiver_changes_are_audited_both_ways(
    policy_url: str, audit_rows: AuditRows, auth: dict[str, str]
) -> None:
    alice = OWNER_TOKENS["alice"]
    before = len(await audit_rows("agent:waivers"))
    removed = await put_grants(policy_url, "waivers", ["file_write"], alice)
    assert removed.status_code == 200, removed.text
    assert removed.json()["waivers_removed"] == ["file_write#noapproval"]
    found = await explain(policy_url, "file_write", {"path": "a", "content": "x"}, agent="waivers")
    assert (found["decision"], found["waived"]) == ("allow", False)
    added = await put_grants(policy_url, "waivers", ["file_write#noapproval"], alice)
    assert added.json()["waivers_added"] == ["file_write#noapproval"]
    rows = (await audit_rows("agent:waivers"))[before:]
    waivers = [r["data"] for r in rows if r["event"] == "waiver.changed"]
    assert [(w["added"], w["removed"]) for w in waivers] == [
        ([], ["file_write#noapproval"]),
        (["file_write#noapproval"], []),
    ]
    assert {w["by"] for w in waivers} == {"owner:alice"}
    async with httpx.AsyncClient(base_url=policy_url, timeout=30, headers=ADMIN) as client:
        report = (await client.get("/v1/audit/agent:waivers", headers=auth)).json()
    assert report["intact"], report


async def test_only_the_owner_or_an_admin_changes_grants(
    policy_url: str, auth: dict[str, str]
) -> None:
    bob, token = OWNER_TOKENS["bob"], auth["Authorization"][7:]
    # Another owner's agent is out of bob's reach: it looks missing (the identity model
    # answers 404 for what a principal may not see), and nothing changes.
    assert (await put_grants(policy_url, "waivers", [], bob)).status_code == 404
    assert (await put_grants(policy_url, "waivers", [], None)).status_code == 401
    assert (await put_grants(policy_url, "bobs", ["calculate"], bob)).status_code == 200
    assert (await put_grants(policy_url, "bobs", [], token)).status_code == 200
    bad = await put_grants(policy_url, "bobs", ["app.*?x=1"], token)
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_grant")


async def catalog_grants(url: str, agent: str, tool: str) -> list[str]:
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as client:
        found = (await client.get(f"/v1/agents/{agent}/tool-catalog")).json()
    (entry,) = [t for t in found["tools"] if t["name"] == tool]
    grants: list[str] = entry["grants"]
    return grants


async def test_a_grant_change_holds_on_every_replica_and_after_a_restart(
    policy_url: str, stack: Supervisor, auth: dict[str, str]
) -> None:
    """Changed through one replica (the policy API served here), in force on the stack's
    brain (another process) on the broadcast, and on a brain restarted afterwards."""
    token = auth["Authorization"][7:]
    brain = stack.child("brain")
    assert await catalog_grants(brain.url, "bobs", "calculate") == []
    changed = await put_grants(policy_url, "bobs", ["calculate"], token)
    assert changed.status_code == 200, changed.text
    await until(
        lambda: catalog_grants(brain.url, "bobs", "calculate"),
        timeout=10,
        what="the grant in force on the brain",
    )
    assert await catalog_grants(brain.url, "bobs", "calculate") == ["calculate"]

    stack.kill("brain")
    await stack.start_child(brain)
    await stack.wait_ready(timeout=60, children=[brain])
    assert await catalog_grants(brain.url, "bobs", "calculate") == ["calculate"]
    assert (await put_grants(policy_url, "bobs", [], token)).status_code == 200
