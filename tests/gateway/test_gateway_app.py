"""The gateway's composition: settings from the environment, every provider registered on
its own subject, the public surface, and the bus handler's framing."""

from __future__ import annotations

import json

import httpx
import pytest

import tether_gateway.providers
from tether_common.messages.gateway import ChatMessage, GenerateRequest
from tether_common.messages.profiles import ModelPrice
from tether_common.subjects import Subjects
from tether_gateway.app import handler, providers
from tether_gateway.histories import HistoryCache
from tether_gateway.profiles import Profiles, ProfileStore
from tether_gateway.providers import RulesPlanner, TextProtocol
from tether_gateway.settings import GatewaySettings


def test_settings_read_lists_prices_and_secrets_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_GATEWAY_TEXT_PROTOCOL_MODELS", "smollm2, qwen2.5-0.5b")
    monkeypatch.setenv("TETHER_GATEWAY_OPENAI_REASONING_MODELS", '["o4-mini"]')
    monkeypatch.setenv(
        "TETHER_GATEWAY_PRICES",
        json.dumps({"gpt-4o": {"input_per_million": 2.5, "output_per_million": 10}}),
    )
    monkeypatch.setenv("TETHER_GATEWAY_OPENAI_API_KEY", "sk-live-secret")
    settings = GatewaySettings()
    assert settings.text_protocol_models == {"smollm2", "qwen2.5-0.5b"}
    assert settings.openai_reasoning_models == {"o4-mini"}
    assert settings.prices["gpt-4o"] == ModelPrice(input_per_million=2.5, output_per_million=10)
    assert "sk-live-secret" not in repr(settings)
    assert "sk-live-secret" not in str(settings.model_dump())
    assert settings.openai_missing() is None


def test_what_is_missing_is_named() -> None:
    bare = GatewaySettings(openai_api_key=None, anthropic_api_key=None)
    assert bare.openai_missing() is not None
    assert bare.anthropic_missing() == "TETHER_GATEWAY_ANTHROPIC_API_KEY"
    local = GatewaySettings(openai_base_url="http://127.0.0.1:8080/v1")
    assert local.openai_missing() is None


async def test_every_provider_is_registered_on_a_subject_of_its_own() -> None:
    async with httpx.AsyncClient() as client:
        registered = providers(GatewaySettings(text_protocol_models=frozenset({"m"})), client)
    names = [p.name for p in registered]
    assert names == ["rules", "scripted", "openai", "anthropic", "ollama", "local"]
    subjects = {Subjects("tether").generate(name).subject for name in names}
    assert len(subjects) == len(names)
    assert all(isinstance(p, TextProtocol) for p in registered[2:])


def test_the_providers_package_exports_what_it_lists() -> None:
    exported = set(tether_gateway.providers.__all__)
    assert exported == {
        "AnthropicProvider",
        "OllamaProvider",
        "OpenAIProvider",
        "Provider",
        "RetryPolicy",
        "RulesPlanner",
        "ScriptedProvider",
        "TextProtocol",
        "estimate_tokens",
    }
    for name in exported:
        assert hasattr(tether_gateway.providers, name)


async def test_the_handler_wraps_events_and_ends_with_a_terminal_message() -> None:
    request = GenerateRequest(
        run_id="r",
        provider="rules",
        messages=[ChatMessage(role="user", content="hello")],
    )
    profiles = Profiles(GatewaySettings(), ProfileStore(None))
    messages = [m async for m in handler(RulesPlanner(), profiles, HistoryCache(2**20))(request)]
    assert [m.event.kind for m in messages] == ["chunk", "usage", "done"]
    assert messages[-1].terminal
