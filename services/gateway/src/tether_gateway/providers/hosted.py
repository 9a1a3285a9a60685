"""What every HTTP provider adapter shares: its upstream (client, timeouts, the key to
redact), the retry policy, the check that it is configured and has a model, and retries
around one streamed attempt. An adapter says only where it sends, with which key, what
it still needs, and how one attempt reads its provider's stream."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator

import httpx
from pydantic import SecretStr

from tether_common.messages.gateway import ErrorEvent, GenerateRequest, ModelEvent
from tether_gateway.providers.http import Upstream
from tether_gateway.providers.retry import RetryPolicy, Sleep, with_retries
from tether_gateway.settings import GatewaySettings


class HostedProvider(ABC):
    name: str

    def __init__(
        self,
        settings: GatewaySettings,
        client: httpx.AsyncClient,
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
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

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        missing = self.missing()
        model = request.model or self.default_model()
        if missing is None and model is None:
            missing = f"TETHER_GATEWAY_{self.name.upper()}_MODEL (or name a model in the request)"
        if missing is not None or model is None:
            yield ErrorEvent(
                code="provider_not_configured",
                message=f"{self.name} is not configured: set {missing}",
            )
            return
        async for event in with_retries(
            self.upstream, self.retry, lambda: self._attempt(request, model)
        ):
            yield event

    @abstractmethod
    def _attempt(self, request: GenerateRequest, model: str) -> AsyncGenerator[ModelEvent, None]:
        """One streamed request; an `UpstreamError` raised here may be retried."""
