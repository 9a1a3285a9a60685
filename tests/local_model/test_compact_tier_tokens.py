"""The compact prompt tier counted with the bundled model's real tokenizer (llama.cpp's
`/extras/tokenize/count` on SmolLM2), as the text protocol sends it: the request for the
same question is far smaller than the full tier's, and its opening (system prompt and
tool cards) is the same token for token at every step, so the server's prompt cache
reuses it."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from builtin_tools import RUNNER_TOOLS, offered
from tether_brain.context.offering import DEFAULT_KEYWORDS, compact_offer
from tether_brain.context.prompting import build_request
from tether_brain.state.run import Limits, RunState
from tether_client.local_model import LlamaServer
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.messages.profiles import PromptTier
from tether_gateway.providers.text_protocol import textual_request

TOOLS = offered(RUNNER_TOOLS)
PROMPT = "What time is it in Tokyo?"


async def tokens(server: LlamaServer, text: str) -> list[int]:
    url = server.base_url.removesuffix("/v1") + "/extras/tokenize"
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(url, json={"input": text})
    response.raise_for_status()
    return list(response.json()["tokens"])


def step_state(step: int) -> RunState:
    now = datetime.now(UTC)
    state = RunState(
        run_id=f"run_step{step}",
        prompt=PROMPT,
        provider="local",
        model=None,
        limits=Limits(max_steps=6),
        created_at=now,
        updated_at=now,
        step=step,
    )
    state.messages.append(ChatMessage(role="user", content=PROMPT))
    if step > 0:
        call = CallRecord(id="c1", name="current_time", arguments={"timezone": "Asia/Tokyo"})
        state.messages += [
            ChatMessage(role="assistant", tool_calls=[call]),
            ChatMessage(role="tool", content="18:00 in Asia/Tokyo", tool_call_id="c1"),
        ]
    return state


def rendered(state: RunState, tier: PromptTier, minute: int) -> str:
    """The request as the text protocol sends it, flattened the way a chat template lays
    messages end to end."""
    if tier == "compact":
        offered, hidden = compact_offer(TOOLS, PROMPT, PROMPT, DEFAULT_KEYWORDS)
    else:
        offered, hidden = TOOLS, None
    now = datetime(2026, 12, 1, 17, minute, tzinfo=UTC)
    request = build_request(state, offered, False, [], hidden, tier=tier, now=now)
    return "\n".join(f"<{m.role}>\n{m.content}" for m in textual_request(request).messages)


async def test_the_compact_tier_is_a_fraction_of_the_full_one_in_real_tokens(
    llama: LlamaServer,
) -> None:
    full = len(await tokens(llama, rendered(step_state(0), "full", 0)))
    compact = len(await tokens(llama, rendered(step_state(0), "compact", 0)))
    print(f"SmolLM2 tokens for {PROMPT!r}: full {full}, compact {compact}")  # noqa: T201
    assert compact < 0.4 * full


@pytest.mark.parametrize("tier", ["full", "compact"])
async def test_two_steps_share_their_opening_token_for_token(
    llama: LlamaServer, tier: PromptTier
) -> None:
    first = await tokens(llama, rendered(step_state(0), tier, 0))
    later = await tokens(llama, rendered(step_state(1), tier, 7))
    shared = next((i for i, (a, b) in enumerate(zip(first, later, strict=False)) if a != b), 0)
    closing = len(await tokens(llama, rendered(step_state(0), tier, 0).rsplit("<system>", 1)[1]))
    print(f"{tier}: {shared} of {len(first)} tokens of step 1 reused by step 2")  # noqa: T201
    # Everything but the closing note (date, budget) is reused by the next step.
    assert shared >= len(first) - closing - 6
