"""OpenAI's error body on the face's routes: the app's own error answer (logged and
counted by `tether_common.http`, status from `CODES`), with OpenAI's `type` (from the
status) and `param` added beside Tether's `code` and `message`, so OpenAI's SDKs raise
their matching error class and Tether's clients still read `error.code`."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from tether_brain.faces.openai_wire import ErrorBody
from tether_brain.faces.shaped import ShapedRoute, reshaped

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
        (409, "a kill switch is in force for this tenant or agent (`killed`)"),
        (413, "the body is larger than the route reads (`body_too_large`)"),
        (422, "the body does not validate (`invalid_request`)"),
        (429, "a quota of the tenant or agent is used up (`quota_exceeded`; `Retry-After`)"),
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


def _openai_body(status: int, code: str, message: str) -> dict[str, Any]:
    return {"error": openai_detail(status, code, message)}


async def answered(request: Request, exc: Exception) -> Response:
    """The app's own answer to `exc`, in OpenAI's shape (re-raised if the app has none)."""
    return await reshaped(request, exc, _openai_body)


class OpenAIRoute(ShapedRoute):
    """A route whose every error leaves in OpenAI's shape (validation and auth included:
    the body and the bearer token are read inside the route's handler)."""

    def shape(self, status: int, code: str, message: str) -> dict[str, Any]:
        return _openai_body(status, code, message)


__all__ = ["ERROR_RESPONSES", "OpenAIRoute", "answered", "error_type", "openai_detail"]
