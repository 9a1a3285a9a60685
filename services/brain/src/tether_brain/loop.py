"""The only think-act loop. Each step: ask the model, pass every call through the gates,
run what is allowed, and commit what the step added as one durable journal write."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from tether_brain.events import emit, publish
from tether_brain.model import ModelClient, ModelTurn
from tether_brain.prompts import LAST_STEP, STEP_LIMIT_ANSWER, system_prompt
from tether_brain.state import RunState
from tether_brain.store import RunStore
from tether_brain.toolbox import Toolbox
from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.gateway import CallRecord, ChatMessage, GenerateRequest, OfferedToolSpec
from tether_common.messages.runs import RunEvent, RunStatus, StepView, Usage
from tether_common.messages.tools import ToolResult
from tether_common.metrics import runs_ended, steps
from tether_common.telemetry import current_run_id

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


class Loop:
    def __init__(
        self,
        bus: Bus,
        store: RunStore,
        model: ModelClient,
        toolbox: Toolbox,
        *,
        max_calls_per_step: int,
    ) -> None:
        self.bus = bus
        self.store = store
        self.model = model
        self.toolbox = toolbox
        self.max_calls_per_step = max_calls_per_step

    async def run(self, state: RunState, stop: asyncio.Event) -> None:
        """Advance `state` until it ends; every outcome, even a crash of ours, is recorded.
        The run is one trace: every bus call below is a child of this span."""
        current_run_id.set(state.run_id)
        with tracer.start_as_current_span("run", kind=SpanKind.INTERNAL) as span:
            span.set_attribute("tether.run_id", state.run_id)
            span.set_attribute("gen_ai.system", state.provider)
            await self._run(state, stop)
            span.set_attribute("tether.run.status", state.status)

    async def _run(self, state: RunState, stop: asyncio.Event) -> None:
        try:
            await self._advance(state, stop)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("run %s failed", state.run_id)
            state.pending.clear()
            await self._finish(state, "failed", f"internal_error: {type(exc).__name__}", None)

    async def _advance(self, state: RunState, stop: asyncio.Event) -> None:
        if state.status == "queued":
            state.status = "running"
            state.add_message(ChatMessage(role="user", content=state.prompt))
            emit(
                state, "run.start", prompt=state.prompt, provider=state.provider, model=state.model
            )
            await self._commit(state)
        while True:
            if stop.is_set():
                return await self._finish(state, "stopped", "stop_requested", state.answer)
            if state.step >= state.max_steps:
                return await self._finish(state, "stopped", "max_steps", STEP_LIMIT_ANSWER)
            with tracer.start_as_current_span("step") as span:
                span.set_attribute("tether.step", state.step + 1)
                if await self._step(state):
                    return

    async def _step(self, state: RunState) -> bool:
        """One step; True when the run has ended."""
        state.step += 1
        steps.add(1)
        last = state.step == state.max_steps
        offered = [] if last or state.max_steps == 1 else await self.toolbox.offered()
        turn = await self.model.generate(self._request(state, offered, last))
        state.usage = _add(state.usage, turn.usage)
        if turn.error is not None:
            reason = f"model_error: {turn.error.code}: {turn.error.message}"
            return await self._end_with(state, "failed", reason, None)
        if turn.calls and offered:
            await self._act(state, turn)
            return False
        if turn.calls:  # tools were not on offer (last step), yet the model asked
            answer = turn.text.strip() or STEP_LIMIT_ANSWER
            self._record_answer(state, turn, answer)
            return await self._end_with(state, "stopped", "max_steps", answer)
        self._record_answer(state, turn, turn.text.strip())
        return await self._end_with(state, "completed", None, turn.text.strip())

    def _request(
        self, state: RunState, offered: list[OfferedToolSpec], last: bool
    ) -> GenerateRequest:
        messages = [ChatMessage(role="system", content=system_prompt(datetime.now(UTC)))]
        messages += state.messages
        if last and state.max_steps > 1:
            messages.append(ChatMessage(role="system", content=LAST_STEP))
        return GenerateRequest(
            run_id=state.run_id,
            provider=state.provider,
            model=state.model,
            messages=messages,
            tools=offered,
        )

    async def _act(self, state: RunState, turn: ModelTurn) -> None:
        calls, extra = turn.calls[: self.max_calls_per_step], turn.calls[self.max_calls_per_step :]
        state.add_message(
            ChatMessage(role="assistant", content=turn.text.strip(), tool_calls=calls)
        )
        state.add_step(StepView(step=state.step, kind="model", text=_describe_calls(turn)))
        emit(state, "step", step=state.step, kind="model", text=_describe_calls(turn))
        for call in calls:
            emit(
                state,
                "tool.call",
                step=state.step,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
            )
        results = await asyncio.gather(*(self._run_call(state, call) for call in calls))
        results += [_not_run(call, self.max_calls_per_step) for call in extra]
        for call, result in zip(calls + extra, results, strict=True):
            self._record_result(state, call, result)
        emit(state, "usage", **state.usage.model_dump(exclude={"version"}))
        await self._commit(state)

    async def _run_call(self, state: RunState, call: CallRecord) -> ToolResult:
        try:
            await self.toolbox.catalog()
            gate = self.toolbox.validate(call)
        except TetherError as exc:
            return _refused(call, exc.code, f"the tool catalogue is unavailable: {exc.message}")
        if not gate.allowed or gate.tool is None:
            return _refused(call, gate.code or "refused", gate.message)
        return await self.toolbox.execute(state.run_id, call, gate.tool)

    def _record_result(self, state: RunState, call: CallRecord, result: ToolResult) -> None:
        state.add_message(
            ChatMessage(role="tool", content=result.content, tool_call_id=call.id, name=call.name)
        )
        outcome = "ok" if result.ok else (result.error_code or "failed")
        state.add_step(
            StepView(
                step=state.step,
                kind="tool",
                text=result.content[:2000],
                tool=call.name,
                call_id=call.id,
                outcome=outcome,
            )
        )
        emit(
            state,
            "tool.result",
            step=state.step,
            call_id=call.id,
            name=call.name,
            ok=result.ok,
            error_code=result.error_code,
            content=result.content,
            duration_ms=round(result.duration_ms, 2),
        )

    def _record_answer(self, state: RunState, turn: ModelTurn, answer: str) -> None:
        state.add_message(ChatMessage(role="assistant", content=answer))
        state.add_step(StepView(step=state.step, kind="model", text=answer))
        emit(state, "step", step=state.step, kind="model", text=answer)
        if turn.thinking:
            emit(state, "step", step=state.step, kind="model", text="", thinking=turn.thinking)
        emit(state, "usage", **state.usage.model_dump(exclude={"version"}))

    async def _end_with(
        self, state: RunState, status: RunStatus, reason: str | None, answer: str | None
    ) -> bool:
        await self._finish(state, status, reason, answer)
        return True

    async def _finish(
        self, state: RunState, status: RunStatus, reason: str | None, answer: str | None
    ) -> None:
        state.status, state.stop_reason, state.answer = status, reason, answer
        emit(
            state,
            "run.end",
            status=status,
            stop_reason=reason,
            answer=answer,
            steps=state.step,
            usage=state.usage.model_dump(exclude={"version"}),
        )
        await self._commit(state)
        runs_ended.add(1, {"status": status})

    async def _commit(self, state: RunState) -> None:
        events = [RunEvent.model_validate(e.data) for e in state.pending if e.kind == "event"]
        await self.store.commit(state)
        await publish(self.bus, events)


def _add(total: Usage, more: Usage) -> Usage:
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cost=total.cost + more.cost,
        estimated=total.estimated or more.estimated,
    )


def _describe_calls(turn: ModelTurn) -> str:
    names = ", ".join(f"{c.name}({c.arguments})" for c in turn.calls)
    return (turn.text.strip() + " " if turn.text.strip() else "") + f"calls {names}"


def _refused(call: CallRecord, code: str, message: str) -> ToolResult:
    return ToolResult(
        call_id=call.id,
        name=call.name,
        ok=False,
        content=f"FAILED: {code}: {message}",
        error_code=code,
    )


def _not_run(call: CallRecord, limit: int) -> ToolResult:
    return _refused(
        call, "too_many_calls", f"not run: at most {limit} tool calls are run per step."
    )
