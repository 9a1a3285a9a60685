"""A chat request's messages as one run prompt. A run takes one prompt, so the caller's
earlier turns are rendered into it as a transcript: system and developer messages as the
caller's instructions (they carry the caller's authority, never the operator's, so they
join the prompt, not the brain's system prompt), earlier user, assistant and tool
messages as the conversation so far, and the last user message as the task."""

from __future__ import annotations

from collections.abc import Sequence

from tether_brain.faces.openai_wire import ChatMessage
from tether_common.errors import ErrorCode, MessageError

MAX_PROMPT_CHARS = 200_000  # `StartRun.prompt`'s own bound
_SPEAKERS = {
    "user": "User",
    "assistant": "Assistant",
    "tool": "Tool result",
    "function": "Tool result",
}


def render_prompt(messages: Sequence[ChatMessage]) -> str:
    """The run's prompt; a 422 `invalid_request` when there is no user message to answer
    last, or the whole is longer than a run's prompt may be."""
    if messages[-1].role != "user" or not messages[-1].text.strip():
        raise MessageError(
            "the last message must be a user message with text: it is the task the agent runs",
            code=ErrorCode.INVALID_REQUEST,
        )
    task = messages[-1].text
    instructions = [m.text for m in messages if m.role in ("system", "developer") and m.text]
    history = [
        f"{_SPEAKERS[m.role]}: {m.text}" for m in messages[:-1] if m.role in _SPEAKERS and m.text
    ]
    if not instructions and not history:
        return _bounded(task)
    parts = []
    if instructions:
        parts.append("Instructions from the caller:\n" + "\n\n".join(instructions))
    if history:
        parts.append("The conversation so far:\n" + "\n\n".join(history))
    parts.append("The message to answer now:\n" + task)
    return _bounded("\n\n".join(parts))


def _bounded(prompt: str) -> str:
    if len(prompt) > MAX_PROMPT_CHARS:
        raise MessageError(
            f"the messages make a prompt of {len(prompt)} characters; a run takes at most "
            f"{MAX_PROMPT_CHARS} (send fewer earlier turns)",
            code=ErrorCode.INVALID_REQUEST,
        )
    return prompt


__all__ = ["MAX_PROMPT_CHARS", "render_prompt"]
