"""A tenant's own tool servers' tools (`/v1/tool-servers`), laid over the shared
catalogue for that tenant's runs only.

Whose tools a lookup may see is the current run's tenant (`current_tenant`), set where
the loop takes a run up (`Loop.run`, beside the run id the logs carry): every catalogue
read, offer, validation and call of that run's task, and of the tasks it starts, sees
the shared tools and its tenant's; anything outside a run (no tenant set) sees the
shared ones only. A name of another tenant's server is then unknown, as a name never
made is, and the runner refuses it the same way (it checks the call's tenant too)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from jsonschema import Draft202012Validator

from tether_brain.clients.runner import RunnerPort
from tether_common.errors import TetherError
from tether_common.messages.tools import ToolDescriptor

log = logging.getLogger(__name__)

current_tenant: ContextVar[str | None] = ContextVar("current_tenant", default=None)

__all__ = ["Overlay", "TenantTools", "current_tenant", "in_tenant"]


@contextlib.contextmanager
def in_tenant(tenant: str | None) -> Iterator[None]:
    """Lookups within see `tenant`'s own tools too (for callers outside a run's task)."""
    token = current_tenant.set(tenant)
    try:
        yield
    finally:
        current_tenant.reset(token)


@dataclass(frozen=True, slots=True)
class Overlay:
    """One tenant's own tools as last read: by name, with their validators."""

    tools: dict[str, ToolDescriptor] = field(default_factory=dict)
    validators: dict[str, Draft202012Validator] = field(default_factory=dict)
    connecting: frozenset[str] = frozenset()
    fetched_at: float = float("-inf")


EMPTY = Overlay()


class TenantTools:
    """The overlays of the tenants whose runs this replica steps, each re-read every
    `ttl_s`; a failed read keeps the last one (none yet: no tools of its own for now)."""

    def __init__(self, runner: RunnerPort, *, ttl_s: float) -> None:
        self.runner = runner
        self.ttl_s = ttl_s
        self._by_tenant: dict[str, Overlay] = {}

    def of(self, tenant: str | None) -> Overlay:
        return EMPTY if tenant is None else self._by_tenant.get(tenant, EMPTY)

    async def refresh(self, tenant: str, *, fresh: bool = False) -> Overlay:
        known = self._by_tenant.get(tenant, EMPTY)
        if not fresh and time.monotonic() - known.fetched_at <= self.ttl_s:
            return known
        try:
            reply = await self.runner.catalog(tenant)
        except TetherError as exc:
            log.warning("tenant %s's tool servers could not be read: %s", tenant, exc.message)
            kept = Overlay(known.tools, known.validators, known.connecting, time.monotonic())
            self._by_tenant[tenant] = kept
            return kept
        tools = {t.name: t for t in reply.tools if t.available}
        overlay = Overlay(
            tools,
            {n: Draft202012Validator(t.parameters) for n, t in tools.items()},
            frozenset(reply.connecting),
            time.monotonic(),
        )
        self._by_tenant[tenant] = overlay
        return overlay
