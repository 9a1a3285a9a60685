"""Skill bodies cost nothing until used, counted with the bundled model's real tokenizer
(llama.cpp's `/extras/tokenize/count` on SmolLM2): a baseline turn carries only the
one-line index; a body is present when invoked with `/name` or loaded, and a loaded body
is gone from the next turn."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx

from tether_brain.context.prompting import build_request
from tether_brain.skills import FolderSkillStore, forget_loaded_skills, invoke, load_skill
from tether_brain.state.run import Limits, RunState
from tether_client.local_model import LlamaServer
from tether_common.messages.gateway import CallRecord, ChatMessage

SKILLS = Path(__file__).resolve().parents[2] / "skills"


async def count(server: LlamaServer, text: str) -> int:
    url = server.base_url.removesuffix("/v1") + "/extras/tokenize/count"
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(url, json={"input": text})
    response.raise_for_status()
    return int(response.json()["count"])


def run_state(prompt: str) -> RunState:
    now = datetime.now(UTC)
    state = RunState(
        run_id="run_tokens",
        prompt=prompt,
        provider="local",
        model=None,
        limits=Limits(max_steps=6),
        created_at=now,
        updated_at=now,
    )
    state.messages.append(ChatMessage(role="user", content=prompt))
    return state


def text_of(messages: list[ChatMessage]) -> str:
    return "\n".join(m.content for m in messages)


async def test_skill_bodies_cost_tokens_only_when_used(llama: LlamaServer) -> None:
    skills = FolderSkillStore([SKILLS]).by_name()
    assert len(skills) >= 4
    body = skills["research-brief"].body
    body_tokens = await count(llama, body)
    assert body_tokens > 150

    baseline = build_request(run_state("find the facts"), [], False, skills.values()).messages
    baseline_tokens = await count(llama, text_of(baseline))
    assert body not in text_of(baseline)
    all_bodies = sum([await count(llama, s.body) for s in skills.values()])
    index_tokens = baseline_tokens - await count(
        llama, text_of(build_request(run_state("find the facts"), [], False, []).messages)
    )
    assert 0 < index_tokens < all_bodies / 4

    invocation = invoke("/research-brief find the facts", skills)
    note = invocation.message()
    assert note is not None
    invoked = await count(llama, text_of([note, *baseline]))
    assert invoked - baseline_tokens > body_tokens * 0.8

    loaded = load_skill(
        skills, CallRecord(id="c1", name="load_skill", arguments={"name": "research-brief"})
    )
    turn = [
        *baseline,
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=[
                CallRecord(id="c1", name="load_skill", arguments={"name": "research-brief"})
            ],
        ),
        ChatMessage(role="tool", content=loaded.content, tool_call_id="c1", name="load_skill"),
    ]
    assert await count(llama, text_of(turn)) - baseline_tokens > body_tokens * 0.8
    later = forget_loaded_skills([*turn, ChatMessage(role="user", content="next question")])
    assert await count(llama, text_of(later)) - baseline_tokens < body_tokens * 0.2
