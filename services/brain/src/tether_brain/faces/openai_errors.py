"""OpenAI's error body on the face's routes: the app's own error answer (logged and
counted by `tether_common.http`, status from `CODES`), with OpenAI's `type` (from the
status) and `param` added beside Tether's `code` and `message`, so OpenAI's SDKs raise
their matching error class and Tether's clients still read `error.code`."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from tether_brain.faces.openai_wire import ErrorBody

_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
}
# The statuses the face's routes answer with an error body, for the OpenAPI document.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": what}
    for status, what in (
        (400, "the request is not what the route reads (`bad_request`)"),
        (401, "no valid bearer token (`unauthenticated`, `token_expired`)"),
        (403, "the token may not run this agent, provider or model (`forbidden`)"),
        (404, "no such agent for this caller (`not_found`)"),
        (413, "the body is larger than the route reads (`body_too_large`)"),
        (422, "the body does not validate (`invalid_request`)"),
        (503, "a service the run needs is unavailable (retryable)"),
    )
}


def error_type(status: int) -> str:
    if status >= 500:
        return "api_error"
    return _TYPES.get(status, "invalid_request_error")


def openai_detail(status: int, code: str, message: str) -> dict[str, Any]:
    """One error as OpenAI's SDKs read it (also in a stream's `data: {"error": ...}`)."""
    return {"message": message, "type": error_type(status), "code": code, "param": None}


async def answered(request: Request, exc: Exception) -> Response:
    """The app's own answer to `exc`, reshaped (re-raised if the app has none)."""
    handlers = request.app.exception_handlers
    handler = next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)
    if handler is None:
        raise exc
    response: Response = await handler(request, exc)
    try:
        error = json.loads(bytes(response.body))["error"]
        detail = openai_detail(response.status_code, error["code"], error["message"])
    except (ValueError, KeyError, TypeError):
        return response
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return JSONResponse({"error": detail}, status_code=response.status_code, headers=headers)


class OpenAIRoute(APIRoute):
    """A route whose every error leaves in OpenAI's shape (validation and auth included:
    the body and the bearer token are read inside the route's handler)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # answered as the app answers it
                return await answered(request, exc)

        return guarded


__all__ = ["ERROR_RESPONSES", "OpenAIRoute", "answered", "error_type", "openai_detail"]
