"""Agents keyed by (tenant, id), the mechanism alone: which agent an id names for a caller
of a tenant (`Agents.resolve`), the agent a run pinned at its start (`Agents.of_run`),
what a face may offer (`visible_to`), the policy a shared agent runs under in another
tenant's run, and which agent a management call addresses (`api/agent_reach.addressed`).
Through the real services: `tests/identity/test_brain_authz.py` and the authorisation
table (`tests/identity/test_authz_table.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether_brain.agents.config import BUILT_IN, AgentConfig, AgentKey, Agents, PolicySnapshot
from tether_brain.api.agent_reach import addressed
from tether_brain.gates.policy import Rule
from tether_brain.state.options import RunOptions
from tether_common.errors import MessageError, NotFoundError
from tether_common.identity import Principal

A, B, D = "team-a", "team-b", "default"


def agents_with(configs: dict[AgentKey, AgentConfig], **tenant_rules: dict[str, Rule]) -> Agents:
    agents = Agents({}, workspace=Path("/tmp"), guardrails={}, allowlist=[])
    guardrails: dict[str, dict[str, Rule]] = {"*": {}} | tenant_rules
    allowlist = {"*": [], A: ["shell?cmd=make"], D: ["shell?cmd=rm"]}
    agents_in_force = {BUILT_IN: AgentConfig(shared=True)} | configs
    snapshot = PolicySnapshot(1, agents_in_force, guardrails, allowlist)
    assert agents.install(snapshot)
    return agents


RTW = AgentConfig(tenant=D, grants=["file_write#noapproval"])  # a default operator's own
SHARED = AgentConfig(tenant=D, shared=True, grants=["calculate"])
OWN_A = AgentConfig(tenant=A, grants=["current_time"], owner="olive")
WORLD = {(D, "rtw"): RTW, (D, "helper"): SHARED, (A, "mine"): OWN_A}


@pytest.mark.parametrize(
    ("tenant", "name", "expected"),
    [
        (A, None, BUILT_IN),  # the built-in default serves every tenant
        (B, "default", BUILT_IN),
        (D, "rtw", (D, "rtw")),
        (A, "helper", (D, "helper")),  # shared
        (B, "helper", (D, "helper")),
        (A, "mine", (A, "mine")),
        (A, "rtw", None),  # the default tenant's own agent is no other tenant's
        (B, "rtw", None),
        (B, "mine", None),
        (D, "mine", None),  # nor is another tenant's the default tenant's
        (A, "nothing", None),
    ],
)
def test_an_id_names_the_tenants_own_agent_else_a_shared_one(
    tenant: str, name: str | None, expected: AgentKey | None
) -> None:
    agents = agents_with(WORLD)
    if expected is None:
        with pytest.raises(NotFoundError) as missing:
            agents.resolve(tenant, name)
        # Word for word the answer for an id nobody has.
        assert str(missing.value) == f"no agent '{name}'"
        return
    assert agents.resolve(tenant, name)[0] == expected


def test_a_tenants_own_agent_wins_over_a_shared_one_of_the_same_id() -> None:
    theirs = AgentConfig(tenant=A, grants=["__none__"])
    agents = agents_with(WORLD | {(A, "helper"): theirs, (A, "default"): theirs})
    assert agents.resolve(A, "helper") == ((A, "helper"), theirs)
    assert agents.resolve(A, None) == ((A, "default"), theirs)
    assert agents.resolve(B, "helper")[0] == (D, "helper")


def test_a_run_keeps_the_agent_it_started_with() -> None:
    """The pinned agent stays the run's (and its children's, which inherit the pin) when
    its tenant makes its own of that id; unshared or deleted, it is gone for the run."""
    started = RunOptions(agent="helper", agent_tenant=D)
    child = RunOptions(**started.inherited())
    assert child.agent_tenant == D
    agents = agents_with(WORLD | {(A, "helper"): AgentConfig(tenant=A, mode="allow-all")})
    for options in (started, child):
        assert agents.of_run(options, A) == SHARED
    unshared = agents_with(WORLD | {(D, "helper"): SHARED.model_copy(update={"shared": False})})
    with pytest.raises(NotFoundError):
        unshared.of_run(started, A)
    assert unshared.of_run(started, D).grants == ["calculate"]  # its own tenant's, still
    with pytest.raises(NotFoundError):
        agents_with({}).of_run(started, A)
    # A run stored before the pin resolves as a start would now: never another's.
    with pytest.raises(NotFoundError):
        agents_with(WORLD).of_run(RunOptions(agent="rtw"), A)


def test_a_face_offers_only_what_the_tenant_can_name() -> None:
    agents = agents_with(WORLD)
    assert set(agents.visible_to(A)) == {"default", "helper", "mine"}
    assert set(agents.visible_to(B)) == {"default", "helper"}
    assert set(agents.visible_to(D)) == {"default", "helper", "rtw"}


def test_a_shared_agent_runs_under_the_runs_tenant_policy() -> None:
    """Guardrails of both tenants apply (each only tightens); the allow-list, which
    widens, is the run's tenant's only."""
    rules: dict[str, dict[str, Rule]] = {A: {"calculate": "confirm"}, D: {"shell": "deny"}}
    agents = agents_with(WORLD, **rules)
    policy = agents.policy(RunOptions(agent="helper", agent_tenant=D), A)
    assert dict(policy.guardrails) == {"calculate": "confirm", "shell": "deny"}
    assert [g.raw for g in policy.allowlist] == ["shell?cmd=make"]


def who(role: str, tenant: str, name: str = "x") -> Principal:
    return Principal(name=name, role=role, tenant=tenant)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("caller", "action", "name", "tenant", "expected"),
    [
        (who("operator", A), "agents.read", "mine", None, (A, "mine")),
        (who("operator", A), "agents.read", "helper", None, (D, "helper")),  # shared: read
        (who("operator", A), "agents.write", "helper", None, None),  # never written
        (who("operator", A), "agents.write", "helper", D, None),
        (who("operator", A), "agents.read", "rtw", None, None),
        (who("operator", A), "agents.read", "rtw", D, None),
        (who("operator", B), "agents.read", "mine", A, None),
        (who("owner", A, "olive"), "agents.write", "mine", None, (A, "mine")),
        (who("owner", A, "oscar"), "agents.read", "mine", None, None),
        (who("admin", D), "agents.write", "mine", None, (A, "mine")),  # the only one
        (who("admin", D), "agents.write", "rtw", None, (D, "rtw")),
        (who("admin", D), "agents.write", "mine", B, None),
    ],
)
def test_which_agent_a_call_addresses(
    caller: Principal, action: str, name: str, tenant: str | None, expected: AgentKey | None
) -> None:
    if expected is None:
        with pytest.raises(NotFoundError) as missing:
            addressed(WORLD, caller, action, name, tenant)  # type: ignore[arg-type]
        assert str(missing.value) == f"no agent '{name}'"
    else:
        assert addressed(WORLD, caller, action, name, tenant) == expected  # type: ignore[arg-type]


def test_an_admin_names_the_tenant_when_an_id_is_in_several() -> None:
    found = WORLD | {(A, "rtw"): OWN_A, (B, "rtw"): OWN_A}
    assert addressed(found, who("admin", D), "agents.read", "rtw") == (D, "rtw")  # its own
    found.pop((D, "rtw"))
    with pytest.raises(MessageError, match="several tenants"):
        addressed(found, who("admin", D), "agents.read", "rtw")
    assert addressed(found, who("admin", D), "agents.read", "rtw", B) == (B, "rtw")
