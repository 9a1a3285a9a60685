"""Memory over HTTP: `GET|POST|DELETE /v1/memory`, `GET /v1/memory/search`,
`DELETE /v1/memory/{memory_id}`. What each does, and who may, is `tools.memory.Memory`'s;
runs save and find memories through `memory_save` and `memory_search`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from tether_brain.api.deps import MemoryDep
from tether_common.http import PathId
from tether_common.identity.http import Caller
from tether_common.messages.base import ID_PATTERN, CarryableText
from tether_common.messages.memory import (
    LISTED,
    MAX_QUERY_CHARS,
    MAX_RESULTS,
    AddMemory,
    MemoryForgotten,
    MemoryList,
    MemoryView,
)

# Which tenant an admin means (others always mean their own; none: its own, or every
# tenant's for a listing).
TenantQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)]
# Whose memories (a user: only its own) and with which agent (none: any).
OwnerQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)]
AgentQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)]
SearchQuery = Annotated[CarryableText, Query(min_length=1, max_length=MAX_QUERY_CHARS)]

router = APIRouter(prefix="/v1", tags=["memory"])


@router.get("/memory")
async def listing(
    memory: MemoryDep,
    who: Caller,
    owner: OwnerQuery = None,
    agent: AgentQuery = None,
    agent_wide: bool = False,
    tenant: TenantQuery = None,
    limit: Annotated[int, Query(ge=1, le=LISTED)] = LISTED,
) -> MemoryList:
    """What is kept, newest first: a user's own; an operator's tenant's (`owner`,
    `agent` narrow it; `agent_wide`: the agents' own memories only)."""
    return await memory.listing(
        who, tenant=tenant, owner=owner, agent=agent, agent_wide=agent_wide, limit=limit
    )


@router.get("/memory/search")
async def search(
    query: SearchQuery,
    memory: MemoryDep,
    who: Caller,
    agent: AgentQuery = None,
    owner: OwnerQuery = None,
    tenant: TenantQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_RESULTS)] = MAX_RESULTS,
) -> MemoryList:
    """What a run of `owner` (a user: itself) with `agent` (none: the default) finds
    for `query` (web-search syntax), best first."""
    return await memory.search(who, query, agent=agent, owner=owner, tenant=tenant, limit=limit)


@router.post("/memory", status_code=201)
async def add(body: AddMemory, memory: MemoryDep, who: Caller) -> MemoryView:
    """Keep a memory for a user (a user: itself) or, `agent_wide`, for an agent's
    every user (operators only)."""
    return await memory.add(body, who)


@router.delete("/memory")
async def forget_all(
    memory: MemoryDep,
    who: Caller,
    owner: OwnerQuery = None,
    agent: AgentQuery = None,
    tenant: TenantQuery = None,
) -> MemoryForgotten:
    """Forget everything kept about `owner` (none: the caller), with `agent` or any."""
    return await memory.forget_all(who, owner=owner, agent=agent, tenant=tenant)


@router.delete("/memory/{memory_id}", status_code=204)
async def forget(
    memory_id: PathId, memory: MemoryDep, who: Caller, tenant: TenantQuery = None
) -> Response:
    """Forget one memory: no run finds it any more (404: none within reach)."""
    await memory.forget(memory_id, who, tenant)
    return Response(status_code=204)
