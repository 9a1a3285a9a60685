"""A face's error answers in the shape its clients read: the app's own answer to an
error (logged and counted by `tether_common.http`, status from `CODES`), its
`{"error": {code, message}}` rewritten by the face (OpenAI's error body, a JSON-RPC error).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

__all__ = ["Shape", "ShapedRoute", "reshaped"]

# (status, Tether's code, message) -> the body the face's clients read.
Shape = Callable[[int, str, str], dict[str, Any]]


async def reshaped(request: Request, exc: Exception, shape: Shape) -> Response:
    """The app's own answer to `exc`, its body rewritten by `shape` (re-raised if the app
    has no answer for it; left as is if its body is not Tether's error body)."""
    handlers = request.app.exception_handlers
    handler = next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)
    if handler is None:
        raise exc
    response: Response = await handler(request, exc)
    try:
        error = json.loads(bytes(response.body))["error"]
        body = shape(response.status_code, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return response
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return JSONResponse(body, status_code=response.status_code, headers=headers)


class ShapedRoute(APIRoute):
    """A route whose every error leaves in `shape`'s body (validation and auth included:
    the body and the bearer token are read inside the route's handler)."""

    def shape(self, status: int, code: str, message: str) -> dict[str, Any]:
        raise NotImplementedError  # each face's route says its own

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        shape = self.shape

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # answered as the app answers it
                return await reshaped(request, exc, shape)

        return guarded
