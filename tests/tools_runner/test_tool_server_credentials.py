"""Tool servers' credentials at rest (`tether_tools_runner.credentials`): sealed under a
key outside the database and bound to their row, so a changed byte, another row's
tenant or id, or another key opens nothing, and no error quotes the value."""

from __future__ import annotations

import base64
import os

import pytest

from tether_common.errors import ConfigError, ErrorCode
from tether_tools_runner.credentials import NONCE_BYTES, CredentialKey, new_key

SECRET = {"Authorization": "Bearer s3cr3t-token-value", "X-Org": "acme"}
ROW = {"tenant": "acme", "server_id": "tsv_0001"}


@pytest.fixture
def key() -> CredentialKey:
    return CredentialKey.from_text(new_key())


def test_a_sealed_value_opens_for_its_row_and_holds_no_plaintext(key: CredentialKey) -> None:
    sealed = key.seal(SECRET, **ROW)
    assert b"s3cr3t" not in sealed
    assert b"Authorization" not in sealed
    assert key.open(sealed, **ROW) == SECRET
    assert key.seal(SECRET, **ROW) != sealed  # a fresh nonce each time


def opened(key: CredentialKey, sealed: bytes, tenant: str, server_id: str) -> ConfigError | None:
    """The refusal of opening `sealed` as that row's (None: it opened)."""
    try:
        key.open(sealed, tenant=tenant, server_id=server_id)
    except ConfigError as refusal:
        return refusal
    return None


def unreadable(refusal: ConfigError | None) -> bool:
    """Refused as unreadable, with no part of the secret in the message."""
    return (
        refusal is not None
        and refusal.code == ErrorCode.CREDENTIALS_UNREADABLE
        and "s3cr3t" not in refusal.message
    )


@pytest.mark.parametrize(
    "where",
    [0, 1, NONCE_BYTES, NONCE_BYTES + 1, NONCE_BYTES + 5, -16, -1],
    ids=["version", "nonce", "nonce-end", "ciphertext", "ciphertext-mid", "tag", "tag-end"],
)
def test_a_changed_byte_anywhere_opens_nothing(key: CredentialKey, where: int) -> None:
    sealed = bytearray(key.seal(SECRET, **ROW))
    sealed[where] ^= 0x01
    assert unreadable(opened(key, bytes(sealed), **ROW))


@pytest.mark.parametrize(
    ("tenant", "server_id"),
    [
        ("other", "tsv_0001"),  # another tenant's row with the same id
        ("acme", "tsv_0002"),  # another server of the same tenant
        ("tsv_0001", "acme"),  # the two swapped
        ("*", "tsv_0001"),  # made shared
        ('acme", "tsv_0001', ""),  # a tenant spelling the pair in one field
    ],
)
def test_a_value_moved_to_another_row_opens_nothing(
    key: CredentialKey, tenant: str, server_id: str
) -> None:
    assert unreadable(opened(key, key.seal(SECRET, **ROW), tenant, server_id))


@pytest.mark.parametrize("cut", [0, 1, NONCE_BYTES, NONCE_BYTES + 15])
def test_a_truncated_value_opens_nothing(key: CredentialKey, cut: int) -> None:
    assert unreadable(opened(key, key.seal(SECRET, **ROW)[:cut], **ROW))


def test_another_key_opens_nothing(key: CredentialKey) -> None:
    sealed = key.seal(SECRET, **ROW)
    assert unreadable(opened(CredentialKey.from_text(new_key()), sealed, **ROW))


@pytest.mark.parametrize(
    "text",
    ["", "short", "!!!not base64!!!", new_key()[:20]],
    ids=["empty", "short", "not-base64", "truncated"],
)
def test_a_malformed_key_is_refused_at_start(text: str) -> None:
    with pytest.raises(ConfigError):
        CredentialKey.from_text(text)


def test_a_hex_key_is_the_same_key_as_its_base64url() -> None:
    """.env.example suggests `openssl rand -hex 32` for every secret: 64 hex digits are the
    32 bytes themselves, not base64 text (which would decode to 48 bytes and be refused)."""
    raw = os.urandom(32)
    hexed = CredentialKey.from_text(raw.hex())
    based = CredentialKey.from_text(base64.urlsafe_b64encode(raw).decode())
    sealed = hexed.seal(SECRET, **ROW)
    assert based.open(sealed, **ROW) == SECRET
