"""The agents and organisation policy as resources over HTTP:

    GET|POST /v1/agents, GET|PUT|DELETE /v1/agents/{id}[?tenant=T]
    GET|PUT  /v1/policy/guardrails[?tenant=T], GET|PUT /v1/policy/allowlist[?tenant=T]

Bodies are validated strictly (a grant that does not parse is a 422 naming it). Every
answer carries `ETag: "<version>"`; a write may send `If-Match` or a `version` field,
and a stale one is a 409 `version_conflict`.

An agent is keyed by (tenant, id): two tenants may each have an agent `rtw`. An id in
the path names the caller's tenant's agent (`agent_reach.addressed`; `?tenant=` another,
for an admin); creating one says nothing of other tenants' ids.

Who may (the identity model's `agents.*` and `policy.*`, decided on the row as locked
for the change):
- reading an agent: `agents.read` on its tenant and owner (another tenant's agent is a
  404, as if missing), or any caller with `agents.read` for a shared one; the listing
  holds the same (shared ones say `shared: true`).
- creating and deleting agents: admins (any tenant) and operators (their tenant).
  Owners may not: an agent's tenant, owner and what it may cost are the operators'.
- changing an agent: admins and its tenant's operators, who may not move it out of
  their reach; its owner, but only its grants, mode, categories, done rule,
  interactivity and budget defaults, never its owner, tenant, providers, models,
  fallback chain, budget ceilings, quota or safety bars (`untrusted_bar`,
  `waiver_lifts_taint`). An agent's tenant is fixed (it is part of its key).
- sharing: only an admin sets `shared: true`, and only an admin changes or deletes a
  shared agent (what it may do reaches every tenant's runs). One shared agent per id.
- guardrails and allow-list: the organisation-wide ones (no `tenant`) are read by anyone
  with `policy.read` and written by admins only; a tenant's are read and written by
  its operators (and admins). A tenant's guardrails add to the organisation's (the
  stronger rule wins for the same pattern); its allow-list entries add to the
  organisation's for its agents only.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Response

from tether_brain.agents.config import BUILT_IN, GLOBAL, AgentConfig, AgentKey, Agents
from tether_brain.agents.store import AgentStore, Kind, StoredAgent
from tether_brain.api.agent_models import (
    AgentBody,
    AgentList,
    AgentView,
    AllowlistBody,
    AllowlistView,
    GuardrailsBody,
    GuardrailsView,
    NewAgent,
    document_view,
    view,
)
from tether_brain.api.agent_reach import addressed, reaches
from tether_brain.api.deps import AgentStoreDep
from tether_common.errors import AuthError, ErrorCode, MessageError
from tether_common.http import PathId
from tether_common.identity import Action, Principal
from tether_common.identity.http import Caller
from tether_common.messages.base import ID_PATTERN

# What only an agent's operators may change (an owner may change the rest).
RESERVED = (
    "owner",
    "tenant",
    "providers",
    "models",
    "fallback",
    "ceilings",
    "untrusted_bar",
    "waiver_lifts_taint",
    "quota",
)
_ETAG = re.compile(r'^(?:W/)?"?(\d{1,9})"?$')

TenantQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)]


def expected_version(if_match: str | None, version: int | None) -> int | None:
    """The version a write replaces: the body's, else `If-Match`'s (None: unconditional)."""
    if version is not None or if_match is None or if_match.strip() == "*":
        return version
    found = _ETAG.fullmatch(if_match.strip())
    if found is None:
        raise MessageError(
            'If-Match takes the ETag of a read, e.g. "3"', code=ErrorCode.INVALID_REQUEST
        )
    return int(found.group(1))


def _tagged(response: Response, version: int) -> None:
    response.headers["ETag"] = f'"{version}"'


def may_list(who: Principal, found: StoredAgent) -> bool:
    """In `who`'s listing: an agent of its reach, or a shared one."""
    key = found.key
    return Agents.is_shared(key, found.config) or reaches(
        {key: found.config}, who, "agents.read", key
    )


def check_create(who: Principal, new: AgentConfig) -> None:
    """Decided on the body alone, before the store is asked anything (so a refused
    caller never learns whether the id exists in that tenant)."""
    who.require("agents.write")
    if who.reach_of("agents.write") == "own":
        raise AuthError(
            "an agent's owner may change it; operators create agents", code=ErrorCode.FORBIDDEN
        )
    _within_reach(who, new)
    _sharing(who, None, new)


def check_change(who: Principal, key: AgentKey, current: AgentConfig, new: AgentConfig) -> None:
    who.require("agents.write", current.tenant, current.owner)  # 404 out of reach
    if who.reach_of("agents.write") == "own":
        for name in RESERVED:
            if getattr(new, name) != getattr(current, name):
                raise AuthError(
                    f"an agent's owner may not change its '{name}' (operators may)",
                    code=ErrorCode.FORBIDDEN,
                )
    _within_reach(who, new)
    _sharing(who, key, current)
    _sharing(who, None, new)
    if new.tenant != key[0]:
        raise MessageError(
            f"an agent's tenant is fixed ('{key[0]}'): create it in '{new.tenant}' instead",
            code=ErrorCode.INVALID_REQUEST,
        )


def check_delete(who: Principal, key: AgentKey, current: AgentConfig) -> None:
    who.require("agents.write", current.tenant, current.owner)
    if who.reach_of("agents.write") == "own":
        raise AuthError(
            "an agent's owner may not delete it (operators may)", code=ErrorCode.FORBIDDEN
        )
    _sharing(who, key, current)


def _sharing(who: Principal, key: AgentKey | None, config: AgentConfig) -> None:
    """Only an admin shares an agent, and changes or deletes a shared one (its tenant's
    operators included: what it does reaches every tenant's runs)."""
    shared = config.shared if key is None else Agents.is_shared(key, config)
    if shared and who.reach_of("agents.write") != "all":
        raise AuthError(
            "only an admin shares an agent with every tenant, or changes a shared one",
            code=ErrorCode.FORBIDDEN,
        )


def _within_reach(who: Principal, new: AgentConfig) -> None:
    """The agent as written must stay within the writer's reach: an operator cannot put
    one in another tenant (nor an owner give its agent away)."""
    if not who.sees("agents.write", new.tenant, new.owner):
        raise AuthError(
            f"this token may not write agents of tenant '{new.tenant}' owned by '{new.owner}'",
            code=ErrorCode.FORBIDDEN,
        )


def check_policy(
    who: Principal, action: Literal["policy.read", "policy.write"], scope: str
) -> None:
    if scope != GLOBAL:
        who.require(action, scope)
        return
    who.require(action)
    if action == "policy.write" and who.reach_of(action) != "all":
        raise AuthError(
            "only an admin changes the organisation-wide policy", code=ErrorCode.FORBIDDEN
        )


# ---- the routes ----------------------------------------------------------------------


router = APIRouter(prefix="/v1", tags=["agents"])


async def target(
    store: AgentStore, who: Principal, action: Action, agent_id: str, tenant: str | None
) -> tuple[AgentKey, StoredAgent]:
    """The stored agent the path addresses (read from the store, not this replica's
    copy in force, so a change just made through another replica is found)."""
    found = await store.agents_named(agent_id)
    key = addressed({k: a.config for k, a in found.items()}, who, action, agent_id, tenant)
    return key, found[key]


@router.get("/agents")
async def list_agents(store: AgentStoreDep, who: Caller) -> AgentList:
    who.require("agents.read")
    found = await store.agents_stored()
    return AgentList(agents=[view(a) for a in found if may_list(who, a)])


@router.post("/agents", status_code=201)
async def create_agent(
    body: NewAgent, response: Response, store: AgentStoreDep, who: Caller
) -> AgentView:
    new = body.config()
    check_create(who, new)

    def decide(_current: StoredAgent | None) -> AgentConfig:
        return new

    key = (new.tenant, body.id)
    made = await store.change_agent(key, who.label, decide, expected=None, create=True)
    assert made is not None
    _tagged(response, made.version)
    return view(made)


@router.get("/agents/{agent_id}")
async def get_agent(
    agent_id: PathId,
    response: Response,
    store: AgentStoreDep,
    who: Caller,
    tenant: TenantQuery = None,
) -> AgentView:
    _key, found = await target(store, who, "agents.read", agent_id, tenant)
    _tagged(response, found.version)
    return view(found)


@router.put("/agents/{agent_id}")
async def replace_agent(
    agent_id: PathId,
    body: AgentBody,
    response: Response,
    store: AgentStoreDep,
    who: Caller,
    tenant: TenantQuery = None,
    if_match: Annotated[str | None, Header()] = None,
) -> AgentView:
    new = body.config()
    key, _found = await target(store, who, "agents.write", agent_id, tenant)

    def decide(current: StoredAgent | None) -> AgentConfig:
        assert current is not None
        check_change(who, key, current.config, new)
        return new

    expected = expected_version(if_match, body.version)
    made = await store.change_agent(key, who.label, decide, expected=expected)
    assert made is not None
    _tagged(response, made.version)
    return view(made)


@router.delete("/agents/{agent_id}")
async def delete_agent(
    agent_id: PathId,
    store: AgentStoreDep,
    who: Caller,
    tenant: TenantQuery = None,
    if_match: Annotated[str | None, Header()] = None,
) -> Response:
    key, _found = await target(store, who, "agents.write", agent_id, tenant)
    if key == BUILT_IN:
        raise MessageError(
            "the default agent cannot be deleted (narrow its grants instead)",
            code=ErrorCode.INVALID_REQUEST,
        )

    def decide(current: StoredAgent | None) -> None:
        assert current is not None
        check_delete(who, key, current.config)

    expected = expected_version(if_match, None)
    await store.change_agent(key, who.label, decide, expected=expected)
    return Response(status_code=204)


async def read_policy(
    store: AgentStore, kind: Kind, tenant: str | None, who: Principal, response: Response
) -> Any:
    scope = tenant or GLOBAL
    check_policy(who, "policy.read", scope)
    found = await store.document(kind, scope)
    _tagged(response, found.version)
    return document_view(found)


async def write_policy(
    store: AgentStore,
    kind: Kind,
    tenant: str | None,
    body: Any,
    version: int | None,
    if_match: str | None,
    who: Principal,
    response: Response,
) -> Any:
    scope = tenant or GLOBAL
    check_policy(who, "policy.write", scope)
    expected = expected_version(if_match, version)
    found = await store.change_document(kind, scope, body, who.label, expected=expected)
    _tagged(response, found.version)
    return document_view(found)


@router.get("/policy/guardrails")
async def get_guardrails(
    response: Response, store: AgentStoreDep, who: Caller, tenant: TenantQuery = None
) -> GuardrailsView:
    return await read_policy(store, "guardrails", tenant, who, response)  # type: ignore[no-any-return]


@router.put("/policy/guardrails")
async def put_guardrails(
    body: GuardrailsBody,
    response: Response,
    store: AgentStoreDep,
    who: Caller,
    tenant: TenantQuery = None,
    if_match: Annotated[str | None, Header()] = None,
) -> GuardrailsView:
    return await write_policy(  # type: ignore[no-any-return]
        store, "guardrails", tenant, dict(body.rules), body.version, if_match, who, response
    )


@router.get("/policy/allowlist")
async def get_allowlist(
    response: Response, store: AgentStoreDep, who: Caller, tenant: TenantQuery = None
) -> AllowlistView:
    return await read_policy(store, "allowlist", tenant, who, response)  # type: ignore[no-any-return]


@router.put("/policy/allowlist")
async def put_allowlist(
    body: AllowlistBody,
    response: Response,
    store: AgentStoreDep,
    who: Caller,
    tenant: TenantQuery = None,
    if_match: Annotated[str | None, Header()] = None,
) -> AllowlistView:
    return await write_policy(  # type: ignore[no-any-return]
        store, "allowlist", tenant, list(body.entries), body.version, if_match, who, response
    )
