"""Retrying a generation: back-off with jitter honouring `Retry-After`, and only while
nothing of the response has reached the consumer, so the brain never sees a turn twice."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

import httpx

from tether_common.messages.gateway import ErrorEvent, ModelEvent
from tether_gateway.providers.http import Upstream, UpstreamError, bad_response, transport_error
from tether_gateway.settings import GatewaySettings

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait; `sleep` and `jitter` are swappable for tests."""

    retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    sleep: Sleep = asyncio.sleep
    jitter: Callable[[], float] = random.random

    @classmethod
    def from_settings(
        cls, settings: GatewaySettings, *, sleep: Sleep = asyncio.sleep
    ) -> RetryPolicy:
        return cls(
            retries=settings.retry_attempts,
            base_delay_s=settings.retry_base_delay_s,
            max_delay_s=settings.retry_max_delay_s,
            sleep=sleep,
        )

    def delay(self, retry: int, retry_after: float | None) -> float | None:
        """Seconds before retry number `retry` (from 0), or None when the provider asks
        for a longer wait than we allow (the error then goes to the brain at once)."""
        if retry_after is not None:
            if retry_after > self.max_delay_s:
                return None
            # A little jitter on top, so replicas told the same moment do not stampede.
            return retry_after + self.jitter() * self.base_delay_s
        ceiling = min(self.max_delay_s, self.base_delay_s * 2.0**retry)
        return ceiling / 2 + self.jitter() * ceiling / 2


Attempt = Callable[[], AsyncGenerator[ModelEvent, None]]


async def with_retries(
    upstream: Upstream, policy: RetryPolicy, attempt: Attempt
) -> AsyncGenerator[ModelEvent, None]:
    """Run `attempt` until it succeeds, fails for good, or has emitted anything; every
    failure ends as one `error` event with the secrets redacted."""
    retry = 0
    while True:
        emitted = False
        try:
            # `aclosing`: when our consumer closes us, the attempt (and its HTTP stream)
            # closes now, not whenever the garbage collector finalizes it.
            async with aclosing(attempt()) as events:
                async for event in events:
                    emitted = True
                    yield event
            return
        except (UpstreamError, httpx.HTTPError) as exc:
            error = _as_upstream(upstream, exc)
        except (AttributeError, TypeError, KeyError):
            # A stream item of the wrong shape (a list where the API documents an
            # object): the provider's fault, so an answer for the brain, not a crash.
            log.warning(
                "%s sent a stream item of an unexpected shape", upstream.provider, exc_info=True
            )
            error = bad_response(upstream.provider, "a stream item has an unexpected shape")
        wait = _wait_before_retry(policy, retry, error, emitted)
        if wait is None:
            yield ErrorEvent(
                code=error.code, retryable=error.retryable, message=upstream.redact(error.message)
            )
            return
        log.info(
            "%s: %s, retry %d of %d in %.2fs",
            upstream.provider,
            error.code,
            retry + 1,
            policy.retries,
            wait,
        )
        retry += 1
        await policy.sleep(wait)


def _as_upstream(upstream: Upstream, exc: UpstreamError | httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, UpstreamError):
        return exc
    return transport_error(upstream.provider, exc, upstream.inactivity_timeout_s)


def _wait_before_retry(
    policy: RetryPolicy, retry: int, error: UpstreamError, emitted: bool
) -> float | None:
    if emitted or not error.retry_here or retry >= policy.retries:
        return None
    return policy.delay(retry, error.retry_after)
