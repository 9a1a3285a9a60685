"""The webhook signature: `Tether-Signature: t=<unix seconds>,v1=<hex>`, where the hex is
HMAC-SHA256 with the endpoint's secret over `"<t>.<raw body>"` (the scheme Stripe uses).

A receiver recomputes the HMAC over the bytes it received, compares in constant time,
and refuses a timestamp older than a few minutes, so a captured delivery cannot be
replayed later; the `Tether-Delivery` header (the notice id, the same on every re-send)
lets it drop a delivery it already handled (delivery is at least once).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SECRET_PREFIX",
    "SIGNATURE_HEADER",
    "TOLERANCE_S",
    "new_secret",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "Tether-Signature"
DELIVERY_HEADER = "Tether-Delivery"
EVENT_HEADER = "Tether-Event"
SECRET_PREFIX = "whsec_"
TOLERANCE_S = 300


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


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
