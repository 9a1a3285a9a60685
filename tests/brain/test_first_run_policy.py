"""The first run as shipped (issue 27, item 2), as pure functions: the default agent under
the brain's default settings judges the runner's own built-in tools (their real
descriptors, not ones written for a test): it reads, lists and searches the workspace
without asking and asks for every write, edit, command and network call, and says why in
plain words. An operator's approval answers exactly the gates that asked, for exactly
the call and sealed action it was given for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether_brain.agents.config import Agents
from tether_brain.clients.approval import PendingApproval, in_doubt
from tether_brain.gates import AgentPolicy, Verdict, decide
from tether_brain.settings import BrainSettings
from tether_brain.state.options import RunOptions
from tether_common.identity import DEFAULT_TENANT
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ToolDescriptor
from tether_tools_runner.sandbox import Attestation
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.tools import Builtins

# Every built-in tool and what the default agent's gates say to it with no grant.
FIRST_RUN: dict[str, str] = {
    "current_time": "allow",
    "convert_time": "allow",
    "calculate": "allow",
    "file_read": "allow",
    "file_list": "allow",
    "file_search": "allow",
    "file_write": "ask",
    "file_edit": "ask",
    "shell": "ask",
    "web_fetch": "ask",
    "web_search": "ask",
}
ARGS: dict[str, dict[str, Any]] = {
    "current_time": {"timezone": "UTC"},
    "convert_time": {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"},
    "calculate": {"expression": "1+1"},
    "file_read": {"path": "notes.txt"},
    "file_list": {"path": "."},
    "file_search": {"pattern": "hello", "path": "."},
    "file_write": {"path": "out.txt", "content": "x"},
    "file_edit": {"path": "notes.txt", "old_text": "hello", "new_text": "bye"},
    "shell": {"command": "ls"},
    "web_fetch": {"url": "https://example.com/"},
    "web_search": {"query": "tether"},
}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ToolDescriptor]]:
    """The runner's built-in descriptors, as its catalogue serves them."""
    builtins = Builtins(
        RunnerSettings(workspace=tmp_path_factory.mktemp("workspace")),
        Attestation(level="none", bwrap=None),
    )
    try:
        yield {tool.name: tool.descriptor for tool in builtins.tools()}
    finally:
        builtins.close()


@pytest.fixture
def default_policy(tmp_path: Path) -> AgentPolicy:
    """The policy a run naming no agent gets, from the brain's default settings."""
    settings = BrainSettings(workspace=tmp_path)
    (tmp_path / "notes.txt").write_text("hello\n")
    agents = Agents(
        settings.agents,
        workspace=settings.workspace,
        guardrails=settings.guardrails,
        allowlist=settings.allowlist,
    )
    return agents.policy(RunOptions(), DEFAULT_TENANT)


def test_every_built_in_is_classified(shipped: dict[str, ToolDescriptor]) -> None:
    """A new built-in must say here what a first run does with it."""
    assert set(shipped) == set(FIRST_RUN)


@pytest.mark.parametrize(("name", "expected"), sorted(FIRST_RUN.items()))
def test_the_default_agent_reads_freely_and_asks_for_the_rest(
    shipped: dict[str, ToolDescriptor], default_policy: AgentPolicy, name: str, expected: str
) -> None:
    verdict = decide(shipped[name], ARGS[name], default_policy)
    assert verdict.decision == expected, verdict.trail
    if expected == "ask":
        assert verdict.code == "not_granted"
        assert verdict.asks == ("not_granted",)


def test_the_workspace_reads_still_stop_at_its_edge(
    shipped: dict[str, ToolDescriptor], default_policy: AgentPolicy
) -> None:
    """Reading freely is reading the workspace: outside it, or its protected files, no."""
    for path in ("../outside.txt", "/etc/passwd", ".env", ".git/config"):
        for name in ("file_read", "file_list"):
            verdict = decide(shipped[name], {"path": path}, default_policy)
            assert verdict.decision == "deny", (name, path, verdict.trail)


def test_explain_says_why_in_plain_words(
    shipped: dict[str, ToolDescriptor], default_policy: AgentPolicy
) -> None:
    read = decide(shipped["file_read"], ARGS["file_read"], default_policy)
    assert read.reason == (
        "file_read only reads (scope read) within the user's workspace (reach user), "
        "which needs no grant: it runs without asking"
    )
    write = decide(shipped["file_write"], ARGS["file_write"], default_policy)
    assert write.reason == (
        "file_write changes things (scope update) within the user's workspace (reach user): "
        "anything but a read needs a grant, and agent default has none for it, so an "
        "operator approves each call (a grant 'file_write' would allow it)"
    )
    fetch = decide(shipped["web_fetch"], ARGS["web_fetch"], default_policy)
    assert "a read that reaches this far needs a grant" in fetch.reason
    assert "outside Tether (reach external)" in fetch.reason


CALL = CallRecord(id="c_1", name="file_write", arguments={"path": "a.txt", "content": "x"})
ASKS = ("not_granted", "untrusted_content")


def _ask(*codes: str) -> Verdict:
    return Verdict("ask", codes[0], "asked", "user", asks=codes)


def _approval(asks: tuple[str, ...] | None = ASKS) -> PendingApproval:
    return PendingApproval("apr_1", CALL.id, "d" * 64, 1, asks=asks)


@pytest.mark.parametrize(
    ("call", "verdict", "digest", "answered"),
    [
        (CALL, _ask(*ASKS), "d" * 64, True),
        (CALL, _ask("untrusted_content"), "d" * 64, True),  # fewer asks than approved
        # Another call, even of the same tool with the same arguments: not answered.
        (CALL.model_copy(update={"id": "c_2"}), _ask(*ASKS), "d" * 64, False),
        # The same call with changed arguments or history: another sealed action.
        (CALL, _ask(*ASKS), "e" * 64, False),
        # A gate that asks only now (a new guardrail, a quorum): not what was approved.
        (CALL, _ask("not_granted", "org_confirm"), "d" * 64, False),
        (CALL, _ask("quorum_required"), "d" * 64, False),
        (CALL, _ask(*ASKS, "shell_danger"), "d" * 64, False),
    ],
)
def test_an_approval_answers_its_own_call_and_asks_only(
    call: CallRecord, verdict: Verdict, digest: str, answered: bool
) -> None:
    problem = _approval().unanswered(call, verdict, digest)
    assert (problem is None) is answered, problem


def test_an_approval_keeps_what_it_answers_across_a_reload() -> None:
    """The pending approval lives in the run's JSON counters while the run is parked."""
    again = PendingApproval.from_json(_approval().to_json())
    assert again == _approval()
    assert again.unanswered(CALL, _ask("org_confirm"), "d" * 64) is not None
    # Parked before the asks were kept: answers any ask of its own call and action only.
    legacy = {k: v for k, v in _approval().to_json().items() if k != "asks"}
    old = PendingApproval.from_json(legacy)
    assert old.asks is None
    assert old.unanswered(CALL, _ask("org_confirm"), "d" * 64) is None
    assert old.unanswered(CALL, _ask("org_confirm"), "e" * 64) is not None


def test_a_reconcile_card_carries_what_the_gates_ask_now(
    shipped: dict[str, ToolDescriptor], default_policy: AgentPolicy
) -> None:
    """ "Run it again" on a call in doubt answers the gates' asks as they stand, and they
    are on the card; a call the gates would allow asks only `in_doubt`."""
    write = shipped["file_write"]
    now = decide(write, ARGS["file_write"], default_policy)
    card = in_doubt(write, now)
    assert card.asks == ("in_doubt", "not_granted")
    assert now.reason in card.reason
    allowed = decide(shipped["file_read"], ARGS["file_read"], default_policy)
    assert in_doubt(shipped["file_read"], allowed).asks == ("in_doubt",)
