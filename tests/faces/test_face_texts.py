"""The faces' translations that need no services: a chat's messages as one run prompt,
and what a stream still owes of the answer after the live text it sent."""

from __future__ import annotations

import pytest

from tether_brain.faces.conversation import MAX_PROMPT_CHARS, render_prompt
from tether_brain.faces.following import Ending, Text
from tether_brain.faces.openai import Written
from tether_brain.faces.openai_wire import ChatMessage
from tether_common.errors import MessageError
from tether_common.messages.runs import Usage


def messages(*pairs: tuple[str, str]) -> list[ChatMessage]:
    return [ChatMessage.model_validate({"role": r, "content": c}) for r, c in pairs]


def test_a_lone_user_message_is_the_prompt_itself() -> None:
    assert render_prompt(messages(("user", "hello"))) == "hello"


def test_instructions_and_history_are_rendered_around_the_task() -> None:
    prompt = render_prompt(
        messages(
            ("system", "Be brief."),
            ("user", "hi"),
            ("assistant", "Hello!"),
            ("tool", "42"),
            ("user", "and now?"),
        )
    )
    assert prompt.startswith("Instructions from the caller:\nBe brief.")
    assert "User: hi\n\nAssistant: Hello!\n\nTool result: 42" in prompt
    assert prompt.endswith("The message to answer now:\nand now?")


def test_text_parts_are_joined() -> None:
    parts = ChatMessage.model_validate(
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    )
    assert render_prompt([parts]) == "ab"


@pytest.mark.parametrize(
    "pairs",
    [
        (("user", "hi"), ("assistant", "last word")),
        (("system", "only instructions"),),
        (("user", "   "),),
        (("system", "x" * MAX_PROMPT_CHARS), ("user", "task")),
    ],
)
def test_what_is_no_task_is_refused(pairs: tuple[tuple[str, str], ...]) -> None:
    with pytest.raises(MessageError) as refused:
        render_prompt(messages(*pairs))
    assert refused.value.code == "invalid_request"


def ending(answer: str) -> Ending:
    return Ending("run_1", "completed", None, answer, Usage())


def test_a_stream_owes_only_what_its_live_text_lacks() -> None:
    written = Written()
    assert written.add(Text(1, "Let me look.")) == "Let me look."
    assert written.add(Text(2, "Noon")) == "\n\nNoon"  # a new step after a blank line
    assert written.rest(ending("Noon, UTC.")) == ", UTC."
    assert written.rest(ending("Noon")) == ""
    # The last step's live text was not the answer: all of it follows.
    assert written.rest(ending("Midnight.")) == "\n\nMidnight."
    assert Written().rest(ending("All of it.")) == "All of it."
