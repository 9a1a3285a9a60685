"""`local`: a small model on this machine, served by llama.cpp's OpenAI-compatible server
(`tether up` starts it), reached through the `openai` adapter and asked as the model's
profile says (by default: the text protocol, compact prompt, grammar-constrained).

The server holds one model whatever a run names, so every request is sent for the
configured alias; its profile and price key on that name.

On a CPU the prompt's prefill dominates a small model's step, and llama.cpp evaluates
only what follows the longest token prefix its KV cache shares with the previous prompt.
So a run's prompt keeps listing the tools its earlier step listed (`ListedTools`) when a
later step offers fewer: the tools-off round that ends a run, a step narrowed to the one
call a failure named. The grammar still admits only the step's own tools (or only an
answer), and the whole prefix up to the new messages is reused instead of re-evaluated.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass

import httpx

from tether_common.messages.gateway import GenerateRequest, ModelEvent, OfferedToolSpec
from tether_common.retrying import Sleep
from tether_gateway.profiles import Profiles, ProfileStore
from tether_gateway.providers.openai import OpenAIProvider
from tether_gateway.providers.text_protocol import TextProtocol
from tether_gateway.settings import GatewaySettings

RUNS_HELD = 1024  # runs whose listed tools are kept, least recently asked out first


class _LocalChatCompletions(OpenAIProvider):
    """The openai adapter under its own name, so its errors and profile say `local`."""

    name = "local"


@dataclass(frozen=True, slots=True)
class _Listed:
    system: str  # the brain's system text the list led
    tools: tuple[OfferedToolSpec, ...]


class ListedTools:
    """Per run, the tools its prompt last listed. A later request of the same run, with
    the same system text, whose tools are all among them (fewer, or none) lists them
    again, so its prompt opens with the same tokens. Only a run's own list is ever shown
    to it (keyed by run id): no run sees another's (or another tenant's) tools."""

    def __init__(self, size: int = RUNS_HELD) -> None:
        self.size = size
        self._held: OrderedDict[str, _Listed] = OrderedDict()

    def listed(self, request: GenerateRequest) -> Sequence[OfferedToolSpec]:
        first = request.messages[0] if request.messages else None
        if first is None or first.role != "system":
            return request.tools  # no system text to lead: nothing to keep stable
        held = self._held.get(request.run_id)
        # Another system text (a side generation's, a summary's) keeps its own prompt.
        same = held is not None and held.system == first.content
        if held is not None and same and all(tool in held.tools for tool in request.tools):
            self._held.move_to_end(request.run_id)
            return held.tools
        if request.tools:  # a first list, or one that grew or changed: listed from now on
            self._held[request.run_id] = _Listed(first.content, tuple(request.tools))
            self._held.move_to_end(request.run_id)
            while len(self._held) > self.size:
                self._held.popitem(last=False)
        return request.tools


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
        self.listed_by_run = ListedTools()

    def listed_tools(self, request: GenerateRequest) -> Sequence[OfferedToolSpec]:
        return self.listed_by_run.listed(request)

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        # A small model rambles to the end of its window unless told where to stop.
        limit = request.max_output_tokens or self.max_output_tokens
        served = request.model_copy(update={"model": self.model, "max_output_tokens": limit})
        async with aclosing(super().generate(served)) as events:
            async for event in events:
                yield event
