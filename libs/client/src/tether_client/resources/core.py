"""The client's core: the HTTP connection with its bearer token, one request and its
answer read as the route's model, and a refusal raised as the `TetherError` of its code.
Every resource's methods (the sibling modules) are built on `ClientCore`.

Errors: every refusal raises the `tether_common.errors` class of its wire code, with
`code`, `message`, `retryable` and the HTTP `status`; a body the client cannot read as the
route's model raises `MessageError` (`invalid_message`), never a half-read value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from tether_common.errors import (
    AuthError,
    ConflictError,
    ErrorCode,
    MessageError,
    NotFoundError,
    RemoteError,
    SafetyError,
    TetherError,
    from_wire,
)

__all__ = [
    "DEFAULT_API_URL",
    "ClientCore",
    "given",
    "parse",
    "raise_for_error",
    "tenant_param",
    "to_wire",
]

DEFAULT_API_URL = "http://127.0.0.1:8700"

log = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

# A code the wire table does not know is classed by its HTTP status, so a caller (the
# CLI's exit codes) can still tell a refusal from a missing thing from a conflict.
_BY_STATUS: dict[int, type[TetherError]] = {
    400: MessageError,
    401: AuthError,
    403: SafetyError,
    404: NotFoundError,
    409: ConflictError,
    410: NotFoundError,
    412: ConflictError,
    422: MessageError,
}


def raise_for_error(response: httpx.Response) -> None:
    """Turn an `{"error": {code, message}}` body into the matching `TetherError`, its
    `status` the response's."""
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        # The server's word on this one error; unsaid, the code's row in errors.CODES.
        retryable = error.get("retryable") if isinstance(error.get("retryable"), bool) else None
        retry_after = _retry_after(error.get("retry_after"), response)
        details = error.get("details") if isinstance(error.get("details"), dict) else None
    except (ValueError, KeyError, TypeError):
        cls = _BY_STATUS.get(response.status_code, TetherError)
        found: TetherError = cls(f"HTTP {response.status_code}: {response.text[:500]}")
    else:
        found = from_wire(
            code, message, retryable=retryable, retry_after=retry_after, details=details
        )
        if isinstance(found, RemoteError) and response.status_code in _BY_STATUS:
            found = _BY_STATUS[response.status_code](
                message, code=code, retryable=retryable, retry_after=retry_after, details=details
            )
    found.status = response.status_code
    raise found from None


def _retry_after(said: Any, response: httpx.Response) -> float | None:
    """The body's `retry_after`, else the `Retry-After` header's seconds (None: neither)."""
    if isinstance(said, int | float) and not isinstance(said, bool):
        return float(said)
    header = response.headers.get("retry-after", "").strip()
    return float(header) if header.isdigit() else None


def parse(validate: Callable[[bytes], T], response: httpx.Response) -> T:
    """The body as the route's model; a body that is not one is a `MessageError`."""
    try:
        return validate(response.content)
    except ValidationError as exc:
        where = f"{response.request.method} {response.request.url.path}"
        log.warning("unreadable answer to %s: %s", where, exc.errors()[:3])
        error = MessageError(
            f"the answer to {where} is not what the route promises: {exc.errors()[:3]}",
            code=ErrorCode.INVALID_MESSAGE,
        )
        error.status = response.status_code
        raise error from None


def tenant_param(tenant: str | None) -> dict[str, str | int] | None:
    """The `?tenant=` of a tenant's resource (an id is unique within its tenant)."""
    return None if tenant is None else {"tenant": tenant}


def given(**params: str | int | None) -> dict[str, str | int]:
    """The query parameters that were given."""
    return {name: value for name, value in params.items() if value is not None}


def to_wire(model: BaseModel) -> dict[str, Any]:
    """A request model as its JSON body (or query): None fields and `version` left out."""
    return model.model_dump(mode="json", exclude_none=True, exclude={"version"})


class ClientCore:
    """The brain's API; `token` (a principal's bearer token) goes with every request:
    none given, `TETHER_TOKEN` from the environment; `""` sends none (anonymous).
    `transport`: an httpx transport for tests (`httpx.MockTransport`)."""

    def __init__(
        self,
        base_url: str = DEFAULT_API_URL,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if token is None:
            token = os.environ.get("TETHER_TOKEN", "").strip()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        body: BaseModel | None = None,
        *,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        content = to_wire(body) if body is not None else None
        response = await self._http.request(
            method, path, json=content, params=params, headers=headers
        )
        raise_for_error(response)
        return response

    async def _call(
        self,
        model: type[M],
        method: str,
        path: str,
        body: BaseModel | None = None,
        *,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> M:
        response = await self._send(method, path, body, params=params, headers=headers)
        return parse(model.model_validate_json, response)
