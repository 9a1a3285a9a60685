"""The signature Tether puts on what it sends over HTTP to someone else's endpoint
(approval webhooks, HTTPS hooks): `Tether-Signature: t=<unix seconds>,v1=<hex>`, where
the hex is HMAC-SHA256 with the endpoint's secret over `"<t>.<raw body>"` (the scheme
Stripe uses).

A receiver recomputes the HMAC over the bytes it received, compares in constant time,
and refuses a timestamp older than a few minutes, so a captured request cannot be
replayed later. The approvals service's `notices.signing` re-exports this scheme and adds
the notices' own headers."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

__all__ = ["SIGNATURE_HEADER", "TOLERANCE_S", "new_secret", "sign", "verify"]

SIGNATURE_HEADER = "Tether-Signature"
TOLERANCE_S = 300


def new_secret(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def _mac(secret: str, body: bytes, ts: int) -> str:
    return hmac.new(secret.encode(), str(ts).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, ts: int | None = None) -> str:
    """The `Tether-Signature` header value for `body`, signed now (or at `ts`)."""
    ts = int(time.time()) if ts is None else ts
    return f"t={ts},v1={_mac(secret, body, ts)}"


def verify(
    secret: str,
    body: bytes,
    header: str | None,
    *,
    now: float | None = None,
    tolerance_s: float = TOLERANCE_S,
) -> bool:
    """Whether `header` signs `body` with `secret` within `tolerance_s` of `now`."""
    if not header:
        return False
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        ts = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - ts) > tolerance_s:
        return False
    return hmac.compare_digest(_mac(secret, body, ts), parts.get("v1", ""))
