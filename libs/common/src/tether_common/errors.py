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
    ├── QuotaExceededError           a tenant's or agent's quota refuses (details, retry_after)
    └── SafetyError                  a hard safety constraint refused an action
        ├── PathDenied               outside the workspace, protected, malformed
        ├── BlockedDestination       a URL or address the URL guard refuses
        └── CommandDenied            a shell command on the deny-list

Every code is an `ErrorCode`, declared once below with its HTTP status, whether trying
again may help, and the class a caller catches (`CODES`). Errors cross the bus as
`ErrorReply(code, message, retryable)` and HTTP as `{"error": {code, message}}` (the
status and retryability being the code's); `from_wire` turns either back into the
matching class, so callers catch by layer whichever side raised. An error may also carry
`retry_after` (seconds until the same request may succeed; HTTP's `Retry-After`) and
`details` (a JSON object saying more, e.g. which quota refused): both travel beside the
code and message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar


class ErrorCode(StrEnum):
    """Every error code a service answers (bus replies, HTTP bodies, model `error` events).
    A `StrEnum`, so a member is also the plain string that travels."""

    INTERNAL = "internal"
    # settings
    CONFIG_INVALID = "config_invalid"
    SECRET_FILE = "secret_file"
    DECISION_KEY_MISSING = "decision_key_missing"
    DECISION_KEY_INVALID = "decision_key_invalid"
    # tool-server credentials: no key to seal them with, or a sealed value that does not open
    CREDENTIALS_KEY_MISSING = "credentials_key_missing"
    CREDENTIALS_UNREADABLE = "credentials_unreadable"
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
    HOOK_REFUSED = "hook_refused"  # a hook definition the brain will not keep (its URL…)
    TOOL_SERVER_REFUSED = "tool_server_refused"
    DELETE_NOT_REMEMBERED = "delete_not_remembered"
    # an operator's edit whose arguments do not fit the tool's schema; an edit or
    # response a request does not take (one that needs a quorum of people)
    ARGUMENTS_INVALID = "arguments_invalid"
    ANSWER_REFUSED = "answer_refused"
    LIMIT_UNENFORCEABLE = "limit_unenforceable"
    AMBIGUOUS_ID = "ambiguous_id"
    # a run's final answer never fit its output schema (the violation's path and message)
    OUTPUT_INVALID = "output_invalid"
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
    HOOK_EXISTS = "hook_exists"
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
    TOOL_SERVER_EXISTS = "tool_server_exists"
    # a tenant's or agent's quota (tokens, cost, runs a minute, concurrent runs) refuses
    QUOTA_EXCEEDED = "quota_exceeded"
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
    # a model request names a history prefix this gateway replica does not hold: send it whole
    PREFIX_UNKNOWN = "prefix_unknown"
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
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code or self.default_code
        if retryable is None:
            retryable = (known(self.code) or self.default_code).spec.retryable
        self.retryable = retryable
        # Seconds until the same request may succeed (None: unsaid), and more about it.
        self.retry_after = retry_after
        self.details: dict[str, Any] | None = None if details is None else dict(details)

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


class QuotaExceededError(TetherError):
    """A quota refuses: `details` names the limit, the use and when it resets
    (`tether_common.messages.quotas.QuotaRefusal`), `retry_after` the seconds until then."""

    default_code = ErrorCode.QUOTA_EXCEEDED


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
    **_rows(422, False, MessageError, C.AMBIGUOUS_ID, C.TOOL_SERVER_REFUSED),
    **_rows(422, False, MessageError, C.HOOK_REFUSED),
    **_rows(422, False, MessageError, C.ARGUMENTS_INVALID, C.ANSWER_REFUSED),
    **_rows(500, False, ConfigError, C.CREDENTIALS_KEY_MISSING, C.CREDENTIALS_UNREADABLE),
    **_rows(409, False, ConflictError, C.TOOL_SERVER_EXISTS, C.HOOK_EXISTS),
    # The model's answer, not the request, is of the wrong shape: a bad answer upstream.
    **_rows(502, False, MessageError, C.OUTPUT_INVALID),
    **_rows(400, False, MessageError, C.BAD_REQUEST),
    **_rows(405, False, MessageError, C.METHOD_NOT_ALLOWED),
    **_rows(413, False, MessageError, C.BODY_TOO_LARGE),
    **_rows(500, False, TetherError, C.HTTP_ERROR),
    **_rows(404, False, NotFoundError, C.NOT_FOUND),
    # Not held here (another replica, a restart, an eviction): the same request will not
    # succeed, the whole history will.
    **_rows(404, False, NotFoundError, C.PREFIX_UNKNOWN),
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
    # Used up until its window moves on or a run ends (`retry_after` says when).
    **_rows(429, True, QuotaExceededError, C.QUOTA_EXCEEDED),
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


def code_in(reason: str) -> ErrorCode | None:
    """The error code a run's stop reason names (`model_error: script_exhausted: ...`,
    `output_invalid: $.x: ...`): its first `:`-separated word that is a code, or None."""
    return next((c for w in reason.split(":") if (c := known(w.strip())) is not None), None)


def spec_for(exc: TetherError) -> CodeSpec:
    """The row of `exc`'s code, or of its class's own code when the code is not ours."""
    return (known(exc.code) or exc.default_code).spec


def from_wire(
    code: str,
    message: str,
    *,
    retryable: bool | None = None,
    retry_after: float | None = None,
    details: Mapping[str, Any] | None = None,
) -> TetherError:
    """Rebuild the error a remote service answered, keeping its code; an unknown code is a
    `RemoteError`. `retryable` unsaid: what the code's row says."""
    found = known(code)
    cls = found.spec.error if found is not None else RemoteError
    return cls(message, code=code, retryable=retryable, retry_after=retry_after, details=details)
