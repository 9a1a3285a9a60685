"""Organisation guardrails when several patterns match one tool (issue 13, part 8): deny
wins over confirm whatever order the patterns come in, a rule written for a tool's alias
holds for its canonical name and the other way round, and the permission chain, the tool
catalogue, `POST /v1/policy/explain` and manual runs all give the same answer, because
they all ask `gates.policy.guardrail`.

The pure table tries every ordering of each set of patterns against the chain and the
catalogue; the HTTP tests drive the brain's policy routes against the real tools-runner
catalogue and approvals service."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from shipped import observe
from tether_brain.agents.config import AgentConfig, Agents
from tether_brain.agents.overrides import GrantOverrides
from tether_brain.api import policy
from tether_brain.api.policy import catalog_entry, policy_state
from tether_brain.api.static_verifier import StaticVerifier
from tether_brain.clients.approval import ApprovalClient
from tether_brain.clients.runner import BusRunner
from tether_brain.gates import AgentPolicy, decide, parse_grants
from tether_brain.gates.policy import Rule, guardrail
from tether_brain.tools.toolbox import Toolbox
from tether_client.server.supervisor import Supervisor
from tether_common.db import make_engine
from tether_common.http import install_error_handlers
from tether_common.messages.tools import ToolDescriptor

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}
OPERATOR = {"Authorization": "Bearer test-operator-token"}  # tests/conftest.py's admin


def tool(name: str, *aliases: str, **fields: Any) -> ToolDescriptor:
    return ToolDescriptor(
        name=name, description=name, parameters=SCHEMA, aliases=list(aliases), **fields
    )


CALCULATE = tool("calculate", "calculator", "calc", "math", "evaluate", effect="none")
SHELL = tool("shell", "bash", "sh", "terminal", scope="update", reach="instance", effect="process")
MCP_WRITE = tool("mcp.notes.write_note", scope="update", reach="external", effect="mcp")
MCP_READ = tool("mcp.notes.read_note", reach="instance", effect="read")
READ = tool("file_read", "read_file", "cat", "open_file", reach="instance", effect="read")

# (patterns, tool, the rule that must hold). Every ordering of the patterns is tried.
CASES: list[tuple[dict[str, Rule], ToolDescriptor, Rule | None]] = [
    ({"calc*": "confirm", "calculate": "deny"}, CALCULATE, "deny"),
    ({"*": "confirm", "calculate": "deny"}, CALCULATE, "deny"),
    ({"*": "deny", "calculate": "confirm"}, CALCULATE, "deny"),
    ({"c?lculate": "confirm", "[a-c]*": "deny"}, CALCULATE, "deny"),
    ({"[!s]*": "deny", "calculate": "confirm", "calc*": "confirm"}, CALCULATE, "deny"),
    ({"calc*": "confirm", "calculat?": "confirm"}, CALCULATE, "confirm"),
    ({"calc": "deny"}, CALCULATE, "deny"),  # an alias: calling `calculate` does not dodge it
    ({"evaluate": "confirm", "shell": "deny"}, CALCULATE, "confirm"),
    ({"CALCULATE": "deny"}, CALCULATE, "deny"),  # tool ids are matched case-insensitively
    ({"Calc*": "confirm"}, CALCULATE, "confirm"),
    ({"shell": "deny", "file_*": "confirm"}, CALCULATE, None),
    ({"calculated": "deny", "calculat": "deny", "?calculate": "deny"}, CALCULATE, None),
    ({"sh": "deny", "s*": "confirm"}, SHELL, "deny"),
    ({"bash": "confirm", "shell": "confirm"}, SHELL, "confirm"),
    ({"*": "confirm", "terminal": "deny", "mcp.*": "deny"}, SHELL, "deny"),
    ({"mcp.*": "confirm", "mcp.notes.*": "deny"}, MCP_WRITE, "deny"),
    ({"mcp.*": "deny", "mcp.notes.write_note": "confirm"}, MCP_WRITE, "deny"),
    ({"mcp.*": "confirm", "mcp.other.*": "deny"}, MCP_WRITE, "confirm"),
    ({"mcp.notes.*_note": "confirm", "*write*": "deny"}, MCP_WRITE, "deny"),
    ({"mcp.notes.read_note": "deny", "mcp.*": "confirm"}, MCP_WRITE, "confirm"),
    ({"mcp.notes.read_note": "deny", "mcp.*": "confirm"}, MCP_READ, "deny"),
    ({"mcp.?otes.*": "deny"}, MCP_READ, "deny"),
    ({"mcp.[a-m]*": "deny"}, MCP_READ, None),
    ({"cat": "deny", "file_read": "confirm"}, READ, "deny"),
    ({"read_*": "confirm", "file_*": "confirm"}, READ, "confirm"),
]


def orderings() -> Iterator[tuple[dict[str, Rule], ToolDescriptor, Rule | None]]:
    for patterns, target, expected in CASES:
        for order in itertools.permutations(patterns.items()):
            yield dict(order), target, expected


ORDERED = list(orderings())


def case_id(case: tuple[dict[str, Rule], ToolDescriptor, Rule | None]) -> str:
    patterns, target, _ = case
    return f"{target.name}:{','.join(f'{p}={r}' for p, r in patterns.items())}"


def grant_all(workspace: Path, guardrails: dict[str, Rule]) -> AgentPolicy:
    """Every tool granted without confirmation: only the guardrails can ask or deny."""
    grants = parse_grants(
        [f"{t.name}#noapproval" for t in (CALCULATE, SHELL, MCP_WRITE, MCP_READ, READ)]
    )
    return AgentPolicy("ops", grants, workspace, guardrails=guardrails)


@pytest.mark.parametrize("case", ORDERED, ids=[case_id(c) for c in ORDERED])
def test_the_chain_and_the_catalogue_agree_in_every_order(
    tmp_path: Path, case: tuple[dict[str, Rule], ToolDescriptor, Rule | None]
) -> None:
    patterns, target, expected = case
    found = guardrail(target, patterns)
    assert (found.rule if found else None) == expected
    policy = grant_all(tmp_path, patterns)
    args = {"command": "echo hi"} if target is SHELL else {}
    verdict = decide(target, args, policy)
    entry = catalog_entry(target, policy)
    if expected == "deny":
        assert (verdict.decision, verdict.code) == ("deny", "org_denied")
        assert (entry.blocked, entry.granted, entry.confirm) == ("org_denied", False, False)
    elif expected == "confirm":
        assert (verdict.decision, verdict.code) == ("ask", "org_confirm")
        assert (entry.blocked, entry.confirm) == (None, True)
    else:
        assert verdict.decision == "allow", verdict
        assert (entry.blocked, entry.confirm) == (None, False)


def test_the_reason_names_the_rule_that_decided(tmp_path: Path) -> None:
    policy = grant_all(tmp_path, {"calc*": "confirm", "calculate": "deny", "*": "confirm"})
    verdict = decide(CALCULATE, {}, policy)
    assert "rule 'calculate'" in verdict.reason


# ---- through the brain's policy routes, against the real services ---------------------

AGENTS = {"ops": AgentConfig(grants=["calculate#noapproval", "shell#noapproval"])}
CALC = {"expression": "1+1"}
ECHO = {"command": "echo hi"}
# (patterns, the name the caller uses, the canonical name, arguments, the rule that holds)
HTTP_CASES: list[tuple[dict[str, Rule], str, str, dict[str, Any], Rule | None]] = [
    ({"calc*": "confirm", "calculate": "deny"}, "calculate", "calculate", CALC, "deny"),
    ({"*": "confirm", "calc": "deny"}, "calculate", "calculate", CALC, "deny"),
    ({"c?lc*": "confirm", "[a-c]alculate": "deny"}, "calculate", "calculate", CALC, "deny"),
    ({"math": "confirm", "shell": "deny"}, "calculate", "calculate", CALC, "confirm"),
    ({"CALC*": "confirm", "mcp.*": "deny"}, "calculate", "calculate", CALC, "confirm"),
    ({"mcp.*": "deny", "calculate?": "deny"}, "calculate", "calculate", CALC, None),
    # A rule on the canonical name holds when an alias is called, and the other way round.
    ({"calculate": "deny", "calc*": "confirm"}, "calc", "calculate", CALC, "deny"),
    ({"evaluate": "deny"}, "calculator", "calculate", CALC, "deny"),
    ({"calculator": "confirm"}, "math", "calculate", CALC, "confirm"),
    ({"sh*": "confirm", "bash": "deny"}, "shell", "shell", ECHO, "deny"),
    ({"shell": "deny", "*": "confirm"}, "bash", "shell", ECHO, "deny"),
    ({"terminal": "confirm"}, "sh", "shell", ECHO, "confirm"),
]
HTTP_ORDERED = [
    (dict(order), called, name, args, expected)
    for patterns, called, name, args, expected in HTTP_CASES
    for order in itertools.permutations(patterns.items())
]


@pytest.fixture(scope="module")
def live_guardrails() -> dict[str, Rule]:
    """The organisation's rules the served routes read; each test sets them in place."""
    return {}


@pytest.fixture(scope="module")
async def policy_http(
    stack: Supervisor,
    database_url: str,
    live_guardrails: dict[str, Rule],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[httpx.AsyncClient]:
    """The brain's policy routes over this module's stack (its runner's catalogue, its
    approvals service, the shared PostgreSQL), served in-process."""
    bus = await observe(stack, "guardrail-test")
    engine = make_engine(database_url, pool_size=2)
    workspace = tmp_path_factory.mktemp("ws")
    agents = Agents(dict(AGENTS), workspace=workspace, guardrails=live_guardrails, allowlist=[])
    app = FastAPI()
    install_error_handlers(app, "brain")
    parts = policy_state(
        agents,
        Toolbox(BusRunner(bus), ttl_s=60.0, timeout_s=30.0),
        ApprovalClient(bus, expiry_s=120.0),
        GrantOverrides(engine, agents, bus, refresh_s=3600),
        engine=engine,
    )
    for name, part in parts.items():
        setattr(app.state, name, part)
    app.state.verifier = StaticVerifier("test-operator-token", {})
    app.include_router(policy.router)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://brain",
            headers={"Authorization": "Bearer test-operator-token"},
        ) as client:
            yield client
    finally:
        await engine.dispose()
        await bus.close()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("patterns", "called", "name", "args", "expected"),
    HTTP_ORDERED,
    ids=[f"{c}:{','.join(p)}" for p, c, _, _, _ in HTTP_ORDERED],
)
async def test_explain_catalogue_and_manual_runs_agree(
    policy_http: httpx.AsyncClient,
    live_guardrails: dict[str, Rule],
    patterns: dict[str, Rule],
    called: str,
    name: str,
    args: dict[str, Any],
    expected: Rule | None,
) -> None:
    live_guardrails.clear()
    live_guardrails.update(patterns)  # in this order: the order must not matter
    body = {"tool": called, "args": args, "agent": "ops"}
    explained = (await policy_http.post("/v1/policy/explain", json=body)).json()
    catalog = (await policy_http.get("/v1/agents/ops/tool-catalog")).json()
    entry = next(t for t in catalog["tools"] if t["name"] == name)
    manual = await policy_http.post("/v1/tools/run", json=body, headers=OPERATOR)
    if expected == "deny":
        assert (explained["decision"], explained["code"]) == ("deny", "org_denied")
        assert (entry["blocked"], entry["granted"]) == ("org_denied", False)
        assert manual.status_code == 403
        assert manual.json()["error"]["code"] == "org_denied"
    elif expected == "confirm":
        assert (explained["decision"], explained["code"]) == ("ask", "org_confirm")
        assert (entry["blocked"], entry["confirm"]) == (None, True)
        assert manual.status_code == 403
        assert manual.json()["decision"] == "ask"
        assert manual.json()["error"]["code"] == "org_confirm"
    else:
        assert explained["decision"] == "allow", explained
        assert (entry["blocked"], entry["confirm"]) == (None, False)
        assert manual.status_code == 200, manual.text
        assert manual.json()["ok"] is True
