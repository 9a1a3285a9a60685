"""A tenant's hooks as stored: one `policy_documents` row of kind `hooks`, scope the
tenant, body `{"hooks": [spec + secret, ...]}`, changed through the agents store, so each
change is versioned (409 `version_conflict` on a race, retried here on a fresh read),
takes the one policy lock and leaves a `hooks.changed` record (digests before and after;
never the secret) in the `policy` trail. Runs read a copy at most `refresh_s` old."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from tether_brain.agents.store import AgentStore, Kind, StoredDocument
from tether_common.errors import ConflictError, ErrorCode, MessageError, NotFoundError
from tether_common.messages.hooks import MAX_HOOKS_PER_TENANT, AddHook, HookPoint, HookSpec
from tether_common.signing import new_secret

log = logging.getLogger(__name__)

KIND: Kind = "hooks"
SECRET_PREFIX = "hksec_"
_RETRIES = 3  # a change raced by another: read again and re-apply (by name, so safe)


@dataclass(frozen=True, slots=True)
class StoredHook:
    spec: HookSpec
    secret: str | None  # an https hook's signing secret


@dataclass(frozen=True, slots=True)
class TenantHooks:
    tenant: str
    hooks: tuple[StoredHook, ...]
    version: int
    changed_by: str | None = None
    changed_at: datetime | None = None

    def at(self, point: HookPoint) -> list[StoredHook]:
        return [h for h in self.hooks if h.spec.point == point]

    def named(self, name: str) -> StoredHook:
        for hook in self.hooks:
            if hook.spec.name == name:
                return hook
        raise NotFoundError(f"no hook '{name}'")


def _hooks_of(found: StoredDocument) -> TenantHooks:
    hooks = []
    for raw in (found.body or {}).get("hooks", []):
        try:
            spec = HookSpec.model_validate({k: v for k, v in raw.items() if k != "secret"})
        except ValidationError as exc:  # written by a newer brain: not in force here
            log.error(
                "a hook of tenant %s is stored in a shape this brain cannot read: %s",
                found.scope,
                exc,
            )
            continue
        hooks.append(StoredHook(spec, raw.get("secret")))
    return TenantHooks(found.scope, tuple(hooks), found.version, found.changed_by, found.changed_at)


def _body(hooks: list[StoredHook]) -> dict[str, Any]:
    return {
        "hooks": [
            h.spec.model_dump(mode="json") | ({"secret": h.secret} if h.secret else {})
            for h in hooks
        ]
    }


class HookBook:
    def __init__(self, store: AgentStore, *, refresh_s: float = 2.0) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self._cache: dict[str, tuple[float, TenantHooks]] = {}
        self._reading: dict[str, asyncio.Future[TenantHooks]] = {}

    async def of(self, tenant: str) -> TenantHooks:
        """The tenant's hooks, read at most `refresh_s` ago. One read at a time a tenant:
        the runs in flight that find the copy stale together share it (each of 50 ran
        its own, every 2 s)."""
        cached = self._cache.get(tenant)
        if cached is not None and time.monotonic() - cached[0] < self.refresh_s:
            return cached[1]
        reading = self._reading.get(tenant)
        if reading is None:
            reading = asyncio.ensure_future(self._read(tenant))
            self._reading[tenant] = reading
            reading.add_done_callback(lambda _: self._reading.pop(tenant, None))
        return await asyncio.shield(reading)

    async def _read(self, tenant: str) -> TenantHooks:
        """Read and keep, stamped with when the read began; a read that began before the
        kept one (a shared read outrun by `fresh` after a change) is not kept."""
        began = time.monotonic()
        found = _hooks_of(await self.store.document(KIND, tenant))
        kept = self._cache.get(tenant)
        if kept is None or kept[0] <= began:
            self._cache[tenant] = (began, found)
        return found

    async def fresh(self, tenant: str) -> TenantHooks:
        """Read now (a read already under way may have begun before a change)."""
        self._cache.pop(tenant, None)
        return await self._read(tenant)

    async def add(self, tenant: str, body: AddHook, who: str) -> tuple[StoredHook, TenantHooks]:
        """One more hook (409 `hook_exists` by name; at most MAX_HOOKS_PER_TENANT)."""
        spec = HookSpec.model_validate(body.model_dump(exclude={"tenant", "secret", "version"}))
        secret = (body.secret or new_secret(SECRET_PREFIX)) if spec.transport == "https" else None
        hook = StoredHook(spec, secret)

        def added(current: TenantHooks) -> list[StoredHook]:
            if any(h.spec.name == spec.name for h in current.hooks):
                raise ConflictError(
                    f"hook '{spec.name}' already exists", code=ErrorCode.HOOK_EXISTS
                )
            if len(current.hooks) >= MAX_HOOKS_PER_TENANT:
                raise MessageError(
                    f"a tenant keeps at most {MAX_HOOKS_PER_TENANT} hooks",
                    code=ErrorCode.HOOK_REFUSED,
                )
            return [*current.hooks, hook]

        return hook, await self._change(tenant, who, added)

    async def remove(self, tenant: str, name: str, who: str) -> TenantHooks:
        def removed(current: TenantHooks) -> list[StoredHook]:
            current.named(name)  # 404 when missing
            return [h for h in current.hooks if h.spec.name != name]

        return await self._change(tenant, who, removed)

    async def _change(self, tenant: str, who: str, change: Any) -> TenantHooks:
        for attempt in range(_RETRIES):
            current = await self.fresh(tenant)
            hooks = change(current)
            try:
                await self.store.change_document(
                    KIND, tenant, _body(hooks), who, expected=current.version
                )
            except ConflictError as exc:
                if exc.code != ErrorCode.VERSION_CONFLICT or attempt == _RETRIES - 1:
                    raise
                continue
            return await self.fresh(tenant)
        raise AssertionError("unreachable")
