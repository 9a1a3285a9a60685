"""What a step writes about its results and answers: history, step list, events."""

from __future__ import annotations

from tether_brain.loop.planned import Planned
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_common.messages.events import Step
from tether_common.messages.events import ToolResult as ResultData
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.messages.runs import StepView
from tether_common.messages.tools import ToolResult


def record_result(state: RunState, item: Planned, result: ToolResult) -> None:
    """A tool result into history, the step list and the event stream."""
    call = item.call
    state.add_message(
        ChatMessage(role="tool", content=result.content, tool_call_id=call.id, name=call.name)
    )
    outcome = "ok" if result.ok else (result.error_code or "failed")
    # What the gateway and the tool changed to make the call usable, recorded on the step.
    repairs = [*call.repairs, *result.repairs]
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
        ResultData(
            step=state.step,
            call_id=call.id,
            name=call.name,
            ok=result.ok,
            error_code=result.error_code,
            content=result.content,
            cached=item.cached is not None,
            duration_ms=round(result.duration_ms, 2),
            output_ref=result.output_ref,  # the whole output, for the console's download
            **({"repairs": repairs} if repairs else {}),
        ),
    )


def record_answer(state: RunState, answer: str) -> None:
    state.add_message(ChatMessage(role="assistant", content=answer))
    state.add_step(StepView(step=state.step, kind="model", text=answer))
    emit(state, Step(step=state.step, kind="model", text=answer))


def describe_calls(text: str, calls: list[CallRecord]) -> str:
    """A step's calls as text: its step list's entry, or how a call the step refused as
    an answer stays in the history."""
    names = ", ".join(f"{c.name}({c.arguments})" for c in calls)
    return (text + " " if text else "") + f"calls {names}"
