"""The detectors the built-in hooks use: personal data (`safety.pii`: e-mail, phone, card
numbers that pass Luhn) and credentials (`safety.secrets`), each with what it must find
and what it must leave alone, and in time linear in the text."""

from __future__ import annotations

import time

import pytest

from tether_common.safety.pii import find_pii, luhn_ok, redact_pii
from tether_common.safety.secrets import redact_secrets


@pytest.mark.parametrize(
    ("digits", "ok"),
    [
        ("4111111111111111", True),  # Visa test number
        ("5500005555555559", True),  # Mastercard test number
        ("378282246310005", True),  # Amex test number
        ("6011111111111117", True),  # Discover test number
        ("4111111111111112", False),
        ("1234567812345678", False),
        ("0", True),
        ("79927398713", True),  # the textbook example
        ("79927398710", False),
        ("", False),  # no digits: not a number at all
        ("12a4", False),
    ],
)
def test_luhn(digits: str, ok: bool) -> None:
    assert luhn_ok(digits) is ok


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("write to jane.doe+tag@example.co.uk today", ["email"]),
        ("card 4111 1111 1111 1111 on file", ["card"]),
        ("card 4111-1111-1111-1111 on file", ["card"]),
        ("amex 378282246310005", ["card"]),
        ("not a card 4111 1111 1111 1112", []),
        ("call +1 415-555-0132 now", ["phone"]),
        ("call (020) 7946 0958", ["phone"]),
        ("call +44 20 7946 0958 or bob@mail.example.org", ["phone", "email"]),
        ("on 2026-12-06 at 10:30", []),
        ("version 1.2.3 build 42", []),
        ("total 12345", []),
        ("user@localhost has no domain", []),
    ],
)
def test_pii_finds(text: str, kinds: list[str]) -> None:
    assert [h.kind for h in find_pii(text)] == kinds
    redacted, found = redact_pii(text)
    assert found == kinds
    for hit in find_pii(text):
        assert hit.text not in redacted


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz0123", "api_key"),
        ("aws AKIAIOSFODNN7EXAMPLE in a log", "aws_access_key"),
        ("token ghp_" + "a1B2" * 9, "github_token"),
        ("slack xoxb-123456789012-abcdefghijkl", "slack_token"),
        ("key AIza" + "b" * 35, "google_api_key"),
        ("Authorization: Bearer abcdefghijklmnop.qrstuv", "bearer"),
        ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.c2lnbmF0dXJlMTIz", "jwt"),
        ("db at postgresql://app:s3cretpw@db:5432/x", "url_password"),
        ("password: hunter2-is-long", "assigned"),
        ('"client_secret": "abc123def456"', "assigned"),
        ("DATABASE_PASSWORD=correct-horse", "assigned"),
        ("OPENAI_API_KEY=not-an-sk-shape-1234", "assigned"),
        ("export GITHUB_TOKEN='abcd1234'", "assigned"),
        ("a tether token tth_" + "x" * 43, "tether_token"),
        ("whsec_" + "y" * 43, "signing_secret"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----", "private_key"),
    ],
)
def test_secrets_found_and_redacted(text: str, kind: str) -> None:
    redacted, kinds = redact_secrets(text)
    assert kind in kinds
    assert f"[redacted:{kind}]" in redacted


@pytest.mark.parametrize(
    "text",
    [
        "the sky is blue",
        "key = value",  # no credential word in the name
        "sk-short",
        "see https://example.com/path?q=1",
        "BEGIN PRIVATE KEY is what the header says",
    ],
)
def test_plain_text_is_left_alone(text: str) -> None:
    assert redact_secrets(text) == (text, [])


@pytest.mark.parametrize(
    "text",
    ["a" * 200_000, "1 " * 100_000, "x@" * 100_000, "-" * 200_000 + "BEGIN", "password=" * 20_000],
)
def test_detectors_are_linear(text: str) -> None:
    started = time.perf_counter()
    redact_pii(text)
    redact_secrets(text)
    assert time.perf_counter() - started < 3.0
