"""The base of every wire model, the error reply, and the one decoder that classifies bad bodies."""

from __future__ import annotations

import json
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from tether_common.errors import MessageError, TetherError, from_wire

M = TypeVar("M", bound=BaseModel)

CURRENT_VERSION = 1


class WireModel(BaseModel):
    """A message body: strict about unknown fields, versioned."""

    model_config = ConfigDict(extra="forbid")
    supported_versions: ClassVar[frozenset[int]] = frozenset({CURRENT_VERSION})

    version: int = CURRENT_VERSION


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    retryable: bool = False


class ErrorReply(WireModel):
    """What a receiver answers instead of raising."""

    error: ErrorDetail

    @classmethod
    def of(cls, exc: TetherError) -> ErrorReply:
        return cls(error=ErrorDetail(code=exc.code, message=exc.message, retryable=exc.retryable))


def encode(body: BaseModel) -> bytes:
    return body.model_dump_json(exclude_none=False).encode()


def _load_object(data: bytes) -> dict[str, Any]:
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MessageError(f"body is not JSON: {exc}", code="not_json") from None
    if not isinstance(raw, dict):
        raise MessageError("body must be a JSON object", code="invalid_message")
    return raw


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "<body>"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def decode(model: type[M], data: bytes) -> M:
    """Parse `data` as `model`, raising `MessageError` with code `not_json`,
    `unsupported_version` or `invalid_message`."""
    raw = _load_object(data)
    supported = getattr(model, "supported_versions", None)
    version = raw.get("version", CURRENT_VERSION)
    if supported is not None and version not in supported:
        raise MessageError(
            f"{model.__name__} version {version!r} is not supported "
            f"(supported: {sorted(supported)})",
            code="unsupported_version",
        )
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise MessageError(
            f"{model.__name__} does not validate: {_summarise(exc)}", code="invalid_message"
        ) from None


def decode_reply(model: type[M], data: bytes) -> M:
    """Decode a reply; an `ErrorReply` becomes the matching `TetherError`."""
    raw = _load_object(data)
    if set(raw) <= {"version", "error"} and "error" in raw:
        err = ErrorReply.model_validate(raw).error
        raise from_wire(err.code, err.message, retryable=err.retryable)
    return decode(model, data)
