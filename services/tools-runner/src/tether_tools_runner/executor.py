"""Runs one tool call: re-validates the arguments (the bus may be spoken to directly),
applies the time limit, and turns every failure into a result. Never raises."""

from __future__ import annotations

import asyncio
import logging
import time

from jsonschema import Draft202012Validator

from tether_common.messages.tools import ExecuteTool, ToolResult
from tether_common.metrics import tool_calls
from tether_tools_runner.tool import Registry, ToolFailure

log = logging.getLogger(__name__)


class Executor:
    def __init__(self, registry: Registry, *, default_timeout_s: float) -> None:
        self.registry = registry
        self.default_timeout_s = default_timeout_s
        self._validators = {
            d.name: Draft202012Validator(d.parameters) for d in registry.descriptors()
        }

    async def execute(self, call: ExecuteTool) -> ToolResult:
        started = time.perf_counter()
        code, content = await self._run(call)
        tool_calls.add(1, {"tool": call.name, "outcome": code or "ok"})
        return ToolResult(
            call_id=call.call_id,
            name=call.name,
            ok=code is None,
            content=content if code is None else f"FAILED: {code}: {content}",
            error_code=code,
            duration_ms=(time.perf_counter() - started) * 1000,
        )

    async def _run(self, call: ExecuteTool) -> tuple[str | None, str]:
        tool = self.registry.get(call.name)
        if tool is None:
            known = ", ".join(self.registry.names())
            return "unknown_tool", f"no tool named '{call.name}'. Known tools: {known}."
        errors = sorted(self._validators[call.name].iter_errors(call.args), key=str)
        if errors:
            detail = "; ".join(e.message for e in errors[:3])
            return "schema_invalid", f"arguments do not match the schema: {detail}. Do not guess."
        timeout = min(call.timeout_s or self.default_timeout_s, 120.0)
        try:
            async with asyncio.timeout(timeout):
                return None, await tool.run(call.args)
        except ToolFailure as failure:
            return failure.code, f"{failure.message} Do not guess a result."
        except TimeoutError:
            return "timeout", f"the tool did not finish within {timeout:g}s."
        except Exception as exc:
            log.exception("tool %s raised", call.name)
            return "tool_error", f"{type(exc).__name__}: {exc}. Do not guess a result."
