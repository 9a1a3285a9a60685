"""The shared HTTP pieces: Retry-After, back-off, error details, the SSE reader."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from tether_common.messages.gateway import ChatMessage, ErrorEvent, GenerateRequest
from tether_gateway.providers import OpenAIProvider
from tether_gateway.providers.http import (
    error_detail,
    parse_retry_after,
    sse_events,
    status_error,
)
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, RecordingSleep, Reply, collect

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
EVENT_STREAM = {"content-type": "text/event-stream; charset=utf-8"}


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("-3", 0.0),
        ("Sun, 01 Jun 2025 12:00:30 GMT", 30.0),
        ("Sun, 01 Jun 2025 11:00:00 GMT", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_reads_seconds_and_http_dates(
    header: str | None, seconds: float | None
) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


def hi() -> GenerateRequest:
    return GenerateRequest(
        run_id="r", provider="openai", model="m", messages=[ChatMessage(role="user", content="hi")]
    )


async def test_back_off_doubles_with_jitter_and_is_capped(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    # Each wait is drawn from the upper half of base * 2**n, capped at the maximum.
    tuned = settings.model_copy(
        update={"retry_attempts": 4, "retry_base_delay_s": 1.0, "retry_max_delay_s": 5.0}
    )
    failing = Reply(status=500, pieces=[b'{"error": {"message": "boom"}}'])
    for _ in range(20):
        sleep = RecordingSleep()
        upstream.queue(*[failing] * 5)
        events = await collect(OpenAIProvider(tuned, client, sleep=sleep).generate(hi()))
        assert [e.kind for e in events] == ["error"]
        assert len(sleep.delays) == 4  # the fifth failure is reported, not waited on
        for delay, (low, high) in zip(
            sleep.delays, [(0.5, 1), (1, 2), (2, 4), (2.5, 5)], strict=True
        ):
            assert low <= delay <= high


@pytest.mark.parametrize(("header", "low", "high"), [("3", 3.0, 3.2), ("0", 0.0, 0.2)])
async def test_retry_after_is_honoured_with_a_little_jitter(
    upstream: FakeUpstream,
    client: httpx.AsyncClient,
    settings: GatewaySettings,
    header: str,
    low: float,
    high: float,
) -> None:
    tuned = settings.model_copy(update={"retry_base_delay_s": 0.2, "retry_max_delay_s": 10.0})
    limited = Reply(status=429, headers={"retry-after": header}, pieces=[b"slow down"])
    upstream.queue(limited, limited, limited)
    sleep = RecordingSleep()
    await collect(OpenAIProvider(tuned, client, sleep=sleep).generate(hi()))
    assert len(sleep.delays) == 2
    assert all(low <= delay <= high for delay in sleep.delays)


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (400, "provider_bad_request", False),
        (401, "provider_auth", False),
        (403, "provider_auth", False),
        (404, "provider_bad_request", False),
        (408, "provider_timeout", True),
        (429, "provider_rate_limited", True),
        (500, "provider_unavailable", True),
        (529, "provider_unavailable", True),
    ],
)
def test_statuses_map_to_codes(status: int, code: str, retryable: bool) -> None:
    error = status_error("x", status, "detail")
    assert (error.code, error.retryable) == (code, retryable)


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"error": {"message": "Bad key", "type": "auth"}}', "Bad key"),
        (b'{"type": "error", "error": {"type": "overloaded_error"}}', "overloaded_error"),
        (b'{"error": "model not found"}', "model not found"),
        (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (b"", ""),
    ],
)
def test_error_details_take_the_providers_own_words(body: bytes, detail: str) -> None:
    assert error_detail(body) == detail


async def test_the_sse_reader_follows_the_specification() -> None:
    body = (
        b": a comment\r\n"
        b"event: first\r\ndata: line one\r\ndata: line two\r\n\r\n"
        b"data:no space\n\n"
        b"id: 3\nretry: 10\n\n"
        b"data: cut off at the end"
    )
    response = httpx.Response(200, content=body, headers=EVENT_STREAM)
    events = [(event.event, event.data) async for event in sse_events(response)]
    assert events == [("first", "line one\nline two"), ("message", "no space")]


async def test_a_body_that_is_not_an_event_stream_is_a_bad_response(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    # A proxy answering 200 with its own page instead of the provider's stream.
    page = Reply(pieces=[b"<html>login</html>"], headers={"content-type": "text/html"})
    upstream.queue(page)
    request = GenerateRequest(
        run_id="r", provider="openai", model="m", messages=[ChatMessage(role="user", content="hi")]
    )
    events = await collect(OpenAIProvider(settings, client).generate(request))
    assert [(e.kind, getattr(e, "code", None)) for e in events] == [
        ("error", "provider_bad_response")
    ]
    assert "text/event-stream" in getattr(events[0], "message", "")


async def test_a_retry_after_longer_than_allowed_is_reported_at_once(
    upstream: FakeUpstream,
    client: httpx.AsyncClient,
    settings: GatewaySettings,
    sleep: RecordingSleep,
) -> None:
    upstream.queue(Reply(status=429, headers={"retry-after": "3600"}, pieces=[b"slow down"]))
    request = GenerateRequest(
        run_id="r", provider="openai", model="m", messages=[ChatMessage(role="user", content="hi")]
    )
    events = await collect(OpenAIProvider(settings, client, sleep=sleep).generate(request))
    assert events == [
        ErrorEvent(
            code="provider_rate_limited",
            retryable=True,
            message="openai answered HTTP 429: slow down",
        )
    ]
    assert sleep.delays == []
    assert len(upstream.received) == 1
