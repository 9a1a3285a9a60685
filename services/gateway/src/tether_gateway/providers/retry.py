"""Retrying a generation: the common back-off (`tether_common.retrying`) honouring
`Retry-After`, and only until an attempt's first event, so nothing the consumer has seen
is ever sent again and the brain never sees a turn twice."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass

import httpx

from tether_common.messages.gateway import ErrorEvent, ModelEvent
from tether_common.retrying import Policy, Sleep, retrying
from tether_gateway.providers.http import Upstream, UpstreamError, bad_response, transport_error
from tether_gateway.settings import GatewaySettings

log = logging.getLogger(__name__)

Attempt = Callable[[], AsyncGenerator[ModelEvent, None]]
# What one attempt may raise besides an `UpstreamError`, made one (`_as_upstream`): the
# transport's errors, and a stream item of the wrong shape (a list where the API
# documents an object).
OTHER_FAILURES = (httpx.HTTPError, AttributeError, TypeError, KeyError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait (`retries` after the first try, waits from
    `base_delay_s` doubling to `max_delay_s`); `sleep` is swappable for tests."""

    retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    sleep: Sleep = asyncio.sleep

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

    def policy(self, provider: str) -> Policy:
        return Policy(provider, self.base_delay_s, self.max_delay_s, attempts=self.retries + 1)

    def retries_on(self, failure: BaseException) -> bool:
        """Retried here: an error the gateway may retry itself, unless the provider asks
        for a longer wait than we allow (the error then goes to the brain at once)."""
        if not isinstance(failure, UpstreamError) or not failure.retry_here:
            return False
        return failure.retry_after is None or failure.retry_after <= self.max_delay_s


async def with_retries(
    upstream: Upstream, policy: RetryPolicy, attempt: Attempt
) -> AsyncGenerator[ModelEvent, None]:
    """Run `attempt` until it succeeds, fails for good, or has emitted anything; every
    failure ends as one `error` event with the secrets redacted."""
    try:
        opened = await _opened(upstream, policy, attempt)
    except UpstreamError as error:
        yield _reported(upstream, error)
        return
    if opened is None:
        return
    first, events = opened
    # `aclosing`: when our consumer closes us, the attempt (and its HTTP stream) closes
    # now, not whenever the garbage collector finalizes it.
    async with aclosing(events):
        try:
            yield first
            async for event in events:
                yield event
        except (UpstreamError, *OTHER_FAILURES) as exc:
            yield _reported(upstream, _as_upstream(upstream, exc))


async def _opened(
    upstream: Upstream, policy: RetryPolicy, attempt: Attempt
) -> tuple[ModelEvent, AsyncGenerator[ModelEvent, None]] | None:
    """The first event of the first attempt that has one, with that attempt still open
    for the rest; None when an attempt ends without any. Only this part is retried."""
    async for trial in retrying(
        policy.policy(upstream.provider),
        on=policy.retries_on,
        sleep=policy.sleep,
        asked=_retry_after,
        level=logging.INFO,
    ):
        with trial:
            events = attempt()
            try:
                return await anext(events), events
            except StopAsyncIteration:
                return None
            except OTHER_FAILURES as exc:
                raise _as_upstream(upstream, exc) from exc
    raise AssertionError("unreachable: the last failure is raised")


def _retry_after(failure: BaseException) -> float | None:
    return failure.retry_after if isinstance(failure, UpstreamError) else None


def _as_upstream(upstream: Upstream, exc: Exception) -> UpstreamError:
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, httpx.HTTPError):
        return transport_error(upstream.provider, exc, upstream.inactivity_timeout_s)
    # A stream item of the wrong shape: the provider's fault, so an answer for the brain,
    # not a crash.
    log.warning("%s sent a stream item of an unexpected shape", upstream.provider, exc_info=exc)
    return bad_response(upstream.provider, "a stream item has an unexpected shape")


def _reported(upstream: Upstream, error: UpstreamError) -> ErrorEvent:
    return ErrorEvent(
        code=error.code, retryable=error.retryable, message=upstream.redact(error.message)
    )
