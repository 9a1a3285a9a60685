"""Context fitting, case by case (pure): the order of what gives way, and what never does."""

from __future__ import annotations

from tether_brain.context.fitting import OLD_RESULT_CHARS, Fitter, estimate, reserve
from tether_common.messages.gateway import CallRecord, ChatMessage

PROMPT = "Summarise the logs " + "carefully " * 200


def history(results: int, size: int) -> list[ChatMessage]:
    messages = [ChatMessage(role="system", content="sys"), ChatMessage(role="user", content=PROMPT)]
    for i in range(results):
        call = CallRecord(id=f"c{i}", name="file_read", arguments={"path": f"f{i}"})
        messages.append(ChatMessage(role="assistant", content="", tool_calls=[call]))
        messages.append(
            ChatMessage(role="tool", content="x" * size, tool_call_id=f"c{i}", name="file_read")
        )
    return messages


def test_reserve_is_clamped() -> None:
    assert reserve(512) == 256
    assert reserve(4096) == 1024
    assert reserve(100_000) == 2048


def test_a_request_that_fits_is_untouched() -> None:
    messages = history(2, 100)
    fitted = Fitter(32_768, PROMPT).fit(messages, [])
    assert fitted.messages == messages
    assert fitted.actions == []


def test_old_results_are_cut_first() -> None:
    messages = history(4, 3000)
    fitter = Fitter(3500, PROMPT)
    fitted = fitter.fit(messages, [])
    assert fitted.actions[0] == "old tool results cut"
    old = [m for m in fitted.messages[:-1] if m.role == "tool"]
    assert all(len(m.content) <= OLD_RESULT_CHARS + 40 for m in old)
    assert len(fitted.messages[-1].content) == 3000  # the newest result is kept
    assert not fitter.over(fitted.messages, [])


def test_history_is_dropped_then_newest_results_cut_and_the_prompt_kept() -> None:
    messages = history(30, 2000)
    fitter = Fitter(1200, PROMPT)
    fitted = fitter.fit(messages, [])
    assert "old tool results cut" in fitted.actions
    assert any(a.endswith("messages dropped") for a in fitted.actions)
    assert fitted.dropped
    assert any(m.content == PROMPT for m in fitted.messages), "the user's prompt was trimmed"
    calls = {c.id for m in fitted.messages for c in m.tool_calls}
    results = {m.tool_call_id for m in fitted.messages if m.role == "tool"}
    assert results <= calls, "a result lost its call"
    assert estimate(fitted.messages) < estimate(messages)
