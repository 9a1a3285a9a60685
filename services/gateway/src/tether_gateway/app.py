"""Composition root of the gateway: one HTTP client pool, every provider adapter, and one
queue-group subscription per provider subject."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

import httpx
from fastapi import FastAPI

from tether_common.messages.gateway import GenerateRequest, ModelEventMessage
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_gateway.metering import metered
from tether_gateway.providers import (
    AnthropicProvider,
    OllamaProvider,
    OpenAIProvider,
    Provider,
    RulesPlanner,
    ScriptedProvider,
    TextProtocol,
)
from tether_gateway.providers.local import LocalProvider
from tether_gateway.settings import GatewaySettings

SERVICE = "gateway"

log = logging.getLogger(__name__)


def providers(settings: GatewaySettings, client: httpx.AsyncClient) -> list[Provider]:
    """Every adapter, configured or not: an unconfigured one answers `provider_not_configured`
    naming the settings to set, so the brain always gets an answer."""
    text_models = settings.text_protocol_models
    return [
        RulesPlanner(),
        ScriptedProvider(settings.scripts_dir),
        TextProtocol(OpenAIProvider(settings, client), text_models, settings.openai_model),
        TextProtocol(AnthropicProvider(settings, client), text_models, settings.anthropic_model),
        TextProtocol(OllamaProvider(settings, client), text_models, settings.ollama_model),
        LocalProvider(settings, client),
    ]


def served_model(provider: Provider, request: GenerateRequest) -> str:
    """The model name metrics carry: the request's, else the adapter's configured one; the
    local adapter always serves its own alias."""
    if isinstance(provider, LocalProvider):
        return provider.model
    default = provider.default_model if isinstance(provider, TextProtocol) else None
    return request.model or default or "default"


def handler(provider: Provider) -> Callable[[GenerateRequest], AsyncIterator[ModelEventMessage]]:
    async def generate(request: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
        started, last = time.perf_counter(), "none"
        model = served_model(provider, request)
        async with aclosing(metered(provider.name, model, provider.generate(request))) as events:
            async for event in events:
                last = event.code if event.kind == "error" else event.kind
                yield ModelEventMessage(event=event)
        log.info(
            "generated run_id=%s provider=%s model=%s outcome=%s in %.0f ms",
            request.run_id,
            provider.name,
            model,
            last,
            (time.perf_counter() - started) * 1000,
        )

    return generate


def create_app(common: CommonSettings, settings: GatewaySettings) -> FastAPI:
    service = Service(SERVICE, common, uses_db=False)
    clients: list[httpx.AsyncClient] = []

    async def on_start() -> None:
        client = httpx.AsyncClient(follow_redirects=False)
        clients.append(client)
        for provider in providers(settings, client):
            await service.bus.serve_stream(
                service.subjects.generate(provider.name), handler(provider)
            )

    async def on_stop() -> None:
        # Drain first, so in-flight generations finish before their HTTP pool closes;
        # the service's own stop closes the (already drained) bus again harmlessly.
        await service.bus.close()
        for client in clients:
            await client.aclose()

    return service.app(title="Tether gateway", on_start=on_start, on_stop=on_stop)
