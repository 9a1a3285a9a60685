"""The base of every wire model, the error reply, and the one decoder that classifies bad bodies.

Requests (what a client or another service asks for, over HTTP or the bus) derive from
`RequestModel`: every string in them, however deeply nested, is text that PostgreSQL and
JSON can carry (no NUL, no lone surrogate), and every float is finite. Checked once here
at the edge, so no handler meets such a value and no database call fails on one.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, ClassVar, NoReturn, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ValidationError,
    model_validator,
)

from tether_common.errors import ErrorCode, MessageError, TetherError, from_wire

M = TypeVar("M", bound=BaseModel)

CURRENT_VERSION = 1


class WireModel(BaseModel):
    """A message body: strict about unknown fields, versioned."""

    model_config = ConfigDict(extra="forbid")
    supported_versions: ClassVar[frozenset[int]] = frozenset({CURRENT_VERSION})

    version: int = CURRENT_VERSION


# What a path or an id field may hold: the ids Tether makes (`run_…`, `apr_…`, `out_…`),
# agent and skill names, and the test ids used over the bus; nothing that needs escaping.
ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,199}$"
# The largest integer a request may carry where PostgreSQL keeps it (bigint).
MAX_BIGINT = 2**63 - 1


def text_problem(text: str, *, allow_nul: bool = False) -> str | None:
    """Why PostgreSQL or strict JSON could not carry `text`, or None."""
    if not allow_nul and "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate, which is not valid Unicode"
    return None


def _carryable_text(text: str) -> str:
    if (problem := text_problem(text)) is not None:
        raise ValueError(problem)
    return text


# A string field that must be storable; `RequestModel` checks every string anyway, so this
# is for models that are not requests (and for FastAPI query parameters).
CarryableText = Annotated[str, AfterValidator(_carryable_text)]


# Deeper JSON than this is refused: nothing Tether accepts nests so far, and every later
# walk over the value (serialising, hashing, storing) then stays far from Python's
# recursion limit.
MAX_DEPTH = 64


def _children(value: Any, where: str) -> list[tuple[Any, str]]:
    if isinstance(value, BaseModel):
        return [(item, f"{where}.{name}" if where else name) for name, item in value]
    if isinstance(value, dict):
        keys = [(key, f"{where} (a key)") for key in value]
        return keys + [(item, f"{where}.{key}") for key, item in value.items()]
    if isinstance(value, list | tuple | set | frozenset):
        return [(item, f"{where}.{index}") for index, item in enumerate(value)]
    return []


def _check_leaf(value: Any, where: str, allow_nul: bool) -> None:
    if isinstance(value, str):
        if (problem := text_problem(value, allow_nul=allow_nul)) is not None:
            _refuse(where, problem)
    elif isinstance(value, float) and not math.isfinite(value):
        _refuse(where, "is not a finite number")


def _walk(value: Any, where: str, allow_nul: bool = False) -> None:
    """Check every string and float in `value`, iteratively (no recursion to exhaust)."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        item, at, depth = stack.pop()
        if depth > MAX_DEPTH:
            _refuse(where, f"is nested more than {MAX_DEPTH} levels deep")
        _check_leaf(item, at, allow_nul)
        stack.extend((child, path, depth + 1) for child, path in _children(item, at))


def _refuse(where: str, problem: str) -> NoReturn:
    raise ValueError(f"{where or 'a value'} {problem}")


class RequestModel(BaseModel):
    """A request from outside the service: strings storable, numbers finite (see module)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # Fields that carry content as bytes, never into a text column: NUL is allowed there.
    content_fields: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="after")
    def _carryable(self) -> Self:
        for name, value in self.__dict__.items():
            _walk(value, name, allow_nul=name in self.content_fields)
        return self


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    retryable: bool = False
    # Seconds until the same request may succeed, and what more the error says (its
    # code's own shape, e.g. `quotas.QuotaRefusal`); None: unsaid.
    retry_after: float | None = None
    details: dict[str, Any] | None = None


class WireRequest(WireModel, RequestModel):
    """A versioned request body on the bus or over HTTP."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ErrorReply(WireModel):
    """What a receiver answers instead of raising."""

    error: ErrorDetail

    @classmethod
    def of(cls, exc: TetherError) -> ErrorReply:
        return cls(
            error=ErrorDetail(
                code=exc.code,
                message=exc.message,
                retryable=exc.retryable,
                retry_after=exc.retry_after,
                details=exc.details,
            )
        )


def encode(body: BaseModel) -> bytes:
    return body.model_dump_json(exclude_none=False).encode()


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def loads_strict(data: bytes | str) -> Any:
    """`json.loads` without the NaN/Infinity extension Python accepts by default, and
    with its limit on deep nesting answered as an error rather than a crash."""
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _load_object(data: bytes) -> dict[str, Any]:
    try:
        raw = loads_strict(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MessageError(f"body is not JSON: {exc}", code=ErrorCode.NOT_JSON) from None
    if not isinstance(raw, dict):
        raise MessageError("body must be a JSON object", code=ErrorCode.INVALID_MESSAGE)
    return raw


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "<body>"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


# A body spelling either (even inside a string) takes the classifying path: pydantic's
# JSON parser accepts these constants, which RFC 8259 does not have.
_JSON_CONSTANTS = (b"NaN", b"Infinity")


def _decode_fast(model: type[M], data: bytes) -> M | None:
    """`data` as `model` in one pass of pydantic's own parser, or None: anything it
    refuses (or might judge differently) goes the classifying way, which then gives the
    same answer or the exact error. (The hot path: every message on the bus.)"""
    if any(constant in data for constant in _JSON_CONSTANTS):
        return None
    try:
        body = model.model_validate_json(data)
    except ValidationError:
        return None
    supported = getattr(model, "supported_versions", None)
    if supported is not None and getattr(body, "version", CURRENT_VERSION) not in supported:
        return None
    return body


def decode(model: type[M], data: bytes) -> M:
    """Parse `data` as `model`, raising `MessageError` with code `not_json`,
    `unsupported_version` or `invalid_message`."""
    fast = _decode_fast(model, data)
    return fast if fast is not None else _validate(model, _load_object(data))


def _validate(model: type[M], raw: dict[str, Any]) -> M:
    supported = getattr(model, "supported_versions", None)
    version = raw.get("version", CURRENT_VERSION)
    if supported is not None and version not in supported:
        raise MessageError(
            f"{model.__name__} version {version!r} is not supported "
            f"(supported: {sorted(supported)})",
            code=ErrorCode.UNSUPPORTED_VERSION,
        )
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise MessageError(
            f"{model.__name__} does not validate: {_summarise(exc)}", code=ErrorCode.INVALID_MESSAGE
        ) from None


def decode_reply(model: type[M], data: bytes) -> M:
    """Decode a reply; an `ErrorReply` becomes the matching `TetherError`."""
    if b'"error"' not in data and (fast := _decode_fast(model, data)) is not None:
        return fast  # cannot be an error reply: it names no `error`
    raw = _load_object(data)
    if set(raw) <= {"version", "error"} and "error" in raw:
        err = ErrorReply.model_validate(raw).error
        raise from_wire(
            err.code,
            err.message,
            retryable=err.retryable,
            retry_after=err.retry_after,
            details=err.details,
        )
    return _validate(model, raw)  # parsed once
