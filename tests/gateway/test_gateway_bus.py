"""The gateway app on a real NATS server: each provider answers on its own subject, and
an unconfigured one answers `provider_not_configured` instead of staying silent."""

from __future__ import annotations

from tether_common.bus import Bus
from tether_common.messages.gateway import ChatMessage, GenerateRequest, ModelEventMessage
from tether_common.settings import CommonSettings
from tether_gateway.app import create_app
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, Reply, ndjson


async def ask(bus: Bus, provider: str, model: str | None) -> list[ModelEventMessage]:
    request = GenerateRequest(
        run_id="run-bus",
        provider=provider,
        model=model,
        messages=[ChatMessage(role="user", content="Say hi.")],
    )
    route = bus.subjects.generate(provider)
    return [
        m async for m in bus.stream(route, request, is_terminal=lambda m: m.terminal, timeout=5)
    ]


async def test_providers_answer_on_their_subjects(
    nats_url: str, prefix: str, bus: Bus, upstream: FakeUpstream
) -> None:
    common = CommonSettings(nats_url=nats_url, subject_prefix=prefix)
    settings = GatewaySettings(ollama_url=upstream.url, openai_api_key=None)
    upstream.queue(
        Reply(
            pieces=[
                ndjson({"message": {"role": "assistant", "content": "hi"}, "done": False}),
                ndjson({"message": {"role": "assistant", "content": ""}, "done": True}),
            ]
        )
    )
    app = create_app(common, settings)
    async with app.router.lifespan_context(app):
        ollama = await ask(bus, "ollama", "llama3.2")
        openai = await ask(bus, "openai", "gpt-4o")
    assert [m.event.kind for m in ollama] == ["chunk", "usage", "done"]
    assert [m.event.kind for m in openai] == ["error"]
    error = openai[0].event
    assert error.kind == "error"
    assert error.code == "provider_not_configured"
