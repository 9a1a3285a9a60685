"""What every HTTP provider adapter shares: its upstream (client, timeouts, the key to
redact), the retry policy, the check that it is configured and has a model, and retries
around one streamed attempt. An adapter says only where it sends, with which key, what
it still needs, and how one attempt reads its provider's stream."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx
from pydantic import SecretStr

from tether_common.errors import ErrorCode
from tether_common.messages.gateway import ErrorEvent, GenerateRequest, ModelEvent
from tether_common.messages.profiles import ModelPrice
from tether_common.retrying import Sleep
from tether_gateway.profiles import Profiles, ProfileStore
from tether_gateway.providers.http import Upstream
from tether_gateway.providers.retry import RetryPolicy, with_retries
from tether_gateway.settings import GatewaySettings

# A JSON schema the reply must follow (grammar-constrained decoding), or None.
ResponseSchema = Mapping[str, Any] | None


class HostedProvider(ABC):
    name: str

    def __init__(
        self,
        settings: GatewaySettings,
        client: httpx.AsyncClient,
        *,
        sleep: Sleep = asyncio.sleep,
        profiles: Profiles | None = None,
    ) -> None:
        self.settings = settings
        self.profiles = profiles or Profiles(settings, ProfileStore(settings.profiles_dir))
        key = self.api_key()
        self.upstream = Upstream(
            self.name,
            client,
            settings.connect_timeout_s,
            settings.inactivity_timeout_s,
            secrets=(key,) if key is not None else (),
        )
        self.retry = RetryPolicy.from_settings(settings, sleep=sleep)
        self.url = self.endpoint()

    @abstractmethod
    def endpoint(self) -> str:
        """The URL one generation is POSTed to."""

    @abstractmethod
    def default_model(self) -> str | None: ...

    def api_key(self) -> SecretStr | None:
        return None

    def missing(self) -> str | None:
        """What to set before this adapter can work, or None when it can."""
        return None

    def price(self, model: str) -> ModelPrice | None:
        return self.profiles.get(self.name, model).price

    async def generate(
        self, request: GenerateRequest, *, response_schema: ResponseSchema = None
    ) -> AsyncGenerator[ModelEvent, None]:
        """One generation; `response_schema` constrains the reply where the provider can
        (the OpenAI-compatible adapter sends it as `response_format`), else is ignored."""
        missing = self.missing()
        model = request.model or self.default_model()
        if missing is None and model is None:
            missing = f"TETHER_GATEWAY_{self.name.upper()}_MODEL (or name a model in the request)"
        if missing is not None or model is None:
            yield ErrorEvent(
                code=ErrorCode.PROVIDER_NOT_CONFIGURED,
                message=f"{self.name} is not configured: set {missing}",
            )
            return
        async for event in with_retries(
            self.upstream, self.retry, lambda: self._attempt(request, model, response_schema)
        ):
            yield event

    @abstractmethod
    def _attempt(
        self, request: GenerateRequest, model: str, response_schema: ResponseSchema
    ) -> AsyncGenerator[ModelEvent, None]:
        """One streamed request; an `UpstreamError` raised here may be retried."""
