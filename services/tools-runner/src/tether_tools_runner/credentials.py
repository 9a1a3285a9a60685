"""Tool servers' credentials sealed at rest: AES-256-GCM under a key kept outside the
database (`TETHER_RUNNER_CREDENTIALS_KEY`, handed only to the runner), each sealed value
bound to its row.

The associated data is the row's tenant and server id, so a sealed value copied into
another row (another tenant's server, another server of the same tenant) does not open:
SQL access alone can neither read a credential nor move one to a server it controls.
A sealed value is `version ‖ nonce ‖ ciphertext+tag`; the nonce is random (96 bits, one
per seal; far below the birthday bound at one seal per server added)."""

from __future__ import annotations

import base64
import binascii
import json
import os
import string

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tether_common.errors import ConfigError, ErrorCode

FORMAT = b"\x01"
NONCE_BYTES = 12
KEY_BYTES = 32
_CONTEXT = b"tether/tool-server-credentials\x00"

__all__ = ["CredentialKey", "bound_to", "new_key"]


def new_key() -> str:
    """A fresh key as its setting holds it: 32 random bytes, base64url."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def bound_to(tenant: str, server_id: str) -> bytes:
    """The associated data of one row's sealed credentials."""
    return _CONTEXT + json.dumps([tenant, server_id]).encode()


def _unreadable(why: str) -> ConfigError:
    return ConfigError(
        f"the stored credentials do not open ({why}): the key changed, or the row was "
        "altered; add the server again with its credentials",
        code=ErrorCode.CREDENTIALS_UNREADABLE,
    )


class CredentialKey:
    """The key; seals and opens one server's credentials (a name → value map)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ConfigError(
                f"TETHER_RUNNER_CREDENTIALS_KEY must hold {KEY_BYTES} bytes (base64url)",
                code=ErrorCode.CONFIG_INVALID,
            )
        self._aead = AESGCM(key)

    @classmethod
    def from_text(cls, text: str) -> CredentialKey:
        """From the setting's text: 64 hex digits (`openssl rand -hex 32`, as .env.example
        suggests for every secret) or base64url; a malformed key stops the service."""
        text = text.strip()
        if len(text) == 2 * KEY_BYTES and all(c in string.hexdigits for c in text):
            return cls(bytes.fromhex(text))
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        return cls(raw)

    def seal(self, credentials: dict[str, str], *, tenant: str, server_id: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        plain = json.dumps(credentials, separators=(",", ":")).encode()
        return FORMAT + nonce + self._aead.encrypt(nonce, plain, bound_to(tenant, server_id))

    def open(self, sealed: bytes, *, tenant: str, server_id: str) -> dict[str, str]:
        """The credentials, or `credentials_unreadable` (tampered, another row's, another
        key's); the error never holds any part of the value."""
        if len(sealed) < 1 + NONCE_BYTES + 16 or sealed[:1] != FORMAT:
            raise _unreadable("not a sealed value of this version")
        nonce, body = sealed[1 : 1 + NONCE_BYTES], sealed[1 + NONCE_BYTES :]
        try:
            plain = self._aead.decrypt(nonce, body, bound_to(tenant, server_id))
        except InvalidTag:
            raise _unreadable("authentication failed") from None
        value = json.loads(plain)
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise _unreadable("not a map of names to text")
        return {str(k): v for k, v in value.items()}
