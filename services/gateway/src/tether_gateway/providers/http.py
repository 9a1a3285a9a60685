"""The HTTP side every provider shares: opening a streamed POST, turning statuses and
transport failures into `UpstreamError`s (codes, retryability, `Retry-After`), reading
Server-Sent Events and newline-delimited JSON, and keeping API keys out of messages.

Error codes (all carried to the brain as `error` events):

    provider_rate_limited   429                       retryable, retried here
    provider_unavailable    5xx, 529, overloaded      retryable, retried here
    provider_unreachable    connect failure           retryable, retried here
    provider_disconnected   connection lost / cut     retryable, retried here before output
    provider_timeout        silent past the timeout   retryable, left to the brain
    provider_auth           401, 403                  not retryable
    provider_bad_request    other 4xx                 not retryable
    provider_bad_response   a body we cannot read     not retryable
    provider_error          an error the stream named not retryable unless it says so
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError
from pydantic import SecretStr

from tether_common.errors import ErrorCode, ProviderError

MAX_DETAIL_BYTES = 4096
MAX_DETAIL_CHARS = 300
REDACTED = "[redacted]"


class UpstreamError(ProviderError):
    """A provider failure; `retry_here` says whether the gateway itself may try again."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        retryable: bool,
        retry_here: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, retryable=retryable)
        self.retry_here = retry_here
        self.retry_after = retry_after


def status_error(
    provider: str, status: int, detail: str, retry_after: float | None = None
) -> UpstreamError:
    """The error for an HTTP status the provider answered."""
    message = f"{provider} answered HTTP {status}" + (f": {detail}" if detail else "")
    if status == 429:
        return UpstreamError(
            message,
            code=ErrorCode.PROVIDER_RATE_LIMITED,
            retryable=True,
            retry_here=True,
            retry_after=retry_after,
        )
    if status >= 500:
        return UpstreamError(
            message,
            code=ErrorCode.PROVIDER_UNAVAILABLE,
            retryable=True,
            retry_here=True,
            retry_after=retry_after,
        )
    if status == 408:
        return UpstreamError(message, code=ErrorCode.PROVIDER_TIMEOUT, retryable=True)
    if status in (401, 403):
        return UpstreamError(message, code=ErrorCode.PROVIDER_AUTH, retryable=False)
    return UpstreamError(message, code=ErrorCode.PROVIDER_BAD_REQUEST, retryable=False)


def transport_error(provider: str, exc: httpx.HTTPError, timeout_s: float) -> UpstreamError:
    """The error for a failure below HTTP: no connection, silence, a cut stream, a body
    that is not the event stream asked for."""
    if isinstance(exc, SSEError):
        return bad_response(provider, str(exc))
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return UpstreamError(
            f"cannot connect to {provider}: {type(exc).__name__}",
            code=ErrorCode.PROVIDER_UNREACHABLE,
            retryable=True,
            retry_here=True,
        )
    if isinstance(exc, httpx.TimeoutException):
        # Not retried here: another silent attempt would cost the whole timeout again.
        return UpstreamError(
            f"{provider} sent nothing for {timeout_s:g}s; the stream was cut",
            code=ErrorCode.PROVIDER_TIMEOUT,
            retryable=True,
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return disconnected(provider, type(exc).__name__)
    return UpstreamError(
        f"{provider} request failed: {type(exc).__name__}",
        code=ErrorCode.PROVIDER_ERROR,
        retryable=False,
    )


def disconnected(provider: str, why: str) -> UpstreamError:
    return UpstreamError(
        f"{provider} connection dropped mid-stream ({why})",
        code=ErrorCode.PROVIDER_DISCONNECTED,
        retryable=True,
        retry_here=True,
    )


def bad_response(provider: str, why: str) -> UpstreamError:
    return UpstreamError(
        f"{provider} sent a response we cannot read: {why}",
        code=ErrorCode.PROVIDER_BAD_RESPONSE,
        retryable=False,
    )


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" dates parse naive; HTTP dates are always UTC
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def error_detail(body: bytes) -> str:
    """The provider's own words from an error body, short: `error.message`, `error`, or text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:MAX_DETAIL_CHARS]
    found: Any = data
    if isinstance(found, dict) and "error" in found:
        found = found["error"]
    if isinstance(found, dict):
        found = found.get("message") or found.get("type") or json.dumps(found)
    return str(found)[:MAX_DETAIL_CHARS]


def load_object(provider: str, text: str) -> dict[str, Any]:
    """One JSON object from the stream, or `provider_bad_response`."""
    try:
        data = json.loads(text)
    except ValueError:
        raise bad_response(provider, "a stream item is not JSON") from None
    if not isinstance(data, dict):
        raise bad_response(provider, "a stream item is not a JSON object")
    return data


async def sse_events(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    """The events of a `text/event-stream` body, read by `httpx-sse` (WHATWG HTML
    §9.2.6): an event cut off by the end of the body is dropped, and an event with no
    data is not dispatched, as the specification says. A body of another content type
    raises `SSEError`, which `transport_error` reports as `provider_bad_response`."""
    async with aclosing(EventSource(response).aiter_sse()) as events:
        async for event in events:
            if event.data:
                yield event


async def json_lines(provider: str, response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The objects of a newline-delimited JSON body."""
    async for line in response.aiter_lines():
        if line.strip():
            yield load_object(provider, line)


# What httpx's `json=` writes: compact, UTF-8, no NaN (which no provider reads).
JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_json(body: Mapping[str, Any]) -> bytes:
    return JSON_ENCODER.encode(dict(body)).encode()


@dataclass(frozen=True, slots=True)
class Upstream:
    """One provider's HTTP endpoint: shared client, timeouts, and the secrets to redact."""

    provider: str
    client: httpx.AsyncClient
    connect_timeout_s: float
    inactivity_timeout_s: float
    secrets: tuple[SecretStr, ...] = field(default=())

    @property
    def timeout(self) -> httpx.Timeout:
        # httpx's read timeout bounds each wait for bytes, which is exactly inactivity.
        return httpx.Timeout(
            self.inactivity_timeout_s,
            connect=self.connect_timeout_s,
            pool=self.connect_timeout_s,
        )

    @asynccontextmanager
    async def post_stream(
        self, url: str, body: Mapping[str, Any] | bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[httpx.Response]:
        """POST `body` (an object, or JSON already encoded: `bodies.spliced`) and hold the
        streamed response open; a status ≥ 400 raises.

        Leaving the block (also by `aclose()` of the generator using it) closes the
        connection at once, so a cancelled generation stops costing tokens."""
        content = body if isinstance(body, bytes) else encode_json(body)
        async with self.client.stream(
            "POST",
            url,
            content=content,
            headers={"content-type": "application/json", **headers},
            timeout=self.timeout,
        ) as response:
            if response.status_code >= 400:
                raise await self._status_error(response)
            yield response

    async def _status_error(self, response: httpx.Response) -> UpstreamError:
        body = b""
        async for piece in response.aiter_bytes():
            body += piece
            if len(body) >= MAX_DETAIL_BYTES:
                break
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        return status_error(self.provider, response.status_code, error_detail(body), retry_after)

    def redact(self, text: str) -> str:
        """`text` with every configured secret replaced; providers echo keys in 401 bodies."""
        for secret in self.secrets:
            value = secret.get_secret_value()
            if value:
                text = text.replace(value, REDACTED)
        return text
