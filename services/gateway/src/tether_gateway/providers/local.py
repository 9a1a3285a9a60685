"""`local`: a small model on this machine, served by llama.cpp's OpenAI-compatible server
(`tether up` starts it), reached through the `openai` adapter and asked as the model's
profile says (by default: the text protocol, compact prompt, grammar-constrained).

The server holds one model whatever a run names, so every request is sent for the
configured alias; its profile and price key on that name.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing

import httpx

from tether_common.messages.gateway import GenerateRequest, ModelEvent
from tether_common.retrying import Sleep
from tether_gateway.profiles import Profiles, ProfileStore
from tether_gateway.providers.openai import OpenAIProvider
from tether_gateway.providers.text_protocol import TextProtocol
from tether_gateway.settings import GatewaySettings


class _LocalChatCompletions(OpenAIProvider):
    """The openai adapter under its own name, so its errors and profile say `local`."""

    name = "local"


class LocalProvider(TextProtocol):
    """The profile-driven wrapper around the openai adapter, pointed at the local server."""

    def __init__(
        self,
        settings: GatewaySettings,
        client: httpx.AsyncClient,
        *,
        sleep: Sleep = asyncio.sleep,
        profiles: Profiles | None = None,
    ) -> None:
        self.model = settings.local_model
        self.max_output_tokens = settings.local_max_output_tokens
        served = settings.model_copy(
            update={
                "openai_base_url": settings.local_base_url,
                "openai_api_key": None,  # never send an OpenAI key to a local server
                "openai_model": settings.local_model,
                "openai_reasoning_models": frozenset(),
            }
        )
        profiles = profiles or Profiles(settings, ProfileStore(settings.profiles_dir))
        inner = _LocalChatCompletions(served, client, sleep=sleep, profiles=profiles)
        super().__init__(inner, profiles)

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        # A small model rambles to the end of its window unless told where to stop.
        limit = request.max_output_tokens or self.max_output_tokens
        served = request.model_copy(update={"model": self.model, "max_output_tokens": limit})
        async with aclosing(super().generate(served)) as events:
            async for event in events:
                yield event
