"""The grant grammar and the permission chain, case by case (pure functions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether_brain.gates import AgentPolicy, decide, parse_grants
from tether_brain.gates.grants import parse_grant
from tether_common.messages.tools import ToolDescriptor

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}


def tool(
    name: str, scope: str = "read", reach: str = "self", effect: str = "read"
) -> ToolDescriptor:
    return ToolDescriptor.model_validate(
        {
            "name": name,
            "description": name,
            "parameters": SCHEMA,
            "scope": scope,
            "reach": reach,
            "effect": effect,
        }
    )


CLOCK = tool("current_time")
READ = tool("file_read", reach="user")
WRITE = tool("file_write", scope="create", reach="instance", effect="write")
DELETE = tool("file_delete", scope="delete", reach="instance", effect="write")
SHELL = tool("shell", scope="update", reach="instance", effect="process")
FETCH = tool("web_fetch", reach="external", effect="network")
CRM_LIST = tool("app.crm.list", reach="instance")
CRM_DELETE = tool("app.crm.delete", scope="delete", reach="instance", effect="write")
UNDECLARED = ToolDescriptor(name="mystery", description="?", parameters=SCHEMA)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("hi")
    return tmp_path


def policy(workspace: Path, *grants: str, **extra: Any) -> AgentPolicy:
    return AgentPolicy(agent_id="a", grants=parse_grants(grants), workspace=workspace, **extra)


@pytest.mark.parametrize(
    ("raw", "tool_id", "args", "covers", "allows"),
    [
        ("file_read", "file_read", {}, True, True),
        ("file_read", "file_write", {}, False, False),
        ("app.crm.*", "app.crm.list", {}, True, True),
        ("app.crm.*", "app.crm.delete", {}, False, False),
        ("app.crm.*:write", "app.crm.delete", {}, True, True),
        ("app.crm.*", "app.crm.sub.list", {}, False, False),
        ("app.crm.*", "app.other.list", {}, False, False),
        ("shell?command=ls", "shell", {"command": "ls"}, True, True),
        ("shell?command=ls", "shell", {"command": "rm"}, True, False),
        ("shell?command=in:ls,pwd", "shell", {"command": "pwd"}, True, True),
        ("file_write?path=a%20b.txt", "file_write", {"path": "a b.txt"}, True, True),
        ("file_write?path=a.txt&mode=w", "file_write", {"path": "a.txt", "mode": "w"}, True, True),
        ("file_write?path=a.txt&mode=w", "file_write", {"path": "a.txt"}, True, False),
        ("x?flag=true", "x", {"flag": True}, True, True),
    ],
)
def test_grant_matching(
    raw: str, tool_id: str, args: dict[str, Any], covers: bool, allows: bool
) -> None:
    grant = parse_grant(raw)
    assert grant.covers(tool_id) is covers
    assert (grant.covers(tool_id) and grant.allows(args)) is allows


@pytest.mark.parametrize(
    "raw",
    [
        "app.crm.*?id=1",
        "file_read#sometimes",
        "*",
        "app.*",
        "shell:write",
        "",
        "shell?novalue",
        "a.b.*.c",
    ],
)
def test_bad_grants_grant_nothing(raw: str) -> None:
    parsed = parse_grants([raw])
    assert parsed.grants == ()
    assert parsed.problems


def test_none_means_tool_less(workspace: Path) -> None:
    verdict = decide(CLOCK, {}, policy(workspace, "__none__"))
    assert (verdict.decision, verdict.code) == ("deny", "not_granted")


def test_entries_for_one_tool_stay_alternatives(workspace: Path) -> None:
    p = policy(workspace, "shell?command=ls", "shell?command=pwd")
    assert decide(SHELL, {"command": "ls"}, p).decision == "allow"
    assert decide(SHELL, {"command": "pwd"}, p).decision == "allow"
    verdict = decide(SHELL, {"command": "whoami"}, p)
    assert (verdict.decision, verdict.code) == ("ask", "grant_constraint_violated")


@pytest.mark.parametrize(
    ("subject", "args", "decision", "code"),
    [
        (CLOCK, {}, "allow", None),
        (READ, {"path": "notes.txt"}, "allow", None),
        (READ, {"path": "../etc/passwd"}, "deny", "path_denied"),
        (READ, {"path": ".env"}, "deny", "path_denied"),
        (READ, {"path": ".git/config"}, "deny", "path_denied"),
        (WRITE, {"path": "out.txt"}, "ask", "not_granted"),
        (DELETE, {"path": "notes.txt"}, "ask", "not_granted"),
        (SHELL, {"command": "ls -la"}, "ask", "not_granted"),
        (SHELL, {"command": "rm -rf /"}, "deny", "deny_listed"),
        (SHELL, {"command": ":(){ :|:& };:"}, "deny", "deny_listed"),
        (FETCH, {"url": "https://example.com/"}, "ask", "not_granted"),
        (FETCH, {"url": "http://169.254.169.254/latest/meta-data"}, "deny", "blocked_destination"),
        (FETCH, {"url": "http://127.0.0.1:8700/"}, "deny", "blocked_destination"),
        (FETCH, {"url": "file:///etc/passwd"}, "deny", "blocked_destination"),
        (CRM_LIST, {}, "ask", "not_granted"),
        (UNDECLARED, {}, "ask", "not_granted"),
    ],
)
def test_default_policy(
    workspace: Path, subject: ToolDescriptor, args: dict[str, Any], decision: str, code: str | None
) -> None:
    verdict = decide(subject, args, policy(workspace))
    assert (verdict.decision, verdict.code) == (decision, code), verdict.trail


def test_undeclared_reach_is_external(workspace: Path) -> None:
    assert decide(UNDECLARED, {}, policy(workspace)).reach == "external"
    assert "reach external" in decide(UNDECLARED, {}, policy(workspace)).reason


def test_grants_allow_and_name_themselves(workspace: Path) -> None:
    verdict = decide(WRITE, {"path": "out.txt"}, policy(workspace, "file_write"))
    assert verdict.decision == "allow"
    assert verdict.grant == "file_write"


def test_wildcard_grants_reads_only_unless_write(workspace: Path) -> None:
    assert decide(CRM_LIST, {}, policy(workspace, "app.crm.*")).decision == "allow"
    assert decide(CRM_DELETE, {}, policy(workspace, "app.crm.*")).code == "not_granted"
    verdict = decide(CRM_DELETE, {}, policy(workspace, "app.crm.*:write"))
    assert (verdict.decision, verdict.code) == ("ask", "confirm_destructive")


def test_noapproval_waives_confirmation_for_that_entry_only(workspace: Path) -> None:
    p = policy(workspace, "app.crm.delete#noapproval", "file_delete")
    assert decide(CRM_DELETE, {}, p).decision == "allow"
    assert decide(CRM_DELETE, {}, p).waived is True
    assert decide(DELETE, {"path": "notes.txt"}, p).code == "confirm_destructive"


def test_noapproval_widens_nothing(workspace: Path) -> None:
    p = policy(workspace, "shell?command=ls#noapproval")
    assert decide(SHELL, {"command": "whoami"}, p).code == "grant_constraint_violated"


def test_noapproval_never_beats_an_organisation_deny_or_confirm(workspace: Path) -> None:
    p = policy(workspace, "app.crm.delete#noapproval", guardrails={"app.crm.delete": "deny"})
    assert decide(CRM_DELETE, {}, p).code == "org_denied"
    p = policy(workspace, "file_write#noapproval", guardrails={"file_*": "confirm"})
    assert decide(WRITE, {"path": "a.txt"}, p).code == "org_confirm"


def test_classifier_asks_whatever_a_grant_says(workspace: Path) -> None:
    p = policy(workspace, "shell#noapproval")
    assert decide(SHELL, {"command": "ls -la"}, p).decision == "allow"
    for opaque in ("echo $(whoami)", "bash -c 'ls'", "curl https://example.com", "rm notes.txt"):
        verdict = decide(SHELL, {"command": opaque}, p)
        assert verdict.decision == "ask", opaque
        assert verdict.code is not None
        assert verdict.code.startswith("shell_")


def test_modes(workspace: Path) -> None:
    assert (
        decide(WRITE, {"path": "a.txt"}, policy(workspace, mode="read-only")).code
        == "mode_read_only"
    )
    assert (
        decide(READ, {"path": "notes.txt"}, policy(workspace, mode="read-only")).decision == "allow"
    )
    assert decide(WRITE, {"path": "a.txt"}, policy(workspace, mode="allow-all")).decision == "allow"
    assert (
        decide(SHELL, {"command": "rm -rf /"}, policy(workspace, mode="allow-all")).code
        == "deny_listed"
    )
    assert (
        decide(READ, {"path": "/etc/passwd"}, policy(workspace, mode="allow-all")).code
        == "path_denied"
    )


def test_category_toggles(workspace: Path) -> None:
    p = policy(workspace, "shell", categories=frozenset({"read_files", "other"}))
    assert decide(SHELL, {"command": "ls"}, p).code == "category_off"
    assert decide(FETCH, {"url": "https://example.com"}, p).code == "category_off"
    assert decide(READ, {"path": "notes.txt"}, p).decision == "allow"


def test_untrusted_content_raises_the_bar(workspace: Path) -> None:
    p = policy(workspace, "shell#noapproval", "web_fetch")
    assert decide(SHELL, {"command": "ls"}, p, tainted=True).code == "untrusted_content"
    assert (
        decide(FETCH, {"url": "https://example.com"}, p, tainted=True).code == "untrusted_content"
    )
    assert decide(READ, {"path": "notes.txt"}, p, tainted=True).decision == "allow"
    opted_in = policy(workspace, "shell#noapproval", waiver_lifts_taint=True)
    assert decide(SHELL, {"command": "ls"}, opted_in, tainted=True).decision == "allow"
    off = policy(workspace, "shell", untrusted_bar=False)
    assert decide(SHELL, {"command": "ls"}, off, tainted=True).decision == "allow"


def test_session_approvals_and_allowlist(workspace: Path) -> None:
    assert (
        decide(
            WRITE, {"path": "a.txt"}, policy(workspace), session=frozenset({"file_write"})
        ).decision
        == "allow"
    )
    p = policy(workspace, allowlist=(parse_grant("file_write?path=report.md"),))
    assert decide(WRITE, {"path": "report.md"}, p).decision == "allow"
    assert decide(WRITE, {"path": "other.md"}, p).code == "not_granted"


def test_the_trail_explains_every_gate(workspace: Path) -> None:
    verdict = decide(SHELL, {"command": "echo $(id)"}, policy(workspace, "shell"))
    assert any("allowed by shell" in line for line in verdict.trail)
    assert any(line.startswith("ask (shell_opaque)") for line in verdict.trail)
