"""Composition root of the gateway: one queue-group subscription per provider subject."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI

from tether_common.messages.gateway import GenerateRequest, ModelEventMessage
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_gateway.providers import Provider, RulesPlanner, ScriptedProvider
from tether_gateway.settings import GatewaySettings

SERVICE = "gateway"


def providers(settings: GatewaySettings) -> list[Provider]:
    return [RulesPlanner(), ScriptedProvider(settings.scripts_dir)]


def create_app(common: CommonSettings, settings: GatewaySettings) -> FastAPI:
    service = Service(SERVICE, common, uses_db=False)

    def handler(
        provider: Provider,
    ) -> Callable[[GenerateRequest], AsyncIterator[ModelEventMessage]]:
        async def generate(request: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
            async for event in provider.generate(request):
                yield ModelEventMessage(event=event)

        return generate

    async def on_start() -> None:
        for provider in providers(settings):
            await service.bus.serve_stream(
                service.subjects.generate(provider.name), handler(provider)
            )

    return service.app(title="Tether gateway", on_start=on_start)
