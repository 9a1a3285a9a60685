"""The one exception tree of Tether, and the table from wire codes to classes.

    TetherError                      code: str, message: str, retryable: bool, status: int | None
    ├── ConfigError                  settings that cannot work together
    ├── BusError                     NATS trouble
    │   ├── BusTimeoutError          no reply (or no next streamed message) in time
    │   └── RemoteError              the other side answered a structured error reply
    ├── MessageError                 a body that is not JSON, wrong shape, unknown version
    ├── NotFoundError                a run, approval or output that does not exist (for you)
    ├── ConflictError                a lease, fencing token or state transition lost a race
    ├── StoreError                   PostgreSQL trouble
    ├── ProviderError                a model provider failed (gateway)
    ├── AuthError                    missing or wrong credentials, or a role that may not act
    └── SafetyError                  a hard safety constraint refused an action
        ├── PathDenied               outside the workspace, protected, malformed
        ├── BlockedDestination       a URL or address the URL guard refuses
        └── CommandDenied            a shell command on the deny-list

Every code is an `ErrorCode`, declared once below with its HTTP status, whether trying
again may help, and the class a caller catches (`CODES`). Errors cross the bus as
`ErrorReply(code, message, retryable)` and HTTP as `{"error": {code, message}}` (the
status and retryability being the code's); `from_wire` turns either back into the
matching class, so callers catch by layer whichever side raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar


class ErrorCode(StrEnum):
    """Every error code a service answers (bus replies, HTTP bodies, model `error` events).
    A `StrEnum`, so a member is also the plain string that travels."""

    INTERNAL = "internal"
    # settings
    CONFIG_INVALID = "config_invalid"
    SECRET_FILE = "secret_file"
    DECISION_KEY_MISSING = "decision_key_missing"
    DECISION_KEY_INVALID = "decision_key_invalid"
    # the bus
    BUS_ERROR = "bus_error"
    NOT_CONNECTED = "not_connected"
    NO_RESPONDERS = "no_responders"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    REMOTE_ERROR = "remote_error"
    # bad input
    BAD_MESSAGE = "bad_message"
    NOT_JSON = "not_json"
    INVALID_MESSAGE = "invalid_message"
    UNSUPPORTED_VERSION = "unsupported_version"
    INVALID_REQUEST = "invalid_request"
    INVALID_LAST_EVENT_ID = "invalid_last_event_id"
    INVALID_PATH = "invalid_path"
    INVALID_COLUMN = "invalid_column"
    INVALID_PATTERN = "invalid_pattern"
    PATTERN_BUDGET = "pattern_budget"
    TOO_LARGE = "too_large"
    SKILL_INVALID = "skill_invalid"
    INVALID_GRANT = "invalid_grant"
    WEBHOOK_URL_REFUSED = "webhook_url_refused"
    DELETE_NOT_REMEMBERED = "delete_not_remembered"
    LIMIT_UNENFORCEABLE = "limit_unenforceable"
    AMBIGUOUS_ID = "ambiguous_id"
    # the framework's own refusals
    BAD_REQUEST = "bad_request"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    BODY_TOO_LARGE = "body_too_large"
    HTTP_ERROR = "http_error"
    # missing things
    NOT_FOUND = "not_found"
    EXPIRED = "expired"
    # races and states
    CONFLICT = "conflict"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    VERSION_CONFLICT = "version_conflict"
    AGENT_EXISTS = "agent_exists"
    SKILL_EXISTS = "skill_exists"
    READ_ONLY = "read_only"
    RUN_ENDED = "run_ended"
    ALREADY_DECIDED = "already_decided"
    ALREADY_VOTED = "already_voted"
    WITHDRAWN = "withdrawn"
    NO_OPERATOR = "no_operator"
    THREAD_BUSY = "thread_busy"
    THREAD_BUDGET_SPENT = "thread_budget_spent"
    KILLED = "killed"
    # storage
    STORE_ERROR = "store_error"
    STORE_UNAVAILABLE = "store_unavailable"
    CHUNK_MISSING = "chunk_missing"
    # the runner's staging folder cannot be used: calls are approved without a diff
    STAGING_UNAVAILABLE = "staging_unavailable"
    # model providers (the gateway)
    PROVIDER_ERROR = "provider_error"
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    PROVIDER_UNREACHABLE = "provider_unreachable"
    PROVIDER_DISCONNECTED = "provider_disconnected"
    PROVIDER_TIMEOUT = "provider_timeout"
    PROVIDER_AUTH = "provider_auth"
    PROVIDER_BAD_REQUEST = "provider_bad_request"
    PROVIDER_BAD_RESPONSE = "provider_bad_response"
    PROVIDER_NOT_CONFIGURED = "provider_not_configured"
    SCRIPT_INVALID = "script_invalid"
    SCRIPT_EXHAUSTED = "script_exhausted"
    # who you are
    UNAUTHORIZED = "unauthorized"
    UNAUTHENTICATED = "unauthenticated"
    TOKEN_EXPIRED = "token_expired"
    NO_TOKEN = "no_token"
    FORBIDDEN = "forbidden"
    REQUESTER_CANNOT_APPROVE = "requester_cannot_approve"
    NOT_IN_GROUP = "not_in_group"
    # hard safety constraints
    SAFETY_DENIED = "safety_denied"
    PATH_DENIED = "path_denied"
    NOT_A_FILE = "not_a_file"
    BLOCKED_DESTINATION = "blocked_destination"
    DNS_FAILED = "dns_failed"
    DENY_LISTED = "deny_listed"

    @property
    def spec(self) -> CodeSpec:
        return CODES[self]


def known(code: str) -> ErrorCode | None:
    """`code` as an `ErrorCode`, or None for a code this version does not know."""
    try:
        return ErrorCode(code)
    except ValueError:
        return None


class TetherError(Exception):
    """Base of every Tether error; carries a stable machine-readable `code`. Unless told,
    `retryable` is what the code's row in `CODES` says."""

    default_code: ClassVar[ErrorCode] = ErrorCode.INTERNAL
    # The HTTP status it was answered with, when it crossed HTTP (the client sets it).
    status: int | None = None

    def __init__(
        self, message: str, *, code: str | None = None, retryable: bool | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code or self.default_code
        if retryable is None:
            retryable = (known(self.code) or self.default_code).spec.retryable
        self.retryable = retryable

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ConfigError(TetherError):
    default_code = ErrorCode.CONFIG_INVALID


class BusError(TetherError):
    default_code = ErrorCode.BUS_ERROR


class BusTimeoutError(BusError):
    default_code = ErrorCode.TIMEOUT


class RemoteError(BusError):
    """A structured error reply from another service; `code` is the remote code."""

    default_code = ErrorCode.REMOTE_ERROR


class MessageError(TetherError):
    default_code = ErrorCode.BAD_MESSAGE


class NotFoundError(TetherError):
    default_code = ErrorCode.NOT_FOUND


class ConflictError(TetherError):
    default_code = ErrorCode.CONFLICT


class StoreError(TetherError):
    default_code = ErrorCode.STORE_ERROR


class ProviderError(TetherError):
    default_code = ErrorCode.PROVIDER_ERROR


class AuthError(TetherError):
    default_code = ErrorCode.UNAUTHORIZED


class SafetyError(TetherError):
    default_code = ErrorCode.SAFETY_DENIED


class PathDenied(SafetyError):  # noqa: N818 - the name the design documents use
    default_code = ErrorCode.PATH_DENIED


class BlockedDestination(SafetyError):  # noqa: N818 - the name the design documents use
    default_code = ErrorCode.BLOCKED_DESTINATION


class CommandDenied(SafetyError):  # noqa: N818 - the name the design documents use
    default_code = ErrorCode.DENY_LISTED


@dataclass(frozen=True, slots=True)
class CodeSpec:
    """What a code means to a caller: the HTTP status it answers, whether the same request
    may succeed later, and the class `from_wire` raises for it."""

    status: int
    retryable: bool
    error: type[TetherError]


def _rows(
    status: int, retryable: bool, error: type[TetherError], *codes: ErrorCode
) -> dict[ErrorCode, CodeSpec]:
    return dict.fromkeys(codes, CodeSpec(status, retryable, error))


C = ErrorCode
# The one table: every `ErrorCode` has exactly one row (a test checks it).
CODES: dict[ErrorCode, CodeSpec] = {
    **_rows(500, False, TetherError, C.INTERNAL),
    **_rows(500, False, ConfigError, C.CONFIG_INVALID, C.SECRET_FILE),
    **_rows(500, False, ConfigError, C.DECISION_KEY_MISSING, C.DECISION_KEY_INVALID),
    **_rows(503, True, BusError, C.BUS_ERROR, C.NOT_CONNECTED, C.NO_RESPONDERS, C.UNREACHABLE),
    **_rows(503, True, BusTimeoutError, C.TIMEOUT),
    **_rows(500, False, RemoteError, C.REMOTE_ERROR),
    **_rows(422, False, MessageError, C.BAD_MESSAGE, C.NOT_JSON, C.INVALID_MESSAGE),
    **_rows(422, False, MessageError, C.UNSUPPORTED_VERSION, C.INVALID_REQUEST),
    **_rows(422, False, MessageError, C.INVALID_LAST_EVENT_ID, C.INVALID_PATH, C.INVALID_COLUMN),
    **_rows(422, False, MessageError, C.INVALID_PATTERN, C.PATTERN_BUDGET, C.TOO_LARGE),
    **_rows(422, False, MessageError, C.SKILL_INVALID, C.INVALID_GRANT, C.WEBHOOK_URL_REFUSED),
    **_rows(422, False, MessageError, C.DELETE_NOT_REMEMBERED, C.LIMIT_UNENFORCEABLE),
    **_rows(422, False, MessageError, C.AMBIGUOUS_ID),
    **_rows(400, False, MessageError, C.BAD_REQUEST),
    **_rows(405, False, MessageError, C.METHOD_NOT_ALLOWED),
    **_rows(413, False, MessageError, C.BODY_TOO_LARGE),
    **_rows(500, False, TetherError, C.HTTP_ERROR),
    **_rows(404, False, NotFoundError, C.NOT_FOUND),
    # Gone: an approval past its expiry, an output past its retention.
    **_rows(410, False, NotFoundError, C.EXPIRED),
    **_rows(409, False, ConflictError, C.CONFLICT, C.CHECKSUM_MISMATCH, C.VERSION_CONFLICT),
    **_rows(409, False, ConflictError, C.AGENT_EXISTS, C.SKILL_EXISTS, C.READ_ONLY),
    **_rows(409, False, ConflictError, C.RUN_ENDED, C.ALREADY_DECIDED, C.WITHDRAWN),
    **_rows(409, False, ConflictError, C.NO_OPERATOR, C.ALREADY_VOTED),
    # A thread whose last turn has not ended, or whose budget its turns have spent.
    **_rows(409, False, ConflictError, C.THREAD_BUSY, C.THREAD_BUDGET_SPENT),
    # An admin's kill switch is in force for the run's tenant or agent, or for all.
    **_rows(409, False, ConflictError, C.KILLED),
    **_rows(503, True, StoreError, C.STORE_ERROR),
    **_rows(500, False, StoreError, C.STORE_UNAVAILABLE, C.CHUNK_MISSING),
    **_rows(503, False, TetherError, C.STAGING_UNAVAILABLE),
    **_rows(502, False, ProviderError, C.PROVIDER_ERROR, C.PROVIDER_BAD_RESPONSE),
    **_rows(502, False, ProviderError, C.PROVIDER_AUTH, C.PROVIDER_BAD_REQUEST),
    **_rows(502, False, ProviderError, C.SCRIPT_INVALID, C.SCRIPT_EXHAUSTED),
    **_rows(503, False, ProviderError, C.PROVIDER_NOT_CONFIGURED),
    **_rows(503, True, ProviderError, C.PROVIDER_RATE_LIMITED, C.PROVIDER_UNAVAILABLE),
    **_rows(503, True, ProviderError, C.PROVIDER_UNREACHABLE, C.PROVIDER_DISCONNECTED),
    **_rows(504, True, ProviderError, C.PROVIDER_TIMEOUT),
    **_rows(401, False, AuthError, C.UNAUTHORIZED, C.UNAUTHENTICATED, C.TOKEN_EXPIRED),
    **_rows(401, False, AuthError, C.NO_TOKEN),
    **_rows(403, False, AuthError, C.FORBIDDEN),
    **_rows(403, False, AuthError, C.REQUESTER_CANNOT_APPROVE, C.NOT_IN_GROUP),
    **_rows(403, False, SafetyError, C.SAFETY_DENIED),
    **_rows(403, False, PathDenied, C.PATH_DENIED, C.NOT_A_FILE),
    **_rows(403, False, BlockedDestination, C.BLOCKED_DESTINATION, C.DNS_FAILED),
    **_rows(403, False, CommandDenied, C.DENY_LISTED),
}


def spec_for(exc: TetherError) -> CodeSpec:
    """The row of `exc`'s code, or of its class's own code when the code is not ours."""
    return (known(exc.code) or exc.default_code).spec


def from_wire(code: str, message: str, *, retryable: bool | None = None) -> TetherError:
    """Rebuild the error a remote service answered, keeping its code; an unknown code is a
    `RemoteError`. `retryable` unsaid: what the code's row says."""
    found = known(code)
    cls = found.spec.error if found is not None else RemoteError
    return cls(message, code=code, retryable=retryable)
