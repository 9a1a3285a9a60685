"""Composition root of the gateway: one HTTP client pool, every provider adapter, and one
queue-group subscription per provider subject."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

import httpx
from fastapi import FastAPI

from tether_common.identity import RemoteVerifier
from tether_common.messages.gateway import GenerateRequest, ModelEventMessage
from tether_common.messages.profiles import ModelProfile
from tether_common.scripted import fitted
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_gateway.histories import HistoryCache, expanded
from tether_gateway.metering import metered
from tether_gateway.probe import ProviderFor
from tether_gateway.profile_routes import serve_profiles
from tether_gateway.profiles import FixedProfile, Profiles, ProfileStore
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


def providers(
    settings: GatewaySettings, client: httpx.AsyncClient, profiles: Profiles | None = None
) -> list[Provider]:
    """Every adapter, configured or not: an unconfigured one answers `provider_not_configured`
    naming the settings to set, so the brain always gets an answer. Each HTTP adapter is
    asked as its model's profile says (`TextProtocol`)."""
    profiles = profiles or Profiles(settings, ProfileStore(settings.profiles_dir))
    hosted = (OpenAIProvider, AnthropicProvider, OllamaProvider)
    return [
        RulesPlanner(),
        ScriptedProvider(settings.scripts_dir),
        *(TextProtocol(kind(settings, client, profiles=profiles), profiles) for kind in hosted),
        LocalProvider(settings, client, profiles=profiles),
    ]


def provider_for(settings: GatewaySettings, client: httpx.AsyncClient) -> ProviderFor:
    """Builds the adapter of `profile.provider` asking its model exactly as `profile` says
    (the probe tries each way with one of these)."""

    def build(profile: ModelProfile) -> Provider:
        fixed = FixedProfile(settings, profile)
        return next(p for p in providers(settings, client, fixed) if p.name == profile.provider)

    return build


def handler(
    provider: Provider, profiles: Profiles, histories: HistoryCache
) -> Callable[[GenerateRequest], AsyncIterator[ModelEventMessage]]:
    async def generate(request: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
        # A prefix not held here raises `prefix_unknown` (an error reply, counted).
        request = expanded(histories, request)
        started, last = time.perf_counter(), "none"
        model = profiles.model_for(provider.name, request.model)
        try:
            async with aclosing(
                metered(provider.name, model, provider.generate(request))
            ) as events:
                async for event in events:
                    last = event.code if event.kind == "error" else event.kind
                    yield ModelEventMessage(event=fitted(event, request.tools))
        except asyncio.CancelledError:
            last = "cancelled"  # its caller went away (the route is cancellable)
            raise
        finally:
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
        profiles = Profiles(settings, ProfileStore(settings.profiles_dir or common.home / "models"))
        # One for every provider: a history is the same whoever is asked to continue it.
        histories = HistoryCache(int(settings.history_cache_mib * 2**20))
        for provider in providers(settings, client, profiles):
            await service.bus.serve_stream(
                service.subjects.generate(provider.name), handler(provider, profiles, histories)
            )
        names = [provider.name for provider in providers(settings, client, profiles)]
        await serve_profiles(service.bus, profiles, provider_for(settings, client), names)

    async def on_stop() -> None:
        # Service.stop has drained the bus first: no generation is left using the pool.
        for client in clients:
            await client.aclose()

    return service.app(
        title="Tether gateway",
        on_start=on_start,
        on_stop=on_stop,
        # No identity tables here: `/openapi.json`'s token is verified over the bus.
        verifier=RemoteVerifier(service.bus),
    )
