"""The permission table, walked: every role × every action × a resource of its own, of
another principal in its tenant, and of another tenant; and the per-principal limits."""

from __future__ import annotations

import pytest

from tether_common.errors import AuthError, NotFoundError
from tether_common.identity import ACTIONS, PERMISSIONS, ROLES, Action, Principal, Role, RowFilter

# What each role may reach, written out again by hand (not derived from PERMISSIONS), so
# a change to the table must be made twice: here on purpose, there by intent.
EXPECTED: dict[Role, dict[Action, str]] = {
    "admin": dict.fromkeys(ACTIONS, "all"),
    "operator": {
        "runs.start": "tenant",
        "runs.read": "tenant",
        "runs.message": "tenant",
        "runs.stop": "tenant",
        "outputs.read": "tenant",
        "skills.read": "tenant",
        "skills.write": "tenant",
        "agents.read": "tenant",
        "agents.write": "tenant",
        "policy.read": "tenant",
        "policy.write": "tenant",
        "approvals.read": "tenant",
        "approvals.decide": "tenant",
        "webhooks.manage": "tenant",
        "service.read": "tenant",
        "kill.read": "tenant",
        "documents.read": "tenant",
        "documents.write": "tenant",
        "tool_servers.read": "tenant",
        "tool_servers.manage": "tenant",
        "memory.read": "tenant",
        "memory.write": "tenant",
        "schedules.read": "tenant",
        "schedules.manage": "tenant",
    },
    "approver": {
        "runs.read": "tenant",
        "outputs.read": "tenant",
        "agents.read": "tenant",
        "approvals.read": "tenant",
        "approvals.decide": "tenant",
        "kill.read": "tenant",
        "schedules.read": "tenant",
    },
    "viewer": {
        "runs.read": "tenant",
        "outputs.read": "tenant",
        "agents.read": "tenant",
        "approvals.read": "tenant",
        "kill.read": "tenant",
        "tool_servers.read": "tenant",
        "schedules.read": "tenant",
    },
    "owner": {
        "runs.start": "tenant",
        "runs.read": "own",
        "runs.message": "own",
        "runs.stop": "own",
        "outputs.read": "own",
        "skills.read": "tenant",
        "agents.read": "own",
        "agents.write": "own",
        "approvals.read": "own",
        "memory.read": "own",
        "memory.write": "own",
    },
    "client": {
        "runs.start": "tenant",
        "runs.read": "own",
        "runs.message": "own",
        "runs.stop": "own",
        "outputs.read": "own",
        "memory.read": "own",
        "memory.write": "own",
    },
}

ME = "alice"
# (resource tenant, resource owner, agent owner) → which reaches admit it.
RESOURCES: dict[str, tuple[str, str | None, str | None, frozenset[str]]] = {
    "mine": ("team-a", ME, None, frozenset({"all", "tenant", "own"})),
    "my agent's": ("team-a", "bob", ME, frozenset({"all", "tenant", "own"})),
    "a teammate's": ("team-a", "bob", "carol", frozenset({"all", "tenant"})),
    "unowned in my tenant": ("team-a", None, None, frozenset({"all", "tenant"})),
    "another tenant's": ("team-b", "bob", None, frozenset({"all"})),
    "another tenant's, same name": ("team-b", ME, ME, frozenset({"all"})),
}


def test_the_table_is_what_was_decided() -> None:
    assert set(ROLES) == set(EXPECTED)
    for role in ROLES:
        granted = {a: r for a, row in PERMISSIONS.items() if (r := row.get(role)) is not None}
        assert granted == EXPECTED[role], role


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ACTIONS)
def test_every_role_every_action_every_resource(role: Role, action: Action) -> None:
    who = Principal(ME, role, "team-a", token_id="tok_x")
    reach = EXPECTED[role].get(action)
    assert who.may(action) is (reach is not None)
    for name, (tenant, owner, agent_owner, admitted_by) in RESOURCES.items():
        expected = reach in admitted_by
        assert who.sees(action, tenant, owner, agent_owner=agent_owner) is expected, name
        if reach is None:
            with pytest.raises(AuthError) as refused:
                who.require(action, tenant, owner, agent_owner=agent_owner)
            assert refused.value.code == "forbidden"
        elif expected:
            who.require(action, tenant, owner, agent_owner=agent_owner)
        else:
            # Out of reach looks exactly like absent: nothing of the other tenant shows.
            with pytest.raises(NotFoundError) as hidden:
                who.require(action, tenant, owner, agent_owner=agent_owner)
            assert tenant not in hidden.value.message
            assert "bob" not in hidden.value.message


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ACTIONS)
def test_listings_filter_by_reach(role: Role, action: Action) -> None:
    who = Principal(ME, role, "team-a", token_id="tok_x")
    match EXPECTED[role].get(action):
        case None:
            with pytest.raises(AuthError):
                who.reach(action)
        case "all":
            assert who.reach(action) == RowFilter(None, None)
        case "tenant":
            assert who.reach(action) == RowFilter("team-a", None)
        case "own":
            assert who.reach(action) == RowFilter("team-a", ME)


def test_limits_say_what_a_principal_may_use() -> None:
    who = Principal(
        ME,
        "client",
        "team-a",
        agents=frozenset({"helper"}),
        providers=frozenset({"ollama"}),
        models=frozenset({"llama3"}),
        modes=frozenset({"ask"}),
    )
    who.check_use(agent="helper", provider="ollama", model="llama3", mode="ask")
    who.check_use()  # nothing chosen: nothing to refuse
    for choice in (
        {"agent": "root-agent"},
        {"provider": "openai"},
        {"model": "gpt-4o"},
        {"mode": "auto"},
        {"agent": "helper", "provider": "anthropic"},
    ):
        with pytest.raises(AuthError) as refused:
            who.check_use(**choice)
        assert refused.value.code == "forbidden"
        assert next(iter(choice.values())) in refused.value.message or "anthropic" in (
            refused.value.message
        )
    unlimited = Principal(ME, "client", "team-a")
    unlimited.check_use(agent="anything", provider="any", model="any", mode="any")


def test_the_approvals_team_scope() -> None:
    scoped = Principal(ME, "approver", agents=frozenset({"bot-a"}), owners=frozenset({"t-a"}))
    assert scoped.covers("bot-a", "t-a")
    assert not scoped.covers("bot-b", "t-a")
    assert not scoped.covers("bot-a", "t-b")
    assert not scoped.covers(None, None)
    assert Principal(ME, "approver").covers(None, None)


def test_labels_and_the_wire_form() -> None:
    who = Principal(ME, "owner", "team-a", token_id="tok_1", models=frozenset({"m2", "m1"}))
    assert who.label == "token:alice"
    assert Principal("operator", "admin").label == "operator"
    assert Principal.of(who.view()) == who
    assert who.view().models == ["m1", "m2"]
