"""What every service's HTTP side shares: `/healthz`, `/readyz`, `/metrics`, the error body
`{"error": {"code", "message"}}` for every failure (its status, and the retryability a
client reads back, from `tether_common.errors.CODES`), the request body limits, the shapes
of path ids and `Last-Event-ID`, bearer-token checks, and serving under uvicorn with
graceful shutdown."""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import uvicorn
from fastapi import APIRouter, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether_common.errors import AuthError, ErrorCode, MessageError, TetherError, spec_for
from tether_common.messages.base import ID_PATTERN
from tether_common.metrics import http_errors
from tether_common.telemetry import PROMETHEUS

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[dict[str, bool]]]

# The largest request body any route reads, unless the route declares its own with
# `openapi_extra=body_limit(n)`. Enforced by `BodyLimit` while the body streams in.
DEFAULT_BODY_LIMIT = 1024 * 1024
BODY_LIMIT_KEY = "x-max-body-bytes"
# Routes that carry up to 200,000 characters of text (prompts, messages, skills): JSON
# may escape each as a surrogate pair, `\ud83d\ude00`, 12 bytes a character.
TEXT_BODY_LIMIT = 3 * 1024 * 1024

# A path parameter that names a run, approval, output, token or skill.
PathId = Annotated[str, Path(pattern=ID_PATTERN, max_length=200)]

# At most 18 digits: every such id fits PostgreSQL's bigint.
_EVENT_ID = re.compile(r"[0-9]{1,18}")


def parse_last_event_id(value: str | None) -> int | None:
    """An SSE `Last-Event-ID` (absent or blank: None), or `MessageError`."""
    if value is None or not value.strip():
        return None
    if not _EVENT_ID.fullmatch(value.strip()):
        raise MessageError(
            "Last-Event-ID must be the decimal id of an event this stream sent (at most 18 digits)",
            code=ErrorCode.INVALID_LAST_EVENT_ID,
        )
    return int(value)


class ErrorInfo(BaseModel):
    code: str = Field(description="stable, machine-readable (tether_common.errors.ErrorCode)")
    message: str
    retry_after: float | None = Field(
        default=None, description="seconds until the same request may succeed (also `Retry-After`)"
    )
    details: dict[str, Any] | None = Field(
        default=None, description="what more the error says, e.g. which quota refused"
    )


class ErrorBody(BaseModel):
    """The body of every HTTP error, for the OpenAPI document (`error_responses`)."""

    error: ErrorInfo


def error_responses(described: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """A route's `responses=`: each status it may answer with the error body, and why."""
    return {status: {"model": ErrorBody, "description": why} for status, why in described.items()}


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    retry_after: float | None = None,
    details: dict[str, Any] | None = None,
) -> JSONResponse:
    """The error body; with `retry_after`, also HTTP's `Retry-After` (whole seconds, up)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if retry_after is not None:
        error["retry_after"] = retry_after
    if details is not None:
        error["details"] = details
    response = JSONResponse({"error": error}, status_code=status)
    if retry_after is not None:
        response.headers["Retry-After"] = str(max(math.ceil(retry_after), 0))
    return response


def status_for(exc: TetherError) -> int:
    """The HTTP status of `exc`: its code's row in `tether_common.errors.CODES`."""
    return spec_for(exc).status


# The framework's refusals (routing, methods, body size) by status; others: `http_error`.
_HTTP_CODES = {
    400: ErrorCode.BAD_REQUEST,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.BODY_TOO_LARGE,
}


def install_error_handlers(app: FastAPI, service: str) -> None:
    """Every error, ours or the framework's, leaves as `{"error": {code, message}}`."""

    async def on_tether(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, TetherError)
        http_errors.add(1, {"service": service, "code": exc.code})
        status = status_for(exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        response = error_response(
            status, exc.code, exc.message, retry_after=exc.retry_after, details=exc.details
        )
        if headers:
            response.headers.update(headers)
        return response

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        http_errors.add(1, {"service": service, "code": ErrorCode.INVALID_REQUEST})
        parts = [
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()[:5]
        ]
        return error_response(422, ErrorCode.INVALID_REQUEST, "; ".join(parts))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code, ErrorCode.HTTP_ERROR)
        http_errors.add(1, {"service": service, "code": code})
        return error_response(exc.status_code, code, str(exc.detail))

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        http_errors.add(1, {"service": service, "code": ErrorCode.INTERNAL})
        return error_response(500, ErrorCode.INTERNAL, "internal error; see the service log")

    app.add_exception_handler(TetherError, on_tether)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_other)


def body_limit(max_bytes: int) -> dict[str, Any]:
    """A route's own body limit, for its decorator (`openapi_extra=`); shown in OpenAPI."""
    return {BODY_LIMIT_KEY: max_bytes}


def _route_limit(scope: Scope, default: int) -> int:
    # The router has matched by the time a handler reads the body.
    extra = getattr(scope.get("route"), "openapi_extra", None) or {}
    return int(extra.get(BODY_LIMIT_KEY, default))


def _too_large(limit: int) -> str:
    return f"the request body is larger than this route accepts ({limit} bytes)"


class BodyLimit:
    """Cut every request body at its route's limit while it streams in, answering the
    structured 413: at most the limit plus one chunk is ever held, with or without a
    Content-Length. (Starlette's own `max_body_size` answers plain text.)"""

    def __init__(self, app: ASGIApp, default: int) -> None:
        self.app, self.default = app, default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        received = 0

        async def limited() -> Message:
            nonlocal received
            limit = _route_limit(scope, self.default)
            if declared.isdigit() and int(declared) > limit:
                raise StarletteHTTPException(413, _too_large(limit))
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:  # handled like any HTTPException: the structured 413
                raise StarletteHTTPException(413, _too_large(limit))
            return message

        await self.app(scope, limited, send)


def health_router(ready: ReadinessCheck) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "alive"}

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        checks = await ready()
        ok = all(checks.values())
        return JSONResponse(
            {"status": "ready" if ok else "not_ready", "checks": checks},
            status_code=200 if ok else 503,
        )

    return router


def metrics_router() -> APIRouter:
    """`/metrics` in Prometheus' text format. Not behind a token, like the health routes:
    it holds only counts and timings whose attributes are the few each instrument's spec
    allows (`telemetry.attribute_views`), never an id, tenant, principal or argument."""
    router = APIRouter(tags=["health"])

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
        summary="Prometheus metrics (text exposition format)",
    )
    async def metrics() -> Response:
        return Response(generate_latest(PROMETHEUS), media_type=CONTENT_TYPE_LATEST)

    return router


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def operator_token_hashes(token: str | None) -> frozenset[str]:
    """The accepted operator tokens, hashed (no token configured: nothing is accepted)."""
    return frozenset({hash_token(token)} if token else set())


def check_bearer(authorization: str | None, token_hashes: frozenset[str]) -> str:
    """Return the hash of a valid bearer token, or raise `AuthError`."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise AuthError("a bearer token is required (Authorization: Bearer <token>)")
    digest = hash_token(authorization[7:].strip())
    for known in token_hashes:
        if hmac.compare_digest(digest, known):
            return known
    raise AuthError("the bearer token is not valid")


async def serve_http(app: FastAPI, host: str, port: int) -> None:
    """Run `app` until SIGTERM/SIGINT; uvicorn drives the lifespan (start-up, drain)."""
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False, lifespan="on"
    )
    await uvicorn.Server(config).serve()
