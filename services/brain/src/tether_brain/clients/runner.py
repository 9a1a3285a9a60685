"""The tools-runner as the brain asks it: its catalogue, one call run, one call staged.
Failures of the asking (no reply, nobody listening) raise `TetherError`; what they mean
for the call (lost, never delivered) is the toolbox's to say."""

from __future__ import annotations

from typing import Protocol

from tether_common.bus import Bus
from tether_common.messages.staging import StagedEffect
from tether_common.messages.tools import Catalog, CatalogRequest, ExecuteTool, ToolResult

CATALOG_TIMEOUT_S = 10.0


class RunnerPort(Protocol):
    """The loop's seam onto the tools-runner. `BusRunner` is the real one;
    `tether_brain.testing.LocalRunner` runs tools in process."""

    async def catalog(self, tenant: str | None = None) -> Catalog:
        """The shared catalogue; with `tenant`, that tenant's own servers' tools only."""
        ...

    async def execute(
        self, request: ExecuteTool, *, timeout_s: float, heartbeat_s: float | None
    ) -> ToolResult: ...

    async def stage(self, request: ExecuteTool, *, timeout_s: float) -> StagedEffect: ...


class BusRunner:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def catalog(self, tenant: str | None = None) -> Catalog:
        subject = self.bus.subjects.tool_catalog
        request = CatalogRequest(tenant=tenant)
        return await self.bus.request(subject, request, timeout=CATALOG_TIMEOUT_S)

    async def execute(
        self, request: ExecuteTool, *, timeout_s: float, heartbeat_s: float | None
    ) -> ToolResult:
        """With `heartbeat_s`, a runner that misses three beats is given up on (the call
        is lost, as at the timeout, only sooner)."""
        route = self.bus.subjects.tool_execute
        if heartbeat_s:
            return await self.bus.request_watched(
                route, request, timeout=timeout_s, heartbeat_s=heartbeat_s
            )
        return await self.bus.request(route, request, timeout=timeout_s)

    async def stage(self, request: ExecuteTool, *, timeout_s: float) -> StagedEffect:
        return await self.bus.request(self.bus.subjects.tool_stage, request, timeout=timeout_s)
