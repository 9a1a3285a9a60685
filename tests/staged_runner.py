"""An in-process tools-runner's staging, for the staging tests (tests/staging)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from tether_common.messages.staging import StagedEffect
from tether_common.messages.tools import ExecuteTool, ToolResult, effect_key
from tether_tools_runner.calls import Calls
from tether_tools_runner.executor import Executor
from tether_tools_runner.staging.stager import Stager


@dataclass
class Runner:
    """One in-process runner: stage a call, apply it through `Calls` (keyed), or run a
    tool the ordinary way."""

    stager: Stager
    calls: Calls
    executor: Executor
    run_id: str

    def call(self, name: str, args: dict[str, Any], call_id: str, **extra: Any) -> ExecuteTool:
        return ExecuteTool(
            run_id=self.run_id,
            call_id=call_id,
            name=name,
            args=args,
            idempotency_key=effect_key(self.run_id, call_id),
            **extra,
        )

    async def stage(self, name: str, args: dict[str, Any], call_id: str = "c1") -> StagedEffect:
        return await self.stager.stage(self.call(name, args, call_id))

    async def apply(
        self, name: str, args: dict[str, Any], digest: str, call_id: str = "c1"
    ) -> ToolResult:
        return await self.calls.execute(self.call(name, args, call_id, staged=digest))

    async def run(self, name: str, args: dict[str, Any]) -> ToolResult:
        return await self.calls.execute(self.call(name, args, uuid.uuid4().hex[:8]))
