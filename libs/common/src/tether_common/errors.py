"""The one exception tree of Tether, and the table from wire codes to classes.

    TetherError                      code: str, message: str, retryable: bool
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

Errors cross the bus as `ErrorReply(code, message, retryable)`; `from_wire` turns one
back into the matching class, so callers catch by layer whichever side raised.
"""

from __future__ import annotations

from typing import ClassVar


class TetherError(Exception):
    """Base of every Tether error; carries a stable machine-readable `code`."""

    default_code: ClassVar[str] = "internal"
    default_retryable: ClassVar[bool] = False

    def __init__(
        self, message: str, *, code: str | None = None, retryable: bool | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.retryable = self.default_retryable if retryable is None else retryable

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ConfigError(TetherError):
    default_code = "config_invalid"


class BusError(TetherError):
    default_code = "bus_error"
    default_retryable = True


class BusTimeoutError(BusError):
    default_code = "timeout"


class RemoteError(BusError):
    """A structured error reply from another service; `code` is the remote code."""

    default_code = "remote_error"
    default_retryable = False


class MessageError(TetherError):
    default_code = "bad_message"


class NotFoundError(TetherError):
    default_code = "not_found"


class ConflictError(TetherError):
    default_code = "conflict"


class StoreError(TetherError):
    default_code = "store_error"
    default_retryable = True


class ProviderError(TetherError):
    default_code = "provider_error"


class AuthError(TetherError):
    default_code = "unauthorized"


class SafetyError(TetherError):
    default_code = "safety_denied"


class PathDenied(SafetyError):  # noqa: N818 - the name the design documents use
    default_code = "path_denied"


class BlockedDestination(SafetyError):  # noqa: N818 - the name the design documents use
    default_code = "blocked_destination"


class CommandDenied(SafetyError):  # noqa: N818 - the name the design documents use
    default_code = "deny_listed"


_BY_CODE: dict[str, type[TetherError]] = {
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "timeout": BusTimeoutError,
    "path_denied": PathDenied,
    "blocked_destination": BlockedDestination,
    "deny_listed": CommandDenied,
    "dns_failed": BlockedDestination,
    "expired": NotFoundError,
    "checksum_mismatch": ConflictError,
    "config_invalid": ConfigError,
    "unauthorized": AuthError,
    "forbidden": AuthError,
    "unauthenticated": AuthError,
    "token_expired": AuthError,
    "not_json": MessageError,
    "invalid_message": MessageError,
    "unsupported_version": MessageError,
}


def from_wire(code: str, message: str, *, retryable: bool = False) -> TetherError:
    """Rebuild the error a remote service answered, keeping its code."""
    cls = _BY_CODE.get(code, RemoteError)
    return cls(message, code=code, retryable=retryable)
