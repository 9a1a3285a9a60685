"""A tenant's lifecycle hooks over HTTP: `GET /v1/hooks`, `POST /v1/hooks`,
`GET /v1/hooks/{name}`, `DELETE /v1/hooks/{name}` (`?tenant=` for an admin). Reading
needs `policy.read`, changing `policy.write` (the tenant's operators, admins of all);
another tenant's hooks answer 404 as missing ones do. An https hook's URL is checked as
written when it is added (`hooks.Destinations`), and its signing secret is answered
once, on creation, never again. What hooks do is `hooks/`'."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tether_brain.api.deps import DestinationsDep, HookBookDep
from tether_brain.hooks import StoredHook, TenantHooks
from tether_common.http import PathId
from tether_common.identity.http import Caller
from tether_common.messages.base import ID_PATTERN
from tether_common.messages.hooks import (
    AddHook,
    HookCreated,
    HookList,
    HookRemoved,
    HookView,
)

TenantQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)]

router = APIRouter(prefix="/v1", tags=["hooks"])


def _view(hook: StoredHook, found: TenantHooks) -> HookView:
    return HookView(
        **hook.spec.model_dump(),
        tenant=found.tenant,
        version=found.version,
        changed_by=found.changed_by,
        changed_at=found.changed_at,
    )


@router.get("/hooks")
async def list_hooks(book: HookBookDep, who: Caller, tenant: TenantQuery = None) -> HookList:
    """The tenant's hooks, in the order they are asked (secrets never shown)."""
    scope = tenant or who.tenant
    who.require("policy.read", scope)
    found = await book.fresh(scope)
    return HookList(hooks=[_view(h, found) for h in found.hooks], version=found.version)


@router.get("/hooks/{name}")
async def show_hook(
    name: PathId, book: HookBookDep, who: Caller, tenant: TenantQuery = None
) -> HookView:
    """One hook of the tenant's (its secret is never shown again)."""
    scope = tenant or who.tenant
    who.require("policy.read", scope)
    found = await book.fresh(scope)
    return _view(found.named(name), found)


@router.post("/hooks", status_code=201)
async def add_hook(
    body: AddHook, book: HookBookDep, destinations: DestinationsDep, who: Caller
) -> HookCreated:
    """One more hook, asked after the tenant's others at its point. 409 `hook_exists`;
    422 `hook_refused` for an https URL the guard refuses."""
    scope = body.tenant or who.tenant
    who.require("policy.write", scope)
    if body.transport == "https":
        destinations.registered(body.target)
    hook, found = await book.add(scope, body, who.label)
    return HookCreated(**_view(hook, found).model_dump(), secret=hook.secret)


@router.delete("/hooks/{name}")
async def remove_hook(
    name: PathId, book: HookBookDep, who: Caller, tenant: TenantQuery = None
) -> HookRemoved:
    """Remove a hook; runs stop asking it within `TETHER_BRAIN_HOOKS_REFRESH_S`."""
    scope = tenant or who.tenant
    who.require("policy.write", scope)
    found = await book.remove(scope, name, who.label)
    return HookRemoved(name=name, tenant=scope, version=found.version)
