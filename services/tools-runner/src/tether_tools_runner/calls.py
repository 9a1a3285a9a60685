"""One `tool_execute` request, end to end: a non-idempotent call with an idempotency key
is claimed in the effect ledger first (a repeat gets the recorded result, a wait, or
`in_doubt`), run by the executor, offloaded when large, and recorded before the reply.

An idempotent call, a call without a key (an older brain) and a call refused before its
tool runs (unknown tool, bad arguments, sandbox too weak) claim nothing: they have no
effect to keep to once.

A call with `staged` applies that approved change set instead of running its tool
(`staging`), under the same key: the set is the call's one effect. A set found stale
applied nothing, so its claim is dropped rather than recorded, and the next apply (of
the set staged again) may claim the key."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from opentelemetry import trace
from sqlalchemy.exc import DBAPIError

from tether_common.bus import Bus
from tether_common.messages.staging import STALE_EFFECT
from tether_common.messages.tools import (
    EFFECTS_UNAVAILABLE,
    TOOL_NOT_READY,
    ExecuteTool,
    ToolResult,
)
from tether_common.metrics import tool_calls
from tether_tools_runner.effects import Claimed, EffectLedger, Recorded
from tether_tools_runner.executor import Executor
from tether_tools_runner.offload import maybe_offload, threshold_for
from tether_tools_runner.staging.stager import Stager
from tether_tools_runner.tool import failed as _failed

tracer = trace.get_tracer(__name__)
log = logging.getLogger(__name__)


class Calls:
    def __init__(
        self,
        bus: Bus,
        executor: Executor,
        *,
        sandbox_level: str,
        thresholds: Mapping[str, int],
        ledger: EffectLedger | None = None,
        stager: Stager | None = None,
    ) -> None:
        self.bus = bus
        self.executor = executor
        self.sandbox_level = sandbox_level
        self.thresholds = dict(thresholds)
        self.ledger = ledger
        self.stager = stager

    def keyed(self, call: ExecuteTool) -> bool:
        """Whether `call` is kept to once: a key, a tool with effects, and no refusal."""
        tool = self.executor.tool_of(call)
        return (
            self.ledger is not None
            and call.idempotency_key is not None
            and tool is not None
            and not tool.descriptor.idempotent
            and self.executor.refusal_for(call) is None
        )

    async def execute(self, call: ExecuteTool) -> ToolResult:
        if self.ledger is None or call.idempotency_key is None or not self.keyed(call):
            return await self.run(call)
        span = trace.get_current_span()
        wait_s = self.executor.time_limit(call) + self.ledger.lease_s
        try:
            claim = await self.ledger.claim(call, call.idempotency_key, wait_s=wait_s)
        except (OSError, DBAPIError) as exc:
            log.warning("call %s not run: its start could not be recorded: %s", call.name, exc)
            return _failed(
                call,
                EFFECTS_UNAVAILABLE,
                "not run: the runner could not record that this call starts (its database is "
                "unreachable), so it did not start it. It is safe to try again.",
            )
        if isinstance(claim, Recorded):
            span.set_attribute("tether.tool.replayed", True)
            tool_calls.add(1, {"tool": call.name, "outcome": "replayed"})
            return claim.result
        if not isinstance(claim, Claimed):
            tool_calls.add(1, {"tool": call.name, "outcome": claim.code})
            return _failed(call, claim.code, claim.message)
        try:
            result = await self.run(call)
            if result.error_code in (STALE_EFFECT, TOOL_NOT_READY):
                await self.ledger.forget(claim)  # nothing was applied: no effect to keep
            else:
                await self.ledger.record(claim, result)
        finally:
            self.ledger.release(claim)
        return result

    async def run(self, call: ExecuteTool) -> ToolResult:
        """Run the call; a large result goes to the output-store before the reply, so
        only its digest and ref ride the bus."""
        span = trace.get_current_span()  # the bus's span for this call
        span.set_attribute("tether.tool.name", call.name)
        span.set_attribute("tether.sandbox.level", self.sandbox_level)
        if call.staged is None:
            result = await self.executor.execute(call)
        elif self.stager is not None:
            result = await self.stager.apply(call)  # the approved change set, exactly
        else:
            result = _failed(call, "staging_unavailable", "this runner applies no staged effects.")
        if span.is_recording():  # else the attributes are dropped: not worth encoding for
            span.set_attribute("tether.tool.duration_ms", result.duration_ms)
            span.set_attribute("tether.tool.outcome", result.error_code or "ok")
            span.set_attribute("tether.tool.bytes", len(result.content.encode()))
        if result.sandbox_level != self.sandbox_level:  # the executor's results have it
            result = result.model_copy(update={"sandbox_level": self.sandbox_level})
        threshold = threshold_for(call.name, self.thresholds)
        if not result.ok or len(result.content) <= threshold // 4:  # under in any encoding
            return result
        with tracer.start_as_current_span("offload") as offload:
            text, ref = await maybe_offload(
                self.bus, call.run_id, call.name, result.content, threshold=threshold
            )
            offload.set_attribute("tether.output.ref", ref or "")
        return result.model_copy(update={"content": text, "output_ref": ref})


__all__ = ["Calls"]
