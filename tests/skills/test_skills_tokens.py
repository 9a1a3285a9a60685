"""What skills cost in the prompt, counted with the gateway's token estimate (characters /
3.5 + 6 a message: no tokenizer is installed, and this is the count the brain is billed
by when a provider reports no usage).

A baseline turn carries only the one-line index; a body is paid for only in the turn
that invokes it with `/name` or loads it with `load_skill`."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tether_brain.context.prompts import system_prompt
from tether_brain.skills import (
    LOAD_SKILL,
    FolderSkillStore,
    Skill,
    forget_loaded_skills,
    invoke,
    load_skill,
    skill_index,
)
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_gateway.providers.base import estimate_text_tokens, estimate_tokens

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def shipped_skills(shipped: Path) -> dict[str, Skill]:
    skills = FolderSkillStore([shipped]).by_name()
    assert len(skills) == 4
    return skills


def system(skills: dict[str, Skill]) -> ChatMessage:
    content = system_prompt("full") + "\n\n" + skill_index(skills.values())
    return ChatMessage(role="system", content=content)


def body_in(messages: list[ChatMessage], skill: Skill) -> bool:
    return any(skill.body in m.content for m in messages)


def test_baseline_turn_carries_the_index_only(shipped: Path) -> None:
    skills = shipped_skills(shipped)
    bare = [ChatMessage(role="system", content=system_prompt("full"))]
    baseline = [system(skills), ChatMessage(role="user", content="fix the login bug")]
    assert not any(body_in(baseline, s) for s in skills.values())
    index_cost = estimate_tokens(baseline[:1]) - estimate_tokens(bare)
    bodies_cost = sum(estimate_text_tokens(s.body) for s in skills.values())
    assert index_cost < 80 * len(skills)  # one line of at most ~300 characters each
    assert index_cost * 5 < bodies_cost


def test_invoked_body_is_paid_for_in_that_turn_only(shipped: Path) -> None:
    skills = shipped_skills(shipped)
    chosen = skills["coding-task"]
    invocation = invoke("/coding-task fix the login bug", skills)
    injected = invocation.message()
    assert injected is not None
    user = ChatMessage(role="user", content=invocation.prompt)
    turn = [system(skills), injected, user]
    baseline = [system(skills), ChatMessage(role="user", content="fix the login bug")]
    assert body_in(turn, chosen)
    assert "/coding-task" not in user.content
    extra = estimate_tokens(turn) - estimate_tokens(baseline)
    assert estimate_text_tokens(chosen.body) <= extra < estimate_text_tokens(chosen.body) + 40
    others = [s for s in skills.values() if s is not chosen]
    assert not any(body_in(turn, s) for s in others)


def test_loaded_body_is_paid_for_until_the_next_turn(shipped: Path) -> None:
    skills = shipped_skills(shipped)
    chosen = skills["incident-triage"]
    call = CallRecord(id="c1", name=LOAD_SKILL, arguments={"name": chosen.name})
    result = load_skill(skills, call)
    history = [
        ChatMessage(role="user", content="the API returns 502s"),
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content=result.content, tool_call_id="c1", name=LOAD_SKILL),
    ]
    this_turn = [system(skills), *forget_loaded_skills(history)]
    assert body_in(this_turn, chosen)
    history += [
        ChatMessage(role="assistant", content="Rolled back the deploy."),
        ChatMessage(role="user", content="thanks; anything else?"),
    ]
    next_turn = [system(skills), *forget_loaded_skills(history)]
    assert not body_in(next_turn, chosen)
    kept = estimate_tokens(next_turn)
    assert kept + estimate_text_tokens(chosen.body) - 40 < estimate_tokens(
        [system(skills), *history]
    )
