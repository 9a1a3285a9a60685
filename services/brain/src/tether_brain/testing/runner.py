"""The tools-runner in process: a catalogue and a function that runs one call. Give it the
runner's own executor over real built-in tools (tests do: `tether_tools_runner`'s
`Executor`), or `answering`'s scripted results."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from tether_common.messages.staging import StagedEffect
from tether_common.messages.tools import Catalog, ExecuteTool, ToolDescriptor, ToolResult

Execute = Callable[[ExecuteTool], Awaitable[ToolResult]]


class LocalRunner:
    """On the `clients.runner.RunnerPort` protocol; every call sent is kept (`sent`)."""

    def __init__(self, tools: Sequence[ToolDescriptor], execute: Execute) -> None:
        self.tools = list(tools)
        self._execute = execute
        self.sent: list[ExecuteTool] = []

    async def catalog(self, tenant: str | None = None) -> Catalog:
        """No tenant has servers of its own in process."""
        return Catalog(tools=[] if tenant is not None else self.tools)

    async def execute(
        self, request: ExecuteTool, *, timeout_s: float, heartbeat_s: float | None
    ) -> ToolResult:
        self.sent.append(request)
        return await self._execute(request)

    async def stage(self, request: ExecuteTool, *, timeout_s: float) -> StagedEffect:
        """Nothing is staged in process: the call is approved the old way."""
        reason = "the in-process runner does not stage calls"
        return StagedEffect(call_id=request.call_id, stageable=False, reason=reason)


def answering(results: Mapping[str, str]) -> Execute:
    """Scripted results: each tool's call answers its text (`FAILED: code: …` text is a
    failure with that code, as the runner words one)."""

    async def execute(call: ExecuteTool) -> ToolResult:
        content = results.get(call.name, f"FAILED: unknown_tool: no tool named '{call.name}'.")
        code = content.split(": ", 2)[1] if content.startswith("FAILED: ") else None
        return ToolResult(
            call_id=call.call_id, name=call.name, ok=code is None, content=content, error_code=code
        )

    return execute
