"""Runs one tool call: re-validates the arguments (the bus may be spoken to directly),
refuses a tool whose minimum sandbox level this host cannot give, applies the time
limit, and turns every failure into a result. Never raises."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, ValidationError

from tether_common.messages.tools import ExecuteTool, ToolResult
from tether_common.metrics import tool_calls, tool_duration
from tether_tools_runner.context import bound
from tether_tools_runner.plain_args import Check, compile_check
from tether_tools_runner.repairs import collecting
from tether_tools_runner.sandbox import Attestation, missing_for
from tether_tools_runner.tool import Overlay, Registry, Tool, ToolFailure

log = logging.getLogger(__name__)

MAX_TIMEOUT_S = 120.0


class Executor:
    def __init__(
        self,
        registry: Registry,
        *,
        default_timeout_s: float,
        attestation: Attestation | None = None,
        min_sandbox: Mapping[str, str] | None = None,
        tenant_tools: Callable[[str], Registry | None] | None = None,
    ) -> None:
        self.registry = registry
        # A tenant's own servers' tools (`tenant_servers`), laid over the shared ones for
        # that tenant's calls only.
        self.tenant_tools = tenant_tools
        self.default_timeout_s = default_timeout_s
        self.attestation = attestation
        self.min_sandbox = dict(min_sandbox or {})
        # Keyed by the schema object itself (held, so its identity cannot be reused): a
        # tool re-registered with a new schema (MCP) gets a new validator.
        self._validators: dict[str, _Validators] = {}

    @property
    def sandbox_level(self) -> str:
        return self.attestation.level if self.attestation is not None else "none"

    async def execute(self, call: ExecuteTool) -> ToolResult:
        started = time.perf_counter()
        try:
            with collecting() as repairs:
                code, content = await self._run(call)
        except Exception as exc:  # e.g. a broken schema from an MCP server: still a result
            log.exception("executing %s failed", call.name)
            code, content = "tool_error", f"{type(exc).__name__}: {exc}. Do not guess a result."
        elapsed = time.perf_counter() - started
        tool_calls.add(1, {"tool": call.name, "outcome": code or "ok"})
        tool_duration.record(elapsed, {"tool": call.name})
        return ToolResult(
            call_id=call.call_id,
            name=call.name,
            ok=code is None,
            content=content if code is None else f"FAILED: {code}: {content}",
            error_code=code,
            duration_ms=elapsed * 1000,
            sandbox_level=self.sandbox_level,
            repairs=repairs,
        )

    def _validators_of(self, tool: Tool) -> _Validators:
        schema = tool.descriptor.parameters
        cached = self._validators.get(tool.name)
        if cached is None or cached.schema is not schema:
            cached = _Validators(schema, Draft202012Validator(schema), compile_check(schema))
            self._validators[tool.name] = cached
        return cached

    def _refusal(self, call: ExecuteTool, tool: Tool) -> tuple[str, str] | None:
        errors = self._validators_of(tool).errors(call.args)
        if errors:
            detail = "; ".join(e.message for e in errors[:3])
            return "schema_invalid", f"arguments do not match the schema: {detail}. Do not guess."
        required = self.min_sandbox.get(call.name)
        if required is not None:
            missing = (
                "no sandbox attestation was made"
                if self.attestation is None
                else missing_for(self.attestation, required)
            )
            if missing is not None:
                return "sandbox_insufficient", f"{call.name} needs sandbox {required!r}: {missing}."
        return None

    def tools(self, call: ExecuteTool) -> Registry | Overlay:
        """The tools `call` may name: the shared ones, and its tenant's own."""
        own = self.tenant_tools(call.tenant) if call.tenant and self.tenant_tools else None
        return self.registry if own is None else Overlay(self.registry, own)

    def tool_of(self, call: ExecuteTool) -> Tool | None:
        return self.tools(call).get(call.name)

    def refusal_for(self, call: ExecuteTool) -> tuple[str, str] | None:
        """Why `call` would be refused before its tool runs (unknown tool, arguments,
        sandbox), or None: a refused call has no effect, so it claims no key. A tool
        whose source is still connecting (or failed) is answered by that source."""
        tools = self.tools(call)
        if (held := tools.held(call.name)) is not None:
            return held
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(tools.names())
            return "unknown_tool", f"no tool named '{call.name}'. Known tools: {known}."
        return self._refusal(call, tool)

    def time_limit(self, call: ExecuteTool) -> float:
        """How long `call` may run (a tool with its own limit gets that)."""
        tool = self.tool_of(call)
        own = tool.own_timeout_s if tool is not None else None
        return own or min(call.timeout_s or self.default_timeout_s, MAX_TIMEOUT_S)

    async def _run(self, call: ExecuteTool) -> tuple[str | None, str]:
        refusal = self.refusal_for(call)
        tool = self.tool_of(call)
        if refusal is not None or tool is None:
            return refusal or ("unknown_tool", f"no tool named '{call.name}'.")
        timeout = self.time_limit(call)
        try:
            with bound(call):
                async with asyncio.timeout(timeout):
                    return None, await tool.run(call.args)
        except ToolFailure as failure:
            return failure.code, f"{failure.message} Do not guess a result."
        except TimeoutError:
            return "timeout", f"the tool did not finish within {timeout:g}s."
        except Exception as exc:
            log.exception("tool %s raised", call.name)
            return "tool_error", f"{type(exc).__name__}: {exc}. Do not guess a result."


@dataclass(frozen=True, slots=True)
class _Validators:
    """One schema's checks: the quick yes for plain arguments, then jsonschema's verdict."""

    schema: dict[str, Any]
    full: Draft202012Validator
    plain: Check | None

    def errors(self, args: dict[str, Any]) -> list[ValidationError]:
        """Every way `args` fails the schema (sorted, so the message is stable); none when
        the quick check already says they fit."""
        if self.plain is not None and self.plain(args):
            return []
        return sorted(self.full.iter_errors(args), key=str)


__all__ = ["MAX_TIMEOUT_S", "Executor"]
