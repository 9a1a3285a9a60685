"""Provider bodies spliced from each message's JSON (`providers.bodies`): the bytes parse to
exactly the documented body, whatever the history holds; a kept history's messages are
encoded once, not every step; a message the gateway no longer keeps is forgotten; and
through the `openai`, `ollama` and `anthropic` adapters, step after step of a kept history, the
upstream receives the whole, correct history each time."""

from __future__ import annotations

import gc
import json
import random
from typing import Any

import httpx
from pydantic import SecretStr

from tether_common.messages.gateway import (
    HISTORY_ROOT,
    CallRecord,
    ChatMessage,
    GenerateRequest,
    OfferedToolSpec,
    history_digest,
)
from tether_gateway.histories import HistoryCache, expanded
from tether_gateway.providers import (
    AnthropicProvider,
    OllamaProvider,
    OpenAIProvider,
    anthropic,
    ollama,
    openai,
)
from tether_gateway.providers.bodies import MessageTexts, spliced
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, Reply, chat_text_stream, collect, ndjson, sse

TEXTS = ["", "plain", 'quotes " and \\', "ünïcødé ✓ 日本", "line\nbreak", "\u2028", "</script>"]
Adapter = OpenAIProvider | OllamaProvider | AnthropicProvider
TOOL = OfferedToolSpec(name="calculate", description="d", parameters={"type": "object"})


def history(rng: random.Random, steps: int) -> list[ChatMessage]:
    out = [
        ChatMessage(role="system", content=rng.choice(TEXTS)),
        ChatMessage(role="user", content=rng.choice(TEXTS)),
    ]
    for i in range(steps):
        args = {"x": rng.choice(TEXTS), "n": rng.randint(-3, 3), "f": 0.5, "deep": [None, True]}
        call = CallRecord(id=f"c{i}", name="calculate", arguments=args)
        out.append(ChatMessage(role="assistant", content=rng.choice(TEXTS), tool_calls=[call]))
        out.append(
            ChatMessage(role="tool", content=rng.choice(TEXTS), tool_call_id=call.id, name="calc")
        )
    return out


def request(messages: list[ChatMessage], **fields: Any) -> GenerateRequest:
    return GenerateRequest(
        run_id="r", provider="openai", model="m", messages=messages, tools=[TOOL], **fields
    )


def test_the_spliced_body_parses_to_the_documented_body() -> None:
    settings = GatewaySettings()
    openai_texts, ollama_texts = (
        MessageTexts(openai.chat_message),
        MessageTexts(ollama.chat_message),
    )
    for seed in range(20):
        rng = random.Random(seed)
        asked = request(history(rng, rng.randint(0, 6)), max_output_tokens=9)
        fields = openai.chat_fields(asked, "m", settings)
        body = spliced(fields, openai_texts.texts(asked.messages))
        assert json.loads(body) == json.loads(json.dumps(openai.chat_body(asked, "m", settings)))
        body = spliced(ollama.chat_fields(asked, "m"), ollama_texts.texts(asked.messages))
        assert json.loads(body) == json.loads(json.dumps(ollama.chat_body(asked, "m")))
    assert json.loads(spliced({}, [])) == {"messages": []}


def test_anthropic_turns_spliced_from_each_messages_blocks_are_its_turns() -> None:
    """Neighbours of one role merge into one turn; system messages and empty ones add
    nothing: the same as `turns`, whatever the order of roles."""
    blocks = MessageTexts(anthropic.turn_blocks)
    roles = ["system", "user", "assistant", "tool"]
    for seed in range(40):
        rng = random.Random(seed)
        messages = history(rng, rng.randint(0, 4))
        for _ in range(rng.randint(0, 6)):  # odd neighbours: merges, empty texts, systems
            role = rng.choice(roles)
            content = rng.choice(TEXTS)
            messages.insert(
                rng.randint(0, len(messages)),
                ChatMessage(
                    role=role, content=content, tool_call_id="c0" if role == "tool" else None
                ),
            )
        asked = request(messages)
        fields = anthropic.messages_fields(asked, "m", 99)
        body = spliced(fields, anthropic.spliced_turns(messages, blocks.texts(messages)))
        assert json.loads(body) == json.loads(json.dumps(anthropic.messages_body(asked, "m", 99)))


def test_each_kept_message_is_encoded_once() -> None:
    rendered: list[ChatMessage] = []

    def render(message: ChatMessage) -> dict[str, Any]:
        rendered.append(message)
        return openai.chat_message(message)

    texts = MessageTexts(render)
    messages = history(random.Random(1), 5)
    first = texts.texts(messages)
    assert len(rendered) == len(messages)
    new = history(random.Random(2), 1)[-2:]
    again = texts.texts([*messages, *new])
    assert again[: len(first)] == first
    assert rendered[len(messages) :] == new  # only the new messages
    # An equal message that is another object is encoded afresh: identity, not equality.
    copy = messages[1].model_copy()
    texts.texts([copy])
    assert rendered[-1] is copy


def test_a_message_nobody_keeps_is_forgotten_and_the_bound_holds() -> None:
    texts = MessageTexts(openai.chat_message)
    messages = history(random.Random(3), 4)
    texts.texts(messages)
    assert len(texts) == len(messages)
    del messages
    gc.collect()
    assert (len(texts), texts.chars) == (0, 0)
    small = MessageTexts(openai.chat_message, max_chars=200)
    kept = [ChatMessage(role="user", content="x" * 60) for _ in range(10)]
    small.texts(kept)
    assert small.chars <= 200


async def test_the_adapters_send_every_kept_history_whole(upstream: FakeUpstream) -> None:
    """Step after step through a kept history (as the gateway's handler gives it): the
    upstream gets every message each time, in each provider's own format."""
    settings = GatewaySettings(
        openai_base_url=f"{upstream.url}/v1",
        ollama_url=upstream.url,
        anthropic_base_url=upstream.url,
        anthropic_api_key=SecretStr("sk-ant-test"),
        retry_attempts=0,
    )
    cache, rng = HistoryCache(2**24), random.Random(4)
    kept = history(rng, 2)
    async with httpx.AsyncClient() as client:
        adapters: list[Adapter] = [
            OpenAIProvider(settings, client),
            OllamaProvider(settings, client),
            AnthropicProvider(settings, client),
        ]
        wanted: list[dict[str, Any]] = []
        for step in range(6):
            note = ChatMessage(role="system", content=f"note {step}")
            new = history(rng, 1)[-2:] if step else kept
            sent = GenerateRequest(
                run_id="r",
                provider="openai",
                model="m",
                messages=[*new, note],
                prefix_digest=_digest(kept) if step else None,
                keep=len(kept) + len(new) if step else len(kept),
            )
            whole = expanded(cache, sent)
            kept = [*kept, *new] if step else kept
            assert whole.messages == [*kept, note]
            for adapter in adapters:
                upstream.queue(reply_for(adapter))
                await collect(adapter.generate(whole))
                wanted.append(_body(adapter, whole, settings))
    got = [received.json() for received in upstream.received]
    assert got == wanted
    assert len(got[-3]["messages"]) == len(kept) + 1  # openai's: the system messages too


def _digest(messages: list[ChatMessage]) -> str:
    return history_digest(HISTORY_ROOT, [m.model_dump_json() for m in messages]).hex()


def reply_for(adapter: Adapter) -> Reply:
    if isinstance(adapter, OpenAIProvider):
        return chat_text_stream("ok", "m")
    if isinstance(adapter, AnthropicProvider):
        return Reply(pieces=[sse({"type": "message_stop"}, event="message_stop")])
    final = {"model": "m", "message": {"role": "assistant", "content": "ok"}, "done": True}
    return Reply(headers={"content-type": "application/x-ndjson"}, pieces=[ndjson(final)])


def _body(adapter: Adapter, asked: GenerateRequest, settings: GatewaySettings) -> dict[str, Any]:
    if isinstance(adapter, OpenAIProvider):
        body = openai.chat_body(asked, "m", settings)
    elif isinstance(adapter, AnthropicProvider):
        body = anthropic.messages_body(asked, "m", settings.anthropic_max_tokens)
    else:
        body = ollama.chat_body(asked, "m")
    loaded: dict[str, Any] = json.loads(json.dumps(body))
    return loaded
